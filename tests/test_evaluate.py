"""webdedup evaluate: the exact similarity join, the metrics, labels, plots and cluster diagnostics."""

from __future__ import annotations

import csv
import json
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webdedup_assets.cli.main import main
from webdedup_assets.core.exact import (
    adjusted_rand_index,
    brute_force_join,
    cluster_pair_counts,
    pair_metrics,
    similarity_join,
)

from .conftest import FIXTURE

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _flat(sets: list[set[int]]) -> tuple[np.ndarray, np.ndarray]:
    flat = [np.array(sorted(s), dtype=np.uint64) for s in sets]
    offsets = np.r_[0, np.cumsum([len(s) for s in sets])].astype(np.int64)
    return (np.concatenate(flat) if flat else np.zeros(0, np.uint64)), offsets


# ------------------------------------------------------------------- exact similarity join


@settings(max_examples=150, deadline=None)
@given(
    sets=st.lists(st.sets(st.integers(0, 40), max_size=15), max_size=40),
    threshold=st.sampled_from([0.1, 0.25, 1 / 3, 0.5, 0.6, 2 / 3, 0.7, 0.75, 0.8, 0.9, 1.0]),
)
def test_similarity_join_equals_brute_force(sets, threshold):
    left, right, jaccard, _ = similarity_join(*_flat(sets), threshold)
    expected = brute_force_join(sets, threshold)
    assert list(zip(left.tolist(), right.tolist())) == [(a, b) for a, b, _ in expected]
    assert jaccard.tolist() == [j for _, _, j in expected]  # the same float expression: bit-equal


def test_similarity_join_on_generated_near_duplicates():
    """Documents and edited copies over a Zipf-like vocabulary (shared frequent elements)."""
    rng = random.Random(5)
    base = [set(rng.choices(range(3000), weights=[1 / (k + 1) for k in range(3000)], k=120)) for _ in range(60)]
    sets = list(base)
    for s in base[:30]:
        copy = set(s)
        for value in rng.sample(sorted(copy), k=rng.randint(0, 25)):
            copy.discard(value)
            copy.add(rng.randrange(3000))
        sets.append(copy)
    rng.shuffle(sets)
    for threshold in (0.3, 0.5, 0.7, 0.85):
        left, right, jaccard, compared = similarity_join(*_flat(sets), threshold)
        expected = brute_force_join(sets, threshold)
        assert list(zip(left.tolist(), right.tolist(), jaccard.tolist())) == expected
        assert compared < len(sets) * (len(sets) - 1) // 2  # the prefix filter pruned pairs


def test_similarity_join_never_pairs_empty_sets_and_checks_the_threshold():
    left, right, _, _ = similarity_join(*_flat([set(), set(), {1}, {1}]), 0.5)
    assert (left.tolist(), right.tolist()) == ([2], [3])
    with pytest.raises(ValueError, match="threshold must be in"):
        similarity_join(*_flat([{1}]), 0.0)


# ------------------------------------------------------------------------------- metrics


def test_adjusted_rand_index_known_values():
    assert adjusted_rand_index([0, 0, 1, 1], [0, 0, 1, 1]) == 1.0
    assert adjusted_rand_index([5, 5, 3, 3], [0, 0, 1, 1]) == 1.0  # label names do not matter
    # the scikit-learn documentation example: 4/7
    assert adjusted_rand_index([0, 0, 1, 2], [0, 0, 1, 1]) == pytest.approx(4 / 7)
    # by hand: contingency cells {2,1,1,2} -> 2 pairs together in both; 3 predicted, 6 actual,
    # 15 in all: expected 3 * 6 / 15 = 1.2, maximum 4.5 -> (2 - 1.2) / (4.5 - 1.2) = 8 / 33
    assert adjusted_rand_index(["a", "a", "b", "b", "c", "c"], [1, 1, 1, 2, 2, 2]) == pytest.approx(8 / 33)
    # every item its own cluster against one cluster: no agreement beyond chance
    assert adjusted_rand_index([0, 1, 2, 3], [0, 0, 0, 0]) == pytest.approx(0.0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=2, max_size=30))
