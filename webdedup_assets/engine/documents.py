"""The documents stage: read CSV or Parquet input, validate it, store it typed.

Input contract: columns doc_id, source, domain, crawled_at, title, body (any order);
every other column is kept as is. doc_id must be present and unique; crawled_at must be a
date or timestamp (stored as its UTC day); a NULL body is stored as the empty string (such
a document gets no shingles and can never be a candidate). CSV files must be UTF-8.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import os
import re
import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ..ingest.inputs import WARC_FORMATS, InputFile, day_of_file, format_suffix, resolve_input
from ..ingest.options import WarcOptions
from ..progress import Task
from .contract import REQUIRED_COLUMNS
from .errors import WebdedupError
from .parallel import thread_count
from .state import crawl_month, load_state, record_documents, require_same_input
from .storage import (
    Store,
    atomic_path,
    connect,
    copy_query,
    file_sha256,
    quote_ident,
    scalar,
    sql_string,
    write_schema,
)
from .warc_staging import clear_rejections, discard_staging, stage_warc

TEXT_COLUMNS = ("doc_id", "source", "domain", "title", "body")
MAX_LINE_BYTES = 1 << 30  # a single CSV record may hold a very large page


def combined_sha256(files: list[InputFile]) -> str:
    """One checksum for the whole input (the file's own sha256 when there is one file)."""
    return _combine_checksums([(f.path.name, f.sha256) for f in files])


def _combine_checksums(named: list[tuple[str, str]]) -> str:
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


def check_utf8(path: Path) -> None:
    """Fail on the first invalid UTF-8 byte, naming the file, byte offset and line."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    offset = 0
    lines = 1
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as err:
                bad = offset + err.start
                line = lines + chunk[: err.start].count(b"\n")
                raise WebdedupError(
                    f"{path}: invalid UTF-8 at byte offset {bad} (line {line}): "
                    f"byte 0x{chunk[err.start]:02x}; convert the file to UTF-8 (for example "
                    f"`iconv -f latin1 -t utf-8`)"
                ) from None
            offset += len(chunk)
            lines += chunk.count(b"\n")
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise WebdedupError(f"{path}: invalid UTF-8: the file ends inside a multi-byte character") from None


CSV_DELIMITERS = {".tsv": "\t"}  # every other CSV input is comma-separated


def _delimiter(path: Path) -> str:
    return CSV_DELIMITERS.get(format_suffix(path), ",")


def _csv_reader(handle, path: Path):
    csv.field_size_limit(max(csv.field_size_limit(), MAX_LINE_BYTES))
    return csv.reader(handle, delimiter=_delimiter(path), quotechar='"', doublequote=True, strict=True)


def csv_header(path: Path) -> list[str]:
    """The column names of a CSV file, checked: the file is not empty, and no name is empty or
    repeated. Reads the first record only."""
    if path.stat().st_size == 0:
        raise WebdedupError(
            f"{path}: the file is empty (0 bytes); a CSV input needs at least its header line "
            f"({','.join(REQUIRED_COLUMNS)})"
        )
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = _csv_reader(handle, path)
        try:
            header = next(reader, [])
        except csv.Error as err:
            raise WebdedupError(f"{path}: line 1: cannot read the header: {_csv_problem(err)}") from None
    if not any(name.strip() for name in header):
        raise WebdedupError(f"{path}: line 1: the header line is empty; the first line must name the columns")
    if len(header) == 1:
        other = next((d for d in (";", "\t", "|", ",") if d in header[0] and d != _delimiter(path)), None)
        if other is not None:
            shown = {"\t": "tabs", ";": "semicolons", "|": "'|'", ",": "commas"}[other]
            wanted = "tab-separated (.tsv)" if _delimiter(path) == "\t" else "comma-separated (tab for .tsv)"
            raise WebdedupError(
                f"{path}: line 1: the header is one column {header[0][:80]!r}, separated by {shown}; "
                f"webdedup reads {wanted} files"
            )
    empty = [str(i + 1) for i, name in enumerate(header) if not name.strip()]
    if empty:
        raise WebdedupError(f"{path}: line 1: column(s) {', '.join(empty)} of the header have no name")
    dupes = sorted({name for name in header if header.count(name) > 1})
    if dupes:
        where = "; ".join(
            f"{d!r} in columns {', '.join(str(i + 1) for i, n in enumerate(header) if n == d)}" for d in dupes
        )
        raise WebdedupError(f"{path}: line 1: duplicate column name(s) in the header: {where}")
    return header


def _csv_problem(err: csv.Error) -> str:
    text = str(err)
    if "unexpected end of data" in text:
        return "unterminated quoted field: the quote opened in this record is never closed"
    if "expected after" in text:
        return f'text after a closing quote ({text}); a quote inside a quoted field is written twice ("")'
    return text


def locate_csv_error(path: Path) -> str | None:
    """The first structural problem of a CSV file, with its physical line: a record whose
    number of fields differs from the header's, or bad quoting. None if there is none.

    Python's csv module, streaming: only used to explain a failed read, never on the fast path."""
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = _csv_reader(handle, path)
        width, start = None, 1
        try:
            for row in reader:
                if width is None:
                    width = len(row)
                elif row and len(row) != width:  # blank lines are skipped, as DuckDB does
                    return f"line {start}: {len(row)} field(s), but the header has {width}"
                start = reader.line_num + 1
        except csv.Error as err:
            return f"line {start}: {_csv_problem(err)}"
    return None


DUCKDB_FILE = re.compile(r"^\s*file = (.+?)\s*$", re.MULTILINE)


def read_error(err: duckdb.Error, files: list[InputFile]) -> WebdedupError:
    """A DuckDB error while reading the input -> a message naming the file and, for CSV, the line."""
    text = str(err).strip()
    named = DUCKDB_FILE.search(text)
    suspects = [f for f in files if f.format == "csv" and (named is None or str(f.path) == named.group(1))]
    for f in suspects:
        problem = locate_csv_error(f.path)
        if problem:
            return WebdedupError(f"{f.path}: {problem}")
    where = f"{named.group(1)}: " if named else ""
    return WebdedupError(f"{where}cannot read the input: {text.splitlines()[0]}")


def _source_sql(f: InputFile, strict: bool = True) -> str:
    """DuckDB table expression reading one input file. CSV: comma-separated (tab for .tsv), RFC 4180
    double quotes, the header read by us, every column as text; no dialect sniffing, so a
    malformed file fails with its line instead of being read as one column."""
    if f.format == "csv":
        columns = ", ".join(f"{sql_string(name)}: 'VARCHAR'" for name in csv_header(f.path))
        return (
            f"read_csv({sql_string(str(f.path))}, auto_detect = false, header = true, "
            f"delim = {sql_string(_delimiter(f.path))}, quote = '\"', escape = '\"', columns = {{{columns}}}, "
            f"max_line_size = {MAX_LINE_BYTES}, strict_mode = {'true' if strict else 'false'})"
        )
    return f"read_parquet({sql_string(str(f.path))})"


def _scan(con: duckdb.DuckDBPyConnection, f: InputFile) -> duckdb.DuckDBPyRelation:
    try:
        if f.format == "csv":
            check_utf8(f.path)
        return con.sql(f"SELECT * FROM {_source_sql(f)}")
    except duckdb.Error as err:
        raise read_error(err, [f]) from None


def _validate_columns(files: list[InputFile], relations: list[duckdb.DuckDBPyRelation]) -> list[str]:
    extra: list[str] = []
    for f, rel in zip(files, relations):
        columns = rel.columns
        missing = [c for c in REQUIRED_COLUMNS if c not in columns]
        if missing:
            raise WebdedupError(
                f"{f.path}: missing required column(s) {', '.join(missing)}; found columns: {', '.join(columns)}"
            )
        dupes = sorted({c for c in columns if columns.count(c) > 1})
        if dupes:
            raise WebdedupError(f"{f.path}: duplicate column name(s) {', '.join(dupes)}")
        extra.extend(c for c in columns if c not in REQUIRED_COLUMNS and c not in extra)
    return extra


def _offenders(con: duckdb.DuckDBPyConnection, sql: str, limit: int = 5) -> list[tuple]:
    return con.execute(f"{sql} LIMIT {limit}").fetchall()


def _load(con: duckdb.DuckDBPyConnection, files: list[InputFile]) -> list[str]:
    """Define the view `parsed` over the input files and validate it; returns the extra columns.

    Only a narrow table `keys` (doc_id, dates, file) is materialized for validation; page
    bodies stream from the input straight into the output files, so memory and temporary
    disk do not grow with the corpus' text.
    """
    relations = [_scan(con, f) for f in files]
    extra = _validate_columns(files, relations)
    typed_parts = []
    for index, (f, rel) in enumerate(zip(files, relations)):
        view = f"raw_{index}"
        rel.create_view(view)
        text = _text_columns_sql(con, f, rel, view)
        cols = [f"{text[c]} AS {quote_ident(c)}" for c in TEXT_COLUMNS]
        cols.append(f"{text['crawled_at']} AS crawled_at_raw")
        cols += [(f"{quote_ident(c)}" if c in rel.columns else f"NULL AS {quote_ident(c)}") for c in extra]
        cols.append(f"{sql_string(f.path.name)} AS __source_file, {index} AS __file_index")
        typed_parts.append(f"SELECT {', '.join(cols)} FROM {view}")
    # Timestamps with an offset become their UTC day (the session time zone is UTC).
    con.execute(
        f"CREATE TEMP VIEW parsed AS SELECT *, {crawl_day_sql('trim(crawled_at_raw)')} AS crawled_at "
        "FROM (" + " UNION ALL BY NAME ".join(typed_parts) + ")"
    )
    try:
        con.execute(
            "CREATE TEMP TABLE keys AS SELECT doc_id, crawled_at_raw, crawled_at, __source_file, __file_index "
            "FROM parsed"
        )
    except duckdb.Error as err:  # a malformed CSV fails here, on its first bad record
        raise read_error(err, files) from None
    _validate_rows(con)
    return extra


INTEGER_TYPES = {
    "tinyint",
    "smallint",
    "integer",
    "bigint",
    "hugeint",
    "utinyint",
    "usmallint",
    "uinteger",
    "ubigint",
    "uhugeint",
}


def _text_columns_sql(
    con: duckdb.DuckDBPyConnection, f: InputFile, rel: duckdb.DuckDBPyRelation, view: str
) -> dict[str, str]:
    """SQL giving each text column (and crawled_at) of one input as VARCHAR, by one rule:

    - text (VARCHAR; CSV columns always are) is taken as is;
    - binary (BLOB) must hold UTF-8 text: decoded strictly, else refused naming file, column and doc_ids;
    - integers become their decimal text (numeric ids); a column of only NULLs is NULL;
    - any other type (floating point, decimal, boolean, date, list, struct, ...) is refused in a
      text column, naming the file, the column and its type. crawled_at may also be a date or timestamp.
    """
    types = {c: t for c, t in zip(rel.columns, rel.types)}
    doc_id = quote_ident("doc_id")
    label = (
        f"COALESCE(TRY(decode({doc_id})), CAST({doc_id} AS VARCHAR))"
        if types["doc_id"].id == "blob"
        else (f"CAST({doc_id} AS VARCHAR)")
    )
    out = {}
    for column in (*TEXT_COLUMNS, "crawled_at"):
        name, kind = quote_ident(column), types[column].id
        if kind == "varchar":
            out[column] = name
        elif kind == "blob":
            _require_utf8(con, f, view, column, label)
            out[column] = f"decode({name})"
        elif kind in INTEGER_TYPES or kind == "null":
            out[column] = f"CAST({name} AS VARCHAR)"
        elif column == "crawled_at" and (kind == "date" or kind.startswith("timestamp")):
            out[column] = f"CAST({name} AS VARCHAR)"
        else:
            raise WebdedupError(
                f"{f.path}: column {column} has type {types[column]}; "
                + (
                    "crawled_at must be a date, a timestamp or text"
                    if column == "crawled_at"
                    else f"text columns ({', '.join(TEXT_COLUMNS)}) must be strings, binary holding UTF-8 text, "
                    "or integers"
                )
            )
    return out


def _require_utf8(con: duckdb.DuckDBPyConnection, f: InputFile, view: str, column: str, label: str) -> None:
    """A binary column must decode as UTF-8 in every row; else an error naming the first doc_ids."""
    name = quote_ident(column)
    bad = f"FROM {view} WHERE {name} IS NOT NULL AND TRY(decode({name})) IS NULL"
    first = [d for (d,) in con.execute(f"SELECT {label} AS d {bad} ORDER BY d LIMIT 5").fetchall()]
    if first:
        total = scalar(con, f"SELECT count(*) {bad}")
        raise WebdedupError(
            f"{f.path}: column {column} is binary and not valid UTF-8 for {total} document(s), first doc_id(s): "
            f"{', '.join(repr(d) for d in first)}; write text columns as UTF-8 strings"
        )


def _validate_rows(con: duckdb.DuckDBPyConnection) -> None:
    bad_ids = _offenders(con, "SELECT __source_file FROM keys WHERE doc_id IS NULL OR trim(doc_id) = ''")
    if bad_ids:
        count = scalar(con, "SELECT count(*) FROM keys WHERE doc_id IS NULL OR trim(doc_id) = ''")
        raise WebdedupError(f"{count} row(s) have an empty doc_id (first in file {bad_ids[0][0]})")
    dupes = _offenders(
        con,
        "SELECT doc_id, count(*) AS n, string_agg(DISTINCT __source_file, ', ') FROM keys "
        "GROUP BY doc_id HAVING count(*) > 1 ORDER BY doc_id",
    )
    if dupes:
        total = scalar(con, "SELECT count(*) FROM (SELECT doc_id FROM keys GROUP BY doc_id HAVING count(*) > 1)")
        listed = "; ".join(f"{d!r} x{n} in {src}" for d, n, src in dupes)
        raise WebdedupError(f"doc_id must be unique: {total} doc_id(s) appear more than once, first: {listed}")
    undated = _offenders(
        con,
        "SELECT doc_id, __source_file FROM keys "
        "WHERE crawled_at_raw IS NULL OR trim(crawled_at_raw) = '' ORDER BY doc_id",
    )
    if undated:
        total = scalar(con, "SELECT count(*) FROM keys WHERE crawled_at_raw IS NULL OR trim(crawled_at_raw) = ''")
        raise WebdedupError(
            f"crawled_at is missing for {total} document(s), first doc_id(s): "
            f"{', '.join(repr(d) for d, _ in undated)} (in {undated[0][1]}); every document needs its crawl date"
        )
    unparsable = _offenders(
        con, "SELECT doc_id, crawled_at_raw, __source_file FROM keys WHERE crawled_at IS NULL ORDER BY doc_id"
    )
    if unparsable:
        total = scalar(con, "SELECT count(*) FROM keys WHERE crawled_at IS NULL")
        listed = ", ".join(f"{d!r} ({raw!r})" for d, raw, _ in unparsable)
        raise WebdedupError(
            f"crawled_at is not a date or timestamp for {total} document(s), first: {listed} "
            f"in {unparsable[0][2]}; use ISO 8601 such as 2026-03-01 or 2026-03-01T12:00:00Z"
        )


def _select_sql(extra: list[str]) -> str:
    return ", ".join(
        ["doc_id", "source", "domain", "crawled_at", "title", "COALESCE(body, '') AS body"]
        + [quote_ident(c) for c in extra]
    )


def stage_documents(
    store: Store,
    input_path: str,
    input_format: str = "auto",
    months: list[str] | None = None,
    coverage: tuple[str, str] | None = None,
    warc_options: WarcOptions | None = None,
    extend: bool = False,
) -> dict[str, Any]:
    """Validate the input and write the documents asset.

    extend (`webdedup add`): the input may be another one than the held days'; the held days of
    the run's months that the input does not hold are kept (see _retained).

    Without `months`: every document goes to documents/data.parquet.
    With `months` (crawl-month partitions, YYYY-MM): only files that can hold those months are
    read (a file whose name carries a date outside them is skipped), and each month's documents
    go to documents/part-<month>.parquet and its segments (see _write_months); a month without
    documents keeps no file. Any document read whose day lies outside `coverage` (the first and
    last day of the partitions that exist) is reported, with its doc_id, never silently left out.
    """
    started = time.perf_counter()
    all_files = resolve_input(input_path, input_format)
    files = all_files
    uncovered_files: list[str] = []
    if months is not None:
        if not extend:
            require_same_input(store, input_path, input_format, months)
        wanted = set(months)
        files = [f for f in all_files if (day := day_of_file(f.path)) is None or crawl_month(day) in wanted]
        if coverage is not None:
            uncovered_files = [
                str(f.path)
                for f in all_files
                if (d := day_of_file(f.path)) is not None and not coverage[0] <= d <= coverage[1]
            ]
    sources, described, warc_summary = files, [f.describe() for f in files], None
    if any(f.format in WARC_FORMATS for f in files):  # WARC -> staged Parquet, validated like any input
        files, described, warc_summary = stage_warc(store, files, warc_options, None)
    else:
        clear_rejections(store, None)
    retained = Retained()
    if extend and months is not None:
        retained = _retained(store, files, months)
        files = [*files, *retained.staged]
    con = connect(store)
    params = {
        "stage": "documents",
        "input_path": input_path,
        "input_format": input_format,
        "input_files": described,
        **({"warc": warc_summary} if warc_summary else {}),
    }
    if not files:  # every file of the input is dated outside these months
        extra = []
        con.execute(
            "CREATE TEMP VIEW parsed AS SELECT NULL::VARCHAR AS doc_id, NULL::VARCHAR AS source, "
            "NULL::VARCHAR AS domain, NULL::DATE AS crawled_at, NULL::VARCHAR AS title, "
            "NULL::VARCHAR AS body, NULL::INTEGER AS __file_index WHERE false"
        )
        con.execute("CREATE TEMP TABLE keys AS SELECT doc_id, crawled_at, __file_index FROM parsed")
    else:
        extra = _load(con, files)
    params["input_sha256"] = combined_sha256(sources) if sources else None
    params["extra_columns"] = extra
    select = _select_sql(extra)
    stats: dict[str, Any] = {}
    if months is None:
        with atomic_path(store.path("documents")) as temp:
            try:
                copy_query(con, f"SELECT {select} FROM parsed", temp, params)
            except duckdb.Error as err:
                raise read_error(err, files) from None
        stats = {"rows": scalar(con, "SELECT count(*) FROM keys")}
        store.write_stats("documents", None, {**stats, "seconds": round(time.perf_counter() - started, 4)})
    else:
        kept = [p for paths in retained.files.values() for p in paths]
        _refuse_held_doc_ids(con, kept)
        stats = _write_months(con, store, select, months, params, files, retained.files)
        day_rows = stats.pop("day_rows")
        for f in retained.staged:  # (a run killed before this leaves a .tmp file: removed with the leftovers)
            f.path.unlink(missing_ok=True)
        entries = {**_day_entries(day_rows, sources), **retained.entries}
        record_documents(store, input_path, input_format, months, entries)
        if coverage is not None:
            stats.update(_uncovered(con, coverage, uncovered_files))
    stats["seconds"] = round(time.perf_counter() - started, 4)
    con.close()
    discard_staging(store)
    return {**params, **stats}


@dataclass
class Retained:
    """For `webdedup add`: what a month keeps of the held corpus besides the input's days."""

    files: dict[str, list[Path]] = field(default_factory=dict)  # per month: stored files kept as they are
    staged: list[InputFile] = field(default_factory=list)  # rows of held days from files that must change
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)  # state entries of the held days kept


