"""Given rows of stored Parquet files (by doc_id): what an update, a check or a measurement of
some documents reads."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from .store import quote_ident, sql_string


def listing(files: list[Path]) -> str:
    return "[" + ", ".join(sql_string(str(f)) for f in files) + "]"


def fetch_rows(con, files: list[Path], ids: str, columns: list[str], in_few_files: bool = False) -> pa.Table | None:
    """Rows of `files` whose doc_id is in the table `ids` (a temp table or a registered Arrow
    table of `con`), only `columns` (those a file lacks come back NULL), in no particular order
    (callers look rows up by doc_id); None when no file is given or no row matches.
    in_few_files: the caller expects the rows in a few of the files (see below).

    One DuckDB scan filtered by doc_id: it decodes the wide columns (bodies, signatures) of the
    matching rows only, and costs less CPU than decoding just the row groups that hold them
    with pyarrow and taking the rows, or than keeping file order (with small row groups, a few
    thousand random documents already touch most of them)."""
    if not files:
        return None
    if in_few_files:
        # the files holding any of them, by a scan of the doc_id column alone, and the wide
        # columns read from those only: an update's new representatives (default policy:
        # newest) sit mostly in the day just added, so most files' wide columns are never read.
        # For rows spread over every file it only adds the narrow scan.
        holding = {
            name
            for (name,) in con.sql(f"""
                SELECT DISTINCT filename
                  FROM read_parquet({listing(files)}, union_by_name = true, filename = true, hive_partitioning = false)
                 WHERE doc_id IN (SELECT doc_id FROM {ids})""").fetchall()
        }
        files = [f for f in files if str(f) in holding]
        if not files:
            return None
    present = con.sql(
        f"SELECT * FROM read_parquet({listing(files)}, union_by_name = true, hive_partitioning = false) LIMIT 0"
    ).columns
    select = ", ".join(f"d.{quote_ident(c)}" if c in present else f"NULL AS {quote_ident(c)}" for c in columns)
    found = con.sql(f"""
        SELECT {select} FROM read_parquet({listing(files)}, union_by_name = true, hive_partitioning = false) d
         WHERE d.doc_id IN (SELECT doc_id FROM {ids})""").to_arrow_table()
    return found if found.num_rows else None
