"""Where the incremental state lives, the update report, and small helpers shared by the steps."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import WebdedupError
from ...storage.store import Store

INCREMENTAL_DIR = "incremental"
STATE_NAME = "state.json"
STATE_FORMAT = 1
DAILY = ("documents", "fingerprinted", "band_memberships")
GLOBAL = ("candidate_pairs", "scored_pairs", "duplicate_pairs", "clusters", "deduped_documents")


def bucket_rows(bands: str, probe: str) -> str:
    """Rows (doc_id, band_index, band_hash) of the band table expression `bands` in the buckets
    of the table `probe` (band_index, band_hash). The IN filter on band_hash alone goes into the
    scan, so doc_id is decoded for the few rows that pass it, where a semi join on both columns
    decodes every band row; the semi join then matches band_index too."""
    return f"""SELECT m.doc_id, m.band_index, m.band_hash FROM (
        SELECT doc_id, band_index, band_hash FROM {bands} WHERE band_hash IN (SELECT band_hash FROM {probe})) m
        SEMI JOIN {probe} p ON p.band_index = m.band_index AND p.band_hash = m.band_hash"""


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
    deduped_rewrite: dict[str, int] = field(default_factory=dict)  # pages copied / encoded again

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# ---- where things live --------------------------------------------------------------------


def incremental_dir(store: Store) -> Path:
    return store.root / INCREMENTAL_DIR


def snapshot_dir(store: Store, asset: str) -> Path:
    return incremental_dir(store) / "snapshot" / asset


def load_state(store: Store, damaged_as_absent: bool = False) -> dict[str, Any] | None:
    """The state of the last update; None when there is none (or, with damaged_as_absent, when it
    cannot be read: a full rebuild writes it again). A damaged one is refused, naming the file."""
    path = incremental_dir(store) / STATE_NAME
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_bytes())
        if not isinstance(state, dict):
            raise ValueError(f"a JSON {type(state).__name__}, not an object")
    except (ValueError, UnicodeDecodeError) as err:
        if damaged_as_absent:
            return None
        raise WebdedupError(
            f"damaged storage: {path}: not valid JSON ({err}); it is derived from the other files: "
            "`webdedup add --full-rebuild` rebuilds it"
        ) from None
    return state if state.get("format") == STATE_FORMAT else None


def same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