def _retained(store: Store, files: list[InputFile], months: list[str]) -> Retained:
    """For `webdedup add`: the held days of `months` that the input does not hold stay in the
    corpus. A stored file holding none of the input's days is kept as it is (so it is neither
    re-encoded nor fingerprinted again); the rows of held days in a file that also holds a day
    of the input are written to a staging Parquet file read with the input."""
    state = load_state(store)
    wanted = set(months)
    held = {d: e for d, e in state["days"].items() if crawl_month(d) in wanted}
    retained = Retained()
    if not held:
        return retained
    con = connect(store)
    try:
        new_days: set[str] = set()
        for f in files:
            new_days.update(
                d
                for (d,) in con.execute(
                    f"SELECT DISTINCT CAST({crawl_day_sql('trim(CAST(crawled_at AS VARCHAR))')} AS VARCHAR) "
                    f"FROM {_source_sql(f, strict=False)}"
                ).fetchall()
                if d is not None
            )
        kept_days = sorted(d for d in held if d not in new_days)
        retained.entries = {d: held[d].get("documents", {}) for d in kept_days}
        changing: list[Path] = []
        for month in months:
            for path in store.partition_files("documents", month):
                days = {
                    d
                    for (d,) in con.execute(
                        f"SELECT DISTINCT CAST(crawled_at AS VARCHAR) FROM read_parquet({sql_string(str(path))})"
                    ).fetchall()
                }
                if days & new_days:
                    changing.append(path)
                else:
                    retained.files.setdefault(month, []).append(path)
        if kept_days and changing:
            target = store.asset_dir("documents") / f".retained.{os.getpid()}.{uuid.uuid4().hex}.tmp"
            listing = ", ".join(sql_string(str(p)) for p in changing)
            day_list = ", ".join(f"DATE {sql_string(d)}" for d in kept_days)
            con.execute(
                f"COPY (SELECT * FROM read_parquet([{listing}], union_by_name = true) "
                f"WHERE crawled_at IN ({day_list})) TO {sql_string(str(target))} (FORMAT parquet, COMPRESSION zstd)"
            )
            retained.staged = [InputFile(target, "parquet", file_sha256(target), target.stat().st_size)]
    finally:
        con.close()
    return retained