def test_adjusted_rand_index_is_symmetric_and_ignores_label_names(pairs):
    predicted = np.array([p for p, _ in pairs])
    actual = np.array([a for _, a in pairs])
    ari = adjusted_rand_index(predicted, actual)
    assert ari == pytest.approx(adjusted_rand_index(actual, predicted))
    assert ari == pytest.approx(adjusted_rand_index(predicted * 7 + 3, actual))
    assert adjusted_rand_index(predicted, predicted) == 1.0
    assert ari <= 1.0 + 1e-12


def test_cluster_pair_counts_and_pair_metrics_by_hand():
    # predicted {a,b,c} {d}; actual {a,b} {c,d}: together in both = (a,b) only
    assert cluster_pair_counts(np.array([0, 0, 0, 1]), np.array([0, 0, 1, 1])) == (1, 3, 2, 6)
    metrics = pair_metrics(1, 3, 2)
    assert metrics["precision"] == pytest.approx(1 / 3)
    assert metrics["recall"] == pytest.approx(1 / 2)
    assert metrics["f1"] == pytest.approx(0.4)
    assert (metrics["false_positives"], metrics["false_negatives"]) == (2, 1)
    assert pair_metrics(0, 0, 0)["precision"] is None


# --------------------------------------------------------------------- evaluate on a run


def _chain_bodies() -> list[str]:
    """Three 300-word pages, each 7 words away from the next: A~B and B~C near 0.79 shingle
    Jaccard, A and C (14 words apart) near 0.62, below 0.7 -> one cluster by chaining."""
    rng = random.Random(11)
    words = [f"w{rng.randrange(5000)}x" for _ in range(300)]
    bodies = [" ".join(words)]
    positions = list(range(10, 290, 20))  # 14 positions, 20 apart: every change costs 5 shingles
    for step in range(2):
        for p in positions[step * 7 : step * 7 + 7]:
            words[p] = f"edit{step}{p}"
        bodies.append(" ".join(words))
    return bodies


