"""Sorted unique sets of 64-bit hashes, for the exact Jaccard of candidate pairs.

Shingle hashes are uniformly distributed (fmix64 outputs), so a bucket sort on their top
bits puts almost every value in its final place in one counting pass: what is left is a
short insertion sort over a nearly sorted array. That is O(n) where a comparison sort is
O(n log n), and the sort was the largest part of the scoring stage.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# A bucket this full means the values are not spread as hashes are (or n is tiny): the
# insertion sort could go quadratic, so that segment is sorted by comparison instead.
_CROWDED_BUCKET = 48


@njit(nogil=True, cache=True)
def sort_unique(values, start, stop, scratch, counts):
    """Sort values[start:stop] ascending in place and drop repeats; returns the unique count
    (the set is values[start:start + count]). scratch: uint64 with at least stop - start slots;
    counts: int64 with at least 2 * (stop - start) + 2 slots."""
    n = stop - start
    if n <= 1:
        return n
    bits = 1
    while (1 << bits) < n and bits < 62:
        bits += 1
    buckets = 1 << bits
    shift = np.uint64(64 - bits)
    for b in range(buckets + 1):
        counts[b] = 0
    crowded = False
    for i in range(start, stop):
        b = np.int64(values[i] >> shift) + 1
        counts[b] += 1
        if counts[b] > _CROWDED_BUCKET:
            crowded = True
    if crowded:
        ordered = np.sort(values[start:stop])
        for i in range(n):
            scratch[i] = ordered[i]
    else:
        for b in range(buckets):
            counts[b + 1] += counts[b]
        for i in range(start, stop):
            b = np.int64(values[i] >> shift)
            scratch[counts[b]] = values[i]
            counts[b] += 1
        # every value is in its bucket, buckets in order: only neighbours within a bucket swap
        for i in range(1, n):
            value = scratch[i]
            j = i - 1
            while j >= 0 and scratch[j] > value:
                scratch[j + 1] = scratch[j]
                j -= 1
            scratch[j + 1] = value
    unique = 0
    for i in range(n):
        if i == 0 or scratch[i] != scratch[i - 1]:
            values[start + unique] = scratch[i]
            unique += 1
    return unique


@njit(nogil=True, cache=True)
def jaccard_blocks(flat_a, starts_a, ends_a, flat_b, starts_b, ends_b, left, right, out):
    """out[i] = exact Jaccard of sorted unique sets flat_a[starts_a[left[i]]:ends_a[left[i]]] and
    flat_b[starts_b[right[i]]:ends_b[right[i]]]; 0.0 when both are empty."""
    for i in range(left.shape[0]):
        a0, a1 = starts_a[left[i]], ends_a[left[i]]
        b0, b1 = starts_b[right[i]], ends_b[right[i]]
        union = (a1 - a0) + (b1 - b0)
        if union == 0:
            out[i] = 0.0
            continue
        common = 0
        while a0 < a1 and b0 < b1:
            x = flat_a[a0]
            y = flat_b[b0]
            if x == y:
                common += 1
                a0 += 1
                b0 += 1
            elif x < y:
                a0 += 1
            else:
                b0 += 1
        out[i] = common / (union - common)