def _refuse_held_doc_ids(con: duckdb.DuckDBPyConnection, kept: list[Path]) -> None:
    """doc_ids of the input that a kept file of the corpus already holds (`webdedup add`)."""
    if not kept:
        return
    listing = ", ".join(sql_string(str(p)) for p in kept)
    sql = f"SELECT doc_id FROM keys WHERE doc_id IN (SELECT doc_id FROM read_parquet([{listing}])) ORDER BY doc_id"
    again = [d for (d,) in con.execute(sql + " LIMIT 5").fetchall()]
    if again:
        raise WebdedupError(
            f"doc_id must be unique: the input repeats doc_id(s) the corpus already holds on other days, first: "
            f"{', '.join(repr(d) for d in again)}"
        )


MONTH_SQL = "strftime(crawled_at, '%Y-%m')"


def _write_months(
    con,
    store: Store,
    select: str,
    months: list[str],
    params: dict[str, Any],
    files: list[InputFile],
    kept: dict[str, list[Path]] | None = None,
) -> dict[str, Any]:
    """Every month of the run as documents/part-<month>.parquet and segments; months without
    documents lose their files.

    An input file that already is exactly the stored form and holds days of one month that no
    other file holds is adopted as a byte copy, a segment part-<month>.<first day>.parquet (see
    _adoptable_files: daily or monthly exports); every other document is written in one pass over
    the input (COPY ... PARTITION_BY month), each month then moved into place. `kept` (`webdedup
    add`): stored files of a month that stay as they are; what is written beside them goes to
    segments named by their first day."""
    kept = kept or {}
    started = time.perf_counter()
    wanted = set(months)
    month_list = ", ".join(sql_string(m) for m in months)
    in_run = f"{MONTH_SQL} IN ({month_list})"
    day_rows = dict(
        con.execute(f"SELECT CAST(crawled_at AS VARCHAR), count(*) FROM keys WHERE {in_run} GROUP BY 1").fetchall()
    )
    month_rows: dict[str, int] = {}
    for day, rows in day_rows.items():
        month_rows[crawl_month(day)] = month_rows.get(crawl_month(day), 0) + rows
    stored_schema = con.sql(f"SELECT {select} FROM parsed LIMIT 0").arrow().schema
    adopted = _adoptable_files(con, files, stored_schema, wanted)  # file index -> (month, first day, rows)
    adopted_rows: dict[str, int] = {}
    for month, _, rows in adopted.values():
        adopted_rows[month] = adopted_rows.get(month, 0) + rows
    copied = sorted(m for m in month_rows if month_rows[m] > adopted_rows.get(m, 0))
    adopted_list = ", ".join(str(i) for i in adopted) or "-1"
    first_copied = dict(
        con.execute(
            f"SELECT {MONTH_SQL}, CAST(min(crawled_at) AS VARCHAR) FROM keys "
            f"WHERE {in_run} AND __file_index NOT IN ({adopted_list}) GROUP BY 1"
        ).fetchall()
    )
    kept_rows = {m: sum(pq.read_metadata(p).num_rows for p in paths) for m, paths in kept.items()}
    staging = store.asset_dir("documents") / f".staging-{os.getpid()}-{uuid.uuid4().hex}"
    staging.parent.mkdir(parents=True, exist_ok=True)
    try:
        if copied:
            skip = f" AND __file_index NOT IN ({', '.join(str(i) for i in adopted)})" if adopted else ""
            shown = Task(
                "documents", sum(month_rows[m] for m in copied) - sum(adopted_rows.get(m, 0) for m in copied), "docs"
            )
            try:
                copy_query(
                    con,
                    f"SELECT {select}, {MONTH_SQL} AS __month FROM parsed WHERE {in_run}{skip}",
                    staging,
                    params,
                    partition_by="__month",
                    progress=shown,
                )
            except duckdb.Error as err:  # e.g. a Parquet string column that is not UTF-8
                raise read_error(err, files) from None
            finally:
                shown.close()
        seconds = round((time.perf_counter() - started) / max(1, len(month_rows)), 4)
        for month in months:
            if month not in month_rows and not kept.get(month):
                store.remove("documents", month)  # a month without documents (or whose input was deleted)
                continue
            segments = [
                store.adopt("documents", month, files[i].path, params, segment=first, sha256=files[i].sha256)
                for i, (m, first, _) in sorted(adopted.items(), key=lambda item: item[1][1])
                if m == month
            ]
            staying = kept.get(month, [])
            store.remove_segments("documents", month, keep=[*segments, *staying])
            main = store.path("documents", month)
            if month in copied:
                written = sorted((staging / f"__month={month}").glob("*.parquet"))
                if len(written) != 1:
                    raise WebdedupError(
                        f"documents: expected one file for crawl month {month}, DuckDB wrote {len(written)}"
                    )
                if staying:  # beside files kept as they are: a segment of its own
                    store.place_segment("documents", month, first_copied[month], written[0])
                else:
                    store.place("documents", month, written[0])
            if main not in staying and not (month in copied and not staying):
                main.unlink(missing_ok=True)
            store.write_stats(
                "documents",
                month,
                {
                    "rows": month_rows.get(month, 0) + kept_rows.get(month, 0),
                    "files_kept": len(staying),
                    "seconds": seconds,
                    "segments_adopted": len(segments),
                    "days": sorted(d for d in day_rows if crawl_month(d) == month),
                },
            )
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    write_schema(store, "documents", stored_schema, params)
    return {
        "day_rows": day_rows,
        "partition_rows": {m: month_rows[m] for m in months if m in month_rows},
        "rows": sum(month_rows.values()),
        "months": len(months),
        "days_with_documents": len(day_rows),
        "files_adopted": len(adopted),
    }


