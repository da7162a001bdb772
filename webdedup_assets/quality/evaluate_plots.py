"""PNG plots of an evaluation (matplotlib, headless Agg backend): the S-curve of the banding
with the observed candidate rate per Jaccard bin, the histogram of candidate Jaccards, and the
threshold sweep (precision-recall with labels, recall against the exact reference without)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..core.minhash import candidate_probability
from ..storage.fileio import atomic_path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> str:
    with atomic_path(path) as temp:
        fig.savefig(temp, format="png", dpi=110, bbox_inches="tight")
    return str(path)


def s_curve(path: Path, info, reference_rows: list[dict[str, Any]]) -> str:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    grid = np.linspace(0, 1, 401)
    ax.plot(
        grid,
        [candidate_probability(j, info.bands, info.rows) for j in grid],
        color="tab:blue",
        label=f"P(candidate) = 1-(1-J^{info.rows})^{info.bands}  ({info.bands} bands x {info.rows} rows)",
    )
    at = candidate_probability(info.threshold, info.bands, info.rows)
    ax.axvline(info.threshold, color="tab:red", linestyle="--", label=f"threshold {info.threshold} (P = {at:.4f})")
    shown = [r for r in reference_rows if r["exact_pairs"]]
    if shown:
        centers = [
            (r["jaccard_from"] + r["jaccard_to"]) / 2 if r["jaccard_to"] > r["jaccard_from"] else 1.0 for r in shown
        ]
        ax.scatter(
            centers,
            [r["observed_candidate_rate"] for r in shown],
            color="black",
            zorder=3,
            label="observed candidate rate per Jaccard bin (exact reference)",
        )
        for x, r in zip(centers, shown):
            ax.annotate(
                str(r["exact_pairs"]),
                (x, r["observed_candidate_rate"]),
                textcoords="offset points",
                xytext=(0, -12),
                ha="center",
                fontsize=7,
                color="dimgray",
            )
    ax.set_xlabel("exact shingle Jaccard of a pair")
    ax.set_ylabel("probability of becoming an LSH candidate")
    ax.set_title("LSH S-curve of the run's banding (numbers: exact pairs per bin)")
    ax.set_xlim(0, 1.02)
    ax.set_ylim(-0.02, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    out = _save(fig, path)
    plt.close(fig)
    return out


def jaccard_histogram(path: Path, info, jaccard: np.ndarray) -> str:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.hist(jaccard, bins=np.linspace(0, 1, 41), color="tab:gray", edgecolor="white")
    ax.axvline(info.threshold, color="tab:red", linestyle="--", label=f"threshold {info.threshold}")
    above = int((jaccard >= info.threshold).sum())
    ax.set_xlabel("exact shingle Jaccard of a candidate pair")
    ax.set_ylabel("candidate pairs")
    ax.set_title(f"Candidate Jaccards: {len(jaccard):,} candidates, {above:,} at or above the threshold")
    ax.set_xlim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    out = _save(fig, path)
    plt.close(fig)
    return out


def precision_recall(path: Path, info, sweep: list[dict[str, Any]]) -> str:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 5))
    rows = [r for r in sweep if r.get("precision") is not None and r.get("recall") is not None]
    ax.plot([r["recall"] for r in rows], [r["precision"] for r in rows], marker="o", color="tab:blue")
    for r in rows:
        style = {"color": "tab:red", "fontweight": "bold"} if r["threshold"] == info.threshold else {}
        ax.annotate(
            f"{r['threshold']:g}",
            (r["recall"], r["precision"]),
            textcoords="offset points",
            xytext=(4, 4),
            fontsize=7,
            **style,
        )
    ax.set_xlabel("recall (labelled duplicate pairs found in one cluster)")
    ax.set_ylabel("precision (pairs put in one cluster that are labelled duplicates)")
    ax.set_title(f"Precision-recall over thresholds (run: {info.threshold}, in red)")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    out = _save(fig, path)
    plt.close(fig)
    return out


def recall_by_threshold(path: Path, info, sweep: list[dict[str, Any]]) -> str:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    rows = [r for r in sweep if r.get("recall") is not None]
    x = [r["threshold"] for r in rows]
    ax.plot(x, [r["recall"] for r in rows], marker="o", color="tab:blue", label="measured LSH recall")
    ax.plot(
        x, [r["expected_recall"] for r in rows], linestyle=":", color="tab:green", label="expected from the S-curve"
    )
    ax.axvline(info.threshold, color="tab:red", linestyle="--", label=f"run threshold {info.threshold}")
    ax.set_xlabel("Jaccard threshold t")
    ax.set_ylabel("share of exact pairs with J >= t found as candidates")
    ax.set_title(f"LSH recall against the exact reference ({info.bands} bands x {info.rows} rows)")
    ax.set_ylim(min([0.0] + [r["recall"] for r in rows]) - 0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    out = _save(fig, path)
    plt.close(fig)
    return out


def draw_all(out_dir: Path, info, jaccard: np.ndarray, reference_rows, sweep, labelled: bool) -> dict[str, str]:
    files = {
        "s_curve_png": s_curve(out_dir / "s_curve.png", info, reference_rows),
        "candidate_jaccard_png": jaccard_histogram(out_dir / "candidate_jaccard.png", info, jaccard),
    }
    if labelled and sweep:
        files["precision_recall_png"] = precision_recall(out_dir / "precision_recall.png", info, sweep)
    elif sweep:
        files["recall_by_threshold_png"] = recall_by_threshold(out_dir / "recall_by_threshold.png", info, sweep)
    return files
