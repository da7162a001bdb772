"""Given rows of stored Parquet files: what an update or a measurement of a few documents
reads instead of scanning every body."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .storage import sql_string


def listing(files: list[Path]) -> str:
    return "[" + ", ".join(sql_string(str(f)) for f in files) + "]"


FETCH_ROWS = 65_536  # rows of row groups decoded together by fetch_rows (bounds its memory)


def fetch_rows(con, files: list[Path], ids: str, columns: list[str]) -> pa.Table:
    """Rows of `files` whose doc_id is in the temp table `ids`, only `columns` (those a file
    lacks come back NULL): located by a narrow scan (doc_id, file, row number), then only the
    row groups holding them are read, so wide columns (bodies, signatures) are decoded for
    those row groups only."""
    if not files:
        return None
    located = con.sql(f"""
        SELECT d.filename, d.file_row_number FROM
          read_parquet({listing(files)}, union_by_name = true, filename = true, file_row_number = true) d
          SEMI JOIN {ids} i ON i.doc_id = d.doc_id
         ORDER BY d.filename, d.file_row_number""").to_arrow_table()
    names = located.column("filename").to_numpy(zero_copy_only=False)
    numbers = located.column("file_row_number").to_numpy()
    parts = []
    for path in sorted(set(names)):
        wanted = numbers[names == path]
        handle = pq.ParquetFile(path)
        present = [c for c in columns if c in handle.schema_arrow.names]
        sizes = np.array([handle.metadata.row_group(g).num_rows for g in range(handle.metadata.num_row_groups)])
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        of_row = np.searchsorted(starts, wanted, side="right") - 1  # the row group of each wanted row
        groups = np.unique(of_row)
        # the row groups holding wanted rows, read FETCH_ROWS at a time (decoded on all cores)
        chunk = np.cumsum(sizes[groups]) // FETCH_ROWS
        for batch in np.unique(chunk):
            these = groups[chunk == batch]
            rows = handle.read_row_groups(these.tolist(), columns=present)
            inside = np.isin(of_row, these)
            # a row's place among the groups read: rows of its group before it, plus the groups before
            offsets = np.concatenate([[0], np.cumsum(sizes[these])[:-1]])
            place = wanted[inside] - starts[of_row[inside]] + offsets[np.searchsorted(these, of_row[inside])]
            parts.append(rows.take(pa.array(place)))
    if not parts:
        return None
    return pa.concat_tables(parts, promote_options="default")
