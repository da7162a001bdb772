"""Adopting input files as they are: a Parquet export already in the stored form becomes a
segment of its month by a byte copy instead of being re-encoded (see engine.stages.documents)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import WebdedupError
from ..ingest.inputs import InputFile
from ..threads import thread_count

MONTH_SQL = "strftime(crawled_at, '%Y-%m')"


ADOPT_MAX_ROW_GROUP_ROWS = 1 << 17  # later stages stream row groups; a huge one would not be bounded


def adoptable_files(
    con: duckdb.DuckDBPyConnection,
    files: list[InputFile],
    stored_schema: pa.Schema,
    wanted: set[str],
    unmapped: bool = True,
    held: Callable[[InputFile, str, str], bool] = lambda file, month, first_day: False,
) -> dict[int, tuple[str, str, int]]:
    """Input files whose stored form can be a byte copy: a Parquet file whose columns, order and
    types are exactly the stored schema, all of whose documents (already validated in `keys`)
    fall in one month of the run, on days no other file contributes to, with no NULL body and
    small row groups. Its text columns are checked to be valid UTF-8 here (the copy path gets
    that check from DuckDB's reader). Copying such a file instead of re-encoding all its text is
    what makes ingesting daily or monthly Parquet exports cheap.
    held(file, month, first day): the store already holds a byte copy of this very file (same
    sha256) as that segment, so its text was checked when it was adopted and is not read again
    (a second run over the same daily exports).
    unmapped: the input is read with the contract's own column names and no default date (else only
    files already in the stored form qualify: a mapped file's bytes are not its stored form).
    Returns file index -> (month, first day, rows)."""
    candidates = {
        i
        for i, f in enumerate(files)
        # an object in object storage is read like any input: a byte copy would be a download of it whole
        if f.format == "parquet"
        and (unmapped or f.stored)
        and isinstance(f.path, Path)
        and _same_layout(f.path, stored_schema)
    }
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

    def is_clean(item: tuple[int, str, str, int]) -> bool:
        index, month, first_day, _ = item
        return held(files[index], month, first_day) or _text_is_clean(files[index].path, stored_schema)

    # each file decoded on its own thread (pyarrow releases the GIL): the cores share the check
    with ThreadPoolExecutor(max_workers=thread_count()) as pool:
        clean = list(pool.map(is_clean, chosen))
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