def _day_entries(day_rows: dict[str, int], sources: list[InputFile]) -> dict[str, dict[str, Any]]:
    """The corpus-state entry of each day with documents: its rows and the input files that can
    hold it (a file whose name carries another day cannot)."""
    return {
        day: {
            "rows": rows,
            "input_files": [
                {"path": str(f.path), "sha256": f.sha256} for f in sources if (day_of_file(f.path) or day) == day
            ],
        }
        for day, rows in sorted(day_rows.items())
    }


ADOPT_MAX_ROW_GROUP_ROWS = 1 << 17  # later stages stream row groups; a huge one would not be bounded


def _adoptable_files(
    con: duckdb.DuckDBPyConnection, files: list[InputFile], stored_schema: pa.Schema, wanted: set[str]
) -> dict[int, tuple[str, str, int]]:
    """Input files whose stored form can be a byte copy: a Parquet file whose columns, order and
    types are exactly the stored schema, all of whose documents (already validated in `keys`)
    fall in one month of the run, on days no other file contributes to, with no NULL body and
    small row groups. Its text columns are checked to be valid UTF-8 here (the copy path gets
    that check from DuckDB's reader). Copying such a file instead of re-encoding 2.5 GB of text
    per million pages is what makes ingesting daily or monthly Parquet exports cheap.
    Returns file index -> (month, first day, rows)."""
    candidates = {i for i, f in enumerate(files) if f.format == "parquet" and _same_layout(f.path, stored_schema)}
    if not candidates:
        return {}
    shared = "SELECT crawled_at FROM keys GROUP BY crawled_at HAVING count(DISTINCT __file_index) > 1"
    rows = con.execute(
        f"SELECT __file_index, min({MONTH_SQL}), max({MONTH_SQL}), CAST(min(crawled_at) AS VARCHAR), count(*), "
        f"count(*) FILTER (WHERE crawled_at IN ({shared})) FROM keys GROUP BY __file_index"
    ).fetchall()
    chosen = sorted(
        (index, first_month, first_day, n)
        for index, first_month, last_month, first_day, n, on_shared_days in rows
        if index in candidates and first_month == last_month and first_month in wanted and not on_shared_days
    )
    # each file decoded on its own thread (pyarrow releases the GIL): the cores share the check
    with ThreadPoolExecutor(max_workers=thread_count()) as pool:
        clean = list(pool.map(lambda item: _text_is_clean(files[item[0]].path, stored_schema), chosen))
    return {index: (month, day, n) for (index, month, day, n), ok in zip(chosen, clean) if ok}


