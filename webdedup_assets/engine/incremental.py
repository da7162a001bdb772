"""Incremental global update: the global stages extended by the documents that changed.

What is persisted under `<root>/incremental/` (besides the global assets themselves, which
are the confirmed edges (duplicate_pairs), the cluster assignment (clusters) and the
representatives (deduped_documents)):

- `snapshot/<asset>/<file>`: a hard link to every daily file (documents, fingerprinted,
  band_memberships) as it was at the last global update. Stored files are only ever replaced
  (os.replace), never modified in place, so a link keeps the old version for free while the
  file is unchanged, and the old version of a replaced one. The snapshot of band_memberships
  is the band index (band key -> documents) the update queries; the snapshot of documents is
  what a changed day is compared with, row by row, to find the documents added, changed or
  removed (no per-day bookkeeping: works for any file layout whose files are replaced whole).
- `state.json`: the parameters of the last update, the identity (device, inode) of every
  global asset file it wrote (a global asset rewritten since by a full run makes the next
  update a full rebuild), additive bucket figures (pair slots, collision buckets, the largest
  bucket) and the crawl days held.
- `collision_top.parquet`: the largest buckets with their members (collision_buckets.csv),
  `cluster_inspection.parquet`: one row per multi-member cluster (cluster_inspection.csv).

An update (see `update`):
1. finds the changed documents: files of documents whose identity differs from the snapshot
   are compared with their snapshot version row by row (`changed_documents`, the one place
   that knows how daily files map to documents);
2. takes the buckets touched by an added or removed document, their old members (snapshot
   index) and new members, and derives the change in band links per pair with the same
   hot-bucket policy as engine.candidates (a bucket whose policy outcome changes, or that
   lost a member, has all its links recomputed; others only gain the links of new members);
3. applies it to candidate_pairs (shared_bands), scores the new pairs and those of changed
   documents with the same kernel as scored_pairs (shingle sets recomputed for those
   documents only), rewrites duplicate_pairs;
4. recomputes connected components over the clusters touched (old clusters of every document
   whose edges changed, and the added ones): cluster id = 'cluster-' + smallest doc_id;
5. re-ranks the members of touched clusters only (same ORDER BY as deduped_documents) and
   replaces their representatives' rows.

The result equals a full recompute row for row (tests/test_incremental.py), except the row
order of deduped_documents, which the full stage writes in the documents' file order and an
update writes ordered by doc_id.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..core.components import component_labels
from ..core.fingerprint import shingle_sets
from ..core.minhash import estimate_jaccard
from ..core.ranking import policy_order_by
from ..core.sets import jaccard_blocks
from ..errors import WebdedupError
from ..params import CandidateParams, RepresentativeParams, ScoringParams
from .candidates import pair_slot_budget
from .clustering import cluster_inspection
from .documents import stored_extra_columns
from .publish import report_path
from .scoring import SCORED_SCHEMA, reasons
from .serial import from_stored
from .stage import DUCKDB, STAGES, StageRun, check_uniform
from .state import check_consistent, held_days
from .storage import Store, connect, quote_ident, scalar, sql_string, write_csv, write_text

INCREMENTAL_DIR = "incremental"
STATE_NAME = "state.json"
STATE_FORMAT = 1
DAILY = ("documents", "fingerprinted", "band_memberships")
GLOBAL = ("candidate_pairs", "scored_pairs", "duplicate_pairs", "clusters", "deduped_documents")
COLLISION_TOP = 10_000  # collision_buckets.csv lists this many buckets


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


def _dir(store: Store) -> Path:
    return store.root / INCREMENTAL_DIR


def _snapshot_dir(store: Store, asset: str) -> Path:
    return _dir(store) / "snapshot" / asset


def load_state(store: Store) -> dict[str, Any] | None:
    path = _dir(store) / STATE_NAME
    if not path.exists():
        return None
    state = json.loads(path.read_text())
    return state if state.get("format") == STATE_FORMAT else None


def _identity(path: Path) -> list[int]:
    info = os.stat(path)
    return [info.st_dev, info.st_ino]


def _data_files(store: Store, asset: str) -> list[Path]:
    return [f for f in store.files(asset) if f != store.schema_path(asset)]


def _listing(files: list[Path]) -> str:
    return "[" + ", ".join(sql_string(str(f)) for f in files) + "]"


def _link(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    temp.unlink(missing_ok=True)
    try:
        os.link(source, temp)
    except OSError:
        shutil.copyfile(source, temp)
    os.replace(temp, target)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


# ---- the documents that changed (the one place that maps daily files to documents) ---------


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
        files = _data_files(store, asset)
        snap = _snapshot_dir(store, asset)
        names = {f.name for f in files}
        current[asset] = [f for f in files if not _same_file(f, snap / f.name)]
        kept = sorted(snap.glob("*.parquet")) if snap.exists() else []
        previous[asset] = [s for s in kept if s.name not in names or not _same_file(store.asset_dir(asset) / s.name, s)]
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
        columns = con.sql(f"SELECT * FROM read_parquet({_listing(files)}, union_by_name = true) LIMIT 0").columns
        row = ", ".join(f"d.{quote_ident(c)}" for c in columns)
        con.execute(f"""CREATE TEMP TABLE {name} AS SELECT d.doc_id, hash(row({row})) AS digest
            FROM read_parquet({_listing(files)}, union_by_name = true) d""")

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


def _fetch(con, files: list[Path], ids: str, columns: list[str]) -> pa.Table:
    """Rows of `files` whose doc_id is in the temp table `ids`, only `columns` (those a file
    lacks come back NULL): located by a narrow scan (doc_id, file, row number), then read row
    group by row group, so wide columns (bodies, signatures) are read for those rows only."""
    if not files:
        return None
    located = con.sql(f"""
        SELECT d.filename, d.file_row_number FROM
          read_parquet({_listing(files)}, union_by_name = true, filename = true, file_row_number = true) d
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


# ---- parameters ---------------------------------------------------------------------------


def _global_params(store: Store) -> dict[str, dict[str, Any]]:
    return {asset: store.params(asset) for asset in GLOBAL}


def _stored_choice(state: dict[str, Any] | None, key: str, model, given):
    if given is not None:
        return given
    if state is not None and key in state["parameters"]:
        return from_stored(model, state["parameters"][key])
    return model()


# ---- the full rebuild ---------------------------------------------------------------------


