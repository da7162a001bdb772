"""The full rebuild, the incremental state it records, and when an update must be one."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...core.ranking import policy_order_by
from ...errors import WebdedupError
from ...params import CandidateParams, RepresentativeParams, ScoringParams
from ...storage.serial import from_stored
from ...storage.state import held_days
from ...storage.store import Store, connect, file_identity, link_or_copy, save_table, write_text
from ..stage import DUCKDB, StageResult
from ..stages.candidates import (
    COLLISION_TOP_FILE,
    bucket_sizes_sql,
    bucket_totals,
    create_collision_top,
    kept_bucket_summary,
    kept_dir,
)
from ..stages.clustering import cluster_inspection, ranked_sql
from ..stages.documents import stored_extra_columns
from .layout import (
    DAILY,
    GLOBAL,
    STATE_FORMAT,
    STATE_NAME,
    incremental_dir,
    same_file,
    snapshot_dir,
)

# Runs one global stage with its parameters (None: the stage's own from upstream).
StageRunner = Callable[[str, Any], StageResult]

# where a global asset records the parameter group an update chooses (engine.stage's groups)
HELD_GROUPS = {
    "candidates": ("candidate_pairs", "candidates"),
    "scoring": ("scored_pairs", "scoring"),
    "representative": ("deduped_documents", "representatives"),
}


def stored_choice(store: Store, state: dict[str, Any] | None, key: str, model, given):
    """The parameters given, else those of the last update, else those the held global asset was
    built with (a storage written by `webdedup run`, or whose state.json was lost), else the defaults."""
    if given is not None:
        return given
    if state is not None and key in state["parameters"]:
        return from_stored(model, state["parameters"][key])
    asset, group = HELD_GROUPS[key]
    try:
        held = store.params(asset).get(group) if store.files(asset) else None
    except (OSError, ValueError):  # a damaged asset: a full rebuild writes it again
        held = None
    return from_stored(model, held) if held else model()


def full_rebuild_steps(
    store: Store,
    candidates: CandidateParams,
    scoring: ScoringParams,
    representative: RepresentativeParams,
    run_stage: StageRunner | None = None,
) -> Iterator[str]:
    """full_rebuild one global stage at a time: yields each stage's name once it is written (the
    snapshot and the state are recorded before the last one, deduped_documents, is yielded)."""
    run_stage = run_stage or (lambda name, params: DUCKDB.run(name, store, params))
    *first, (last, last_params) = global_stage_params(candidates, scoring, representative)
    for name, params in first:
        run_stage(name, params)
        yield name
    run_stage(last, last_params)
    _snapshot(store, candidates, scoring, representative)
    yield last


def _snapshot(
    store: Store, candidates: CandidateParams, scoring: ScoringParams, representative: RepresentativeParams
) -> None:
    """What the next update extends: the bucket figures, the largest buckets, the cluster
    inspection rows, the daily files' snapshot and the state."""
    con = connect(store)
    try:
        top_path = incremental_dir(store) / COLLISION_TOP_FILE
        figures = kept_bucket_summary(store, candidates.hot_bucket_size)
        if figures is not None:  # the full stage's own, kept next to the candidate_pairs it wrote
            link_or_copy(kept_dir(store) / COLLISION_TOP_FILE, top_path)
        else:
            bm = store.scan_sql("band_memberships")
            con.execute(f"CREATE TEMP TABLE buckets AS {bucket_sizes_sql(bm, with_hub=False)}")
            figures = bucket_totals(con, "buckets", candidates.hot_bucket_size)
            create_collision_top(con, bm, "buckets")
            save_table(con, "top", top_path)
        inspection_all(con, store, representative)
        save_table(con, "inspection", incremental_dir(store) / "cluster_inspection.parquet")
    finally:
        con.close()
    commit(store, candidates, scoring, representative, figures)


def run_global_stages(
    run_stage: StageRunner,
    candidates: CandidateParams,
    scoring: ScoringParams,
    representative: RepresentativeParams,
) -> None:
    """candidate_pairs .. deduped_documents from scratch, in order, on any engine."""
    for name, params in global_stage_params(candidates, scoring, representative):
        run_stage(name, params)


def global_stage_params(
    candidates: CandidateParams, scoring: ScoringParams, representative: RepresentativeParams
) -> list[tuple[str, Any]]:
    """The global stages in order, each with its parameters."""
    return [
        ("candidate_pairs", candidates),
        ("scored_pairs", scoring),
        ("duplicate_pairs", None),
        ("clusters", None),
        ("deduped_documents", representative),
    ]


def inspection_all(con, store: Store, policy: RepresentativeParams) -> None:
    con.execute("DROP TABLE IF EXISTS ranked")
    con.execute(ranked_sql(store, policy_order_by(policy.representative_policy, policy.prefer_domains)))
    relation = cluster_inspection(con, store, stored_extra_columns(store))
    con.execute("DROP TABLE IF EXISTS inspection")
    con.execute(f"CREATE TEMP TABLE inspection AS {relation.sql_query()}")


def commit(
    store: Store,
    candidates: CandidateParams,
    scoring: ScoringParams,
    representative: RepresentativeParams,
    figures: dict[str, Any],
) -> None:
    """Link the daily files into the snapshot and record the state (last: a crash before leaves
    the previous state, whose global asset identities no longer match: a full rebuild)."""
    for asset in DAILY:
        snap = snapshot_dir(store, asset)
        files = store.data_files(asset)
        names = {f.name for f in files}
        for f in files:
            if not same_file(f, snap / f.name):
                link_or_copy(f, snap / f.name)
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
        "global_files": {a: [str(f), file_identity(f)] for a in GLOBAL for f in [store.path(a)]},
        "figures": figures,
        "days": held_days(store),
    }
    write_text(incremental_dir(store) / STATE_NAME, json.dumps(state, indent=1, sort_keys=True))


def rebuild_reason(
    store: Store,
    state: dict[str, Any] | None,
    candidates: CandidateParams,
    scoring: ScoringParams,
    representative: RepresentativeParams,
) -> str | None:
    if state is None:
        return "no incremental state in this storage yet"
    for asset, (path, identity) in state["global_files"].items():
        if not _unchanged(store.path(asset), Path(path), identity):
            return f"{asset} was rewritten since the last incremental update (a full run, or an interrupted update)"
    held = state["parameters"]
    for key, given in (("candidates", candidates), ("scoring", scoring), ("representative", representative)):
        if held.get(key) != given.model_dump(mode="json"):
            return f"{key} parameters changed ({held.get(key)} -> {given.model_dump(mode='json')})"
    if representative.verify_against_representative:
        return "verify_against_representative re-checks whole clusters: not updated incrementally"
    if candidates.candidate_scope == "domain":
        return "candidate_scope=domain is not updated incrementally (band keys are mixed with the domain)"
    return None


def _unchanged(path: Path, recorded: Path, identity: dict[str, Any] | list[int]) -> bool:
    """The global file at `path` is the one the last update wrote (recorded at `recorded`): a
    storage moved or copied since (cp -a, a backup restored) holds it under another inode, with
    its name, size and time."""
    if not path.exists():
        return False
    if isinstance(identity, list):  # the state of an earlier version: device and inode (any path to the file)
        info = path.stat()
        return identity == [info.st_dev, info.st_ino]
    now = file_identity(path)
    return all(now[key] == identity.get(key) for key in now if key != "inode" or recorded == path)


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
