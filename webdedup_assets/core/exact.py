"""Exact references for evaluating the LSH: an all-pairs similarity join and quality metrics.

Pure functions over numpy arrays (no files, no Dagster):

- `similarity_join`: every pair of sets with Jaccard >= t, by prefix filtering (the
  All-Pairs / PPJoin principle). Elements are first renumbered by ascending document frequency
  so the prefixes hold the rarest shingles; the size filter and a marker per probing set keep
  verification to the few sets that share a prefix element. Exact: it returns the same pairs
  as comparing every pair (see tests/test_evaluate.py), no sampling, no MinHash.
- `pair_metrics`, `cluster_pair_counts`, `adjusted_rand_index`: pairwise precision / recall /
  F1 and the adjusted Rand index (Hubert and Arabie) of two partitions.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

# t * n computed in floating point can land a hair above an integer (0.7 * 10 could be
# 7.000000000000001); the minimum overlap is rounded up from t * n - EPS so that a prefix is
# never one element too short.
_EPS = 1e-9


def rank_by_frequency(flat: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Renumber the elements of sets (flat values, int64 offsets) by ascending document frequency
    (ties by value): returns (ranks int64 in the layout of flat, each set sorted ascending, and
    the frequency of each rank). Sets must hold unique values (as core.fingerprint.shingle_sets
    gives)."""
    flat = np.asarray(flat)
    offsets = np.asarray(offsets, dtype=np.int64)
    if not len(flat):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    values, inverse, counts = np.unique(flat, return_inverse=True, return_counts=True)
    order = np.lexsort((values, counts))  # rarest first, then by value: deterministic
    rank_of = np.empty(len(values), dtype=np.int64)
    rank_of[order] = np.arange(len(values), dtype=np.int64)
    ranks = rank_of[inverse.reshape(-1)]
    _sort_segments(ranks, offsets)
    return ranks, counts[order]


@njit(cache=True)
def _sort_segments(values, offsets):
    for i in range(offsets.shape[0] - 1):
        values[offsets[i] : offsets[i + 1]] = np.sort(values[offsets[i] : offsets[i + 1]])


@njit(cache=True)
def _min_overlap(size, threshold):
    return np.int64(math.ceil(threshold * size - _EPS))


@njit(cache=True)
def _overlap(ranks, a0, a1, b0, b1, need):
    """Size of the intersection of two sorted runs, or -1 as soon as it can no longer reach need."""
    common = 0
    while a0 < a1 and b0 < b1:
        if common + min(a1 - a0, b1 - b0) < need:
            return -1
        x = ranks[a0]
        y = ranks[b0]
        if x == y:
            common += 1
            a0 += 1
            b0 += 1
        elif x < y:
            a0 += 1
        else:
            b0 += 1
    return common


@njit(cache=True)
def _grow(values, cap):
    bigger = np.empty(cap, dtype=values.dtype)
    bigger[: values.shape[0]] = values
    return bigger


@njit(cache=True)
def _prefixes(ranks, offsets, first_shared, n_slots, threshold):
    """Each set's prefix length, and how many prefixes hold each shared element (ranks from
    first_shared on: those below belong to one set only and can never pair two sets, so they get
    no index slot; on web text most shingles are such singletons)."""
    n_sets = offsets.shape[0] - 1
    sizes = offsets[1:] - offsets[:-1]
    prefix_len = np.zeros(n_sets, dtype=np.int64)
    holders = np.zeros(n_slots, dtype=np.int64)
    for s in range(n_sets):
        if sizes[s] > 0:
            prefix_len[s] = sizes[s] - _min_overlap(sizes[s], threshold) + 1
            for k in range(offsets[s], offsets[s] + prefix_len[s]):
                if ranks[k] >= first_shared:
                    holders[ranks[k] - first_shared] += 1
    return prefix_len, holders


@njit(cache=True)
def _join(ranks, offsets, first_shared, prefix_len, holders, threshold):
    n_sets = offsets.shape[0] - 1
    n_slots = holders.shape[0]
    sizes = offsets[1:] - offsets[:-1]
    order = np.argsort(sizes, kind="mergesort")  # ascending size: indexed sets are never larger
    # inverted index over the prefixes of the sets seen so far: element -> set ids (CSR, filled
    # in processing order)
    head = np.zeros(n_slots + 1, dtype=np.int64)
    head[1:] = np.cumsum(holders)
    fill = head[:-1].copy()
    postings = np.empty(head[n_slots], dtype=np.int64)
    seen = np.full(n_sets, -1, dtype=np.int64)
    cap = 1024
    out_a = np.empty(cap, dtype=np.int64)
    out_b = np.empty(cap, dtype=np.int64)
    out_j = np.empty(cap, dtype=np.float64)
    count = 0
    compared = 0
    for position in range(n_sets):
        x = order[position]
        nx = sizes[x]
        if nx == 0:
            continue
        min_size = _min_overlap(nx, threshold)  # |y| >= t |x| for J >= t when |y| <= |x|
        for k in range(offsets[x], offsets[x] + prefix_len[x]):
            element = ranks[k] - first_shared
            if element < 0:
                continue
            for p in range(head[element], fill[element]):
                y = postings[p]
                if seen[y] == x or sizes[y] < min_size:
                    continue
                seen[y] = x
                compared += 1
                # J >= t  <=>  common >= t (|x| + |y|) / (1 + t); rounded down by EPS so never too strict
                need = np.int64(math.ceil(threshold * (nx + sizes[y]) / (1.0 + threshold) - _EPS))
                common = _overlap(ranks, offsets[x], offsets[x + 1], offsets[y], offsets[y + 1], need)
                if common < 0:
                    continue
                jaccard = common / (nx + sizes[y] - common)
                if jaccard >= threshold:
                    if count == cap:
                        cap *= 2
                        out_a = _grow(out_a, cap)
                        out_b = _grow(out_b, cap)
                        out_j = _grow(out_j, cap)
                    out_a[count] = min(x, y)
                    out_b[count] = max(x, y)
                    out_j[count] = jaccard
                    count += 1
        for k in range(offsets[x], offsets[x] + prefix_len[x]):
            element = ranks[k] - first_shared
            if element < 0:
                continue
            postings[fill[element]] = x
            fill[element] += 1
    return out_a[:count].copy(), out_b[:count].copy(), out_j[:count].copy(), compared


