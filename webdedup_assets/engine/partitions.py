"""Per-day stages over crawl-day partitions: each day's file is built from the same day's
upstream file, so adding a day never touches the others and re-running a day replaces
exactly that day's rows. Global stages read every partition file."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from .fingerprint import (
    BAND_SCHEMA,
    fingerprint_params,
    fingerprint_schema,
    stage_band_memberships,
    stage_fingerprinted,
)
from .state import record_stage
from .storage import Store, sum_figures, write_schema


def _each_day(
    store: Store,
    upstream: str,
    asset: str,
    days: list[str],
    run: Callable[[str], dict[str, Any]],
    schema: Callable[[], pa.Schema],
    params: Callable[[], dict[str, Any]],
) -> dict[str, Any]:
    started = time.perf_counter()
    present = set(store.partitions(upstream))
    built: list[str] = []
    infos: list[dict[str, Any]] = []
    for day in days:
        if day not in present:
            store.remove(asset, day)  # the day has no documents (any more): no rows
            continue
        infos.append(run(day))
        built.append(day)
    totals: dict[str, Any] = {"rows": 0, **sum_figures(infos)}
    write_schema(store, asset, schema(), params())
    record_stage(store, asset, {day: info["rows"] for day, info in zip(built, infos)}, params())
    totals["seconds"] = round(time.perf_counter() - started, 4)
    return {**params(), **totals, "days": len(days), "days_built": built}


def fingerprint_days(store: Store, days: list[str], shingle_size: int, num_perm: int, seed: int) -> dict[str, Any]:
    fingerprint = fingerprint_params(shingle_size, num_perm, seed)
    return _each_day(
        store,
        "documents",
        "fingerprinted",
        days,
        lambda day: stage_fingerprinted(store, shingle_size, num_perm, seed, partition=day),
        lambda: fingerprint_schema(num_perm),
        lambda: {"stage": "fingerprinted", "fingerprint": fingerprint},
    )


def band_days(store: Store, days: list[str], bands: int, rows: int) -> dict[str, Any]:
    return _each_day(
        store,
        "fingerprinted",
        "band_memberships",
        days,
        lambda day: stage_band_memberships(store, bands, rows, partition=day),
        lambda: BAND_SCHEMA,
        lambda: {
            "stage": "band_memberships",
            "fingerprint": store.params("fingerprinted")["fingerprint"],
            "banding": {"bands": bands, "rows": rows},
        },
    )
