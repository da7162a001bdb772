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
  After a full rebuild the bucket figures and the largest buckets are those the candidates
  stage kept in `candidate_pairs/kept/` beside the file it wrote (counted again from the band
  rows only when that file has been replaced since).
- `bodies/`: the body index, every documents file's bodies as LZ4 blocks addressable by doc_id,
  what verification reads (bodies.py).

An update (see `update`):
1. finds the changed documents: files of documents whose identity differs from the snapshot
   are compared with their snapshot version row by row (`changed_documents`, the one place
   that knows how daily files map to documents);
2. takes the buckets touched by an added or removed document, their old members (snapshot
   index) and new members, and derives the change in band links per pair with the same
   hot-bucket policy as engine.stages.candidates (a bucket whose policy outcome changes, or that
   lost a member, has all its links recomputed; others only gain the links of new members);
3. applies it to candidate_pairs (shared_bands), scores the new pairs and those of changed
   documents with the same kernel as scored_pairs (shingle sets recomputed for those
   documents only), rewrites duplicate_pairs;
4. recomputes connected components over the clusters touched (old clusters of every document
   whose edges changed, and the added ones): cluster id = 'cluster-' + smallest doc_id;
5. re-ranks the members of touched clusters only (same ORDER BY as deduped_documents),
   splices their representatives' rows into deduped_documents at their place in the full
   stage's stored order (one pass over that file, no sort, copying the body pages that keep all
   their rows: storage.parquet_splice), and recomputes cluster_inspection for the touched
   clusters only (representatives.py).

The result equals a full recompute row for row and in stored order (tests/test_incremental.py).

Modules: layout (paths, the report, helpers), changes (1), links (2), verify (3), components
(4), representatives (5), rebuild (the full rebuild, the state it records, when one is needed),
update (`update`, the steps in order), bodies (the body index), check (`check_input`: stage new
data in a scratch storage with the corpus' parameters, then `check_against`).
"""

from .assets import ChainUpdate
from .changes import DailyChanges, changed_documents, daily_changes
from .check import CHECK_SCHEMA, check_against, check_input, held_daily_params
from .layout import DAILY, GLOBAL, INCREMENTAL_DIR, UpdateReport, load_state
from .rebuild import check_fixed_params, run_global_stages
from .update import UpdateSession, update

__all__ = [
    "CHECK_SCHEMA",
    "DAILY",
    "GLOBAL",
    "INCREMENTAL_DIR",
    "DailyChanges",
    "UpdateReport",
    "ChainUpdate",
    "changed_documents",
    "check_against",
    "check_fixed_params",
    "check_input",
    "daily_changes",
    "held_daily_params",
    "load_state",
    "run_global_stages",
    "UpdateSession",
    "update",
]
