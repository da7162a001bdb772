"""The global assets brought up to date as one chain, a stage per Dagster asset.

A whole-chain run opens one `ChainUpdate` (an UpdateSession holding the storage's writer lock
from its first stage to its last) and each global asset advances it to its own stage, so each
asset does its own stage's work. `update` records its report in the incremental folder
(last_update.json), so an asset of a chain that found nothing to do still shows the mode, the
reason, the days added or removed and the clusters touched of the update that produced it.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from typing import Any

from ...params import CandidateParams, RepresentativeParams, ScoringParams
from ...storage.state import writer_lock
from ...storage.store import Store, write_text
from ..stage import StageResult
from .layout import incremental_dir
from .update import UpdateSession

LAST_UPDATE = "last_update.json"


class ChainUpdate:
    """One update of the global chain, advanced asset by asset; closed (the lock released) once its
    last stage is done or when a stage fails (nothing is recorded then: the next update rebuilds)."""

    def __init__(
        self,
        store: Store,
        candidates: CandidateParams,
        scoring: ScoringParams,
        representative: RepresentativeParams,
        full_rebuild: bool = False,
        lock_timeout: float = 0.0,
    ) -> None:
        self.store = store
        self._held = ExitStack()
        self._held.enter_context(writer_lock(store.root, timeout=lock_timeout, purpose="the global chain"))
        self.session = UpdateSession(store, candidates, scoring, representative, full_rebuild)
        self.closed = False

    def advance(self, stage: str) -> tuple[StageResult, dict[str, Any]]:
        """Bring the chain up to and including `stage`; its stored result and the update's report."""
        try:
            self.session.advance(stage)
        except BaseException:
            self.close()
            raise
        recorded = _recorded(self.store, self.session.report.as_dict())
        if self.session.finished:
            self.close()
        return stored_result(self.store, stage), recorded

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.session.close()
            finally:
                self._held.close()


def _recorded(store: Store, report: dict[str, Any]) -> dict[str, Any]:
    """The report of the update that wrote the assets (`applied_now`: this one)."""
    report = json.loads(json.dumps(report, default=str))  # as it stands now: later steps add to it
    path = incremental_dir(store) / LAST_UPDATE
    if report["mode"] != "unchanged" or not path.exists():
        write_text(path, json.dumps({**report, "applied_now": False}, indent=1, default=str))
        return {**report, "applied_now": True}
    return {**json.loads(path.read_text()), "applied_now": False}


def stored_result(store: Store, stage: str) -> StageResult:
    stats = store.stats(stage)[0]
    figures = {k: v for k, v in stats.items() if k not in ("rows", "seconds")}
    return StageResult(stage, int(stats["rows"]), store.params(stage), figures, float(stats.get("seconds") or 0.0))
