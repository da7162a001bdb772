"""Per-day stages over crawl-day partitions: each day's file is built from the same day's
upstream file, so adding a day never touches the others and re-running a day replaces
exactly that day's rows. Global stages read every partition file."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from .fingerprint import BAND_SCHEMA, fingerprint_schema, stage_band_memberships, stage_fingerprinted
from .storage import Store, write_schema


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
    totals: dict[str, Any] = {"rows": 0}
    for day in days:
        if day not in present:
            store.remove(asset, day)  # the day has no documents (any more): no rows
            continue
        info = run(day)
        built.append(day)
        for key, value in info.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "docs_per_second":
                totals[key] = totals.get(key, 0) + value
    write_schema(store, asset, schema(), params())
    totals["seconds"] = round(time.perf_counter() - started, 4)
    return {**params(), **totals, "days": len(days), "days_built": built}


def fingerprint_days(store: Store, days: list[str], shingle_size: int, num_perm: int, seed: int) -> dict[str, Any]:
    from ..core.hashing import FINGERPRINT_VERSION

    fingerprint = {"shingle_size": shingle_size, "num_perm": num_perm, "seed": seed, "version": FINGERPRINT_VERSION}
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
