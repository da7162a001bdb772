"""core.sets.sort_unique: the sorted unique set of each segment, whatever its values."""

import numpy as np
import pytest

from webdedup_assets.core.sets import sort_unique


def sorted_set(values: np.ndarray) -> np.ndarray:
    work = values.copy()
    scratch = np.empty(len(values) + 1, dtype=np.uint64)
    counts = np.empty(2 * len(values) + 2, dtype=np.int64)
    count = sort_unique(work, 0, len(work), scratch, counts)
    return work[:count]


@pytest.mark.parametrize("size", [0, 1, 2, 3, 17, 400, 5000])
def test_uniform_hashes_with_repeats(size):
    rng = np.random.default_rng(size)
    values = rng.integers(0, 2**64, size=size, dtype=np.uint64)
    values = np.concatenate([values, values[: size // 3]])  # repeated shingles
    rng.shuffle(values)
    assert np.array_equal(sorted_set(values), np.unique(values))


def test_values_crowded_into_one_bucket_take_the_comparison_sort():
    # all share their top bits: one bucket would hold everything (quadratic insertion sort)
    values = np.arange(10_000, 0, -1, dtype=np.uint64)
    assert np.array_equal(sorted_set(values), np.arange(1, 10_001, dtype=np.uint64))


def test_extreme_values_and_all_equal():
    top = np.uint64(2**64 - 1)
    values = np.array([top, 0, top, 5, 0], dtype=np.uint64)
    assert sorted_set(values).tolist() == [0, 5, 2**64 - 1]
    assert sorted_set(np.full(300, 7, dtype=np.uint64)).tolist() == [7]


def test_only_the_segment_is_touched():
    values = np.array([9, 3, 3, 1, 8], dtype=np.uint64)
    scratch = np.empty(8, dtype=np.uint64)
    counts = np.empty(16, dtype=np.int64)
    assert sort_unique(values, 1, 4, scratch, counts) == 2
    assert values.tolist() == [9, 1, 3, 1, 8]