class PairBudgetExceeded(ValueError):
    """The join would verify more pair slots than its budget allows (nothing was joined)."""

    def __init__(self, slots: int, budget: int, most_shared: int) -> None:
        super().__init__(f"{slots:,} pair slots, over the budget of {budget:,}")
        self.slots, self.budget, self.most_shared = slots, budget, most_shared


def similarity_join(
    flat: np.ndarray, offsets: np.ndarray, threshold: float, max_pair_slots: int | None = None
) -> tuple[np.ndarray, ...]:
    """All pairs (a, b), a < b (set indexes), of non-empty sets with Jaccard >= threshold.

    flat holds each set's unique values (any order) at flat[offsets[i]:offsets[i + 1]].
    Returns (left, right, jaccard, compared) sorted by (left, right); compared is how many
    pairs were verified (the work prefix filtering left). The Jaccard is computed as
    scoring does (common / (|a| + |b| - common)), so the same pairs pass the same threshold.
    max_pair_slots: the pairs of sets sharing a prefix element, counted before the join (they
    bound both the pairs verified and the pairs returned, like candidate_pairs' slots); over it,
    PairBudgetExceeded is raised instead of joining (n identical sets make n^2 / 2 pairs).
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    ranks, frequency = rank_by_frequency(flat, offsets)
    first_shared = int(np.searchsorted(frequency, 2))  # ranks are ordered by frequency: singletons first
    prefix_len, holders = _prefixes(ranks, offsets, first_shared, len(frequency) - first_shared, float(threshold))
    if max_pair_slots is not None:
        slots = int((holders * (holders - 1) // 2).sum())
        if slots > max_pair_slots:
            raise PairBudgetExceeded(slots, max_pair_slots, int(holders.max(initial=0)))
    left, right, jaccard, compared = _join(ranks, offsets, first_shared, prefix_len, holders, float(threshold))
    order = np.lexsort((right, left))
    return left[order], right[order], jaccard[order], int(compared)


def brute_force_join(sets: list[set], threshold: float) -> list[tuple[int, int, float]]:
    """The definition similarity_join must match: every pair of non-empty sets compared."""
    out = []
    for a in range(len(sets)):
        for b in range(a + 1, len(sets)):
            if sets[a] and sets[b]:
                common = len(sets[a] & sets[b])
                jaccard = common / (len(sets[a]) + len(sets[b]) - common)
                if jaccard >= threshold:
                    out.append((a, b, jaccard))
    return out


def pair_metrics(true_positive: int, predicted: int, actual: int) -> dict[str, float | int | None]:
    """Precision, recall and F1 from counts (None where a denominator is zero)."""
    precision = true_positive / predicted if predicted else None
    recall = true_positive / actual if actual else None
    f1 = 2 * precision * recall / (precision + recall) if precision and recall else (0.0 if predicted else None)
    return {
        "true_positives": int(true_positive),
        "false_positives": int(predicted - true_positive),
        "false_negatives": int(actual - true_positive),
        "precision": precision,
        "recall": recall,
        "f1": f1,
    }


def _pairs(counts: np.ndarray) -> int:
    counts = counts.astype(np.int64)
    return int((counts * (counts - 1) // 2).sum())


def cluster_pair_counts(predicted: np.ndarray, actual: np.ndarray) -> tuple[int, int, int, int]:
    """(pairs together in both, together in predicted, together in actual, all pairs) for two
    labelings of the same items (any hashable labels as arrays), from the contingency table."""
    predicted = np.asarray(predicted)
    actual = np.asarray(actual)
    if predicted.shape != actual.shape:
        raise ValueError("both labelings must cover the same items")
    n = len(predicted)
    _, p = np.unique(predicted, return_inverse=True)
    _, a = np.unique(actual, return_inverse=True)
    p = p.reshape(-1).astype(np.int64)
    a = a.reshape(-1).astype(np.int64)
    cells = np.unique(p * (int(a.max()) + 1 if n else 1) + a, return_counts=True)[1] if n else np.zeros(0)
    return (
        _pairs(cells),
        _pairs(np.bincount(p)) if n else 0,
        _pairs(np.bincount(a)) if n else 0,
        n * (n - 1) // 2,
    )


def adjusted_rand_index(predicted: np.ndarray, actual: np.ndarray) -> float:
    """Adjusted Rand index of two partitions of the same items: 1.0 identical, ~0 chance level.
    Two partitions that are both all-singletons (or both one cluster) count as identical (1.0)."""
    both, pred, act, total = cluster_pair_counts(predicted, actual)
    if total == 0:
        return 1.0
    expected = pred * act / total
    maximum = (pred + act) / 2
    if maximum == expected:
        return 1.0
    return (both - expected) / (maximum - expected)
