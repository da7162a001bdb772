"""Scoring in bounded groups gives the same exact Jaccard as the reference, for any budget."""

from __future__ import annotations

import datetime as dt
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from webdedup_assets.core import reference
from webdedup_assets.engine import (
    Store,
    stage_band_memberships,
    stage_candidate_pairs,
    stage_documents,
    stage_fingerprinted,
    stage_scored_pairs,
)
from webdedup_assets.params import BandingParams, CandidateParams, FingerprintParams, ScoringParams

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda straße café 日本 語 über naïve".split()


def corpus(n_base: int = 60) -> list[str]:
    rng = random.Random(5)
    bodies = []
    for _ in range(n_base):
        words = [rng.choice(WORDS) + str(rng.randrange(40)) for _ in range(rng.randrange(20, 80))]
        bodies.append(" ".join(words))
        for _ in range(rng.randrange(0, 4)):
            copy = list(words)
            for _ in range(rng.randrange(0, 3)):
                copy[rng.randrange(len(copy))] = rng.choice(WORDS).upper()
            bodies.append(" ".join(copy))
    bodies += ["", "   ", "alpha"]
    return bodies


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("scoring"), corpus())


@pytest.fixture(scope="module")
def far_store(tmp_path_factory):
    """The corpus with copies of its first pages at the end: pairs across far groups."""
    bodies = corpus()
    return make_store(tmp_path_factory.mktemp("scoring_far"), bodies + bodies[:12])


def make_store(root, bodies: list[str]) -> Store:
    n = len(bodies)
    pq.write_table(
        pa.table(
            {
                "doc_id": [f"d{i:04d}" for i in range(n)],
                "source": ["s"] * n,
                "domain": [f"x{i % 7}.org" for i in range(n)],
                "crawled_at": pa.array([dt.date(2026, 3, 2)] * n, pa.date32()),
                "title": ["t"] * n,
                "body": bodies,
            }
        ),
        root / "in.parquet",
    )
    store = Store(root / "store")
    stage_documents(store, str(root / "in.parquet"))
    stage_fingerprinted(store, FingerprintParams(shingle_size=3, num_perm=32, seed=1))
    stage_band_memberships(store, BandingParams(bands=16, rows=2))
    stage_candidate_pairs(store, CandidateParams(max_pair_slots=10_000_000))
    return store


def scored(store: Store, **kwargs) -> pa.Table:
    stage_scored_pairs(store, ScoringParams(threshold=0.7), **kwargs)
    return pq.read_table(store.path("scored_pairs"))


def test_exact_jaccard_and_estimate_match_the_reference(store):
    table = scored(store)
    assert table.num_rows > 50
    docs = dict(zip(*pq.read_table(store.path("documents"), columns=["doc_id", "body"]).to_pydict().values()))
    fp = pq.read_table(store.path("fingerprinted")).to_pydict()
    sig = dict(zip(fp["doc_id"], fp["signature"]))
    rows = table.to_pylist()
    assert [(r["left_doc_id"], r["right_doc_id"]) for r in rows] == sorted(
        (r["left_doc_id"], r["right_doc_id"]) for r in rows
    )
    for row in rows:
        left, right = row["left_doc_id"], row["right_doc_id"]
        expected = reference.jaccard(reference.shingle_set(docs[left], 3), reference.shingle_set(docs[right], 3))
        assert row["exact_jaccard"] == expected
        estimate = sum(a == b for a, b in zip(sig[left], sig[right])) / 32
        assert row["minhash_estimate"] == pytest.approx(estimate)
        assert row["is_duplicate"] == (expected >= 0.7)


@pytest.mark.parametrize("budget,threads", [(2_000, 1), (20_000, 2), (1 << 30, 2)])
def test_any_memory_budget_and_thread_count_gives_the_same_table(store, budget, threads):
    baseline = scored(store, threads=1)
    other = scored(store, threads=threads, memory_budget_bytes=budget)
    assert other.equals(baseline)
    stats = store.stats("scored_pairs")[0]
    if budget == 2_000:
        assert stats["document_passes"] > 2  # many groups: still exact


def test_members_that_fit_the_budget_are_one_group_else_halves():
    from webdedup_assets.engine.stages.scoring import _member_groups

    counts = np.full(10, 100)  # 816 bytes each
    assert _member_groups(counts, 8_160).tolist() == [0, 10]
    assert _member_groups(counts, 8_159).tolist() == [0, 4, 8, 10]  # 4,079 bytes a group
    assert _member_groups(np.zeros(0, dtype=np.int64), 1).tolist() == [0, 0]


def test_pairs_across_groups_are_scored_in_one_sweep(far_store, monkeypatch):
    """When the members of the pairs across two groups fit beside one group, each group is loaded
    once (not once per pair of groups sharing a pair), and the table is the same."""
    from webdedup_assets.engine.stages import scoring

    baseline = scored(far_store, threads=1)
    loads = []
    real = scoring._load_sets
    monkeypatch.setattr(
        scoring,
        "_load_sets",
        lambda con, st, first, stop, *a: loads.append((first, stop)) or real(con, st, first, stop, *a),
    )
    assert scored(far_store, threads=2, memory_budget_bytes=60_000).equals(baseline)
    assert len(loads) > 2 and len(loads) == len(set(loads))
    assert far_store.stats("scored_pairs")[0]["document_passes"] == len(loads)