def _same_layout(path: Path, stored_schema: pa.Schema) -> bool:
    try:
        parquet = pq.ParquetFile(path)
    except (OSError, pa.ArrowException):
        return False
    metadata = parquet.metadata
    if any(metadata.row_group(i).num_rows > ADOPT_MAX_ROW_GROUP_ROWS for i in range(metadata.num_row_groups)):
        return False
    return parquet.schema_arrow.remove_metadata().equals(stored_schema.remove_metadata())


def _text_is_clean(path: Path, stored_schema: pa.Schema) -> bool:
    """False when the body has a NULL (the copy path stores those as ""); an error naming the
    doc_id when a text column is not valid UTF-8."""
    text = [f.name for f in stored_schema if pa.types.is_string(f.type) and f.name != "doc_id"]
    for batch in pq.ParquetFile(path).iter_batches(batch_size=16_384, columns=["doc_id", *text], use_threads=False):
        if batch.column("body").null_count:
            return False
        for name in text:
            column = batch.column(name)
            try:
                column.validate(full=True)
            except pa.ArrowInvalid:
                row = _first_invalid_utf8(column)
                raise WebdedupError(
                    f"{path}: column {name} of doc_id {batch.column('doc_id')[row].as_py()!r} is not valid UTF-8"
                ) from None
    return True