def full_rebuild(
    store: Store, candidates: CandidateParams, scoring: ScoringParams, representative: RepresentativeParams
) -> None:
    """Every global stage from scratch (the contract's own implementations), then a fresh snapshot."""
    DUCKDB.run("candidate_pairs", store, candidates)
    DUCKDB.run("scored_pairs", store, scoring)
    DUCKDB.run("duplicate_pairs", store, None)
    DUCKDB.run("clusters", store)
    DUCKDB.run("deduped_documents", store, representative)
    con = connect(store)
    try:
        bm = store.scan_sql("band_memberships")
        all_slots, star_slots, small_slots, buckets, largest = _bucket_totals(con, bm, candidates)
        figures = {
            "all_pairs_slots": all_slots,
            "star_slots": star_slots,
            "small_slots": small_slots,
            "collision_buckets": buckets,
            "max_bucket_size": largest,
        }
        con.execute(f"""CREATE TEMP TABLE top AS
            WITH sizes AS (SELECT band_index, band_hash, count(*) AS size FROM {bm}
                            GROUP BY band_index, band_hash HAVING count(*) > 1
                            ORDER BY size DESC, band_index, band_hash LIMIT {COLLISION_TOP})
            SELECT s.band_index, s.band_hash, s.size, string_agg(m.doc_id, ';' ORDER BY m.doc_id) AS doc_ids
              FROM sizes s JOIN {bm} m USING (band_index, band_hash)
             GROUP BY s.band_index, s.band_hash, s.size""")
        _save_table(con, "top", _dir(store) / "collision_top.parquet")
        _inspection_all(con, store, representative)
        _save_table(con, "inspection", _dir(store) / "cluster_inspection.parquet")
    finally:
        con.close()
    _commit(store, candidates, scoring, representative, figures)


def _bucket_totals(con, bm: str, candidates: CandidateParams) -> tuple[int, int, int, int, int]:
    hot = candidates.hot_bucket_size
    return con.execute(f"""
        SELECT COALESCE(sum(size * (size - 1) // 2), 0),
               COALESCE(sum(CASE WHEN size > {hot} THEN size - 1 END), 0),
               COALESCE(sum(CASE WHEN size <= {hot} THEN size * (size - 1) // 2 END), 0),
               count(*), COALESCE(max(size), 0)
          FROM (SELECT count(*) AS size FROM {bm} GROUP BY band_index, band_hash HAVING count(*) > 1)""").fetchall()[0]


