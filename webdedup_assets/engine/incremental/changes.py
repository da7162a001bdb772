"""The documents that changed since the last update: the one place that maps daily files to documents."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from ...storage.rows import listing
from ...storage.store import Store, quote_ident, scalar
from .layout import DAILY, same_file, snapshot_dir


@dataclass
class DailyChanges:
    """Daily files whose identity differs from the snapshot, per asset: (current files changed
    or new, snapshot files changed or gone)."""

    current: dict[str, list[Path]]
    previous: dict[str, list[Path]]

    @property
    def any(self) -> bool:
        return any(self.current.values()) or any(self.previous.values())


def daily_changes(store: Store) -> DailyChanges:
    current: dict[str, list[Path]] = {}
    previous: dict[str, list[Path]] = {}
    for asset in DAILY:
        files = store.data_files(asset)
        snap = snapshot_dir(store, asset)
        names = {f.name for f in files}
        current[asset] = [f for f in files if not same_file(f, snap / f.name)]
        kept = sorted(snap.glob("*.parquet")) if snap.exists() else []
        previous[asset] = [s for s in kept if s.name not in names or not same_file(store.asset_dir(asset) / s.name, s)]
    return DailyChanges(current, previous)


def changed_documents(con, store: Store, changes: DailyChanges) -> tuple[int, int]:
    """Temp tables `added(doc_id)` (documents new or whose row changed, as they are now) and
    `removed(doc_id)` (documents gone or whose row changed, as they were): rows of the changed
    documents files compared with their snapshot versions by a hash of the whole row.

    Selecting "the new documents" by file keeps this independent of how days map to files:
    the storage layout may hold one file per day or many days per file."""
    new_files, old_files = changes.current["documents"], changes.previous["documents"]

    def digests(files: list[Path], name: str) -> None:
        if not files:
            con.execute(f"CREATE TEMP TABLE {name} (doc_id VARCHAR, digest UBIGINT)")
            return
        # each file with its own columns: over the union of files whose nested columns differ (a
        # struct with other fields), DuckDB's hash(row(...)) failed with an internal error
        parts = [
            f"SELECT doc_id, hash(row({', '.join(quote_ident(c) for c in pq.read_schema(f).names)})) AS digest "
            f"FROM read_parquet({listing([f])}, hive_partitioning = false)"
            for f in files
        ]
        con.execute(f"CREATE TEMP TABLE {name} AS " + " UNION ALL ".join(parts))

    digests(new_files, "new_rows")
    digests(old_files, "old_rows")
    # A document unchanged but moved to another file (a file rewritten with other days) is in
    # both: its digest matches and it is neither added nor removed. A changed file that still
    # holds an unchanged document must list it in the snapshot of that file as well; a document
    # of an unchanged file never appears here.
    con.execute("""CREATE TEMP TABLE added AS SELECT DISTINCT doc_id FROM
        (SELECT doc_id, digest FROM new_rows EXCEPT SELECT doc_id, digest FROM old_rows)""")
    con.execute("""CREATE TEMP TABLE removed AS SELECT DISTINCT doc_id FROM
        (SELECT doc_id, digest FROM old_rows EXCEPT SELECT doc_id, digest FROM new_rows)""")
    return scalar(con, "SELECT count(*) FROM added"), scalar(con, "SELECT count(*) FROM removed")
