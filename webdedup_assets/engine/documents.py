"""The documents stage: read CSV or Parquet input, validate it, store it typed.

Input contract: columns doc_id, source, domain, crawled_at, title, body (any order);
every other column is kept as is. doc_id must be present and unique; crawled_at must be a
date or timestamp (stored as its UTC day); a NULL body is stored as the empty string (such
a document gets no shingles and can never be a candidate). CSV files must be UTF-8.
"""

from __future__ import annotations

import codecs
import glob as globlib
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from .errors import WebdedupError
from .storage import Store, connect, file_sha256, quote_ident, scalar, sql_string, write_relation

REQUIRED_COLUMNS = ("doc_id", "source", "domain", "crawled_at", "title", "body")
TEXT_COLUMNS = ("doc_id", "source", "domain", "title", "body")
FORMATS = ("auto", "csv", "parquet")
SUFFIX_FORMATS = {".csv": "csv", ".tsv": "csv", ".parquet": "parquet", ".pq": "parquet"}
MAX_LINE_BYTES = 1 << 30  # a single CSV record may hold a very large page


@dataclass(frozen=True)
class InputFile:
    path: Path
    format: str
    sha256: str
    bytes: int

    def describe(self) -> dict[str, Any]:
        return {"path": str(self.path), "format": self.format, "sha256": self.sha256, "bytes": self.bytes}


def resolve_input(input_path: str, input_format: str = "auto") -> list[InputFile]:
    """A file, a folder (its CSV/Parquet files, recursively) or a glob -> sorted files."""
    if input_format not in FORMATS:
        raise WebdedupError(f"input_format must be one of {', '.join(FORMATS)}, got {input_format!r}")
    path = Path(input_path).expanduser()
    if any(ch in input_path for ch in "*?["):
        candidates = [Path(p) for p in globlib.glob(str(path), recursive=True)]
        candidates = [p for p in candidates if p.is_file()]
        if not candidates:
            raise WebdedupError(f"input glob {input_path!r} matches no file")
    elif path.is_dir():
        candidates = [
            p
            for p in path.rglob("*")
            if p.is_file() and p.suffix.lower() in SUFFIX_FORMATS and not p.name.startswith(".")
        ]
        if input_format != "auto":
            candidates = [p for p in candidates if SUFFIX_FORMATS[p.suffix.lower()] == input_format]
        if not candidates:
            raise WebdedupError(f"input folder {input_path!r} holds no .csv or .parquet file")
    elif path.is_file():
        candidates = [path]
    else:
        raise WebdedupError(f"input {input_path!r} does not exist")
    files = []
    for candidate in sorted(candidates):
        fmt = input_format
        if fmt == "auto":
            fmt = SUFFIX_FORMATS.get(candidate.suffix.lower(), "")
            if not fmt:
                raise WebdedupError(
                    f"cannot tell the format of {candidate} from its name; set input_format to csv or parquet"
                )
        files.append(InputFile(candidate.resolve(), fmt, file_sha256(candidate), candidate.stat().st_size))
    return files


def combined_sha256(files: list[InputFile]) -> str:
    """One checksum for the whole input (the file's own sha256 when there is one file)."""
    if len(files) == 1:
        return files[0].sha256
    digest = hashlib.sha256()
    for f in files:
        digest.update(f"{f.path.name}\t{f.sha256}\n".encode())
    return digest.hexdigest()


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


def _scan(con: duckdb.DuckDBPyConnection, f: InputFile) -> duckdb.DuckDBPyRelation:
    try:
        if f.format == "csv":
            check_utf8(f.path)
            return con.sql(
                f"SELECT * FROM read_csv({sql_string(str(f.path))}, header = true, all_varchar = true, "
                f"max_line_size = {MAX_LINE_BYTES}, strict_mode = true)"
            )
        return con.sql(f"SELECT * FROM read_parquet({sql_string(str(f.path))})")
    except duckdb.Error as err:
        first_line = str(err).strip().splitlines()[0]
        raise WebdedupError(f"{f.path}: cannot read as {f.format}: {first_line}") from None


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


