"""The figures of an evaluation summary (quality.evaluate.evaluate_run) in the shapes a UI shows:
numbers (one per figure, so they can be plotted across materializations), Markdown tables and
file paths. Pure: no Dagster here (defs/evaluation.py wraps them in MetadataValues)."""

from __future__ import annotations

from typing import Any

from ..engine.preview import markdown_table


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def evaluation_numbers(summary: dict[str, Any]) -> dict[str, float]:
    """labels/precision ..., reference/lsh_recall_at_threshold ..., clusters/low_cohesion ..."""
    out: dict[str, float] = {}
    current = (summary.get("labels") or {}).get("current_run") or {}
    for key in ("precision", "recall", "f1", "ari", "edge_precision", "edge_recall", "edge_f1"):
        if _num(current.get(key)) is not None:
            out[f"labels/{key}"] = _num(current[key])
    labels = summary.get("labels") or {}
    for key in ("best_f1", "best_f1_threshold", "labelled_pairs"):
        if _num(labels.get(key)) is not None:
            out[f"labels/{key}"] = _num(labels[key])
    reference = summary.get("reference") or {}
    for key in (
        "exact_pairs_at_threshold",
        "found_by_lsh_at_threshold",
        "lsh_recall_at_threshold",
        "lsh_miss_rate_at_threshold",
        "documents",
    ):
        if _num(reference.get(key)) is not None:
            out[f"reference/{key}"] = _num(reference[key])
    for key in ("multi_document_clusters", "giant", "low_cohesion", "min_jaccard_to_representative"):
        value = _num((summary.get("clusters") or {}).get(key))
        if value is not None:
            out[f"clusters/{key}"] = value
    for key in ("threshold", "candidate_pairs", "duplicate_pairs", "candidate_probability_at_threshold"):
        value = _num((summary.get("run") or {}).get(key))
        if value is not None:
            out[f"run/{key}"] = value
    return out


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    return markdown_table(columns, [tuple(r.get(c) for c in columns) for r in rows])


def evaluation_tables(summary: dict[str, Any]) -> dict[str, str]:
    """Markdown: the threshold sweep (P/R/F1 per threshold, with labels), the miss rate per
    Jaccard bin (with the exact reference), and what was measured (always)."""
    tables: dict[str, str] = {}
    sweep = summary.get("threshold_sweep") or []
    if sweep:
        columns = [c for c in ("threshold", "duplicate_pairs", "precision", "recall", "f1", "ari") if c in sweep[0]]
        tables["threshold_sweep"] = _table(sweep, columns)
    bins = summary.get("jaccard_bins") or []
    if bins:
        columns = [
            c
            for c in (
                "jaccard_from",
                "jaccard_to",
                "exact_pairs",
                "lsh_candidates",
                "miss_rate",
                "expected_candidate_rate",
            )
            if c in bins[0]
        ]
        tables["miss_rate_by_jaccard_bin"] = _table(bins, columns)
    run = summary.get("run") or {}
    tables["run"] = markdown_table(["parameter", "value"], list(run.items()))
    return tables


def evaluation_files(summary: dict[str, Any]) -> dict[str, str]:
    """Every file the evaluation wrote (CSV tables, PNG plots, summary.json), by name."""
    return {name: str(path) for name, path in (summary.get("files") or {}).items()}
