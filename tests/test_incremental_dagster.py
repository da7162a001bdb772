"""Dagster: the global chain after a daily run is the incremental update; full_rebuild forces a
full one; each global asset's metadata says the mode, the days added and the clusters touched."""

from __future__ import annotations

import shutil

import dagster as dg
import duckdb

from webdedup_assets.defs import GLOBAL_JOB
from webdedup_assets.params import ScoringParams

from .conftest import failure_messages
from .test_partitions import Env, sensor_tick, split_fixture_by_day


def _metadata(result, asset: str) -> dict:
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == asset]
    return event.materialization.metadata


def _rows(env: Env, asset: str, order: str) -> list:
    store = env.store()
    return duckdb.sql(f"SELECT * FROM {store.scan_sql(asset)} ORDER BY {order}").fetchall()


def test_the_automation_after_a_daily_run_updates_the_global_assets_incrementally(tmp_path):
    crawl = tmp_path / "crawl"
    by_day = split_fixture_by_day(crawl)
    march = sorted(d for d in by_day if d.startswith("2026-03"))
    held = tmp_path / "held"
    for day in sorted(by_day):
        if day not in march:
            shutil.copy(crawl / f"{day}.csv", held.mkdir(exist_ok=True) or held / f"{day}.csv")
    env = Env(tmp_path, held)
    env.daily("2026-01", "2026-02")
    env.global_stages()
    first = env.last_global
    assert _metadata(first, "candidate_pairs")["update_mode"].value.startswith("full: no incremental state")
    assert _metadata(first, "deduped_documents")["update_mode"].value.startswith("full: no incremental state")
    # a new crawl month arrives; the daily job runs it; the sensor requests the global run
    for day in march:
        shutil.copy(crawl / f"{day}.csv", held / f"{day}.csv")
    cursor = sensor_tick(env.defs, env.instance).cursor
    env.daily("2026-03")
    [request] = sensor_tick(env.defs, env.instance, cursor).run_requests
    config = {**env.config(), **request.run_config}
    result = env.defs.resolve_job_def(GLOBAL_JOB).execute_in_process(
        run_config=config, instance=env.instance, raise_on_error=False
    )
    assert result.success, failure_messages(result)
    for asset in ("candidate_pairs", "scored_pairs", "duplicate_pairs", "clusters", "deduped_documents"):
        metadata = _metadata(result, asset)
        assert metadata["update_mode"].value == "incremental", asset
        assert metadata["days_added"].value == march
        assert metadata["days_removed"].value == []
        if asset in ("clusters", "deduped_documents"):  # known once the clusters are recomputed
            assert metadata["clusters_touched"].value > 0
        assert "full_rebuild" not in metadata["parameters"].value
    # each asset did its own stage's work: the update's steps so far when each was materialized
    steps = {a: set(_metadata(result, a)["update"].value["seconds"]) for a in ("candidate_pairs", "clusters")}
    assert {"changes", "candidates"} <= steps["candidate_pairs"] and "scoring" not in steps["candidate_pairs"]
    assert {"scoring", "duplicates", "clusters"} <= steps["clusters"] and "deduped_documents" not in steps["clusters"]
    final = _metadata(result, "deduped_documents")["update"].value
    assert {"deduped_documents", "total"} <= set(final["seconds"]) and final["applied_now"] is True
    incremental = {a: _rows(env, a, o) for a, o in (("clusters", "doc_id"), ("deduped_documents", "doc_id"))}
    # full_rebuild: the same rows, and the metadata says why
    config["ops"].setdefault("candidate_pairs", {"config": {}})["config"]["full_rebuild"] = True
    full = env.defs.resolve_job_def(GLOBAL_JOB).execute_in_process(
        run_config=config, instance=env.instance, raise_on_error=False
    )
    assert full.success, failure_messages(full)
    assert _metadata(full, "clusters")["update_mode"].value == "full: full_rebuild requested"
    assert {a: _rows(env, a, "doc_id") for a in incremental} == incremental
    # the automation does not carry full_rebuild to the next run
    env.daily("2026-03")
    [again] = sensor_tick(env.defs, env.instance, cursor).run_requests or [None]
    if again is not None:
        assert "full_rebuild" not in again.run_config["ops"].get("candidate_pairs", {}).get("config", {})