def _first_invalid_utf8(column: pa.Array) -> int:
    for row, value in enumerate(column.cast(pa.binary()).to_pylist()):
        try:
            if value is not None:
                value.decode("utf-8")
        except UnicodeDecodeError:
            return row
    return 0


def _uncovered(con, coverage: tuple[str, str], uncovered_files: list[str]) -> dict[str, Any]:
    """Documents read whose day has no partition: counted and named, never silently dropped."""
    where = f"crawled_at < DATE {sql_string(coverage[0])} OR crawled_at > DATE {sql_string(coverage[1])}"
    count = scalar(con, f"SELECT count(*) FROM keys WHERE {where}")
    sample = [d for (d,) in con.execute(f"SELECT doc_id FROM keys WHERE {where} ORDER BY doc_id LIMIT 10").fetchall()]
    return {
        "documents_outside_partitions": count,
        "doc_ids_outside_partitions": sample,
        "files_outside_partitions": uncovered_files,
    }


def input_days(
    input_path: str, input_format: str = "auto", store: Store | None = None, warc_options: WarcOptions | None = None
) -> list[str]:
    """The distinct crawl days (UTC) present in an input, read from crawled_at alone.

    Rows without a usable date are not listed here; the documents stage reports them by doc_id.
    Returns [] when the input cannot be read this way (the documents stage then says why).
    WARC input is converted once into `store` (the documents stage then reuses that conversion).
    """
    try:
        files = resolve_input(input_path, input_format)
        if any(f.format in WARC_FORMATS for f in files):
            if store is None:
                return []
            files = stage_warc(store, files, warc_options, None)[0]
    except WebdedupError:
        return []
    days: set[str] = set()
    con = connect()
    for f in files:
        from_footer = _days_from_statistics(f) if f.format == "parquet" else None
        if from_footer is not None:
            days.update(from_footer)
            continue
        day = crawl_day_sql("trim(CAST(crawled_at AS VARCHAR))")
        try:
            rows = con.execute(
                f"SELECT DISTINCT CAST({day} AS VARCHAR) AS day FROM {_source_sql(f, strict=False)}"
            ).fetchall()
        except (duckdb.Error, WebdedupError):  # the documents stage names the problem
            return []
        days.update(d for (d,) in rows if d is not None)
    con.close()
    return sorted(days)