def stage_documents(
    store: Store,
    input_path: str,
    input_format: str = "auto",
    partition: str | None = None,
    day_filter: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """Validate the input and write the documents asset; returns metadata for the run."""
    started = time.perf_counter()
    files = resolve_input(input_path, input_format)
    con = connect(store)
    relations = [_scan(con, f) for f in files]
    extra = _validate_columns(files, relations)

    typed_parts = []
    for index, (f, rel) in enumerate(zip(files, relations)):
        view = f"raw_{index}"
        rel.create_view(view)
        cols = [f"CAST({quote_ident(c)} AS VARCHAR) AS {quote_ident(c)}" for c in TEXT_COLUMNS]
        cols.append("CAST(crawled_at AS VARCHAR) AS crawled_at_raw")
        cols += [(f"{quote_ident(c)}" if c in rel.columns else f"NULL AS {quote_ident(c)}") for c in extra]
        cols.append(f"{sql_string(f.path.name)} AS __source_file")
        typed_parts.append(f"SELECT {', '.join(cols)} FROM {view}")
    con.execute("CREATE TEMP TABLE staged AS " + " UNION ALL BY NAME ".join(typed_parts))
    # Timestamps with an offset become their UTC day (the session time zone is UTC).
    con.execute(
        """CREATE TEMP TABLE parsed AS SELECT *,
             COALESCE(CAST(TRY_CAST(trim(crawled_at_raw) AS TIMESTAMPTZ) AS DATE),
                      TRY_CAST(trim(crawled_at_raw) AS DATE)) AS crawled_at
           FROM staged"""
    )

    bad_ids = _offenders(con, "SELECT __source_file FROM parsed WHERE doc_id IS NULL OR trim(doc_id) = ''")
    if bad_ids:
        count = scalar(con, "SELECT count(*) FROM parsed WHERE doc_id IS NULL OR trim(doc_id) = ''")
        raise WebdedupError(f"{count} row(s) have an empty doc_id (first in file {bad_ids[0][0]})")
    dupes = _offenders(
        con,
        "SELECT doc_id, count(*) AS n, string_agg(DISTINCT __source_file, ', ') FROM parsed "
        "GROUP BY doc_id HAVING count(*) > 1 ORDER BY doc_id",
    )
    if dupes:
        total = scalar(con, "SELECT count(*) FROM (SELECT doc_id FROM parsed GROUP BY doc_id HAVING count(*) > 1)")
        listed = "; ".join(f"{d!r} x{n} in {src}" for d, n, src in dupes)
        raise WebdedupError(f"doc_id must be unique: {total} doc_id(s) appear more than once, first: {listed}")
    undated = _offenders(
        con,
        "SELECT doc_id, __source_file FROM parsed "
        "WHERE crawled_at_raw IS NULL OR trim(crawled_at_raw) = '' ORDER BY doc_id",
    )
    if undated:
        total = scalar(con, "SELECT count(*) FROM parsed WHERE crawled_at_raw IS NULL OR trim(crawled_at_raw) = ''")
        raise WebdedupError(
            f"crawled_at is missing for {total} document(s), first doc_id(s): "
            f"{', '.join(repr(d) for d, _ in undated)} (in {undated[0][1]}); every document needs its crawl date"
        )
    unparsable = _offenders(
        con, "SELECT doc_id, crawled_at_raw, __source_file FROM parsed WHERE crawled_at IS NULL ORDER BY doc_id"
    )
    if unparsable:
        total = scalar(con, "SELECT count(*) FROM parsed WHERE crawled_at IS NULL")
        listed = ", ".join(f"{d!r} ({raw!r})" for d, raw, _ in unparsable)
        raise WebdedupError(
            f"crawled_at is not a date or timestamp for {total} document(s), first: {listed} "
            f"in {unparsable[0][2]}; use ISO 8601 such as 2026-03-01 or 2026-03-01T12:00:00Z"
        )

    where = ""
    if day_filter is not None:
        where = (
            f"WHERE crawled_at >= DATE {sql_string(day_filter[0])} AND crawled_at <= DATE {sql_string(day_filter[1])}"
        )
    select = ", ".join(
        ["doc_id", "source", "domain", "crawled_at", "title", "COALESCE(body, '') AS body"]
        + [quote_ident(c) for c in extra]
    )
    relation = con.sql(f"SELECT {select} FROM parsed {where}")
    checksum = combined_sha256(files)
    params = {
        "stage": "documents",
        "input_path": input_path,
        "input_format": input_format,
        "input_sha256": checksum,
        "input_files": [f.describe() for f in files],
        "extra_columns": extra,
        "partition": partition,
    }
    target = store.path("documents", partition)
    rows = write_relation(target, relation, params)
    empty = scalar(
        con, f"SELECT count(*) FROM parsed {where} {'AND' if where else 'WHERE'} trim(COALESCE(body, '')) = ''"
    )
    con.close()
    stats = {"rows": rows, "empty_bodies": empty, "seconds": round(time.perf_counter() - started, 4)}
    store.write_stats("documents", partition, stats)
    return {**params, **stats}
