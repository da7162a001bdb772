"""The column mapping: which field of a tabular input (CSV, Parquet, JSON Lines) gives each column
of the input contract (ColumnParams), how a field or a dotted path into nested objects is read
with DuckDB, the types of a JSON Lines file's fields, and the mapping a corpus is held with (one
corpus is read with one mapping)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from ..errors import WebdedupError
from ..ingest.contract import REQUIRED_COLUMNS
from ..ingest.inputs import InputFile
from ..ingest.jsonl import require_whole_stream
from ..params import ColumnParams, InputParams, ParamAdvice
from ..storage.state import crawl_month, load_state
from ..storage.store import Store, connect, quote_ident, sql_string
from ..threads import ordered_map, thread_count

MAPPED_BY = {  # contract column -> the ColumnParams field naming the input's field for it
    "doc_id": "id_column",
    "source": "source_column",
    "domain": "domain_column",
    "crawled_at": "date_column",
    "title": "title_column",
    "body": "text_column",
}
OPTIONAL_COLUMNS = ("source", "title")  # absent under their own name (or mapped to ""): NULL
# The host of a URL (scheme://[user@]host[:port]/...), lower case; NULL when there is none.
HOST_SQL = "NULLIF(lower(regexp_extract({url}, '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^/?#@]*@)?([^/?#:]*)', 1)), '')"


INTEGER_TYPES = {"tinyint", "smallint", "integer", "bigint", "hugeint"}
INTEGER_TYPES |= {f"u{name}" for name in INTEGER_TYPES}
NUMBER_TYPES = INTEGER_TYPES | {"float", "double", "decimal"}
TEXT_TYPES = {"varchar", "date", "time", "timestamp", "timestamp with time zone", "uuid"}
NESTED = {"struct", "list", "map"}


def fits(kind: duckdb.DuckDBPyType, into: duckdb.DuckDBPyType) -> bool:
    """Whether every value of `kind` keeps its shape cast to `into` (the type DuckDB unifies the
    two to): numbers and text into text, numbers into wider numbers, a struct field by field into
    one with more fields, a list element by element, a map by its keys and values."""
    if kind.id == "null" or str(kind) == str(into):
        return True
    if kind.id in NESTED and kind.id == into.id:  # (a map's children: its key and value)
        wanted = dict(into.children)
        return all(name in wanted and fits(child, wanted[name]) for name, child in kind.children)
    if str(into) == "VARCHAR":
        return kind.id in NUMBER_TYPES | TEXT_TYPES
    return kind.id in NUMBER_TYPES and into.id in NUMBER_TYPES


EMPTY_LISTS = '"NULL"[]'  # how a field whose lists are all empty is stored (Parquet: a list of nulls)


def is_open(kind: duckdb.DuckDBPyType) -> bool:
    """A type that tells nothing of the field's values: NULL throughout, or lists that are all empty
    (DuckDB types them JSON[] in JSON, and they are stored as lists of NULL so that the held
    corpus still says so); it takes the type the other files give."""
    return kind.id == "null" or str(kind) in ("JSON[]", EMPTY_LISTS)


def unified_type(con: duckdb.DuckDBPyConnection, kinds: list[duckdb.DuckDBPyType]) -> duckdb.DuckDBPyType | None:
    """One type that holds the values of every type of `kinds` (an extra field's types in the
    input's files and the held corpus) as they are; None when there is none (the field is then
    kept as JSON text, as DuckDB keeps one whose types differ within a file)."""
    told = list({str(k): k for k in kinds if not is_open(k)}.values())  # each type once
    if not told:  # NULL throughout, or empty lists (stored as lists of NULL, not of JSON text)
        return con.sql(f"SELECT NULL::{EMPTY_LISTS}").types[0] if any(k.id == "list" for k in kinds) else kinds[0]
    union = told[0]
    for kind in told[1:]:
        try:
            union = con.sql(f"SELECT NULL::{union} AS c UNION ALL BY NAME SELECT NULL::{kind} AS c").types[0]
        except duckdb.Error:
            return None
    return union if all(fits(k, union) for k in told) else None


def unify_extra(con: duckdb.DuckDBPyConnection, kinds: dict[str, list], held: dict) -> dict:
    """Each extra field's stored type (None: kept as JSON text) from its types in the input's files
    and, for an add, in the held corpus (`held`: stored column -> type): numbers widened, numbers
    beside text as text, structs with the fields of all. A field the held corpus keeps nested whose
    new values cannot join it is refused (its held files would have to become JSON text)."""
    unified = {}
    for column, found in kinds.items():
        mine = held.get(stored_name(column))
        # the held type first: a struct keeps its held fields' order, as one run of every file orders them
        unified[column] = unified_type(con, [*([mine] if mine is not None else []), *found])
        if unified[column] is None and mine is not None and mine.id in NESTED:
            given = ", ".join(sorted({str(k) for k in found}))
            raise WebdedupError(
                f"field {column!r} is {mine} in the held corpus but {given} in this input: a field keeps one type in "
                "a corpus; `webdedup run` the whole input (a field of several types is kept as JSON text)"
            )
    return unified


def stored_types(con: duckdb.DuckDBPyConnection, store: Store) -> dict:
    """The held documents' columns and their types (their files read as one union, as every stage reads them)."""
    files = ", ".join(sql_string(str(f)) for f in store.data_files("documents"))
    if not files:
        return {}
    rel = con.sql(f"SELECT * FROM read_parquet([{files}], union_by_name = true, hive_partitioning = false) LIMIT 0")
    return dict(zip(rel.columns, rel.types))


