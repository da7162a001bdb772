"""The fixture end to end through the Dagster job, checks included."""

import csv
import json

import dagster as dg
import duckdb

from webdedup_assets.defs import build_defs
from webdedup_assets.engine.reading import input_days
from webdedup_assets.engine.stages.manifest import load_manifest
from webdedup_assets.storage.state import months_of

from .conftest import CLASSIC, FIXTURE, check_results, failure_messages, job_config, run_job
from .dagster_runs import RANGE_END_TAG, RANGE_START_TAG

FIXTURE_MONTHS = months_of(input_days(str(FIXTURE)))

WINNERS = {
    "cluster-billing-canonical": "billing-mirror",  # newest date
    "cluster-incident-canonical": "incident-revision",  # newest date
    "cluster-registry-canonical": "registry-canonical",  # newest date
    "cluster-retention-canonical": "retention-revision",  # same date as the mirror, one more token
    "cluster-retrieval-canonical": "retrieval-canonical",  # same date and tokens: smallest doc_id
    "cluster-support-canonical": "support-mirror",  # newest date
}


def _rows(store, asset, sql="SELECT *"):
    return duckdb.sql(f"{sql} FROM {store.scan_sql(asset)}").fetchall()


def assert_fixture_counts(store):
    counts = load_manifest(store)["counts"]
    assert counts["documents"] == 24
    assert counts["possible_pairs"] == 276
    assert counts["candidate_pairs"] == 18
    assert counts["cross_domain_candidates"] == 18
    assert counts["candidate_reduction_ratio"] == 0.9348
    assert counts["duplicate_pairs"] == 18
    assert counts["exact_duplicate_pairs"] == 6
    assert counts["near_duplicate_pairs"] == 12
    assert counts["duplicate_clusters"] == 6
    assert counts["singletons"] == 6
    assert counts["max_cluster_size"] == 3
    assert counts["representatives"] == 12
    assert counts["retained_ratio"] == 0.5
    winners = dict(_rows(store, "deduped_documents", "SELECT cluster_id, doc_id"))
    for cluster_id, doc_id in WINNERS.items():
        assert winners[cluster_id] == doc_id, cluster_id
    for i in range(1, 7):
        assert winners[f"cluster-notice-0{i}"] == f"notice-0{i}"


def test_fixture_default_parameters(fixture_run):
    result, store, output = fixture_run
    assert_fixture_counts(store)
    checks = check_results(result)
    assert len(checks) == 11
    assert all(c.passed for c in checks.values()), {k: c.passed for k, c in checks.items()}
    manifest = load_manifest(store)
    assert manifest["parameters"]["fingerprinted"]["num_perm"] == 130
    assert manifest["lsh"]["candidate_probability_at_threshold"] >= 0.95
    assert manifest["input"]["files"][0]["bytes"] > 0
    assert len(manifest["input"]["sha256"]) == 64
    assert set(manifest["timings_seconds"]) >= {"documents", "fingerprinted", "manifest"}


def test_fixture_classic_parameters(tmp_path):
    result, store = run_job(tmp_path, **CLASSIC)
    assert result.success, failure_messages(result)
    assert_fixture_counts(store)
    lsh = load_manifest(store)["lsh"]
    assert lsh["candidate_probability_at_threshold"] == round(1 - (1 - 0.7**8) ** 8, 6)


