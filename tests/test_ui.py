"""Headless UI test: `dagster dev` on 127.0.0.1 (its own process session, stopped afterwards).

What a user does in the UI, over GraphQL: the code location loads with the nine assets; the
crawl-month partitions are exactly the months of the input (the fixture's days spread over three
months); a Catalog-style backfill of the three daily assets (an asset selection over the months,
not the daily job) is followed by the global stages on their own, in one in-process run; each
partition's materialization reports its own rows, equal to its file's, and previews its own pages."""

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from webdedup_assets.params import BandingParams

from .conftest import FIXTURE, REPO
from .test_partitions import spread

pytestmark = pytest.mark.ui

DAILY = ["documents", "fingerprinted", "band_memberships"]
GLOBAL = ["candidate_pairs", "scored_pairs", "duplicate_pairs", "clusters", "deduped_documents", "manifest"]
# rejected_records: written by documents, shown by the global job; on demand, not global: evaluation
# (webdedup_evaluate job), checked_documents (webdedup_check job)
ASSETS = set(DAILY + GLOBAL) | {"rejected_records", "evaluation", "checked_documents"}


def make_variable(name: str) -> str:
    """A variable of the Makefile (`NAME := value`), so that the test starts dagster dev as `make ui` does."""
    for line in (REPO / "Makefile").read_text().splitlines():
        if line.startswith(f"{name} :="):
            return line.split(":=", 1)[1].strip()
    raise AssertionError(f"{name} is not set in the Makefile")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(predicate, timeout: float, what: str, log: Path | None = None):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except OSError as err:
            last = err
        time.sleep(1.0)
    tail = log.read_text()[-3000:] if log else ""
    raise AssertionError(f"timed out waiting for {what}; last: {last}\n{tail}")


class Ui:
    def __init__(self, port: int, log: Path, storage: Path):
        self.port, self.log, self.storage = port, log, storage

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/graphql", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            payload = json.loads(response.read())
        assert "errors" not in payload, payload
        return payload["data"]

    def wait(self, predicate, timeout: float, what: str):
        return _wait(predicate, timeout, what, self.log)

    def partition_keys(self, asset: str) -> list[str]:
        node = self.graphql(
            "query($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) { ... on AssetNode { partitionKeys } } }",
            {"key": {"path": [asset]}},
        )["assetNodeOrError"]
        return node["partitionKeys"]

    def materializations(self, asset: str, limit: int = 200) -> list[dict]:
        data = self.graphql(
            """query($key: AssetKeyInput!, $limit: Int) { assetOrError(assetKey: $key) { ... on Asset {
            assetMaterializations(limit: $limit) { partition runId metadataEntries { label
            ... on IntMetadataEntry { intValue } ... on MarkdownMetadataEntry { mdStr }
            ... on JsonMetadataEntry { jsonString } } } } } }""",
            {"key": {"path": [asset]}, "limit": limit},
        )["assetOrError"]
        return data.get("assetMaterializations", []) if data else []

    def materialized_at(self, asset: str) -> float:
        """The time (seconds since the epoch) of the asset's latest materialization."""
        [event] = self.graphql(
            """query($key: AssetKeyInput!) { assetOrError(assetKey: $key) { ... on Asset {
            assetMaterializations(limit: 1) { timestamp } } } }""",
            {"key": {"path": [asset]}},
        )["assetOrError"]["assetMaterializations"]
        return int(event["timestamp"]) / 1000

    def runs(self) -> list[dict]:
        data = self.graphql(
            "{ runsOrError { ... on Runs { results { runId jobName status creationTime startTime endTime "
            "tags { key value } } } } }"
        )
        return data["runsOrError"]["results"]


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("ui")
    port = _free_port()
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    corpus = tmp_path / "corpus.csv"
    with open(FIXTURE, newline="") as source, open(corpus, "w", newline="") as target:
        rows = list(csv.DictReader(source))
        writer = csv.DictWriter(target, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({**row, "crawled_at": spread(row["crawled_at"])} for row in rows)
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "WEBDEDUP_INPUT": str(corpus),
        "WEBDEDUP_STORAGE_ROOT": str(tmp_path / "storage"),
        "WEBDEDUP_OUTPUT_DIR": str(tmp_path / "output"),
        "PYTHONWARNINGS": make_variable("DEV_WARNINGS"),  # as `make ui` starts it
    }
    dagster = Path(sys.executable).with_name("dagster")
    log_path = tmp_path / "dagster_dev.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [str(dagster), "dev", "-w", str(REPO / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port)],
        cwd=home,  # as `make ui` runs it: in DAGSTER_HOME, the checkout holding a dagster.yaml of its own
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        session = Ui(port, log_path, tmp_path / "storage")
        session.wait(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5).status == 200,
            180,
            "the webserver",
        )

        def location_loaded():
            data = session.graphql(
                """{ workspaceOrError { ... on Workspace { locationEntries {
                name loadStatus locationOrLoadError { __typename ... on PythonError { message } } } } } }"""
            )
            entries = data["workspaceOrError"]["locationEntries"]
            return entries and entries[0]["loadStatus"] == "LOADED" and entries[0]

        entry = session.wait(location_loaded, 180, "the code location")
        assert entry["name"] == "webdedup"
        assert entry["locationOrLoadError"]["__typename"] == "RepositoryLocation", entry
        session.startup_log = log_path.read_text()
        yield session
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        log.close()