def field_sql(rel: duckdb.DuckDBPyRelation, path: str) -> tuple[str, duckdb.DuckDBPyType] | None:
    """SQL reading one field of an input, with its type: a column, or a dotted path into nested
    objects (a column whose own name holds the dots is taken first). None: no such field."""
    types = dict(zip(rel.columns, rel.types))
    if path in types:
        return quote_ident(path), types[path]
    head, *rest = path.split(".")
    if head not in types or not rest:
        return None
    sql, kind = quote_ident(head), types[head]
    for index, part in enumerate(rest):
        if is_json(kind):  # an object of mixed shapes, kept as JSON: read by JSON path
            json_path = "$." + ".".join('"' + p.replace('"', '\\"') + '"' for p in rest[index:])
            return f"json_extract({sql}, {sql_string(json_path)})", kind
        if kind.id != "struct":
            return None
        children = dict(kind.children)
        if part not in children:
            return None
        sql, kind = f"struct_extract({sql}, {sql_string(part)})", children[part]
    return sql, kind


def is_json(kind: duckdb.DuckDBPyType) -> bool:
    """A field DuckDB keeps as JSON: its values are of mixed types (1 and "two") or shapes."""
    return str(kind) == "JSON"


def text_sql(sql: str, kind: duckdb.DuckDBPyType) -> str:
    """A field as text: a JSON value's text, a string without its quotes."""
    return f"json_extract_string({sql}, '$')" if is_json(kind) else sql


@dataclass
class MappedInput:
    """One input file read through the column mapping."""

    fields: dict[str, tuple[str, duckdb.DuckDBPyType] | None]  # contract column -> (SQL, type); None: NULL
    labels: dict[str, str]  # contract column -> the field it is read from, as error messages name it
    extra: list[str]  # the input's other columns, kept as they are


