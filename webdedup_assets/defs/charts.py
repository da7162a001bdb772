"""Small charts and tables of stored assets for the Dagster UI: the candidates' Jaccard
histogram, the banding's S-curve with the threshold marked, the cluster-size distribution, and
each asset's column schema. PNG bytes (matplotlib, headless Agg backend); defs embeds them as
Markdown images. Each reads one narrow column of storage."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from ..core.minhash import candidate_probability
from ..storage.store import Store, connect

HISTOGRAM_BINS = 20


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    _pyplot().close(fig)
    return buffer.getvalue()


def jaccard_counts(store: Store, bins: int = HISTOGRAM_BINS) -> list[tuple[float, int]]:
    """(lower edge, candidates) of the exact Jaccard of every scored candidate, in `bins` equal bins."""
    con = connect(store)
    try:
        rows = con.execute(
            f"SELECT least(floor(exact_jaccard * {bins}), {bins - 1})::INTEGER AS b, count(*) "
            f"FROM {store.scan_sql('scored_pairs')} GROUP BY b ORDER BY b"
        ).fetchall()
    finally:
        con.close()
    counts = dict(rows)
    return [(round(b / bins, 4), int(counts.get(b, 0))) for b in range(bins)]


def jaccard_histogram_png(counts: list[tuple[float, int]], threshold: float) -> bytes:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3))
    width = counts[1][0] - counts[0][0] if len(counts) > 1 else 1.0
    ax.bar([edge for edge, _ in counts], [n for _, n in counts], width=width, align="edge", color="#4C72B0")
    ax.axvline(threshold, color="#C44E52", linestyle="--", label=f"threshold {threshold:g}")
    ax.set_xlabel("exact Jaccard of the candidate pair")
    ax.set_ylabel("candidate pairs")
    ax.set_title("Candidates by exact Jaccard")
    ax.legend()
    return _png(fig)


def s_curve_png(bands: int, rows: int, threshold: float) -> bytes:
    plt = _pyplot()
    x = np.linspace(0, 1, 201)
    fig, ax = plt.subplots(figsize=(5.5, 3))
    ax.plot(x, [candidate_probability(float(j), bands, rows) for j in x], color="#4C72B0")
    at = candidate_probability(threshold, bands, rows)
    ax.axvline(threshold, color="#C44E52", linestyle="--", label=f"threshold {threshold:g}: P = {at:.4f}")
    ax.set_xlabel("Jaccard similarity of a pair")
    ax.set_ylabel("P(candidate)")
    ax.set_title(f"LSH S-curve: {bands} bands x {rows} rows")
    ax.legend(loc="lower right")
    return _png(fig)


def cluster_sizes(store: Store) -> list[tuple[int, int]]:
    """(cluster size, clusters of that size), smallest first."""
    con = connect(store)
    try:
        return [
            (int(size), int(n))
            for size, n in con.execute(
                f"SELECT cluster_size, count(DISTINCT cluster_id) FROM {store.scan_sql('clusters')} "
                "GROUP BY cluster_size ORDER BY cluster_size"
            ).fetchall()
        ]
    finally:
        con.close()


def cluster_sizes_png(sizes: list[tuple[int, int]]) -> bytes:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3))
    ax.bar([str(s) if s < 10 else str(s) for s, _ in sizes[:30]], [n for _, n in sizes[:30]], color="#55A868")
    ax.set_yscale("log")
    ax.set_xlabel("documents in the cluster")
    ax.set_ylabel("clusters (log)")
    ax.set_title("Cluster sizes" + (" (the 30 smallest sizes)" if len(sizes) > 30 else ""))
    return _png(fig)


def column_schema(store: Store, asset: str) -> list[tuple[str, str]]:
    """(column, Arrow type) of an asset's stored files (the first file's schema; every file of
    an asset has the same columns, extra input columns aside)."""
    files = store.files(asset)
    if not files:
        return []
    schema = pq.read_schema(files[0])
    return [(field.name, str(field.type)) for field in schema]


def numeric(figures: dict[str, Any]) -> dict[str, int | float]:
    """The figures that are numbers (booleans and nested values left out)."""
    return {k: v for k, v in figures.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