def fixture_months() -> Counter:
    with open(FIXTURE, newline="") as handle:
        return Counter(spread(row["crawled_at"])[:7] for row in csv.DictReader(handle))


def months_doc_ids() -> dict[str, set[str]]:
    ids: dict[str, set[str]] = {}
    with open(FIXTURE, newline="") as handle:
        for row in csv.DictReader(handle):
            ids.setdefault(spread(row["crawled_at"])[:7], set()).add(row["doc_id"])
    return ids


def test_dagster_dev_starts_without_a_warning(ui):
    """Started as the docs say (in DAGSTER_HOME, holding a copy of the checkout's dagster.yaml),
    `dagster dev` warns of nothing, e.g. not of a dagster.yaml it would ignore."""
    assert "Launching Dagster services" in ui.startup_log
    warnings = [line for line in ui.startup_log.splitlines() if " - WARNING - " in line or "Warning:" in line]
    assert not warnings, warnings


def test_the_assets_show_and_the_partitions_are_the_datas_months(ui):
    nodes = ui.graphql("{ assetNodes { assetKey { path } groupName description } }")["assetNodes"]
    assert {n["assetKey"]["path"][-1] for n in nodes} == ASSETS
    assert all(n["groupName"] == "webdedup" and n["description"] for n in nodes)
    months = sorted(fixture_months())
    # the discover_crawl_months sensor (running by default) adds the input's months, and only those
    keys = ui.wait(lambda: ui.partition_keys("documents") or None, 120, "the crawl-month partitions")
    assert keys == months == ["2026-01", "2026-02", "2026-03"]
    assert ui.partition_keys("band_memberships") == months