def test_a_subset_of_the_global_assets_runs_its_stages_from_scratch(tmp_path):
    crawl = tmp_path / "crawl"
    split_fixture_by_day(crawl)
    env = Env(tmp_path, crawl)
    env.daily("2026-01", "2026-03")
    env.global_stages()
    assets = [a for a in env.defs.assets if a.key.to_user_string() in ("scored_pairs", "duplicate_pairs")]
    result = dg.materialize(assets, instance=env.instance, resources=env.defs.resources, run_config=env.config())
    assert result.success
    assert _metadata(result, "scored_pairs")["update_mode"].value.startswith("full: only part")


def _storage_state(root) -> list:
    """Every file under the storage root with its bytes' digest and mtime, and every folder."""
    import hashlib

    return sorted(
        (
            str(p.relative_to(root)),
            p.is_dir(),
            p.stat().st_mtime_ns,
            None if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest(),
        )
        for p in root.rglob("*")
    )


def test_the_check_job_compares_new_pages_with_the_corpus_and_changes_nothing(tmp_path):
    import pyarrow.parquet as pq

    from webdedup_assets.cli.main import main
    from webdedup_assets.defs.check import CHECK_JOB

    crawl = tmp_path / "crawl"
    by_day = split_fixture_by_day(crawl)
    march = sorted(d for d in by_day if d.startswith("2026-03"))
    held, new = tmp_path / "held", tmp_path / "new"
    held.mkdir()
    new.mkdir()
    for day in sorted(by_day):
        shutil.copy(crawl / f"{day}.csv", (new if day in march else held) / f"{day}.csv")
    env = Env(tmp_path, held)
    env.daily("2026-01", "2026-02")
    env.global_stages()
    before = _storage_state(env.storage)
    report = tmp_path / "reports" / "check.parquet"
    config = env.config()
    config["ops"] = {"checked_documents": {"config": {"input_path": str(new), "report_path": str(report)}}}
    result = env.defs.resolve_job_def(CHECK_JOB).execute_in_process(
        run_config=config, instance=env.instance, raise_on_error=False
    )
    assert result.success, failure_messages(result)
    assert _storage_state(env.storage) == before
    rows = pq.read_table(report).to_pylist()
    new_ids = {r[0] for r in duckdb.sql(f"SELECT doc_id FROM read_csv('{new}/*.csv')").fetchall()}
    assert {r["doc_id"] for r in rows} == new_ids
    duplicates = sorted((r for r in rows if r["is_duplicate"]), key=lambda r: r["doc_id"])
    assert duplicates, "the fixture's March pages include near-duplicates of earlier pages"
    metadata = _metadata(result, "checked_documents")
    assert metadata["documents"].value == len(rows) == metadata["dagster/row_count"].value
    assert metadata["duplicates"].value == len(duplicates)
    assert metadata["candidates_verified"].value == sum(r["candidates"] for r in rows) > 0
    assert metadata["threshold"].value == ScoringParams().threshold
    assert metadata["report"].value == str(report)
    assert metadata["input_days"].value == march
    preview = metadata["first_duplicates"].value
    assert f"| {duplicates[0]['doc_id']} | {duplicates[0]['matched_doc_id']} |" in preview
    assert preview.count("\n") == min(len(duplicates), 10) + 1
    # the CLI is the same engine call: the same answer
    cli_report = tmp_path / "cli.parquet"
    assert main(["check", str(new), "--against", str(env.storage), "--report", str(cli_report)]) == 0
    assert pq.read_table(cli_report).to_pylist() == rows
    assert _storage_state(env.storage) == before
    # a report inside the storage would change it: refused, and nothing written
    config["ops"]["checked_documents"]["config"]["report_path"] = str(env.storage / "check.parquet")
    refused = env.defs.resolve_job_def(CHECK_JOB).execute_in_process(
        run_config=config, instance=env.instance, raise_on_error=False
    )
    assert not refused.success
    assert "inside the corpus storage" in " ".join(failure_messages(refused))
    assert _storage_state(env.storage) == before