def map_columns(f: InputFile, rel: duckdb.DuckDBPyRelation, mapping: ColumnParams) -> MappedInput:
    """Where each contract column of one input comes from; an error names the missing fields and the file."""
    m = ColumnParams() if f.stored else mapping
    columns = rel.columns
    dupes = sorted({c for c in columns if columns.count(c) > 1})
    if dupes:
        raise WebdedupError(f"{f.path}: duplicate column name(s) {', '.join(dupes)}")
    fields: dict[str, tuple[str, duckdb.DuckDBPyType] | None] = {}
    labels, missing, used = {}, [], set()
    for column in REQUIRED_COLUMNS:
        name = getattr(m, MAPPED_BY[column])
        labels[column] = name if name in ("", column) else f"{name} (as {column})"
        fields[column] = field_sql(rel, name) if name else None
        if name in columns:
            used.add(name)
        if fields[column] is not None or (column in OPTIONAL_COLUMNS and name in ("", column)):
            continue
        if column == "crawled_at" and m.default_date:  # no date field: every record takes the default date
            continue
        if column == "domain" and name == column and m.url_column:
            url = field_sql(rel, m.url_column)
            if url is not None:  # no domain field: the URL's host
                host = HOST_SQL.format(url=text_sql(*url))
                fields[column], labels[column] = (host, duckdb.sqltype("VARCHAR")), f"{m.url_column} (as URL)"
                continue
            missing.append(f"{m.url_column} (as URL)")
        else:
            missing.append(labels[column])
    if missing:
        undated = "; an input without dates takes --default-date" if labels["crawled_at"] in missing else ""
        raise WebdedupError(
            f"{f.path}: missing required column(s) {', '.join(missing)}; found columns: {', '.join(columns)}{undated}"
        )
    extra = [c for c in columns if c not in used]
    clash = [c for c in extra if c.lower() in REQUIRED_COLUMNS]
    if clash:
        shown = ", ".join(f"{c} (the {c.lower()} column is read from {labels[c.lower()] or 'nothing'})" for c in clash)
        raise WebdedupError(
            f"{f.path}: field(s) {shown} would be kept beside the column of the same name; map them or rename them"
        )
    return MappedInput(fields, labels, extra)


# Columns the pipeline adds beside the documents' own (deduped_documents' cluster_id, cluster_size
# and token_count; DuckDB's filename and file_row_number where the stored files are read).
ADDED_DOWNSTREAM = ("cluster_id", "cluster_size", "token_count", "filename", "file_row_number")


def stored_name(column: str) -> str:
    """The name an input's own column is stored under: its own, or `input_<name>` for a name the
    pipeline adds downstream (FineWeb's token_count), so that both are kept."""
    return f"input_{column}" if column.lower() in ADDED_DOWNSTREAM else column


def mapping_of(p: InputParams) -> ColumnParams:
    """The column mapping of the documents stage's parameters."""
    return ColumnParams(**{name: getattr(p, name) for name in ColumnParams.model_fields})


def stored_mapping(stored: dict[str, Any]) -> ColumnParams:
    """The column mapping of stored input parameters (stored before mappings existed: the defaults)."""
    return ColumnParams(**{k: v for k, v in stored.items() if k in ColumnParams.model_fields})


def mapping_given(stored: dict[str, Any]) -> dict[str, Any]:
    """The mapping's values other than the defaults (what the manifest shows)."""
    return stored_mapping(stored).model_dump(exclude_defaults=True)


def held_mapping(store: Store) -> ColumnParams | None:
    """The column mapping the held corpus was read with (None: no corpus held)."""
    if not store.files("documents"):
        return None
    return stored_mapping(store.params("documents").get("input") or {})


def mapping_for_add(store: Store, given: ColumnParams | None) -> ColumnParams:
    """The column mapping of `webdedup add`: the held corpus' when none is given; one that differs
    from it is refused, naming both (before the input is read with it)."""
    if given is None:  # (the default date is the input's own: never the held one)
        return (held_mapping(store) or ColumnParams()).model_copy(update={"default_date": ColumnParams().default_date})
    require_same_mapping(store, given, [], extend=True)
    return given


def given_mapping(store: Store, columns: dict[str, Any] | None) -> ColumnParams | None:
    """The mapping of an add given some column flags: the held corpus' with those over it."""
    if not columns:
        return None
    held = held_mapping(store)
    return ColumnParams.checked({**(held.model_dump(exclude={"default_date"}) if held else {}), **columns})