def test_a_catalog_backfill_is_followed_by_the_global_stages_with_each_months_rows(ui):
    months = fixture_months()
    ui.wait(lambda: len(ui.partition_keys("documents")) == len(months), 120, "the crawl-month partitions")
    # Catalog -> select the three daily assets -> Materialize -> the input's months: an asset backfill
    clicked = time.time()
    launched = ui.graphql(
        """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
        __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }""",
        {"params": {"assetSelection": [{"path": [a]} for a in DAILY], "partitionNames": sorted(months)}},
    )["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched

    def global_run_ended():
        # the manifest's materialization is stored before its asset checks and the run's end
        # event, so wait for the run itself to end, not for the manifest
        ended = {"SUCCESS", "FAILURE", "CANCELED"}
        runs = ui.runs()
        finished = [r for r in runs if r["jobName"] == "webdedup_global" and r["status"] in ended]
        return runs if finished else None

    runs = ui.wait(global_run_ended, 600, "the global stages after the backfill (their run ended)")
    daily_runs = [r for r in runs if r["jobName"] == "__ASSET_JOB" and r["status"] == "SUCCESS"]
    global_runs = [r for r in runs if r["jobName"] == "webdedup_global"]
    assert len(daily_runs) == 1  # a single-run backfill of 3 months
    assert len(global_runs) == 1 and global_runs[0]["status"] == "SUCCESS"  # once for the batch
    # the global run did not wait for the backfill daemon (every 30 s) to mark the backfill completed
    backfill = ui.wait(
        lambda: (
            (
                b := ui.graphql(
                    """query($id: String!) { partitionBackfillOrError(backfillId: $id) {
                ... on PartitionBackfill { status endTimestamp } } }""",
                    {"id": launched["backfillId"]},
                )["partitionBackfillOrError"]
            )["endTimestamp"]
            and b
        ),
        120,
        "the backfill marked completed",
    )
    assert backfill["status"] == "COMPLETED_SUCCESS"
    assert global_runs[0]["creationTime"] < backfill["endTimestamp"], (global_runs[0], backfill)
    tags = {t["key"]: t["value"] for t in global_runs[0]["tags"]}
    assert tags["webdedup/after_run"] == daily_runs[0]["runId"]
    manifest = json.loads((ui.storage.parent / "output" / "manifest.json").read_text())
    assert manifest["counts"]["candidate_pairs"] == 18 and manifest["counts"]["representatives"] == 12
    # each partition reports its own row count, equal to the rows of that month's Parquet file
    ids = months_doc_ids()
    for asset in DAILY:
        events = ui.materializations(asset)
        assert sorted(e["partition"] for e in events) == sorted(months)
        for event in events:
            entries = {m["label"]: m for m in event["metadataEntries"]}
            month = event["partition"]
            path = ui.storage / asset / f"part-{month}.parquet"
            [(rows,)] = duckdb.sql(f"SELECT count(*) FROM read_parquet('{path}')").fetchall()
            assert entries["dagster/row_count"]["intValue"] == rows, (asset, month)
            assert rows == months[month] * (BandingParams().bands if asset == "band_memberships" else 1)
            if asset == "documents":  # the preview shows that month's pages and no other month's
                preview = entries["preview"]["mdStr"]
                others = set().union(*(v for k, v in ids.items() if k != month))
                assert any(f"| {d} |" in preview for d in ids[month])
                assert not any(f"| {d} |" in preview for d in others)
    # the global stages ran in one process
    events = ui.graphql(
        """query($id: ID!) { runOrError(runId: $id) { ... on Run { eventConnection(limit: 500) { events {
        __typename ... on EngineEvent { message } } } } } }""",
        {"id": global_runs[0]["runId"]},
    )["runOrError"]["eventConnection"]["events"]
    messages = [e.get("message", "") for e in events if e["__typename"] == "EngineEvent"]
    assert any("in process" in m for m in messages), messages
    # (durations are printed, not asserted: a time bound in a test fails on a loaded machine)
    manifest_at = ui.materialized_at("manifest")
    daily, glob = daily_runs[0], global_runs[0]
    print(
        f"\nclick-to-manifest: {manifest_at - clicked:.1f} s "
        f"(daily run created +{daily['creationTime'] - clicked:.1f} s, "
        f"started +{daily['startTime'] - clicked:.1f} s, ended +{daily['endTime'] - clicked:.1f} s; global run created "
        f"+{glob['creationTime'] - clicked:.1f} s, started +{glob['startTime'] - clicked:.1f} s; "
        f"manifest +{manifest_at - clicked:.1f} s; global run {glob['endTime'] - glob['startTime']:.1f} s)"
    )


def test_one_months_run_is_followed_by_the_global_stages_within_seconds(ui):
    """Catalog -> a daily asset -> Materialize -> one month: the UI launches one run (no backfill,
    so no wait for the backfill daemon); the global stages follow it. Prints click-to-manifest."""
    ui.wait(lambda: any(r["jobName"] == "webdedup_global" for r in ui.runs()), 600, "the first global run")
    ui.wait(lambda: all(r["status"] in ("SUCCESS", "FAILURE", "CANCELED") for r in ui.runs()), 300, "runs ended")
    before = {r["runId"] for r in ui.runs()}
    clicked = time.time()
    launched = ui.graphql(
        """mutation($params: ExecutionParams!) { launchPipelineExecution(executionParams: $params) {
        __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }""",
        {
            "params": {
                "selector": {
                    "repositoryLocationName": "webdedup",
                    "repositoryName": "__repository__",
                    "pipelineName": "__ASSET_JOB",
                    "assetSelection": [{"path": [a]} for a in DAILY],
                },
                "executionMetadata": {"tags": [{"key": "dagster/partition", "value": "2026-03"}]},
            }
        },
    )["launchPipelineExecution"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    daily_id = launched["run"]["runId"]

    def followed():
        new = [r for r in ui.runs() if r["runId"] not in before and r["jobName"] == "webdedup_global"]
        return new and new[0]["status"] in ("SUCCESS", "FAILURE", "CANCELED") and new[0]

    run = ui.wait(followed, 300, "the global run after the month's run")
    assert run["status"] == "SUCCESS"
    assert {t["key"]: t["value"] for t in run["tags"]}["webdedup/after_run"] == daily_id
    daily = next(r for r in ui.runs() if r["runId"] == daily_id)
    assert daily["status"] == "SUCCESS"
    manifest = json.loads((ui.storage.parent / "output" / "manifest.json").read_text())
    assert manifest["counts"]["candidate_pairs"] == 18 and manifest["counts"]["representatives"] == 12
    manifest_at = ui.materialized_at("manifest")
    print(
        f"\none month, click-to-manifest: {manifest_at - clicked:.1f} s (daily run started "
        f"+{daily['startTime'] - clicked:.1f} s, ended +{daily['endTime'] - clicked:.1f} s; global run created "
        f"+{run['creationTime'] - clicked:.1f} s, started +{run['startTime'] - clicked:.1f} s)"
    )
