"""Where the incremental state lives, the update report, and small helpers shared by the steps."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..storage import Store, sql_string

INCREMENTAL_DIR = "incremental"
STATE_NAME = "state.json"
STATE_FORMAT = 1
DAILY = ("documents", "fingerprinted", "band_memberships")
GLOBAL = ("candidate_pairs", "scored_pairs", "duplicate_pairs", "clusters", "deduped_documents")
COLLISION_TOP = 10_000  # collision_buckets.csv lists this many buckets


def create_collision_top(con, bands: str) -> None:
    """Temp table `top`: the COLLISION_TOP largest buckets of the band table expression `bands`
    with their members (collision_buckets.csv's rows)."""
    con.execute(f"""CREATE TEMP TABLE top AS
        WITH sizes AS (SELECT band_index, band_hash, count(*) AS size FROM {bands}
                        GROUP BY band_index, band_hash HAVING count(*) > 1
                        ORDER BY size DESC, band_index, band_hash LIMIT {COLLISION_TOP})
        SELECT s.band_index, s.band_hash, s.size, string_agg(m.doc_id, ';' ORDER BY m.doc_id) AS doc_ids
          FROM sizes s JOIN {bands} m USING (band_index, band_hash)
         GROUP BY s.band_index, s.band_hash, s.size""")


@dataclass
class UpdateReport:
    mode: str  # "incremental" | "full" | "unchanged"
    reason: str = ""
    days_added: list[str] = field(default_factory=list)
    days_removed: list[str] = field(default_factory=list)
    documents_added: int = 0
    documents_removed: int = 0
    touched_buckets: int = 0
    pairs_scored: int = 0
    clusters_touched: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# ---- where things live --------------------------------------------------------------------


def incremental_dir(store: Store) -> Path:
    return store.root / INCREMENTAL_DIR


def snapshot_dir(store: Store, asset: str) -> Path:
    return incremental_dir(store) / "snapshot" / asset


def load_state(store: Store) -> dict[str, Any] | None:
    path = incremental_dir(store) / STATE_NAME
    if not path.exists():
        return None
    state = json.loads(path.read_text())
    return state if state.get("format") == STATE_FORMAT else None


def file_identity(path: Path) -> list[int]:
    info = os.stat(path)
    return [info.st_dev, info.st_ino]


def data_files(store: Store, asset: str) -> list[Path]:
    return [f for f in store.files(asset) if f != store.schema_path(asset)]


def listing(files: list[Path]) -> str:
    return "[" + ", ".join(sql_string(str(f)) for f in files) + "]"


def link_file(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    temp.unlink(missing_ok=True)
    try:
        os.link(source, temp)
    except OSError:
        shutil.copyfile(source, temp)
    os.replace(temp, target)


def same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def fetch_rows(con, files: list[Path], ids: str, columns: list[str]) -> pa.Table:
    """Rows of `files` whose doc_id is in the temp table `ids`, only `columns` (those a file
    lacks come back NULL): located by a narrow scan (doc_id, file, row number), then read row
    group by row group, so wide columns (bodies, signatures) are read for those rows only."""
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
        start = 0
        for group in range(handle.metadata.num_row_groups):
            stop = start + handle.metadata.row_group(group).num_rows
            inside = wanted[(wanted >= start) & (wanted < stop)]
            if len(inside):
                rows = handle.read_row_group(group, columns=present, use_threads=False).take(pa.array(inside - start))
                parts.append(rows)
            start = stop
    if not parts:
        return None
    return pa.concat_tables(parts, promote_options="default")


def save_table(con, table: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    con.execute(f"COPY {table} TO {sql_string(str(temp))} (FORMAT parquet, COMPRESSION zstd)")
    os.replace(temp, target)


def duck_type(con, f: pa.Field) -> str:
    """DuckDB's name for an Arrow field's type (via an empty table)."""
    con.register("_type_probe", pa.table({"x": pa.array([], f.type)}))
    try:
        return str(con.sql("SELECT x FROM _type_probe").types[0])
    finally:
        con.unregister("_type_probe")