def _days_from_statistics(f: InputFile) -> set[str] | None:
    """The crawl days of a Parquet file whose crawled_at is a date, read from its footer: each
    row group's min and max, when they are one day. None when that is not enough to tell
    (no statistics, a row group spanning days, another type): the caller reads the column."""
    try:
        parquet = pq.ParquetFile(f.path)
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


def stored_input(store: Store) -> tuple[list[dict[str, Any]], str | None]:
    """Every input file the stored documents were read from (over all crawl days), and the
    combined checksum of those files (the file's own sha256 when there is one)."""
    from .storage import read_params

    seen: dict[str, dict[str, Any]] = {}
    for part in store.files("documents"):
        for f in read_params(part).get("input_files", []):
            seen.setdefault(f["path"], f)
    files = [seen[k] for k in sorted(seen)]
    if not files:
        return [], None
    return files, _combine_checksums([(Path(f["path"]).name, f["sha256"]) for f in files])


def stored_extra_columns(store: Store) -> list[str]:
    """Extra (non-contract) columns present in any stored day, in first-seen order."""
    con = connect()
    try:
        columns = con.sql(f"SELECT * FROM {store.scan_sql('documents')} LIMIT 0").columns
    finally:
        con.close()
    return [c for c in columns if c not in REQUIRED_COLUMNS]
