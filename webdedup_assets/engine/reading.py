"""Reading CSV, Parquet and JSON Lines input with DuckDB, validated: the input contract of the documents stage.

Input contract: columns doc_id, source, domain, crawled_at, title, body (any order), each read
from the input's field the column mapping names (ColumnParams: the contract's own names by
default, dotted paths into nested objects); every other column is kept as is. doc_id must be
present and unique; crawled_at must be a date, a timestamp or epoch seconds (stored as its UTC
day; mapping.default_date for a record without one, when it is given); a NULL body is stored as
the empty string (such a document gets no shingles and can never be a candidate). CSV files must
be UTF-8. Every problem is an error naming the file and the row, column or doc_ids.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import WebdedupError
from ..ingest.csv_files import MAX_LINE_BYTES, check_utf8, csv_header, delimiter, locate_csv_error
from ..ingest.inputs import WARC_FORMATS, InputFile, resolve_input
from ..ingest.jsonl import first_problem, has_records
from ..ingest.options import WarcOptions
from ..params import ColumnParams
from ..storage.objects import ObjectPath, open_input
from ..storage.store import Store, connect, quote_ident, scalar, sql_string
from .columns import (
    INTEGER_TYPES,
    JSON_LINES,
    NUMBER_TYPES,
    MappedInput,
    infer_json_columns,
    is_json,
    json_columns,
    map_columns,
    stored_name,
    stored_types,
    text_sql,
    unify_extra,
)
from .stages.documents_warc import stage_warc

TEXT_COLUMNS = ("doc_id", "source", "domain", "title", "body")


def combined_sha256(files: list[InputFile]) -> str:
    """One checksum for the whole input (the file's own sha256 when there is one file)."""
    return combine_checksums([(f.path.name, f.sha256) for f in files])


def combine_checksums(named: list[tuple[str, str]]) -> str:
    """(file name, sha256) pairs in input order -> one checksum; a single file keeps its own."""
    if len(named) == 1:
        return named[0][1]
    digest = hashlib.sha256()
    for name, sha256 in named:
        digest.update(f"{name}\t{sha256}\n".encode())
    return digest.hexdigest()


def crawl_day_sql(raw: str) -> str:
    """SQL for the UTC crawl day of a crawled_at text: a timestamp (an offset is converted to UTC,
    the session time zone) or a plain date; NULL when it is neither."""
    return f"COALESCE(CAST(TRY_CAST({raw} AS TIMESTAMPTZ) AS DATE), TRY_CAST({raw} AS DATE))"


DUCKDB_FILE = re.compile(r"^\s*file = (.+?)\s*$|in file \"(.+?)\"|(?:end of file|File) '(.+?)'", re.MULTILINE)


def read_error(err: Exception, files: list[InputFile]) -> WebdedupError:
    """A DuckDB error while reading the input (duckdb.Error, or what its Arrow stream raises) -> a
    message naming the file and, for CSV and JSON Lines, the line."""
    text = str(err).strip()
    match = DUCKDB_FILE.search(text)
    named = (match.group(1) or match.group(2) or match.group(3)) if match else None
    suspects = [f for f in files if f.format in ("csv", "jsonl") and (named is None or named == str(f.path))]
    for f in suspects:
        problem = locate_csv_error(f.path) if f.format == "csv" else first_problem(f.path)
        if problem:
            return WebdedupError(f"{f.path}: {problem}")
    if named is None:  # DuckDB named no file (a damaged Parquet page): the first whose footer or pages fail
        named = next((str(f.path) for f in files if f.format == "parquet" and not _reads_whole(f.path)), None)
    where = f"{named}: " if named else ""
    if "No magic bytes found" in text or "too small to be a Parquet file" in text:
        source = next((f.path for f in files if str(f.path) == named), None)
        if source is not None and _starts_as_parquet(source):
            return WebdedupError(f"{where}a Parquet file cut short (no footer at its end): copy it again")
        return WebdedupError(
            f"{where}not a Parquet file (no Parquet footer at its end): give the format it is in, "
            "--format csv, jsonl or warc"
        )
    return WebdedupError(f"{where}cannot read the input: {text.splitlines()[0]}")


def _reads_whole(path: Path | ObjectPath) -> bool:
    """Whether every page of a Parquet file reads (a batch at a time: memory stays bounded)."""
    try:
        with open_input(path) as handle:
            for _ in pq.ParquetFile(handle).iter_batches():
                pass
        return True
    except Exception:  # any damage: pyarrow raises ArrowInvalid, OSError, or its Thrift errors
        return False


def _starts_as_parquet(path: Path | ObjectPath) -> bool:
    try:
        with open_input(path) as handle:
            return handle.read(4) == b"PAR1"
    except (OSError, WebdedupError):
        return False


def source_sql(f: InputFile, strict: bool = True) -> str:
    """DuckDB table expression reading one input file. CSV: comma-separated (tab for .tsv), RFC 4180
    double quotes, the header read by us, every column as text; no dialect sniffing, so a
    malformed file fails with its line instead of being read as one column. JSON Lines: one object
    per line, decompressed by its suffix (.gz, .zst), with the types of columns.json_columns."""
    if f.format == "csv":
        columns = ", ".join(f"{sql_string(name)}: 'VARCHAR'" for name in csv_header(f.path))
        return (
            f"read_csv({sql_string(str(f.path))}, auto_detect = false, header = true, "
            f"delim = {sql_string(delimiter(f.path))}, quote = '\"', escape = '\"', columns = {{{columns}}}, "
            f"max_line_size = {MAX_LINE_BYTES}, strict_mode = {'true' if strict else 'false'}, "
            "hive_partitioning = false)"
        )
    if f.format == "jsonl":
        return (
            f"read_json({sql_string(str(f.path))}, {JSON_LINES}, columns = {{{json_columns(f)}}}, "
            "hive_partitioning = false)"
        )
    return f"read_parquet({sql_string(str(f.path))}, hive_partitioning = false)"


def temp_view(con: duckdb.DuckDBPyConnection, name: str, rel: duckdb.DuckDBPyRelation) -> None:
    """`rel` as a view of this connection only (a relation's create_view puts it in the database,
    which the process' other connections share: storage.store.connect)."""
    con.execute(f"CREATE OR REPLACE TEMP VIEW {quote_ident(name)} AS {rel.sql_query()}")


def without_empty_shards(files: list[InputFile]) -> list[InputFile]:
    """A JSON Lines shard without a record holds no document (DuckDB cannot read it as records)."""
    return [f for f in files if f.format != "jsonl" or has_records(f.path)]


def scan_input(con: duckdb.DuckDBPyConnection, f: InputFile) -> duckdb.DuckDBPyRelation:
    try:
        if f.format == "csv":
            check_utf8(f.path)
        return con.sql(f"SELECT * FROM {source_sql(f)}")
    except duckdb.Error as err:
        raise read_error(err, [f]) from None


def _offenders(con: duckdb.DuckDBPyConnection, sql: str, limit: int = 5) -> list[tuple]:
    return con.execute(f"{sql} LIMIT {limit}").fetchall()


def load_input(
    con: duckdb.DuckDBPyConnection,
    files: list[InputFile],
    mapping: ColumnParams | None = None,
    held: Store | None = None,
) -> tuple[list[str], int]:
    """Define the view `parsed` over the input files (read through the column mapping) and validate
    it; returns the extra columns and the number of documents dated by mapping.default_date.
    `held` (an add): the storage whose documents' column types the extra fields must fit.

    Only a narrow table `keys` (doc_id, dates, file) is materialized for validation; page
    bodies stream from the input straight into the output files, so memory and temporary
    disk do not grow with the corpus' text.
    """
    mapping = mapping or ColumnParams()
    infer_json_columns(files)
    relations = [scan_input(con, f) for f in files]
    mapped = [map_columns(f, rel, mapping) for f, rel in zip(files, relations)]
    file_types = [dict(zip(rel.columns, rel.types)) for rel in relations]
    extra: list[str] = []
    kinds: dict[str, list] = {}  # an extra field's types in the files
    for types, m in zip(file_types, mapped):
        extra.extend(c for c in m.extra if c not in extra)
        for c in m.extra:
            kinds.setdefault(c, []).append(types[c])
    # One type per field, whatever the files it came in (one run, or a run and adds, whose stored
    # files are read as one union); a field whose types do not unify is kept as JSON text.
    unified = unify_extra(con, kinds, stored_types(con, held) if held is not None and kinds else {})
    as_json = {c for c, kind in unified.items() if kind is None}
    typed_parts = []
    for index, (f, rel, m, types) in enumerate(zip(files, relations, mapped, file_types)):
        view = f"raw_{index}"
        temp_view(con, view, rel)
        text = _contract_sql(con, f, view, m)
        cols = [f"{text[c]} AS {quote_ident(c)}" for c in TEXT_COLUMNS]
        cols.append(f"{text['crawled_at']} AS crawled_at_raw")
        cols.append(f"{text['crawled_day']} AS crawled_day")
        cols += [f"{_extra_sql(c, m.extra, as_json, types, unified)} AS {quote_ident(stored_name(c))}" for c in extra]
        cols.append(f"{sql_string(str(f.path))} AS __source_file, {index} AS __file_index")
        typed_parts.append(f"SELECT {', '.join(cols)} FROM {view}")
    fallback = f"DATE {sql_string(mapping.default_date)}" if mapping.default_date else "NULL"
    con.execute(
        f"CREATE TEMP VIEW parsed AS SELECT *, COALESCE(crawled_day, {fallback}) AS crawled_at "
        "FROM (" + " UNION ALL BY NAME ".join(typed_parts) + ")"
    )
    try:
        con.execute(
            "CREATE TEMP TABLE keys AS SELECT doc_id, crawled_at_raw, crawled_day, crawled_at, __source_file, "
            "__file_index FROM parsed"
        )
    except duckdb.Error as err:  # a malformed CSV or JSON Lines file fails here, on its first bad record
        raise read_error(err, files) from None
    date_fields = {str(f.path): "crawled_at" if f.stored else mapping.date_column for f in files}
    json_lines = {str(f.path): f.path for f in files if f.format == "jsonl"}
    _validate_rows(con, dated=not mapping.default_date, date_fields=date_fields, json_lines=json_lines)
    return [stored_name(c) for c in extra], scalar(con, "SELECT count(*) FROM keys WHERE crawled_day IS NULL")


def document_ids(f: InputFile, mapping: ColumnParams) -> pa.ChunkedArray:
    """The doc_id of each record of one input file, in the file's order, derived as load_input
    derives it (the mapping, the cast of numeric or mixed ids), for writing the file back."""
    con = connect()
    try:
        con.execute("SET SESSION preserve_insertion_order = true")
        infer_json_columns([f])
        rel = scan_input(con, f)
        temp_view(con, "raw", rel)
        doc_id = _contract_sql(con, f, "raw", map_columns(f, rel, mapping))["doc_id"]
        return con.sql(f"SELECT {doc_id} FROM raw").to_arrow_table().column(0)
    except duckdb.Error as err:
        raise read_error(err, [f]) from None
    finally:
        con.close()


def _extra_sql(column: str, present: list[str], as_json: set[str], types: dict, unified: dict) -> str:
    if column not in present:
        return "NULL"
    if column in as_json:
        return f"to_json({quote_ident(column)})"
    if types[column].id != "null" and str(types[column]) != str(unified[column]):
        # empty lists take the others' type, and every file the unified one: an add's files are
        # not read in one union with the held ones, which keep the unified type's field order
        return f"CAST({quote_ident(column)} AS {unified[column]})"
    return quote_ident(column)


def _contract_sql(con: duckdb.DuckDBPyConnection, f: InputFile, view: str, mapped: MappedInput) -> dict[str, str]:
    """SQL giving each text column of one input as VARCHAR, crawled_at's text (`crawled_at`) and its
    UTC day (`crawled_day`, NULL when it is not a date), by one rule:

    - text (VARCHAR; CSV columns always are) is taken as is;
    - binary (BLOB) must hold UTF-8 text: decoded strictly, else refused naming file, column and doc_ids;
    - integers become their decimal text (numeric ids); a column of only NULLs is NULL;
    - any other type (floating point, decimal, boolean, date, list, struct, ...) is refused in a
      text column, naming the file, the column and its type. crawled_at may also be a date, a
      timestamp, or a number of seconds since 1970-01-01 UTC.
    """
    doc_id, id_type = mapped.fields["doc_id"]
    label = f"COALESCE(TRY(decode({doc_id})), CAST({doc_id} AS VARCHAR))" if id_type.id == "blob" else doc_id
    label = f"CAST({label} AS VARCHAR)"
    out = {}
    for column in (*TEXT_COLUMNS, "crawled_at"):
        found = mapped.fields[column]
        if found is None:
            out[column] = "CAST(NULL AS VARCHAR)"
            continue
        name, kind = found[0], found[1].id
        if is_json(found[1]):
            out[column] = text_sql(*found)
        elif kind == "varchar":
            out[column] = name
        elif kind == "blob":
            _require_utf8(con, f, view, name, mapped.labels[column], label)
            out[column] = f"decode({name})"
        elif kind in INTEGER_TYPES or kind == "null":
            out[column] = f"CAST({name} AS VARCHAR)"
        elif column == "crawled_at" and (kind in NUMBER_TYPES or kind == "date" or kind.startswith("timestamp")):
            out[column] = f"CAST({name} AS VARCHAR)"
        else:
            raise WebdedupError(
                f"{f.path}: column {mapped.labels[column]} has type {found[1]}; "
                + (
                    "crawled_at must be a date, a timestamp, a number of epoch seconds or text"
                    if column == "crawled_at"
                    else f"text columns ({', '.join(TEXT_COLUMNS)}) must be strings, binary holding UTF-8 text, "
                    "or integers"
                )
            )
    date = mapped.fields["crawled_at"]
    epoch = f"CAST(TRY(to_timestamp(TRY_CAST({out['crawled_at']} AS DOUBLE))) AS DATE)"
    text = crawl_day_sql(f"trim({out['crawled_at']})")  # an offset becomes UTC (the session time zone)
    if date is not None and date[1].id in NUMBER_TYPES:  # epoch seconds
        out["crawled_day"] = epoch
    elif date is not None and is_json(date[1]):  # numbers and strings mixed: each by its JSON type
        numeric = f"json_type({date[0]}) IN ('BIGINT', 'UBIGINT', 'DOUBLE')"
        out["crawled_day"] = f"CASE WHEN {numeric} THEN {epoch} ELSE {text} END"
    else:
        out["crawled_day"] = text
    day = out["crawled_day"]  # a day past year 9999 (an offset can carry 9999-12-31 there) is not a date
    out["crawled_day"] = f"CASE WHEN {day} <= DATE '9999-12-31' THEN {day} END"
    return out


def _require_utf8(con: duckdb.DuckDBPyConnection, f: InputFile, view: str, name: str, column: str, label: str) -> None:
    """A binary column must decode as UTF-8 in every row; else an error naming the first doc_ids."""
    bad = f"FROM {view} WHERE {name} IS NOT NULL AND TRY(decode({name})) IS NULL"
    first = [d for (d,) in con.execute(f"SELECT {label} AS d {bad} ORDER BY d LIMIT 5").fetchall()]
    if first:
        total = scalar(con, f"SELECT count(*) {bad}")
        raise WebdedupError(
            f"{f.path}: column {column} is binary and not valid UTF-8 for {total} document(s), first doc_id(s): "
            f"{', '.join(repr(d) for d in first)}; write text columns as UTF-8 strings"
        )


def _validate_rows(
    con: duckdb.DuckDBPyConnection,
    dated: bool = True,
    date_fields: dict[str, str] | None = None,
    json_lines: dict[str, Path | ObjectPath] | None = None,
) -> None:
    """doc_ids present and unique; with `dated` (no default date), every crawl date present and a date.
    date_fields: file name -> the field its crawl dates are read from, named when it is not crawled_at.
    json_lines: file name -> the JSON Lines file, whose lines explain a record of NULLs."""

    def where(file: str) -> str:
        field = (date_fields or {}).get(file, "crawled_at")
        return file if field == "crawled_at" else f"{file}, field {field}"

    bad_ids = _offenders(con, "SELECT __source_file FROM keys WHERE doc_id IS NULL OR trim(doc_id) = ''")
    if bad_ids:
        count = scalar(con, "SELECT count(*) FROM keys WHERE doc_id IS NULL OR trim(doc_id) = ''")
        first = bad_ids[0][0]
        json_lines = json_lines or {}
        problem = first_problem(json_lines[first]) if first in json_lines else None
        if problem:  # a line DuckDB read as a record of NULLs (`null`): named by its line
            raise WebdedupError(f"{first}: {problem}")
        raise WebdedupError(f"{count} row(s) have an empty doc_id (first in file {first})")
    # a doc_id is written as it is into the CSV outputs, where a NUL byte breaks most readers
    with_nul = _offenders(con, "SELECT doc_id, __source_file FROM keys WHERE contains(doc_id, chr(0)) ORDER BY doc_id")
    if with_nul:
        total = scalar(con, "SELECT count(*) FROM keys WHERE contains(doc_id, chr(0))")
        raise WebdedupError(
            f"{with_nul[0][1]}: {total} doc_id(s) contain a NUL byte, first: "
            f"{', '.join(repr(d) for d, _ in with_nul)}; remove the NUL bytes from the doc_ids"
        )
    dupes = _offenders(
        con,
        "SELECT doc_id, count(*) AS n, string_agg(DISTINCT __source_file, ', ') FROM keys "
        "GROUP BY doc_id HAVING count(*) > 1 ORDER BY doc_id",
    )
    if dupes:
        total = scalar(con, "SELECT count(*) FROM (SELECT doc_id FROM keys GROUP BY doc_id HAVING count(*) > 1)")
        listed = "; ".join(f"{d!r} x{n} in {src}" for d, n, src in dupes)
        raise WebdedupError(f"doc_id must be unique: {total} doc_id(s) appear more than once, first: {listed}")
    if not dated:
        return
    fallback = "or set a default date for them (default_date; CLI: --default-date)"
    undated = _offenders(
        con,
        "SELECT doc_id, __source_file FROM keys "
        "WHERE crawled_at_raw IS NULL OR trim(crawled_at_raw) = '' ORDER BY doc_id",
    )
    if undated:
        total = scalar(con, "SELECT count(*) FROM keys WHERE crawled_at_raw IS NULL OR trim(crawled_at_raw) = ''")
        raise WebdedupError(
            f"crawled_at is missing for {total} document(s), first doc_id(s): "
            f"{', '.join(repr(d) for d, _ in undated)} (in {where(undated[0][1])}); every document needs its crawl "
            f"date, {fallback}"
        )
    unparsable = _offenders(
        con, "SELECT doc_id, crawled_at_raw, __source_file FROM keys WHERE crawled_at IS NULL ORDER BY doc_id"
    )
    if unparsable:
        total = scalar(con, "SELECT count(*) FROM keys WHERE crawled_at IS NULL")
        listed = ", ".join(f"{d!r} ({raw!r})" for d, raw, _ in unparsable)
        raise WebdedupError(
            f"crawled_at is not a date or timestamp for {total} document(s), first: {listed} "
            f"in {where(unparsable[0][2])}; use ISO 8601 such as 2026-03-01 or 2026-03-01T12:00:00Z, or epoch seconds "
            f"(a number field of JSON Lines or Parquet; CSV text holds dates), {fallback}"
        )


def select_sql(extra: list[str]) -> str:
    return ", ".join(
        ["doc_id", "source", "domain", "crawled_at", "title", "COALESCE(body, '') AS body"]
        + [quote_ident(c) for c in extra]
    )


def input_days(
    input_path: str,
    input_format: str = "auto",
    store: Store | None = None,
    warc_options: WarcOptions | None = None,
    mapping: ColumnParams | None = None,
    explain: bool = False,
) -> list[str]:
    """The distinct crawl days (UTC) present in an input, read from its date field alone
    (mapping.default_date for a record without a usable date, when it is given).

    Rows without a usable date are not listed here; the documents stage reports them by doc_id.
    Returns [] when the input cannot be read this way (the documents stage then says why), or
    with `explain` raises the error naming the problem (for a caller that runs no documents stage
    when no day is found: `add`, `check`).
    WARC input is converted once into `store` (the documents stage then reuses that conversion).
    """
    mapping = mapping or ColumnParams()
    try:
        files = resolve_input(input_path, input_format)
        if any(f.format in WARC_FORMATS for f in files):
            if store is None:
                return []
            files = stage_warc(store, files, warc_options)[0]
        files = without_empty_shards(files)
    except WebdedupError:
        if explain:
            raise
        return []
    days: set[str] = set()
    infer_json_columns(files)
    con = connect()
    try:
        for f in files:
            try:
                days.update(file_days(con, f, mapping))
            except duckdb.Error as err:
                raise read_error(err, [f]) from None
    except WebdedupError:
        if explain:
            raise
        return []
    finally:
        con.close()
    return sorted(days)


def no_days_error(input_path: str, input_format: str = "auto") -> WebdedupError:
    """Why an input yields no crawl day (for `add` and `check`, which need one): it holds no
    documents at all, or none with a usable date."""
    try:
        files = without_empty_shards(resolve_input(input_path, input_format))
        infer_json_columns(files)
        with connect() as con:
            rows = sum(scalar(con, f"SELECT count(*) FROM {source_sql(f, strict=False)}") for f in files)
    except (WebdedupError, duckdb.Error):
        rows = None
    if rows == 0:
        return WebdedupError(f"{input_path}: the input holds no documents")
    return WebdedupError(
        f"{input_path}: no crawl day found in the input (is crawled_at a date? pages without one take --default-date)"
    )


def file_days(con: duckdb.DuckDBPyConnection, f: InputFile, mapping: ColumnParams) -> set[str]:
    """The crawl days of one input file (its Parquet footer tells them when it can)."""
    own_dates = f.stored or (mapping.date_column == "crawled_at" and not mapping.default_date)
    from_footer = days_from_statistics(f) if f.format == "parquet" and own_dates else None
    if from_footer is not None:
        return from_footer
    rel = con.sql(f"SELECT * FROM {source_sql(f, strict=False)}")
    view = "file_of_days"  # one file at a time
    temp_view(con, view, rel)
    day = _contract_sql(con, f, view, map_columns(f, rel, mapping))["crawled_day"]
    if mapping.default_date and not f.stored:
        day = f"COALESCE({day}, DATE {sql_string(mapping.default_date)})"
    rows = con.execute(f"SELECT DISTINCT CAST({day} AS VARCHAR) FROM {view}").fetchall()
    return {d for (d,) in rows if d is not None}


def days_from_statistics(f: InputFile) -> set[str] | None:
    """The crawl days of a Parquet file whose crawled_at is a date, read from its footer: each
    row group's min and max, when they are one day. None when that is not enough to tell
    (no statistics, a row group spanning days, another type): the caller reads the column."""
    try:
        parquet = pq.ParquetFile(open_input(f.path) if isinstance(f.path, ObjectPath) else f.path)
        if "crawled_at" not in parquet.schema_arrow.names:
            return None
        if not pa.types.is_date32(parquet.schema_arrow.field("crawled_at").type):
            return None
        column = parquet.schema_arrow.get_field_index("crawled_at")
        days: set[str] = set()
        metadata = parquet.metadata
        for index in range(metadata.num_row_groups):
            group = metadata.row_group(index)
            stats = group.column(column).statistics
            if group.num_rows == 0:
                continue
            if stats is not None and stats.null_count == group.num_rows:
                continue  # only undated rows: the documents stage names them
            if stats is None or not stats.has_min_max:
                return None
            if stats.min != stats.max:
                return None
            days.add(stats.min.isoformat())
        return days
    except (OSError, pa.ArrowException, ValueError):
        return None
