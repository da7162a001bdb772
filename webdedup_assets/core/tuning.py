"""Pure helpers of `webdedup tune`: which bandings to try, band-level recall, the recommendation."""

from __future__ import annotations

from typing import Any

import numpy as np


def bandings(num_perm: int, min_rows: int = 3, max_rows: int = 16) -> list[tuple[int, int]]:
    """Every (bands, rows) with bands x rows = num_perm and min_rows <= rows <= max_rows."""
    return [(num_perm // r, r) for r in range(min_rows, max_rows + 1) if num_perm % r == 0]


def banded_hits(left_signatures: np.ndarray, right_signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """Per pair, whether all rows of some band agree: what equal band keys mean (keys hash the
    band's values, so key collisions aside this is exactly LSH candidacy)."""
    n, num_perm = left_signatures.shape
    if bands * rows != num_perm:
        raise ValueError(f"bands x rows must equal num_perm: {bands} x {rows} != {num_perm}")
    equal = left_signatures == right_signatures
    return equal.reshape(n, bands, rows).all(axis=2).any(axis=1)


def recommend(rows: list[dict[str, Any]], target_recall: float, min_probability: float = 0.0) -> dict[str, Any] | None:
    """The banding that reaches target_recall with the fewest candidates (ties: fewer MinHash
    values, then the higher recall, then the higher P(candidate | threshold)). Rows need recall,
    candidates (None when over the budget: never recommended), num_perm and
    p_candidate_at_threshold; with min_probability, only bandings whose S-curve reaches it at the
    threshold itself are eligible (a guarantee for pairs right at T, which the measured recall
    averages away). None when no row qualifies."""
    eligible = [r for r in rows if r["candidates"] is not None and r["recall"] is not None]
    eligible = [
        r for r in eligible if r["recall"] >= target_recall and r["p_candidate_at_threshold"] >= min_probability
    ]
    if not eligible:
        return None
    return min(eligible, key=lambda r: (r["candidates"], r["num_perm"], -r["recall"], -r["p_candidate_at_threshold"]))