def test_published_outputs(fixture_run):
    _, _, output = fixture_run
    expected = {
        "fingerprinted.parquet",
        "candidate_summary.csv",
        "scored_pairs.parquet",
        "duplicate_pairs.csv",
        "clusters.csv",
        "cluster_inspection.csv",
        "collision_buckets.csv",
        "domain_summary.csv",
        "deduped_documents.parquet",
        "manifest.json",
    }
    assert expected <= {p.name for p in output.iterdir()}
    with open(output / "cluster_inspection.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 6
    billing = next(r for r in rows if r["cluster_id"] == "cluster-billing-canonical")
    assert billing["representative_doc_id"] == "billing-mirror"
    assert billing["member_doc_ids"] == "billing-canonical;billing-mirror;billing-revision"
    assert float(billing["max_jaccard"]) == 1.0 and 0.8 < float(billing["min_jaccard"]) < 1.0
    with open(output / "duplicate_pairs.csv") as handle:
        kinds = [r["kind"] for r in csv.DictReader(handle)]
    assert kinds.count("exact") == 6 and kinds.count("near") == 12
    assert json.loads((output / "manifest.json").read_text())["counts"]["representatives"] == 12
    fingerprinted = duckdb.sql(f"SELECT count(*) FROM '{output / 'fingerprinted.parquet'}'").fetchall()
    assert fingerprinted == [(24,)]


def test_scored_pairs_reasons_and_estimates(fixture_run):
    _, store, _ = fixture_run
    rows = _rows(store, "scored_pairs", "SELECT exact_jaccard, minhash_estimate, is_duplicate, reason")
    assert len(rows) == 18
    for exact, estimate, is_duplicate, reason in rows:
        assert is_duplicate == (exact >= 0.7)
        assert reason in {"jaccard_and_minhash", "jaccard_match"}
        assert abs(exact - estimate) < 0.2


def _materialize(selection, config, ops=(), months=None, **kwargs):
    """Materialize some assets of the fixture-month Definitions with part of a job config."""
    fixture_defs = build_defs(FIXTURE_MONTHS)
    assets = [a for a in fixture_defs.assets if a.key.to_user_string() in selection]
    tags = {RANGE_START_TAG: months[0], RANGE_END_TAG: months[-1]} if months else None
    return dg.materialize(
        assets,
        run_config={
            "ops": {k: v for k, v in config["ops"].items() if k in ops},
            "resources": config["resources"],
            "loggers": config["loggers"],
        },
        resources=fixture_defs.resources,
        instance=dg.DagsterInstance.ephemeral(),
        tags=tags,
        **kwargs,
    )


def test_rematerializing_scoring_alone_with_a_new_threshold(tmp_path):
    result, store = run_job(tmp_path)
    assert result.success
    fingerprint_files = {p: p.stat().st_mtime_ns for p in store.files("fingerprinted")}
    config = job_config(tmp_path / "storage", tmp_path / "output", threshold=0.95)
    downstream = ["scored_pairs", "duplicate_pairs", "clusters", "deduped_documents", "manifest"]
    again = _materialize(downstream, config, ops=["scored_pairs"])
    assert again.success
    materialized = {e.asset_key.to_user_string() for e in again.get_asset_materialization_events()}
    assert materialized == set(downstream)
    assert {p: p.stat().st_mtime_ns for p in store.files("fingerprinted")} == fingerprint_files  # untouched
    counts = load_manifest(store)["counts"]
    assert counts["duplicate_pairs"] == 6  # only the exact mirrors reach 0.95
    assert counts["candidate_pairs"] == 18
    assert counts["duplicate_clusters"] == 6 and counts["singletons"] == 12
    assert counts["representatives"] == 18
    # one threshold: is_duplicate of scored_pairs agrees with duplicate_pairs
    assert _rows(store, "scored_pairs", "SELECT count(*) FILTER (is_duplicate)") == [(6,)]
    assert load_manifest(store)["parameters"]["duplicate_pairs"]["threshold"] == 0.95


def test_duplicate_pairs_refuses_a_threshold_other_than_scored_pairs(tmp_path):
    result, store = run_job(tmp_path)
    assert result.success
    config = job_config(tmp_path / "storage", tmp_path / "output")
    config["ops"]["duplicate_pairs"] = {"config": {"threshold": 0.95}}
    again = _materialize(["duplicate_pairs"], config, ops=["duplicate_pairs"], raise_on_error=False)
    assert not again.success
    message = failure_messages(again)[0]
    assert message.startswith(
        "duplicate_pairs: scored_pairs was built with threshold=0.7 but duplicate_pairs needs threshold=0.95; "
        "there is one threshold"
    )


def test_incompatible_upstream_is_refused_naming_both_values(tmp_path):
    result, store = run_job(tmp_path)
    assert result.success
    config = job_config(tmp_path / "storage", tmp_path / "output", num_perm=64)
    assert _materialize(["fingerprinted"], config, ops=["fingerprinted"], months=FIXTURE_MONTHS).success
    # band_memberships still configured for 26 x 5 = 130 values: refused, naming both
    again = _materialize(["band_memberships"], config, months=FIXTURE_MONTHS, raise_on_error=False)
    assert not again.success
    message = failure_messages(again)[0]
    assert message.startswith(
        "band_memberships: fingerprinted was built with num_perm=64 but band_memberships needs num_perm=130 "
        "(bands=26 x rows=5 = 130)"
    )
    # scoring the old candidates against the new fingerprints is refused too
    again = _materialize(["scored_pairs"], config, raise_on_error=False)
    message = failure_messages(again)[0]
    assert message.startswith("scored_pairs: candidate_pairs was built with fingerprint={")
    assert "'num_perm': 130" in message and "but scored_pairs needs fingerprint={" in message
    assert "'num_perm': 64" in message.split("needs")[1]


def test_count_checks_pass_with_the_reason_for_an_input_without_expectations(tmp_path):
    """No expectations file is not a failure: the check passes and its metadata says why."""
    data = tmp_path / "corpus.csv"
    data.write_text(FIXTURE.read_text())  # same rows, but no corpus.expected.json beside it
    result, _ = run_job(tmp_path, data)
    assert result.success
    checks = check_results(result)
    pinned = checks["candidate_pairs_match_expected_counts"]
    assert pinned.passed and pinned.severity == dg.AssetCheckSeverity.ERROR
    assert "no expectations file" in pinned.metadata["skipped"].value
    assert checks["candidates_well_formed"].passed
