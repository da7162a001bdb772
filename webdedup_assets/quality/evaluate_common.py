"""What every part of an evaluation shares: the stored run's parameters (RunInfo) and the
writing of its CSV tables."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

from ..errors import WebdedupError
from ..params import BandingParams, FingerprintParams
from ..storage.fileio import atomic_path
from ..storage.serial import stored_value
from ..storage.store import Store


@dataclass
class RunInfo:
    threshold: float
    bands: int
    rows: int
    num_perm: int
    shingle_size: int
    shingle_unit: str = "word"
    fingerprint_method: str = "minhash"
    max_hamming: int = 3
    key_blocks: int = 1

    @property
    def simhash(self) -> bool:
        return self.fingerprint_method == "simhash"


def run_info(store: Store) -> RunInfo:
    scored = store.params("scored_pairs")
    duplicates = store.params("duplicate_pairs").get("duplicates") or scored.get("scoring") or {}
    banding = store.params("candidate_pairs").get("banding") or {}
    fingerprint = store.params("fingerprinted")["fingerprint"]
    if not banding:
        raise WebdedupError("candidate_pairs stores no banding parameters; re-run the pipeline")
    return RunInfo(
        threshold=float(duplicates["threshold"]),
        bands=int(banding["bands"]),
        rows=int(banding["rows"]),
        num_perm=int(fingerprint["num_perm"]),
        shingle_size=int(fingerprint["shingle_size"]),
        shingle_unit=str(fingerprint.get("shingle_unit", "word")),
        fingerprint_method=str(stored_value(FingerprintParams, fingerprint, "fingerprint_method")),
        max_hamming=int(stored_value(BandingParams, banding, "max_hamming")),
        key_blocks=int(stored_value(BandingParams, banding, "key_blocks")),
    )


def write_csv(path: Path, table: pa.Table) -> None:
    with atomic_path(path) as temp:
        pacsv.write_csv(table, temp)


def rows_table(rows: list[dict[str, Any]], columns: list[str]) -> pa.Table:
    return pa.table({c: [r.get(c) for r in rows] for c in columns})


def rounded(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(float(value), digits)
