"""The far-member policy (verify_against_representative, off by default) on a generated chain:
members below the threshold to their representative leave the cluster and are clustered again."""

from __future__ import annotations

import csv
import itertools
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from webdedup_assets.cli.main import main
from webdedup_assets.core.fingerprint import shingle_sets
from webdedup_assets.core.sets import jaccard_blocks
from webdedup_assets.engine import invariants
from webdedup_assets.storage.store import Store

from .test_cluster_diagnostics import chain_bodies, write_corpus


def _jaccards(bodies: list[str]) -> dict[tuple[int, int], float]:
    flat, offsets = shingle_sets(pa.array(bodies, pa.large_string()), 5)
    starts, ends = offsets[:-1].astype(np.int64), offsets[1:].astype(np.int64)
    pairs = list(itertools.combinations(range(len(bodies)), 2))
    left = np.array([a for a, _ in pairs], np.int64)
    right = np.array([b for _, b in pairs], np.int64)
    out = np.zeros(len(pairs))
    jaccard_blocks(flat, starts, ends, flat, starts, ends, left, right, out)
    return dict(zip(pairs, out.tolist(), strict=True))


def _run(tmp_path, *flags: str) -> dict[str, tuple[str, int]]:
    out = tmp_path / ("on" if flags else "off")
    assert main(["run", str(tmp_path / "corpus.csv"), "--output", str(out), "--quiet", "--json", *flags]) in (0, 1)
    store = Store(out / "_storage")
    rows = pq.read_table(store.path("deduped_documents"), columns=["doc_id", "cluster_id", "cluster_size"]).to_pylist()
    passed, details = invariants.one_representative_per_cluster(store)
    assert passed, details
    return {r["doc_id"]: (r["cluster_id"], r["cluster_size"]) for r in rows if r["doc_id"].startswith("chain")}, out


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("far_members")
    bodies = chain_bodies(4)
    write_corpus(tmp / "corpus.csv", bodies)
    j = _jaccards(bodies)
    # the generated chain: neighbours are duplicates, two steps or more apart are not
    assert all(j[(i, i + 1)] >= 0.7 for i in range(4))
    assert all(v < 0.7 for (a, b), v in j.items() if b - a >= 2)
    return tmp, j


def test_off_by_default_one_chained_cluster(chain):
    tmp, _ = chain
    reps, out = _run(tmp)
    assert reps == {"chain-4": ("cluster-chain-0", 5)}  # newest crawled_at represents all five
    with open(out / "clusters.csv", newline="") as handle:
        sizes = {r["doc_id"]: r["cluster_size"] for r in csv.DictReader(handle) if r["doc_id"].startswith("chain")}
    assert set(sizes.values()) == {"5"}


def test_far_members_leave_and_are_clustered_again(chain):
    tmp, j = chain
    reps, out = _run(tmp, "--verify-against-representative")
    # chain-4 keeps chain-3 (0.79); 0, 1, 2 are below 0.7 to it and are clustered again: their
    # newest, chain-2, keeps chain-1, and chain-0 (below 0.7 to chain-2) ends alone
    assert reps == {
        "chain-4": ("cluster-chain-0", 2),
        "chain-2": ("cluster-chain-0~chain-0", 2),
        "chain-0": ("cluster-chain-0~chain-0~chain-0", 1),
    }
    assert j[(3, 4)] >= 0.7 and j[(1, 2)] >= 0.7 and j[(0, 2)] < 0.7
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameters"]["deduped_documents"]["verify_against_representative"] is True
    # the clusters asset keeps the connected components
    with open(out / "clusters.csv", newline="") as handle:
        sizes = {r["doc_id"]: r["cluster_size"] for r in csv.DictReader(handle) if r["doc_id"].startswith("chain")}
    assert set(sizes.values()) == {"5"}
    # the fixture's own clusters are cohesive: their representatives are unchanged (12 + 3 chain)
    assert manifest["counts"]["representatives"] == 12 + 3


def test_removed_csv_and_inspect_follow_the_parts_split_off(chain, capsys):
    """removed.csv lists each removed member with the representative of its own part (never a kept
    page), as many rows as the manifest counts; inspect answers for a part's cluster_id."""
    tmp, _ = chain
    _, out = _run(tmp, "--verify-against-representative")
    with open(out / "removed.csv", newline="") as handle:
        removed = {
            r["doc_id"]: (r["representative"], r["cluster_id"], r["cluster_size"]) for r in csv.DictReader(handle)
        }
    kept = set(pq.read_table(out / "deduped_documents.parquet", columns=["doc_id"]).column("doc_id").to_pylist())
    assert not kept & set(removed)
    assert len(removed) == json.loads((out / "manifest.json").read_text())["counts"]["removed"]
    assert {d: v for d, v in removed.items() if d.startswith("chain")} == {
        "chain-3": ("chain-4", "cluster-chain-0", "2"),
        "chain-1": ("chain-2", "cluster-chain-0~chain-0", "2"),
    }
    capsys.readouterr()
    assert main(["inspect", "cluster-chain-0~chain-0", "--output", str(out), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["representative"] == "chain-2" and [m["doc_id"] for m in answer["members"]] == ["chain-2", "chain-1"]
