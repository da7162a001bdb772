"""Hot buckets and long chains at scale: counts only (timings live in benchmarks/)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from webdedup_assets.core.components import component_labels
from webdedup_assets.engine import (
    Store,
    WebdedupError,
    stage_band_memberships,
    stage_candidate_pairs,
    stage_clusters,
    stage_documents,
    stage_duplicate_pairs,
    stage_fingerprinted,
    stage_scored_pairs,
)
from webdedup_assets.engine.stages.candidates import pair_slot_budget
from webdedup_assets.params import BandingParams, CandidateParams, FingerprintParams, ScoringParams
from webdedup_assets.storage.store import write_table

HOT = 50_000
BOILERPLATE = "Home | About | Contact | Privacy | Terms. Accept all cookies. Sign up for our newsletter. © 2026"


def write_input(path, bodies: list[str]) -> None:
    n = len(bodies)
    pq.write_table(
        pa.table(
            {
                "doc_id": [f"p{i:06d}" for i in range(n)],
                "source": [f"https://site{i}.example/" for i in range(n)],
                "domain": [f"site{i}.example" for i in range(n)],
                "crawled_at": pa.array([dt.date(2026, 3, 1)] * n, pa.date32()),
                "title": ["t"] * n,
                "body": bodies,
            }
        ),
        path,
    )


@pytest.fixture(scope="module")
def hot_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("hot")
    others = [f"unrelated page number {i} with its own words {i * 7} and more {i * 13}" for i in range(20)]
    write_input(root / "input.parquet", [BOILERPLATE] * HOT + others)
    store = Store(root / "store")
    stage_documents(store, str(root / "input.parquet"))
    stage_fingerprinted(store, FingerprintParams(shingle_size=5, num_perm=16, seed=1))
    stage_band_memberships(store, BandingParams(bands=4, rows=4))
    return store


def test_hot_bucket_fails_closed_before_the_join(hot_store):
    with pytest.raises(WebdedupError, match="max_pair_slots") as err:
        stage_candidate_pairs(hot_store, CandidateParams(max_pair_slots=1_000_000, bucket_policy="fail"))
    assert f"{HOT:,} documents" in str(err.value)
    assert "bucket_policy='star'" in str(err.value)
    assert not hot_store.files("candidate_pairs")


def test_star_policy_links_the_hot_bucket_linearly_into_one_cluster(hot_store):
    policy = CandidateParams(max_pair_slots=1_000_000, bucket_policy="star", hot_bucket_size=1000)
    info = stage_candidate_pairs(hot_store, policy)
    assert info.rows == HOT - 1  # one star edge per member, not HOT * (HOT - 1) / 2
    assert info.figures["pair_slots"] <= 4 * (HOT - 1)
    assert info.parameters["candidates"] == {**policy.model_dump(), "budget": 1_000_000}  # stored as used
    scored = stage_scored_pairs(hot_store, ScoringParams(threshold=0.8))
    assert scored.figures["duplicates"] == HOT - 1
    stage_duplicate_pairs(hot_store, ScoringParams(threshold=0.8))
    clusters = stage_clusters(hot_store)
    assert clusters.figures["max_cluster_size"] == HOT
    assert clusters.figures["clusters"] == 1 + 20
    table = pq.read_table(hot_store.path("clusters")).to_pandas()
    hot = table[table.doc_id < f"p{HOT:06d}"]
    assert set(hot.cluster_id) == {"cluster-p000000"}


def test_chain_of_100k_documents_is_one_cluster_by_union_find():
    n = 100_000
    order = np.random.default_rng(3).permutation(n - 1)  # edges in any order
    labels = component_labels(n, np.arange(n - 1)[order], np.arange(1, n)[order])
    assert (labels == 0).all()


def test_chain_of_100k_documents_through_the_clusters_stage(tmp_path):
    n = 100_000
    write_input(tmp_path / "input.parquet", [f"doc {i}" for i in range(n)])
    store = Store(tmp_path / "store")
    stage_documents(store, str(tmp_path / "input.parquet"))
    ids = [f"p{i:06d}" for i in range(n)]
    pairs = pa.table({"left_doc_id": ids[:-1], "right_doc_id": ids[1:]})
    write_table(store.path("duplicate_pairs"), pairs, {"fingerprint": {}, "duplicates": {"threshold": 0.8}})
    info = stage_clusters(store)
    assert info.figures["edges"] == n - 1
    assert info.figures["clusters"] == 1 and info.figures["max_cluster_size"] == n


def test_the_default_budget_scales_with_the_corpus_and_still_refuses_the_hot_bucket(hot_store):
    documents = HOT + 20
    with pytest.raises(WebdedupError) as err:
        stage_candidate_pairs(hot_store)  # default parameters
    message = str(err.value)
    assert f"over the budget of {300 * documents:,} (300 per document x {documents:,} documents" in message
    assert f"the largest bucket holds {HOT:,} documents (band " in message
    assert "bucket_policy='star'" in message and "boilerplate" in message


def test_pair_slot_budget():
    assert pair_slot_budget(0, 300, 1_000_000) == 300_000_000  # scales with the corpus
    assert pair_slot_budget(0, 300, 24) == 1_000_000  # never below the floor
    assert pair_slot_budget(10, 300, 1_000_000) == 10  # an absolute budget wins
