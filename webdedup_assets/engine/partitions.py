"""Per-day stages over crawl-day partitions: each day's file is built from the same day's
upstream file, so adding a day never touches the others and re-running a day replaces
exactly that day's rows. All the days of a run are computed in one streamed pass (many small
days share kernel batches), so the cost follows documents, not days. Global stages read
every partition file."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from .fingerprint import BAND_SCHEMA, band_partitions, fingerprint_params, fingerprint_partitions, fingerprint_schema
from .state import record_stage
from .storage import Store, write_schema


def _each_day(
    store: Store,
    upstream: str,
    asset: str,
    days: list[str],
    run: Callable[[list[str]], dict[str, Any]],
    schema: Callable[[], pa.Schema],
    params: Callable[[], dict[str, Any]],
) -> dict[str, Any]:
    started = time.perf_counter()
    present = set(store.partitions(upstream))
    built = [day for day in days if day in present]
    for day in days:
        if day not in present:
            store.remove(asset, day)  # the day has no documents (any more): no rows
    info = run(built) if built else {"rows": 0, "partition_rows": {}}
    day_rows = info.pop("partition_rows")
    write_schema(store, asset, schema(), params())
    record_stage(store, asset, day_rows, params())
    figures = {k: v for k, v in info.items() if k not in ("stage", "fingerprint", "banding", "seconds")}
    return {
        **params(),
        **figures,
        "seconds": round(time.perf_counter() - started, 4),
        "days": len(days),
        "days_built": built,
        "day_rows": day_rows,
    }


def fingerprint_days(store: Store, days: list[str], shingle_size: int, num_perm: int, seed: int) -> dict[str, Any]:
    fingerprint = fingerprint_params(shingle_size, num_perm, seed)
    return _each_day(
        store,
        "documents",
        "fingerprinted",
        days,
        lambda built: fingerprint_partitions(store, built, shingle_size, num_perm, seed),
        lambda: fingerprint_schema(num_perm),
        lambda: {"stage": "fingerprinted", "fingerprint": fingerprint},
    )


def band_days(store: Store, days: list[str], bands: int, rows: int) -> dict[str, Any]:
    return _each_day(
        store,
        "fingerprinted",
        "band_memberships",
        days,
        lambda built: band_partitions(store, built, bands, rows),
        lambda: BAND_SCHEMA,
        lambda: {
            "stage": "band_memberships",
            "fingerprint": store.params("fingerprinted")["fingerprint"],
            "banding": {"bands": bands, "rows": rows},
        },
    )