@pytest.fixture(scope="module")
def labelled_run(tmp_path_factory):
    """The fixture corpus with a true-cluster column (topic = doc_id before '-'), plus a chain of
    three pages, run at threshold 0.7; returns the output folder."""
    root = tmp_path_factory.mktemp("evaluate")
    with open(FIXTURE, newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        row["topic"] = row["doc_id"].split("-")[0] if not row["doc_id"].startswith("notice") else row["doc_id"]
    for i, body in enumerate(_chain_bodies()):
        rows.append(
            {
                "doc_id": f"chain-{'abc'[i]}",
                "source": "chain-crawl",
                "domain": f"chain{i}.example",
                "crawled_at": "2026-03-23",
                "title": f"Chain {i}",
                "body": body,
                "topic": "chain",
            }
        )
    corpus = root / "labelled.csv"
    with open(corpus, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    out = root / "out"
    assert main(["run", str(corpus), "--output", str(out), "--threshold", "0.7", "--quiet", "--json"]) in (0, 1)
    assert (out / "manifest.json").exists()
    return out


def _labels(path, rows):
    with open(path, "w", newline="") as handle:
        handle.write("\n".join(",".join(map(str, r)) for r in rows) + "\n")
    return path


def test_evaluate_with_a_pairs_file_gives_the_known_precision_and_recall(labelled_run, tmp_path, capsys):
    labels = _labels(
        tmp_path / "pairs.csv",
        [
            ("left_doc_id", "right_doc_id", "is_duplicate"),
            ("billing-canonical", "billing-revision", 1),  # same cluster, duplicate: TP
            ("billing-mirror", "billing-canonical", "true"),  # TP (order does not matter)
            ("incident-mirror", "incident-revision", 1),  # TP
            ("billing-canonical", "incident-canonical", 1),  # labelled duplicate, not clustered: FN
            ("support-canonical", "support-mirror", 0),  # clustered, labelled distinct: FP
            ("notice-01", "notice-02", "no"),  # TN
        ],
    )
    code = main(["evaluate", "--output", str(labelled_run), "--labels", str(labels), "--json", "--no-reference"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    current = summary["labels"]["current_run"]
    assert (current["true_positives"], current["false_positives"], current["false_negatives"]) == (3, 1, 1)
    assert current["precision"] == pytest.approx(0.75) and current["recall"] == pytest.approx(0.75)
    assert current["f1"] == pytest.approx(0.75)
    # edge level here equals cluster level: every fixture cluster is a triangle of duplicate pairs
    assert current["edge_precision"] == pytest.approx(0.75) and current["edge_recall"] == pytest.approx(0.75)
    sweep = {row["threshold"]: row for row in summary["threshold_sweep"]}
    assert sweep[0.7]["precision"] == pytest.approx(0.75)
    assert sweep[1.0]["true_positives"] == 1  # only the exact mirror billing-mirror survives J = 1
    png = labelled_run / "evaluation" / "precision_recall.png"
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 5000


def test_evaluate_with_a_label_column_and_the_exact_reference(labelled_run, capsys):
    code = main(["evaluate", "--output", str(labelled_run), "--label-column", "topic", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    current = summary["labels"]["current_run"]
    # the run's clusters are the topics exactly (the chain included, joined by chaining)
    assert current["precision"] == 1.0 and current["recall"] == 1.0 and current["ari"] == 1.0
    ref = summary["reference"]
    # 18 fixture pairs + chain a~b, b~c; a~c is below 0.7 and only in the floor's bins
    assert ref["exact_pairs_at_threshold"] == 20
    assert ref["found_by_lsh_at_threshold"] == 20 and ref["lsh_recall_at_threshold"] == 1.0
    assert ref["run_duplicates_not_in_reference"] == 0
    # the run's own banding simulated from the stored signatures gives the run's recall
    (own,) = [row for row in ref["banding_recall"] if row["is_run_banding"]]
    assert own["measured_recall_at_threshold"] == ref["lsh_recall_at_threshold"]
    bins = {row["jaccard_from"]: row for row in summary["jaccard_bins"]}
    assert bins[1.0]["exact_pairs"] == 6
    assert sum(row["exact_pairs"] for row in summary["jaccard_bins"]) == ref["exact_pairs_at_floor"] == 21
    evaluation = labelled_run / "evaluation"
    for name in ("s_curve.png", "candidate_jaccard.png", "precision_recall.png"):
        data = (evaluation / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 5000, name
    for name in ("jaccard_bins.csv", "threshold_sweep.csv", "cluster_diagnostics.csv", "summary.json"):
        assert (evaluation / name).stat().st_size > 0, name


def test_cluster_diagnostics_flag_the_chain(labelled_run, capsys):
    code = main(["evaluate", "--output", str(labelled_run), "--no-reference", "--no-plots", "--giant-size", "3"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "1 low-cohesion" in captured.out
    with open(labelled_run / "evaluation" / "cluster_diagnostics.csv", newline="") as handle:
        rows = {row["cluster_id"]: row for row in csv.DictReader(handle)}
    chain = rows["cluster-chain-a"]
    assert chain["size"] == "3" and chain["low_cohesion"] == "true" and chain["members_below_threshold"] == "1"
    assert 0.55 < float(chain["min_jaccard_to_representative"]) < 0.7
    assert float(chain["edge_density"]) == pytest.approx(2 / 3)  # two edges of three possible
    assert chain["flag"] == "giant+low_cohesion"  # size 3 >= --giant-size 3
    billing = rows["cluster-billing-canonical"]
    assert billing["low_cohesion"] == "false" and billing["domains"] == "3" and billing["edges"] == "3"
    assert list(rows)[0] == "cluster-chain-a"  # flagged clusters first


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([("left_doc_id", "right", "is_duplicate"), ("a", "b", 1)], "lacks column(s) right_doc_id"),
        (
            [("left_doc_id", "right_doc_id", "is_duplicate"), ("billing-canonical", "nowhere-1", 1)],
            "names 1 doc_id(s) not in the run's documents: 'nowhere-1'",
        ),
        (
            [("left_doc_id", "right_doc_id", "is_duplicate"), ("billing-canonical", "billing-mirror", "maybe")],
            "is_duplicate must be 0/1 or true/false, found maybe",
        ),
        (
            [
                ("left_doc_id", "right_doc_id", "is_duplicate"),
                ("billing-canonical", "billing-mirror", 1),
                ("billing-mirror", "billing-canonical", 0),
            ],
            "both as duplicate and as not duplicate",
        ),
    ],
)
def test_bad_labels_exit_2_naming_the_problem(labelled_run, tmp_path, capsys, rows, message):
    labels = _labels(tmp_path / "bad.csv", rows)
    assert main(["evaluate", "--output", str(labelled_run), "--labels", str(labels), "--no-reference"]) == 2
    assert message in capsys.readouterr().err


def test_bad_label_column_and_missing_run_exit_2(labelled_run, tmp_path, capsys):
    assert main(["evaluate", "--output", str(labelled_run), "--label-column", "nope", "--no-reference"]) == 2
    err = capsys.readouterr().err
    assert "label column 'nope' is not in the stored documents" in err and "topic" in err
    assert main(["evaluate", "--output", str(tmp_path / "none")]) == 2
    assert "no stored run under" in capsys.readouterr().err


# ----------------------------------------------------------------------------------- tune


def test_recommend_picks_the_fewest_candidates_that_reach_the_target():
    from webdedup_assets.core.tuning import bandings, recommend

    rows = [
        {"num_perm": 120, "bands": 20, "rows": 6, "recall": 0.97, "candidates": 100, "p_candidate_at_threshold": 0.9},
        {"num_perm": 120, "bands": 30, "rows": 4, "recall": 1.0, "candidates": 300, "p_candidate_at_threshold": 1.0},
        {"num_perm": 130, "bands": 26, "rows": 5, "recall": 0.995, "candidates": 150, "p_candidate_at_threshold": 0.99},
        {"num_perm": 120, "bands": 40, "rows": 3, "recall": 1.0, "candidates": None, "p_candidate_at_threshold": 1.0},
    ]
    assert recommend(rows, 0.99)["bands"] == 26
    assert recommend(rows, 0.9)["bands"] == 20
    assert recommend(rows, 1.0)["bands"] == 30  # the over-budget banding is never recommended
    assert recommend(rows[:1], 0.99) is None
    assert recommend(rows, 0.9, min_probability=0.99)["bands"] == 26  # 20 x 6 has P(T) 0.9 only
    assert bandings(120) == [(40, 3), (30, 4), (24, 5), (20, 6), (15, 8), (12, 10), (10, 12), (8, 15)]


def _borderline_corpus(path):
    """40 pages of 300 words and an edited copy of each, 9-12 words apart (shingle Jaccard
    0.68-0.74, around the 0.7 threshold), and 20 unrelated pages."""
    rng = random.Random(3)
    rows = []
    for i in range(40):
        words = [f"v{rng.randrange(20000)}" for _ in range(300)]
        rows.append((f"page-{i:02d}", " ".join(words)))
        positions = rng.sample(range(0, 300, 8), k=9 + i % 4)
        for p in positions:
            words[p] = f"changed{p}"
        rows.append((f"page-{i:02d}-copy", " ".join(words)))
    for i in range(20):
        rows.append((f"other-{i:02d}", " ".join(f"v{rng.randrange(20000)}" for _ in range(300))))
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["doc_id", "source", "domain", "crawled_at", "title", "body"])
        for k, (doc_id, body) in enumerate(rows):
            writer.writerow([doc_id, "gen", f"site{k % 7}.example", "2026-04-01", doc_id, body])
    return dict(rows)


def test_tune_recommendation_meets_its_target_recall(tmp_path, capsys):
    from webdedup_assets.core.fingerprint import fingerprint_texts, shingle_sets
    from webdedup_assets.core.minhash import MinHashParams, band_keys

    bodies = _borderline_corpus(tmp_path / "borderline.csv")
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "borderline.csv"), "--output", str(out), "--threshold", "0.7", "--quiet"]) == 0
    capsys.readouterr()
    code = main(["tune", "--output", str(out), "--target-recall", "0.95", "--num-perm", "64,120", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    best = summary["recommended"]
    table = {(r["num_perm"], r["bands"], r["rows"]): r for r in summary["bandings"]}
    assert best["recall"] >= 0.95
    assert table[(64, 8, 8)]["recall"] < 0.95  # the classic banding misses borderline pairs here
    eligible = [r for r in table.values() if r["recall"] >= 0.95 and r["candidates"] is not None]
    assert best["candidates"] == min(r["candidates"] for r in eligible)

    # independent check: exact pairs by brute force, recall and candidates from band keys
    ids = sorted(bodies)
    flat, offsets = shingle_sets(pa.array([bodies[i] for i in ids]), 5)
    sets = [set(flat[offsets[k] : offsets[k + 1]].tolist()) for k in range(len(ids))]
    exact = [(a, b) for a, b, _ in brute_force_join(sets, 0.7)]
    assert summary["exact_pairs_at_threshold"] == len(exact) and 15 <= len(exact) <= 40
    coeff_a, coeff_b = MinHashParams(best["num_perm"], 1).coefficients()
    signatures = fingerprint_texts(pa.array([bodies[i] for i in ids]), 5, coeff_a, coeff_b)[2]
    keys = band_keys(signatures, best["bands"], best["rows"])
    found = sum(1 for a, b in exact if (keys[a] == keys[b]).any())
    assert best["found_pairs"] == found
    buckets: dict = {}
    for node in range(len(ids)):
        for band in range(best["bands"]):
            buckets.setdefault((band, int(keys[node, band])), []).append(node)
    pairs = {(a, b) for members in buckets.values() for a in members for b in members if a < b}
    assert best["candidates"] == len(pairs)
    assert (out / "evaluation" / "tune.csv").stat().st_size > 0

    # the table's recommendation is the flags of a run, threshold included, on a line of their own
    assert main(["tune", "--output", str(out), "--target-recall", "0.95", "--num-perm", "64,120"]) == 0
    lines = capsys.readouterr().out.splitlines()
    flags = f"--num-perm {best['num_perm']} --bands {best['bands']} --rows {best['rows']} --threshold 0.7"
    assert lines[-1] == f"    {flags}"


def test_evaluate_with_a_per_document_labels_file(labelled_run, tmp_path, capsys):
    rows = [("doc_id", "group")] + [(f"{t}-{v}", t) for t in ("billing", "incident") for v in ("canonical", "mirror")]
    rows.append(("billing-revision", "incident"))  # wrong on purpose: billing-revision is clustered with billing
    labels = _labels(tmp_path / "groups.csv", rows)
    args = ["evaluate", "--output", str(labelled_run), "--labels", str(labels), "--label-column", "group"]
    assert main([*args, "--no-reference", "--no-plots", "--json"]) == 0
    current = json.loads(capsys.readouterr().out)["labels"]["current_run"]
    # true pairs: billing c-m, incident c-m, billing-revision with both incident pages -> 4, of
    # which the run clusters 2; it clusters 18 fixture pairs + 3 chain pairs = 21 -> 19 false
    assert (current["true_positives"], current["false_negatives"], current["false_positives"]) == (2, 2, 19)
    bad = _labels(tmp_path / "bad_groups.csv", [("doc_id", "group"), ("ghost", "x")])
    assert main(["evaluate", "--output", str(labelled_run), "--labels", str(bad), "--label-column", "group"]) == 2
    assert "names 1 doc_id(s) not in the run's documents: 'ghost'" in capsys.readouterr().err
    assert main(["evaluate", "--output", str(labelled_run), "--labels", str(bad), "--label-column", "nope"]) == 2
    assert "lacks column(s) nope" in capsys.readouterr().err


def test_evaluate_on_a_sample_of_documents(labelled_run, capsys):
    args = ["evaluate", "--output", str(labelled_run), "--sample", "12", "--seed", "4", "--no-plots", "--json"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    ref = summary["reference"]
    assert ref["sampled"] and ref["documents"] == 12
    assert ref["run_duplicates_not_in_reference"] == 0  # every run duplicate within the sample is exact
    assert ref["exact_pairs_at_threshold"] == ref["found_by_lsh_at_threshold"] <= 20
    assert summary["clusters"]["multi_document_clusters"] == 7  # diagnostics cover the whole run


def test_edge_level_metrics_separate_chaining_from_the_threshold(labelled_run, tmp_path, capsys):
    labels = _labels(
        tmp_path / "chain.csv",
        [
            ("left_doc_id", "right_doc_id", "is_duplicate"),
            ("chain-a", "chain-b", 1),
            ("chain-b", "chain-c", 1),
            ("chain-a", "chain-c", 0),  # clustered only by chaining
        ],
    )
    args = ["evaluate", "--output", str(labelled_run), "--labels", str(labels), "--no-reference", "--no-plots"]
    assert main([*args, "--json"]) == 0
    current = json.loads(capsys.readouterr().out)["labels"]["current_run"]
    assert current["precision"] == pytest.approx(2 / 3) and current["recall"] == 1.0  # cluster level
    assert current["edge_precision"] == 1.0 and current["edge_recall"] == 1.0  # the pairs themselves


def test_evaluate_refuses_a_storage_root_a_writer_holds(labelled_run, capsys):
    import os
    import subprocess
    import sys

    storage = labelled_run / "_storage"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from webdedup_assets.storage.state import writer_lock\n"
            "with writer_lock(sys.argv[1], purpose='test writer'):\n"
            "    print('held', flush=True)\n"
            "    time.sleep(600)\n",
            str(storage),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(FIXTURE.parents[1])},
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["evaluate", "--output", str(labelled_run), "--no-plots"]) == 2
        assert "is in use by another webdedup writer" in capsys.readouterr().err
        assert main(["tune", "--output", str(labelled_run), "--num-perm", "64"]) == 2
        assert "test writer" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    # the lock goes with the process: evaluate works again
    assert main(["evaluate", "--output", str(labelled_run), "--no-plots", "--no-reference"]) == 0


def test_the_cohesion_check_warns_on_a_chain_and_the_run_goes_on(labelled_run, capsys):
    """The fixture plus a chain A~B~C (A and C at J ~0.62): one cluster of three whose far member
    is named by the non-blocking clusters_cohesive check; the fixture's own clusters pass."""
    from webdedup_assets.engine.invariants import cluster_cohesion
    from webdedup_assets.storage.store import Store

    passed, details = cluster_cohesion(Store(labelled_run / "_storage"))
    assert not passed and details["members_below_threshold_to_representative"] == 1
    [[cluster, member, jaccard]] = details["first_members_below (cluster_id, doc_id, jaccard)"]
    assert cluster == "cluster-chain-a" and member in {"chain-a", "chain-c"} and 0.55 < jaccard < 0.7
    assert details["giant_clusters"] == [] and details["members_checked"] == 14  # 7 clusters of 3, less representatives
    passed, details = cluster_cohesion(Store(labelled_run / "_storage"), giant_size=2)
    assert [size for _, size in details["giant_clusters"]] == [3] * 5  # the first five, largest first