def require_same_mapping(store: Store, mapping: ColumnParams, months: list[str], extend: bool) -> None:
    """A run of some months (or `add`) must read its input with the mapping of the days it keeps
    (the default date is the input's own: each day's undated records may take another)."""
    held = held_mapping(store)
    if held is None or held.model_copy(update={"default_date": mapping.default_date}) == mapping:
        return
    kept = [d for d in load_state(store)["days"] if extend or crawl_month(d) not in set(months)]
    if kept:  # each field named by its flag on the command line; the rest are values, given as they are
        differing = {k for k in ColumnParams.model_fields if getattr(held, k) != getattr(mapping, k)}
        names: list[str] = []
        values: dict[str, str] = {"root": str(store.root)}

        def described(m: ColumnParams) -> str:
            """The fields other than the defaults, and those that differ even when default (`--text-column
            body` is the default, and was left out)."""
            fields = m.model_dump(exclude={"default_date"})
            given = mapping_given(fields)
            parts = []
            for name, value in fields.items():
                if name in given or name in differing:
                    if name not in names:
                        names.append(name)
                    values[f"v{len(values)}"] = repr(value)
                    parts.append(f"{{p{names.index(name)}}}={{v{len(values) - 1}}}")
            return ", ".join(parts) or "the default columns"

        held_text, given_text = described(held), described(mapping)
        raise ParamAdvice(
            tuple(names),
            f"the {len(kept)} crawl day(s) held in {{root}} were read with {held_text}, this input with {given_text}: "
            "one corpus is read with one column mapping; give the held one, or `webdedup run` the whole input with "
            "the new one",
            **values,
        )


JSON_LINES = "format = 'newline_delimited', records = true"
_json_schemas: dict[tuple[str, str], str] = {}  # (path, sha256) -> the columns read_json is given


def json_columns(f: InputFile) -> str:
    """The fields of a JSON Lines file and their types, inferred once from every record (so a field
    first seen late is neither dropped nor refused); each later read is then one pass over the file."""
    key = (str(f.path), f.sha256)
    if key not in _json_schemas:
        if str(f.path).lower().endswith(".zst"):  # DuckDB detects a cut .gz itself, not a cut .zst
            require_whole_stream(f.path)
        with connect() as con:
            rel = con.sql(
                f"SELECT * FROM read_json({sql_string(str(f.path))}, {JSON_LINES}, sample_size = -1, "
                "hive_partitioning = false)"
            )
            _json_schemas[key] = ", ".join(
                f"{sql_string(c)}: {sql_string(_as_given(t))}" for c, t in zip(rel.columns, rel.types)
            )
    return _json_schemas[key]


# Types DuckDB's JSON reader detects in strings; a JSON string stays the text it was given.
DETECTED_IN_STRINGS = {"date", "time", "timestamp", "timestamp with time zone", "uuid", "interval"}


def _as_given(kind: duckdb.DuckDBPyType) -> str:
    """A JSON field's inferred type with every type detected in strings read as VARCHAR instead, at
    any depth: a UUID id or a date-like title is text (it was refused as a UUID or a DATE column),
    and an extra field keeps its characters ("2026-03-01T10:00:00" read as a timestamp came back as
    "2026-03-01 10:00:00")."""
    if kind.id in DETECTED_IN_STRINGS:
        return "VARCHAR"
    if kind.id == "list":
        return f"{_as_given(dict(kind.children)['child'])}[]"
    if kind.id == "struct":
        return f"STRUCT({', '.join(f'{quote_ident(name)} {_as_given(child)}' for name, child in kind.children)})"
    if kind.id == "map":
        children = dict(kind.children)
        return f"MAP({_as_given(children['key'])}, {_as_given(children['value'])})"
    return str(kind)


def infer_json_columns(files: list[InputFile]) -> None:
    """json_columns of every JSON Lines file among `files`, on all cores: DuckDB infers the fields
    of one compressed file on one thread. A file whose inference fails is left to its own read,
    which reports it in the files' order."""

    def infer(f: InputFile) -> None:
        try:
            json_columns(f)
        except duckdb.Error:
            pass

    for _ in ordered_map(infer, [f for f in files if f.format == "jsonl"], thread_count()):
        pass
