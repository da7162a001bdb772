import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webdedup_assets.core import reference
from webdedup_assets.core.components import component_labels
from webdedup_assets.core.hashing import band_hash, to_int64
from webdedup_assets.core.minhash import (
    MinHashParams,
    band_keys,
    candidate_probability,
    estimate_jaccard,
    validate_banding,
)
from webdedup_assets.core.ranking import policy_order_by


def test_bands_times_rows_must_equal_num_perm():
    with pytest.raises(ValueError, match=r"bands=16 x rows=8 = 128.*num_perm=64"):
        validate_banding(64, 16, 8)
    validate_banding(64, 8, 8)


def test_candidate_probability_formula_and_defaults():
    assert candidate_probability(0.7, 8, 8) == pytest.approx(0.378, abs=1e-3)
    assert candidate_probability(0.8, 20, 6) >= 0.95  # the default banding at the default threshold
    assert candidate_probability(0.0, 20, 6) == 0.0
    assert candidate_probability(1.0, 20, 6) == 1.0


def test_band_keys_match_the_reference_and_include_the_band_index():
    rng = np.random.default_rng(0)
    signatures = rng.integers(0, 2**32, size=(3, 12), dtype=np.uint32)
    keys = band_keys(signatures, 4, 3)
    for i in range(3):
        for band in range(4):
            values = [int(v) for v in signatures[i, band * 3 : band * 3 + 3]]
            assert keys[i, band] == to_int64(band_hash(band, values))
    same = np.tile(np.arange(3, dtype=np.uint32), (1, 2))  # identical values in both bands
    k = band_keys(same, 2, 3)
    assert k[0, 0] != k[0, 1]


sets = st.sets(st.integers(0, 2**64 - 1), max_size=60)


@given(sets, sets)
def test_jaccard_is_symmetric_and_bounded(a, b):
    value = reference.jaccard(a, b)
    assert value == reference.jaccard(b, a)
    assert 0.0 <= value <= 1.0


@settings(max_examples=40, deadline=None)
@given(st.integers(20, 200), st.floats(0.0, 1.0), st.integers(0, 10_000))
def test_minhash_estimate_is_close_to_the_exact_jaccard(size, overlap, seed):
    rng = np.random.default_rng(seed)
    universe = [int(x) for x in rng.integers(0, 2**63, size=3 * size, dtype=np.uint64)]
    shared = int(size * overlap)
    a = set(universe[:size])
    b = set(universe[:shared]) | set(universe[size : 2 * size - shared])
    params = MinHashParams(256, seed)
    ca, cb = ([int(x) for x in c] for c in params.coefficients())
    sig_a = np.array(reference.minhash_signature(a, ca, cb))
    sig_b = np.array(reference.minhash_signature(b, ca, cb))
    estimate = estimate_jaccard(sig_a[None, :], sig_b[None, :])[0]
    # 256 values: standard error <= 0.032; 5 sigma keeps the test deterministic in practice
    assert abs(estimate - reference.jaccard(a, b)) <= 0.16


def test_union_find_labels_are_the_smallest_member_and_chains_cluster():
    labels = component_labels(6, np.array([4, 1, 2]), np.array([5, 2, 3]))
    assert labels.tolist() == [0, 1, 1, 1, 4, 4]
    n = 100_000
    chain = component_labels(n, np.arange(n - 1), np.arange(1, n))
    assert (chain == 0).all()
    with pytest.raises(ValueError, match="edge endpoints"):
        component_labels(2, np.array([0]), np.array([2]))


def test_representative_policies():
    assert policy_order_by("newest") == "crawled_at DESC, token_count DESC, doc_id ASC"
    with pytest.raises(ValueError, match="unknown representative policy 'biggest'"):
        policy_order_by("biggest")