def _save_table(con, table: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    con.execute(f"COPY {table} TO {sql_string(str(temp))} (FORMAT parquet, COMPRESSION zstd)")
    os.replace(temp, target)


def _ranked_sql(store: Store, policy: RepresentativeParams, members: str | None) -> str:
    """The `ranked` table of deduped_documents (narrow columns, rank per cluster), for the
    clusters of the doc_ids in the temp table `members` only when given."""
    order_by = policy_order_by(policy.representative_policy)
    extra = stored_extra_columns(store)
    provenance = [c for c in extra if c.startswith("warc_") or c == "capture_url"]
    narrow = ", ".join(quote_ident(c) for c in ["doc_id", "domain", "crawled_at", *provenance])
    scope = f"SEMI JOIN {members} s ON s.doc_id = d.doc_id" if members else ""
    return f"""CREATE TEMP TABLE ranked AS
        SELECT d.*, c.cluster_id, c.cluster_size, f.token_count,
               row_number() OVER (PARTITION BY c.cluster_id ORDER BY {order_by}) AS rank
          FROM (SELECT {narrow} FROM {store.scan_sql("documents")} d {scope}) d
          JOIN {store.scan_sql("clusters")} c USING (doc_id)
          JOIN (SELECT doc_id, token_count FROM {store.scan_sql("fingerprinted")}) f USING (doc_id)"""


def _inspection_all(con, store: Store, policy: RepresentativeParams) -> None:
    con.execute("DROP TABLE IF EXISTS ranked")
    con.execute(_ranked_sql(store, policy, None))
    relation = cluster_inspection(con, store, stored_extra_columns(store))
    con.execute("DROP TABLE IF EXISTS inspection")
    con.execute(f"CREATE TEMP TABLE inspection AS {relation.sql_query()}")


def _commit(
    store: Store,
    candidates: CandidateParams,
    scoring: ScoringParams,
    representative: RepresentativeParams,
    figures: dict[str, Any],
) -> None:
    """Link the daily files into the snapshot and record the state (last: a crash before leaves
    the previous state, whose global asset identities no longer match: a full rebuild)."""
    for asset in DAILY:
        snap = _snapshot_dir(store, asset)
        files = _data_files(store, asset)
        names = {f.name for f in files}
        for f in files:
            if not _same_file(f, snap / f.name):
                _link(f, snap / f.name)
        if snap.exists():
            for old in snap.glob("*.parquet"):
                if old.name not in names:
                    old.unlink()
    upstream = {a: store.params(a) for a in ("fingerprinted", "band_memberships")}
    state = {
        "format": STATE_FORMAT,
        "parameters": {
            "fingerprint": upstream["fingerprinted"].get("fingerprint"),
            "banding": upstream["band_memberships"].get("banding"),
            "candidates": candidates.model_dump(mode="json"),
            "scoring": scoring.model_dump(mode="json"),
            "representative": representative.model_dump(mode="json"),
        },
        "global_files": {a: [str(f), _identity(f)] for a in GLOBAL for f in [store.path(a)]},
        "figures": figures,
        "days": held_days(store),
    }
    write_text(_dir(store) / STATE_NAME, json.dumps(state, indent=1, sort_keys=True))


# ---- the update ---------------------------------------------------------------------------


def _rebuild_reason(
    store: Store,
    state: dict[str, Any] | None,
    candidates: CandidateParams,
    scoring: ScoringParams,
    representative: RepresentativeParams,
) -> str | None:
    if state is None:
        return "no incremental state in this storage yet"
    for asset, (path, identity) in state["global_files"].items():
        p = Path(path)
        if not p.exists() or _identity(p) != identity:
            return f"{asset} was rewritten since the last incremental update (a full run, or an interrupted update)"
    held = state["parameters"]
    for key, given in (("candidates", candidates), ("scoring", scoring), ("representative", representative)):
        if held.get(key) != given.model_dump(mode="json"):
            return f"{key} parameters changed ({held.get(key)} -> {given.model_dump(mode='json')})"
    if candidates.candidate_scope == "domain":
        return "candidate_scope=domain is not updated incrementally (band keys are mixed with the domain)"
    return None


def check_fixed_params(store: Store, state: dict[str, Any] | None) -> None:
    """Fingerprint and banding parameters never change incrementally: refuse, naming both values."""
    if state is None:
        return
    now = {
        "fingerprint": store.params("fingerprinted").get("fingerprint"),
        "banding": store.params("band_memberships").get("banding"),
    }
    for key, value in now.items():
        held = state["parameters"].get(key)
        if held != value:
            raise WebdedupError(
                f"incremental update refused: the corpus was deduplicated with {key}={held} but the daily assets "
                f"now hold {key}={value}; changing a {key} parameter needs every day re-fingerprinted and a full "
                f"rebuild: run `webdedup run` on the whole input, or `webdedup add --full-rebuild` after "
                f"re-materializing every day with the new parameters"
            )


def update(
    store: Store,
    candidates: CandidateParams | None = None,
    scoring: ScoringParams | None = None,
    representative: RepresentativeParams | None = None,
    full_rebuild_flag: bool = False,
) -> UpdateReport:
    """Bring every global asset up to date with the daily assets, processing only the
    documents that changed since the last update (a full rebuild when it has to; the report
    says why). The caller holds the storage's writer lock."""
    started = time.perf_counter()
    check_consistent(store)
    for asset in ("fingerprinted", "band_memberships"):
        check_uniform(STAGES["candidate_pairs"], store, asset, store.params(asset))
    state = load_state(store)
    if not full_rebuild_flag:
        check_fixed_params(store, state)
    candidates = _stored_choice(state, "candidates", CandidateParams, candidates)
    scoring = _stored_choice(state, "scoring", ScoringParams, scoring)
    representative = _stored_choice(state, "representative", RepresentativeParams, representative)
    days_before = set(state["days"]) if state else set()
    days_now = set(held_days(store))
    reason = (
        "full_rebuild requested"
        if full_rebuild_flag
        else _rebuild_reason(store, state, candidates, scoring, representative)
    )
    if reason is not None:
        full_rebuild(store, candidates, scoring, representative)
        return UpdateReport(
            "full",
            reason,
            days_added=sorted(days_now - days_before),
            days_removed=sorted(days_before - days_now),
            seconds={"total": round(time.perf_counter() - started, 4)},
        )
    changes = daily_changes(store)
    report = UpdateReport(
        "unchanged", days_added=sorted(days_now - days_before), days_removed=sorted(days_before - days_now)
    )
    if not changes.any:
        report.seconds["total"] = round(time.perf_counter() - started, 4)
        return report
    _Updater(store, state, changes, candidates, scoring, representative, report).run()
    report.seconds["total"] = round(time.perf_counter() - started, 4)
    return report


class _Updater:
    def __init__(self, store, state, changes, candidates, scoring, representative, report):
        self.store, self.state, self.changes = store, state, changes
        self.candidates, self.scoring, self.representative = candidates, scoring, representative
        self.report = report
        self.con = connect(store)
        self.con.execute("SET preserve_insertion_order = true")
        self.figures = dict(state["figures"])
        self.marks: dict[str, float] = {}
        self.clock = time.perf_counter()

    def _mark(self, name: str) -> None:
        now = time.perf_counter()
        self.report.seconds[name] = round(now - self.clock, 4)
        self.clock = now

    def run(self) -> None:
        try:
            self._run()
        finally:
            self.con.close()

    def _run(self) -> None:
        con, store = self.con, self.store
        added, removed = changed_documents(con, store, self.changes)
        self.report.documents_added, self.report.documents_removed = added, removed
        self._mark("changes")
        if not added and not removed:  # files rewritten with the same content
            self.report.mode = "unchanged"
            _commit(store, self.candidates, self.scoring, self.representative, self.figures)
            return
        self.report.mode = "incremental"
        from .candidates import _require_unique_doc_ids

        _require_unique_doc_ids(store)
        self._links()
        self._mark("candidates")
        self._score()
        self._mark("scoring")
        self._clusters()
        self._mark("clusters")
        self._representatives()
        self._mark("representatives")
        _commit(store, self.candidates, self.scoring, self.representative, self.figures)

    # -- candidates ------------------------------------------------------------------------

    def _links(self) -> None:
        con, store, params = self.con, self.store, self.candidates
        snap_bands = sorted(_snapshot_dir(store, "band_memberships").glob("*.parquet"))
        new_bands = self.changes.current["band_memberships"]
        old_bands = self.changes.previous["band_memberships"]
        empty = "SELECT NULL::VARCHAR AS doc_id, NULL::SMALLINT AS band_index, NULL::BIGINT AS band_hash WHERE false"

        def rows(files: list[Path], ids: str) -> str:
            if not files:
                return empty
            return (
                f"SELECT m.doc_id, m.band_index, m.band_hash FROM read_parquet({_listing(files)}) m "
                f"SEMI JOIN {ids} i ON i.doc_id = m.doc_id"
            )

        con.execute(f"CREATE TEMP TABLE add_rows AS {rows(new_bands, 'added')}")
        con.execute(f"CREATE TEMP TABLE rem_rows AS {rows(old_bands, 'removed')}")
        con.execute("""CREATE TEMP TABLE touched AS
            SELECT DISTINCT band_index, band_hash FROM (SELECT band_index, band_hash FROM add_rows
                                                       UNION ALL SELECT band_index, band_hash FROM rem_rows)""")
        self.report.touched_buckets = scalar(con, "SELECT count(*) FROM touched")
        index = (
            f"SELECT m.doc_id, m.band_index, m.band_hash FROM read_parquet({_listing(snap_bands)}) m "
            "SEMI JOIN touched t ON t.band_index = m.band_index AND t.band_hash = m.band_hash"
            if snap_bands
            else empty
        )
        con.execute(f"CREATE TEMP TABLE old_m AS {index}")
        con.execute("""CREATE TEMP TABLE new_m AS
            SELECT doc_id, band_index, band_hash, false AS is_new FROM old_m o
             WHERE doc_id NOT IN (SELECT doc_id FROM removed)
            UNION ALL SELECT doc_id, band_index, band_hash, true FROM add_rows""")
        hot = params.hot_bucket_size if params.bucket_policy == "star" else None
        hot_sql = (lambda size: f"({size} > {hot})") if hot is not None else (lambda size: "false")
        con.execute("""CREATE TEMP TABLE bstats AS
            WITH o AS (SELECT band_index, band_hash, count(*) AS size, min(doc_id) AS hub,
                              count(*) FILTER (doc_id IN (SELECT doc_id FROM removed)) AS lost
                         FROM old_m GROUP BY ALL),
                 n AS (SELECT band_index, band_hash, count(*) AS size, min(doc_id) AS hub FROM new_m GROUP BY ALL)
            SELECT t.band_index, t.band_hash, COALESCE(o.size, 0) AS old_size, o.hub AS old_hub,
                   COALESCE(n.size, 0) AS new_size, n.hub AS new_hub, COALESCE(o.lost, 0) AS lost
              FROM touched t LEFT JOIN o USING (band_index, band_hash) LEFT JOIN n USING (band_index, band_hash)""")
        con.execute("""ALTER TABLE bstats ADD COLUMN old_hot BOOLEAN""")
        con.execute(f"UPDATE bstats SET old_hot = {hot_sql('old_size')}")
        con.execute("ALTER TABLE bstats ADD COLUMN new_hot BOOLEAN")
        con.execute(f"UPDATE bstats SET new_hot = {hot_sql('new_size')}")
        con.execute("""ALTER TABLE bstats ADD COLUMN simple BOOLEAN""")
        con.execute("""UPDATE bstats SET simple = lost = 0 AND ((NOT old_hot AND NOT new_hot)
                                                         OR (old_hot AND new_hot AND old_hub = new_hub))""")
        self._budget()
        key = "a.band_index = b.band_index AND a.band_hash = b.band_hash"

        def links(members: str, where: str) -> str:
            """Links of the buckets in `members` (all pairs of a small bucket, star edges of a hot one)."""
            return f"""
                SELECT a.doc_id AS l, b.doc_id AS r FROM {members} a JOIN {members} b ON {key} AND a.doc_id < b.doc_id
                  JOIN bstats s ON s.band_index = a.band_index AND s.band_hash = a.band_hash
                 WHERE {where}"""

        con.execute(f"""CREATE TEMP TABLE delta AS
            SELECT l, r, CAST(sum(w) AS BIGINT) AS w FROM (
              -- simple small buckets: the links of the new members only
              SELECT l, r, 1 AS w FROM ({links("new_m", "s.simple AND NOT s.new_hot AND (a.is_new OR b.is_new)")})
              UNION ALL  -- simple hot buckets (same hub): star edges of the new members
              SELECT s.new_hub, m.doc_id, 1 FROM new_m m JOIN bstats s USING (band_index, band_hash)
               WHERE s.simple AND s.new_hot AND m.is_new AND m.doc_id > s.new_hub
              UNION ALL  -- other buckets: every link, new minus old
              SELECT l, r, 1 FROM ({links("new_m", "NOT s.simple AND NOT s.new_hot")})
              UNION ALL
              SELECT s.new_hub, m.doc_id, 1 FROM new_m m JOIN bstats s USING (band_index, band_hash)
               WHERE NOT s.simple AND s.new_hot AND m.doc_id > s.new_hub
              UNION ALL
              SELECT l, r, -1 FROM ({links("old_m", "NOT s.simple AND NOT s.old_hot")})
              UNION ALL
              SELECT s.old_hub, m.doc_id, -1 FROM old_m m JOIN bstats s USING (band_index, band_hash)
               WHERE NOT s.simple AND s.old_hot AND m.doc_id > s.old_hub)
            GROUP BY l, r HAVING sum(w) <> 0""")
        cand = store.scan_sql("candidate_pairs")
        con.execute(f"CREATE TEMP TABLE old_cand AS SELECT * FROM {cand}")
        con.execute("""CREATE TEMP TABLE counts AS
            SELECT COALESCE(c.left_doc_id, d.l) AS left_doc_id, COALESCE(c.right_doc_id, d.r) AS right_doc_id,
                   COALESCE(c.shared_bands, 0) + COALESCE(d.w, 0) AS shared_bands,
                   c.left_doc_id IS NULL AS is_new_pair
              FROM old_cand c FULL OUTER JOIN delta d ON c.left_doc_id = d.l AND c.right_doc_id = d.r""")
        bad = scalar(con, "SELECT count(*) FROM counts WHERE shared_bands < 0")
        if bad:
            raise WebdedupError(
                f"incremental update: {bad} pair(s) would share a negative number of bands; run with full_rebuild"
            )
        # Domains: kept for pairs of unchanged documents, looked up for the others.
        con.execute("""CREATE TEMP TABLE rescore AS
            SELECT left_doc_id, right_doc_id FROM counts
             WHERE shared_bands > 0 AND (is_new_pair OR left_doc_id IN (SELECT doc_id FROM added)
                                         OR right_doc_id IN (SELECT doc_id FROM added))""")
        con.execute("""CREATE TEMP TABLE need AS SELECT DISTINCT doc_id FROM
            (SELECT left_doc_id AS doc_id FROM rescore UNION ALL SELECT right_doc_id FROM rescore)""")
        need_domains = _fetch(con, _data_files(store, "documents"), "need", ["doc_id", "domain"])
        con.register(
            "need_domains_arrow",
            need_domains
            if need_domains is not None
            else pa.table({"doc_id": pa.array([], pa.string()), "domain": pa.array([], pa.string())}),
        )
        con.execute("CREATE TEMP TABLE need_domains AS SELECT doc_id, domain FROM need_domains_arrow")
        con.unregister("need_domains_arrow")
        con.execute("""CREATE TEMP TABLE new_cand AS
            SELECT k.left_doc_id, k.right_doc_id, CAST(k.shared_bands AS INTEGER) AS shared_bands,
                   COALESCE(l.domain, c.left_domain) AS left_domain, COALESCE(r.domain, c.right_domain) AS right_domain,
                   COALESCE(l.domain, c.left_domain) IS DISTINCT FROM COALESCE(r.domain, c.right_domain) AS cross_domain
              FROM counts k
              LEFT JOIN old_cand c ON c.left_doc_id = k.left_doc_id AND c.right_doc_id = k.right_doc_id
              LEFT JOIN need_domains l ON l.doc_id = k.left_doc_id
              LEFT JOIN need_domains r ON r.doc_id = k.right_doc_id
             WHERE k.shared_bands > 0
             ORDER BY k.left_doc_id, k.right_doc_id""")
        self._collision_report()
        rows = scalar(con, "SELECT count(*) FROM new_cand")
        cross = scalar(con, "SELECT count(*) FROM new_cand WHERE cross_domain")
        documents = self.documents
        possible = documents * (documents - 1) // 2
        stats = {
            "documents": documents,
            "possible_pairs": possible,
            "candidate_reduction_ratio": round(1 - rows / possible, 4) if possible else 0.0,
            "cross_domain_candidates": cross,
            "same_domain_candidates": rows - cross,
            "collision_buckets": self.figures["collision_buckets"],
            "max_bucket_size": self.figures["max_bucket_size"],
            "pair_slots": self.slots,
            "all_pairs_slots": self.figures["all_pairs_slots"],
        }
        run = self._stage_run("candidate_pairs", self.candidates, budget=self.budget)
        self._write("candidate_pairs", "SELECT * FROM new_cand", run.parameters, rows, stats)
        self.upstream["candidate_pairs"] = run.parameters
        con.execute("SET preserve_insertion_order = true")
        write_csv(
            report_path(store, "candidate_summary.csv"),
            con.sql(
                "SELECT * FROM (VALUES "
                + ", ".join(f"('{k}', '{v}')" for k, v in {"rows": rows, **stats}.items())
                + ") t(metric, value)"
            ),
        )

    def _budget(self) -> None:
        """Pair slots, collision buckets and the largest bucket, updated by the touched
        buckets' size changes; the same budget check as candidate_pairs."""
        con, params, figures = self.con, self.candidates, self.figures
        hot = params.hot_bucket_size

        def sums(size: str) -> str:
            return (
                f"COALESCE(sum(CASE WHEN {size} > 1 THEN {size} * ({size} - 1) // 2 ELSE 0 END), 0), "
                f"COALESCE(sum(CASE WHEN {size} > {hot} THEN {size} - 1 ELSE 0 END), 0), "
                f"COALESCE(sum(CASE WHEN {size} > 1 AND {size} <= {hot} "
                f"THEN {size} * ({size} - 1) // 2 ELSE 0 END), 0), "
                f"count(*) FILTER ({size} > 1)"
            )

        old = con.execute(f"SELECT {sums('old_size')} FROM bstats").fetchall()[0]
        new = con.execute(f"SELECT {sums('new_size')} FROM bstats").fetchall()[0]
        for key, before, after in zip(("all_pairs_slots", "star_slots", "small_slots", "collision_buckets"), old, new):
            figures[key] = int(figures[key] - before + after)
        shrunk_max = scalar(
            con, f"SELECT count(*) FROM bstats WHERE old_size = {figures['max_bucket_size']} AND new_size < old_size"
        )
        grown = scalar(con, "SELECT COALESCE(max(new_size), 0) FROM bstats")
        if shrunk_max:  # the largest bucket lost members: look the largest up again
            figures["max_bucket_size"] = None
        else:
            figures["max_bucket_size"] = max(figures["max_bucket_size"], grown if grown > 1 else 0)
        self.documents = int(sum(pq.read_metadata(f).num_rows for f in _data_files(self.store, "documents")))
        if params.bucket_policy == "star":
            self.slots = figures["star_slots"] + figures["small_slots"]
        else:
            self.slots = figures["all_pairs_slots"]
        self.budget = pair_slot_budget(params.max_pair_slots, params.pair_slots_per_document, self.documents)
        if self.slots > self.budget:
            raise WebdedupError(
                f"candidate join would create {self.slots:,} pair slots, over the budget of {self.budget:,}; the "
                f"largest bucket holds {figures['max_bucket_size'] or 'many'} documents: text they all share, such "
                "as boilerplate. Set bucket_policy='star', strip the shared boilerplate, or raise the budget "
                "(the corpus was left unchanged)"
            )

    def _collision_report(self) -> None:
        """collision_buckets.csv: the largest buckets (size, then key) with their members: the
        kept list updated by the touched buckets; looked up again when a listed bucket shrank."""
        con, store = self.con, self.store
        top_path = _dir(store) / "collision_top.parquet"
        con.execute(f"CREATE TEMP TABLE old_top AS SELECT * FROM read_parquet({sql_string(str(top_path))})")
        listed_shrank = scalar(
            con,
            "SELECT count(*) FROM old_top o JOIN bstats s USING (band_index, band_hash) WHERE s.new_size < s.old_size",
        )
        bands = store.scan_sql("band_memberships")
        if listed_shrank or self.figures["max_bucket_size"] is None:
            con.execute(f"""CREATE TEMP TABLE top AS
                WITH sizes AS (SELECT band_index, band_hash, count(*) AS size FROM {bands}
                                GROUP BY band_index, band_hash HAVING count(*) > 1
                                ORDER BY size DESC, band_index, band_hash LIMIT {COLLISION_TOP})
                SELECT s.band_index, s.band_hash, s.size, string_agg(m.doc_id, ';' ORDER BY m.doc_id) AS doc_ids
                  FROM sizes s JOIN {bands} m USING (band_index, band_hash)
                 GROUP BY s.band_index, s.band_hash, s.size""")
            if self.figures["max_bucket_size"] is None:
                self.figures["max_bucket_size"] = scalar(con, "SELECT COALESCE(max(size), 0) FROM top")
        else:
            con.execute(f"""CREATE TEMP TABLE top AS
                SELECT * FROM (
                  SELECT * FROM old_top o WHERE NOT EXISTS (SELECT 1 FROM bstats s
                      WHERE s.band_index = o.band_index AND s.band_hash = o.band_hash)
                  UNION ALL
                  SELECT s.band_index, s.band_hash, s.new_size AS size,
                         string_agg(m.doc_id, ';' ORDER BY m.doc_id) AS doc_ids
                    FROM bstats s JOIN new_m m USING (band_index, band_hash)
                   WHERE s.new_size > 1 GROUP BY s.band_index, s.band_hash, s.new_size)
                ORDER BY size DESC, band_index, band_hash LIMIT {COLLISION_TOP}""")
        _save_table(con, "top", top_path)
        write_csv(
            report_path(store, "collision_buckets.csv"),
            con.sql("SELECT band_index, band_hash, size, doc_ids FROM top ORDER BY size DESC, band_index, band_hash"),
        )

    # -- scoring ---------------------------------------------------------------------------

    def _score(self) -> None:
        con, store = self.con, self.store
        fingerprint = self.upstream["fingerprinted"]["fingerprint"]
        shingle_size, num_perm = fingerprint["shingle_size"], fingerprint["num_perm"]
        pairs = con.sql(
            "SELECT left_doc_id, right_doc_id FROM rescore ORDER BY left_doc_id, right_doc_id"
        ).to_arrow_table()
        self.report.pairs_scored = pairs.num_rows
        docs = _fetch(con, _data_files(store, "documents"), "need", ["doc_id", "body"])
        prints = _fetch(con, _data_files(store, "fingerprinted"), "need", ["doc_id", "signature"])
        if pairs.num_rows:
            ids = docs.column("doc_id").combine_chunks()
            flat, offsets = shingle_sets(docs.column("body").combine_chunks(), shingle_size)
            starts, ends = offsets[:-1].astype(np.int64), offsets[1:].astype(np.int64)
            left = pa.compute.index_in(pairs["left_doc_id"], value_set=ids).to_numpy().astype(np.int64)
            right = pa.compute.index_in(pairs["right_doc_id"], value_set=ids).to_numpy().astype(np.int64)
            exact = np.zeros(pairs.num_rows, dtype=np.float64)
            jaccard_blocks(flat, starts, ends, flat, starts, ends, left, right, exact)
            sig_ids = prints.column("doc_id").combine_chunks()
            signatures = prints.column("signature").combine_chunks().flatten().to_numpy().reshape(-1, num_perm)
            sl = pa.compute.index_in(pairs["left_doc_id"], value_set=sig_ids).to_numpy().astype(np.int64)
            sr = pa.compute.index_in(pairs["right_doc_id"], value_set=sig_ids).to_numpy().astype(np.int64)
            estimate = estimate_jaccard(signatures[sl], signatures[sr])
        else:
            exact = np.zeros(0, np.float64)
            estimate = np.zeros(0, np.float64)
        threshold = self.scoring.threshold
        con.register(
            "fresh_arrow",
            pa.table(
                {
                    "left_doc_id": pairs["left_doc_id"],
                    "right_doc_id": pairs["right_doc_id"],
                    "exact_jaccard": pa.array(exact),
                    "minhash_estimate": pa.array(estimate),
                    "is_duplicate": pa.array(exact >= threshold),
                    "reason": pa.array(reasons(exact, estimate, threshold), pa.string()),
                }
            ),
        )
        con.execute("CREATE TEMP TABLE fresh AS SELECT * FROM fresh_arrow")
        con.unregister("fresh_arrow")
        scored = store.scan_sql("scored_pairs")
        cols = ", ".join(f"{f.name}" for f in SCORED_SCHEMA)
        con.execute(f"""CREATE TEMP TABLE new_scored AS
            SELECT c.left_doc_id, c.right_doc_id, c.left_domain, c.right_domain, c.cross_domain, c.shared_bands,
                   COALESCE(f.exact_jaccard, s.exact_jaccard) AS exact_jaccard,
                   COALESCE(f.minhash_estimate, s.minhash_estimate) AS minhash_estimate,
                   COALESCE(f.is_duplicate, s.is_duplicate) AS is_duplicate,
                   COALESCE(f.reason, s.reason) AS reason
              FROM new_cand c
              LEFT JOIN fresh f ON f.left_doc_id = c.left_doc_id AND f.right_doc_id = c.right_doc_id
              LEFT JOIN {scored} s ON f.left_doc_id IS NULL AND s.left_doc_id = c.left_doc_id
                                  AND s.right_doc_id = c.right_doc_id
             ORDER BY c.left_doc_id, c.right_doc_id""")
        missing = scalar(con, "SELECT count(*) FROM new_scored WHERE exact_jaccard IS NULL")
        if missing:
            raise WebdedupError(f"incremental update: {missing} candidate pair(s) have no score; run with full_rebuild")
        rows = scalar(con, "SELECT count(*) FROM new_scored")
        by_reason = dict(con.execute("SELECT reason, count(*) FROM new_scored GROUP BY reason").fetchall())
        members = scalar(
            con,
            "SELECT count(DISTINCT d) FROM (SELECT left_doc_id AS d FROM new_scored "
            "UNION ALL SELECT right_doc_id FROM new_scored)",
        )
        run = self._stage_run("scored_pairs", self.scoring)
        figures = {
            "duplicates": scalar(con, "SELECT count(*) FROM new_scored WHERE is_duplicate"),
            "reasons": by_reason,
            "member_documents": members,
            "document_passes": 1,
            "threads": 1,
        }
        self._write(
            "scored_pairs", f"SELECT {cols} FROM new_scored", run.parameters, rows, figures, schema=SCORED_SCHEMA
        )
        self.upstream["scored_pairs"] = run.parameters
        # duplicate_pairs: the scored pairs over the threshold
        con.execute(
            f"CREATE TEMP TABLE old_dup AS SELECT left_doc_id, right_doc_id FROM {store.scan_sql('duplicate_pairs')}"
        )
        con.execute(f"""CREATE TEMP TABLE new_dup AS
            SELECT left_doc_id, right_doc_id, left_domain, right_domain, cross_domain, shared_bands,
                   exact_jaccard, minhash_estimate,
                   CASE WHEN exact_jaccard >= 1.0 THEN 'exact' ELSE 'near' END AS kind
              FROM new_scored WHERE exact_jaccard >= {threshold!r} ORDER BY left_doc_id, right_doc_id""")
        dup_rows = scalar(con, "SELECT count(*) FROM new_dup")
        exact_n, cross_n = con.execute(
            "SELECT count(*) FILTER (kind = 'exact'), count(*) FILTER (cross_domain) FROM new_dup"
        ).fetchall()[0]
        run = self._stage_run("duplicate_pairs", ScoringParams(threshold=threshold))
        figures = {
            "exact_duplicate_pairs": exact_n,
            "near_duplicate_pairs": dup_rows - exact_n,
            "cross_domain_duplicates": cross_n,
            "same_domain_duplicates": dup_rows - cross_n,
        }
        self._write("duplicate_pairs", "SELECT * FROM new_dup", run.parameters, dup_rows, figures)
        self.upstream["duplicate_pairs"] = run.parameters

    # -- clusters --------------------------------------------------------------------------

    def _clusters(self) -> None:
        con, store = self.con, self.store
        con.execute(f"CREATE TEMP TABLE old_clusters AS SELECT * FROM {store.scan_sql('clusters')}")
        # Documents whose edges changed: the added and removed ones, and both ends of every
        # duplicate edge that appeared or vanished.
        con.execute("""CREATE TEMP TABLE affected AS SELECT DISTINCT doc_id FROM (
            SELECT doc_id FROM added UNION ALL SELECT doc_id FROM removed
            UNION ALL SELECT left_doc_id FROM (SELECT left_doc_id, right_doc_id FROM old_dup
                                               EXCEPT SELECT left_doc_id, right_doc_id FROM new_dup)
            UNION ALL SELECT right_doc_id FROM (SELECT left_doc_id, right_doc_id FROM old_dup
                                                EXCEPT SELECT left_doc_id, right_doc_id FROM new_dup)
            UNION ALL SELECT left_doc_id FROM (SELECT left_doc_id, right_doc_id FROM new_dup
                                               EXCEPT SELECT left_doc_id, right_doc_id FROM old_dup)
            UNION ALL SELECT right_doc_id FROM (SELECT left_doc_id, right_doc_id FROM new_dup
                                                EXCEPT SELECT left_doc_id, right_doc_id FROM old_dup))""")
        con.execute("""CREATE TEMP TABLE touched_old AS
            SELECT DISTINCT c.cluster_id FROM old_clusters c SEMI JOIN affected a ON a.doc_id = c.doc_id""")
        # The members to cluster again: old members of touched clusters still held, and the added.
        con.execute("""CREATE TEMP TABLE regroup AS
            SELECT doc_id, CAST(row_number() OVER (ORDER BY doc_id) - 1 AS BIGINT) AS node FROM (
              SELECT c.doc_id FROM old_clusters c SEMI JOIN touched_old t ON t.cluster_id = c.cluster_id
               WHERE c.doc_id NOT IN (SELECT doc_id FROM removed)
              UNION SELECT doc_id FROM added)""")
        edges = con.execute("""
            SELECT l.node, r.node FROM new_dup p JOIN regroup l ON l.doc_id = p.left_doc_id
              JOIN regroup r ON r.doc_id = p.right_doc_id""").fetchnumpy()
        left, right = (np.asarray(v, dtype=np.int64) for v in edges.values())
        ids = con.sql("SELECT doc_id FROM regroup ORDER BY node").to_arrow_table().column("doc_id").combine_chunks()
        labels = component_labels(len(ids), left, right)
        sizes = np.bincount(labels, minlength=len(ids))[labels] if len(ids) else np.zeros(0, np.int64)
        cluster_ids = (
            pa.compute.binary_join_element_wise(pa.scalar("cluster-"), ids.take(pa.array(labels)), "")
            if len(ids)
            else pa.array([], pa.string())
        )
        con.register(
            "regrouped_arrow",
            pa.table({"doc_id": ids, "cluster_id": cluster_ids, "cluster_size": pa.array(sizes, pa.int64())}),
        )
        con.execute("CREATE TEMP TABLE regrouped AS SELECT * FROM regrouped_arrow")
        con.unregister("regrouped_arrow")
        self.report.clusters_touched = scalar(con, "SELECT count(DISTINCT cluster_id) FROM regrouped")
        con.execute("""CREATE TEMP TABLE new_clusters AS
            SELECT * FROM (
              SELECT c.* FROM old_clusters c WHERE c.cluster_id NOT IN (SELECT cluster_id FROM touched_old)
                 AND c.doc_id NOT IN (SELECT doc_id FROM removed)
              UNION ALL SELECT * FROM regrouped) ORDER BY doc_id""")
        n_clusters, dup_clusters, singletons, largest, rows = con.execute("""
            SELECT count(DISTINCT cluster_id), count(DISTINCT cluster_id) FILTER (cluster_size > 1),
                   count(*) FILTER (cluster_size = 1), COALESCE(max(cluster_size), 0), count(*)
              FROM new_clusters""").fetchall()[0]
        figures = {
            "clusters": n_clusters,
            "duplicate_clusters": dup_clusters,
            "singletons": singletons,
            "max_cluster_size": largest,
            "edges": scalar(con, "SELECT count(*) FROM new_dup"),
        }
        if rows != self.documents:
            raise WebdedupError(
                f"incremental update: clusters would hold {rows} documents but the corpus holds {self.documents}; "
                "run with full_rebuild"
            )
        run = self._stage_run("clusters", None)
        self._write("clusters", "SELECT * FROM new_clusters", run.parameters, rows, figures)
        self.upstream["clusters"] = run.parameters

    # -- representatives -------------------------------------------------------------------

    def _representatives(self) -> None:
        con, store = self.con, self.store
        order_by = policy_order_by(self.representative.representative_policy)
        con.execute("CREATE TEMP TABLE touched_new AS SELECT DISTINCT cluster_id FROM regrouped")
        con.execute("CREATE TEMP TABLE members AS SELECT doc_id FROM regrouped")
        con.execute("DROP TABLE IF EXISTS ranked")
        con.execute(_ranked_sql(store, self.representative, "members"))
        con.execute(
            "CREATE TEMP TABLE winners AS "
            "SELECT doc_id, cluster_id, cluster_size, token_count FROM ranked WHERE rank = 1"
        )
        files = _data_files(store, "documents")
        doc_schema = con.sql(f"SELECT * FROM {store.scan_sql('documents')} LIMIT 0").arrow().schema
        winner_rows = _fetch(con, files, "winners", doc_schema.names)
        schema = pa.schema(
            [*doc_schema, ("cluster_id", pa.string()), ("cluster_size", pa.int64()), ("token_count", pa.int32())]
        )
        if winner_rows is None:
            winner_rows = doc_schema.empty_table()
        con.register("winner_rows_arrow", winner_rows)
        select = ", ".join(
            f"CAST(w.{quote_ident(f.name)} AS {_duck_type(con, f)}) AS {quote_ident(f.name)}"
            if f.name in winner_rows.column_names
            else f"CAST(NULL AS {_duck_type(con, f)}) AS {quote_ident(f.name)}"
            for f in doc_schema
        )
        con.execute(f"""CREATE TEMP TABLE new_reps AS
            SELECT {select}, k.cluster_id, k.cluster_size, k.token_count
              FROM winner_rows_arrow w JOIN winners k ON k.doc_id = w.doc_id""")
        con.unregister("winner_rows_arrow")
        old = store.scan_sql("deduped_documents")
        names = ", ".join(quote_ident(f.name) for f in schema)
        con.execute(f"""CREATE TEMP TABLE new_dedup AS
            SELECT {names} FROM (
              SELECT * FROM {old} o WHERE o.cluster_id NOT IN (SELECT cluster_id FROM touched_old)
              UNION ALL BY NAME SELECT * FROM new_reps)
             ORDER BY doc_id""")
        rows = scalar(con, "SELECT count(*) FROM new_dedup")
        documents = self.documents
        figures = {
            "documents": documents,
            "removed": documents - rows,
            "retained_ratio": round(rows / documents, 4) if documents else 0.0,
        }
        run = self._stage_run("deduped_documents", self.representative, order_by=order_by)
        self._write("deduped_documents", "SELECT * FROM new_dedup", run.parameters, rows, figures, schema=schema)
        # cluster_inspection.csv: rows of untouched clusters kept, touched ones recomputed
        inspection_path = _dir(store) / "cluster_inspection.parquet"
        fresh = cluster_inspection(con, store, stored_extra_columns(store))
        con.execute(f"""CREATE TEMP TABLE inspection AS
            SELECT * FROM (
              SELECT * FROM read_parquet({sql_string(str(inspection_path))}) i
               WHERE i.cluster_id NOT IN (SELECT cluster_id FROM touched_old)
              UNION ALL BY NAME SELECT * FROM ({fresh.sql_query()}))
             ORDER BY cluster_id""")
        _save_table(con, "inspection", inspection_path)
        write_csv(report_path(store, "cluster_inspection.csv"), con.sql("SELECT * FROM inspection ORDER BY cluster_id"))

    # -- writing ---------------------------------------------------------------------------

    @property
    def upstream(self) -> dict[str, dict[str, Any]]:
        if not hasattr(self, "_upstream"):
            self._upstream = {a: self.store.params(a) for a in ("documents", "fingerprinted", "band_memberships")}
        return self._upstream

    def _stage_run(self, name: str, params, **derived) -> StageRun:
        stage = STAGES[name]
        run = StageRun(stage, self.store, params, {a: self.upstream[a] for a in stage.upstream})
        if derived:
            run.derive(**derived)
        return run

    def _write(self, asset: str, query: str, parameters, rows: int, figures, schema: pa.Schema | None = None) -> None:
        from .storage import write_batches

        reader = self.con.sql(query).arrow(batch_size=65_536)
        target_schema = schema if schema is not None else reader.schema
        written = write_batches(self.store.path(asset), target_schema, reader, parameters)
        assert written == rows, (asset, written, rows)
        self.store.write_stats(asset, None, {"rows": rows, **figures, "seconds": 0.0})


def _duck_type(con, f: pa.Field) -> str:
    """DuckDB's name for an Arrow field's type (via an empty table)."""
    con.register("_type_probe", pa.table({"x": pa.array([], f.type)}))
    try:
        return str(con.sql("SELECT x FROM _type_probe").types[0])
    finally:
        con.unregister("_type_probe")


# ---- check: new documents against the held corpus, nothing changed ------------------------

CHECK_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("is_duplicate", pa.bool_()),
        ("matched_doc_id", pa.string()),
        ("matched_cluster_id", pa.string()),
        ("exact_jaccard", pa.float64()),
        ("candidates", pa.int64()),
    ]
)


