"""What `webdedup add` keeps of the held months and what it refuses: the held days of the months
it writes that its input does not give stay, a held doc_id on another day is refused, and so is a
day given again without some of its held documents (unless the add says --replace-days)."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from ...errors import WebdedupError
from ...ingest.inputs import InputFile
from ...params import ColumnParams
from ...storage.fileio import file_sha256
from ...storage.state import crawl_month, load_state
from ...storage.store import Store, connect, sql_string
from ..reading import file_days


@dataclass
class Retained:
    """For `webdedup add`: what a month keeps of the held corpus besides the input's days."""

    files: dict[str, list[Path]] = field(default_factory=dict)  # per month: stored files kept as they are
    staged: list[InputFile] = field(default_factory=list)  # rows of held days from files that must change
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)  # state entries of the held days kept
    by_day: set[str] = field(default_factory=set)  # months written a file per day (see retained_for_add)
    replaced: list[Path] = field(default_factory=list)  # stored files holding a held day the input gives again
    replaced_days: list[str] = field(default_factory=list)  # those held days


def retained_for_add(store: Store, files: list[InputFile], months: list[str], mapping: ColumnParams) -> Retained:
    """For `webdedup add`: the held days of `months` that the input does not hold stay in the
    corpus. A stored file holding none of the input's days is kept as it is (so it is neither
    re-encoded nor fingerprinted again); the rows of held days in a file that also holds a day
    of the input are written to a staging Parquet file read with the input.

    A month's files are read in name order, so its days stay in order only if no stored file
    spans a day of the input: a file that does (a middle day added, a held day given again) is
    rewritten too, and that month is written a file per day (`by_day`), as one run of the days'
    files orders them."""
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
            new_days.update(file_days(con, f, mapping))
        kept_days = sorted(d for d in held if d not in new_days)
        retained.replaced_days = sorted(d for d in held if d in new_days)
        retained.entries = {d: held[d].get("documents", {}) for d in kept_days}
        changing: list[Path] = []
        for month in months:
            new_of_month = {d for d in new_days if crawl_month(d) == month}
            for path in store.partition_files("documents", month):
                days = {
                    d
                    for (d,) in con.execute(
                        "SELECT DISTINCT CAST(crawled_at AS VARCHAR) "
                        f"FROM read_parquet({sql_string(str(path))}, hive_partitioning = false)"
                    ).fetchall()
                }
                spanned = new_of_month and min(days) < max(new_of_month) and min(new_of_month) < max(days)
                if days & new_days or spanned:
                    changing.append(path)
                    if days & new_days:
                        retained.replaced.append(path)
                    if days - new_days:
                        retained.by_day.add(month)
                else:
                    retained.files.setdefault(month, []).append(path)
        if kept_days and changing:
            target = store.asset_dir("documents") / f".retained.{os.getpid()}.{uuid.uuid4().hex}.tmp"
            listing = ", ".join(sql_string(str(p)) for p in changing)
            day_list = ", ".join(f"DATE {sql_string(d)}" for d in kept_days)
            con.execute(
                f"COPY (SELECT * FROM read_parquet([{listing}], union_by_name = true, hive_partitioning = false) "
                f"WHERE crawled_at IN ({day_list})) TO {sql_string(str(target))} (FORMAT parquet, COMPRESSION zstd)"
            )
            retained.staged = [InputFile(target, "parquet", file_sha256(target), target.stat().st_size, stored=True)]
    finally:
        con.close()
    return retained


def refuse_dropping(con: duckdb.DuckDBPyConnection, retained: Retained) -> None:
    """An add replaces each held day its input gives again: refused when that would drop held
    documents the input does not give again (a day's crawl split over files added one by one would
    lose all but the last), unless the add says --replace-days."""
    if not retained.replaced:
        return
    listing = ", ".join(sql_string(str(p)) for p in retained.replaced)
    days = ", ".join(f"DATE {sql_string(d)}" for d in retained.replaced_days)
    dropped, first, day_count, day_list = con.execute(f"""
        SELECT count(*), list(doc_id ORDER BY doc_id)[1:3], count(DISTINCT crawled_at),
               list(DISTINCT CAST(crawled_at AS VARCHAR) ORDER BY CAST(crawled_at AS VARCHAR))[1:3]
          FROM read_parquet([{listing}], union_by_name = true, hive_partitioning = false)
         WHERE crawled_at IN ({days}) AND doc_id NOT IN (SELECT doc_id FROM keys)""").fetchone()
    if dropped:
        more = ", ..." if day_count > len(day_list) else ""
        raise WebdedupError(
            f"the input gives again {day_count} crawl day(s) the corpus holds ({', '.join(day_list)}{more}) without "
            f"{dropped} of their held documents (first: {', '.join(first)}): an add replaces each day it gives; "
            "give all of a day's files in one add, or add --replace-days to drop those documents"
        )


def refuse_held_doc_ids(con: duckdb.DuckDBPyConnection, kept: list[Path]) -> None:
    """doc_ids of the input that a kept file of the corpus already holds (`webdedup add`)."""
    if not kept:
        return
    listing = ", ".join(sql_string(str(p)) for p in kept)
    sql = (
        "SELECT doc_id FROM keys WHERE doc_id IN "
        f"(SELECT doc_id FROM read_parquet([{listing}], hive_partitioning = false)) ORDER BY doc_id"
    )
    again = [d for (d,) in con.execute(sql + " LIMIT 5").fetchall()]
    if again:
        raise WebdedupError(
            f"doc_id must be unique: the input repeats doc_id(s) the corpus already holds on other days, first: "
            f"{', '.join(repr(d) for d in again)}"
        )
