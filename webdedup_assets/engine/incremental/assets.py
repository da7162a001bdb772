"""The global assets brought up to date as one chain (what Dagster's global assets call).

`bring_up_to_date` runs `update` (incremental, or a full rebuild when it has to or is asked
to; a second call finds nothing changed and does nothing) and returns one global asset's
result as stored, with the report of the update that wrote it: `update` records its report in
the incremental folder (last_update.json), so each asset of the chain shows the mode, the
reason, the days added or removed and the clusters touched of the update that produced it.
"""

from __future__ import annotations

import json
from typing import Any

from ...params import CandidateParams, RepresentativeParams, ScoringParams
from ...storage.store import Store, write_text
from ..stage import StageResult
from .layout import incremental_dir
from .update import update

LAST_UPDATE = "last_update.json"


def bring_up_to_date(
    stage: str,
    store: Store,
    candidates: CandidateParams,
    scoring: ScoringParams,
    representative: RepresentativeParams,
    full_rebuild: bool = False,
) -> tuple[StageResult, dict[str, Any]]:
    """Every global asset up to date with the daily assets; `stage`'s stored result and the
    report of the update that wrote it (`applied_now`: by this call)."""
    report = update(store, candidates, scoring, representative, full_rebuild_flag=full_rebuild)
    path = incremental_dir(store) / LAST_UPDATE
    if report.mode != "unchanged" or not path.exists():
        recorded = {**report.as_dict(), "applied_now": True}
        write_text(path, json.dumps({**recorded, "applied_now": False}, indent=1, default=str))
    else:
        recorded = {**json.loads(path.read_text()), "applied_now": False}
    stats = store.stats(stage)[0]
    figures = {k: v for k, v in stats.items() if k not in ("rows", "seconds")}
    result = StageResult(stage, int(stats["rows"]), store.params(stage), figures, float(stats.get("seconds") or 0.0))
    return result, recorded