def check_against(store: Store, new: Store, target: Path) -> dict[str, Any]:
    """For every document of `new` (its daily assets built with the corpus' fingerprint and
    banding parameters), whether it duplicates a document of the corpus held in `store`: the
    best match by exact Jaccard (ties: smallest doc_id), its cluster, the Jaccard, the number of
    candidates verified. Candidates come from the corpus' band index (the snapshot of the last
    update, else band_memberships), with the hot-bucket policy of the last update: a bucket
    over hot_bucket_size under `star` links the new document to its first member only. Writes
    `target` (Parquet); reads the corpus only."""
    started = time.perf_counter()
    state = load_state(store)
    held = {
        "fingerprint": store.params("fingerprinted").get("fingerprint"),
        "banding": store.params("band_memberships").get("banding"),
    }
    for key, value in held.items():
        given = new.params("fingerprinted" if key == "fingerprint" else "band_memberships").get(key)
        if given != value:
            raise WebdedupError(f"check: the corpus was built with {key}={value} but the new data with {key}={given}")
    candidates = from_stored(CandidateParams, state["parameters"]["candidates"]) if state else CandidateParams()
    scoring = from_stored(ScoringParams, state["parameters"]["scoring"]) if state else ScoringParams()
    shingle_size = held["fingerprint"]["shingle_size"]
    con = connect(store)
    try:
        snap = sorted(_snapshot_dir(store, "band_memberships").glob("*.parquet")) if state else []
        index = f"read_parquet({_listing(snap)})" if snap else store.scan_sql("band_memberships")
        con.execute(
            f"CREATE TEMP TABLE probe AS SELECT doc_id, band_index, band_hash FROM {new.scan_sql('band_memberships')}"
        )
        con.execute(f"""CREATE TEMP TABLE hits AS SELECT m.doc_id, m.band_index, m.band_hash FROM {index} m
            SEMI JOIN probe p ON p.band_index = m.band_index AND p.band_hash = m.band_hash""")
        hot = candidates.hot_bucket_size if candidates.bucket_policy == "star" else None
        con.execute("""CREATE TEMP TABLE bucket AS SELECT band_index, band_hash, count(*) AS size,
            min(doc_id) AS hub FROM hits GROUP BY ALL""")
        hot_filter = f"b.size <= {hot} OR h.doc_id = b.hub" if hot is not None else "true"
        con.execute(f"""CREATE TEMP TABLE pairs AS
            SELECT p.doc_id AS new_id, h.doc_id AS old_id, count(*) AS shared FROM probe p
              JOIN hits h ON h.band_index = p.band_index AND h.band_hash = p.band_hash
              JOIN bucket b ON b.band_index = p.band_index AND b.band_hash = p.band_hash
             WHERE {hot_filter} GROUP BY ALL ORDER BY new_id, old_id""")
        pairs = con.sql("SELECT new_id, old_id FROM pairs").to_arrow_table()
        con.execute("CREATE TEMP TABLE need AS SELECT DISTINCT old_id AS doc_id FROM pairs")
        con.execute("CREATE TEMP TABLE need_new AS SELECT DISTINCT new_id AS doc_id FROM pairs")
        exact = np.zeros(pairs.num_rows, np.float64)
        if pairs.num_rows:
            sets = {}
            for name, source, ids in (("old", store, "need"), ("new", new, "need_new")):
                rows = _fetch(con, _data_files(source, "documents"), ids, ["doc_id", "body"])
                flat, offsets = shingle_sets(rows.column("body").combine_chunks(), shingle_size)
                sets[name] = (
                    rows.column("doc_id").combine_chunks(),
                    flat,
                    offsets[:-1].astype(np.int64),
                    offsets[1:].astype(np.int64),
                )
            left = pa.compute.index_in(pairs["new_id"], value_set=sets["new"][0]).to_numpy().astype(np.int64)
            right = pa.compute.index_in(pairs["old_id"], value_set=sets["old"][0]).to_numpy().astype(np.int64)
            jaccard_blocks(*sets["new"][1:], *sets["old"][1:], left, right, exact)
        con.register(
            "scored_arrow",
            pa.table({"new_id": pairs["new_id"], "old_id": pairs["old_id"], "exact_jaccard": pa.array(exact)}),
        )
        clusters = store.scan_sql("clusters") if store.files("clusters") else None
        cluster_join = (
            f"LEFT JOIN (SELECT doc_id, cluster_id FROM {clusters} SEMI JOIN need n USING (doc_id)) c "
            "ON c.doc_id = b.old_id"
            if clusters
            else "LEFT JOIN (SELECT NULL::VARCHAR AS doc_id, NULL::VARCHAR AS cluster_id) c ON false"
        )
        relation = con.sql(f"""
            WITH best AS (
                SELECT new_id, arg_min(old_id, (-exact_jaccard, old_id)) AS old_id, max(exact_jaccard) AS exact_jaccard,
                       count(*) AS candidates
                  FROM scored_arrow GROUP BY new_id)
            SELECT d.doc_id, COALESCE(b.exact_jaccard >= {scoring.threshold!r}, false) AS is_duplicate,
                   CASE WHEN b.exact_jaccard >= {scoring.threshold!r} THEN b.old_id END AS matched_doc_id,
                   CASE WHEN b.exact_jaccard >= {scoring.threshold!r} THEN c.cluster_id END AS matched_cluster_id,
                   b.exact_jaccard, COALESCE(b.candidates, 0) AS candidates
              FROM (SELECT doc_id FROM {new.scan_sql("documents")}) d
              LEFT JOIN best b ON b.new_id = d.doc_id {cluster_join}
             ORDER BY d.doc_id""")
        from .storage import write_batches

        reader = relation.arrow(batch_size=65_536)
        rows = write_batches(target, CHECK_SCHEMA, reader, {"stage": "check", "scoring": scoring.model_dump()})
        duplicates = scalar(con, f"SELECT count(*) FROM read_parquet({sql_string(str(target))}) WHERE is_duplicate")
    finally:
        con.close()
    return {
        "documents": rows,
        "duplicates": duplicates,
        "candidate_pairs": pairs.num_rows,
        "threshold": scoring.threshold,
        "seconds": round(time.perf_counter() - started, 4),
    }
