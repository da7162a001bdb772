"""Headless UI test: `dagster dev` on 127.0.0.1, the code location loads, the nine assets show,
a launched materialization succeeds; the whole process group is stopped afterwards."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from .conftest import REPO

pytestmark = pytest.mark.ui

ASSETS = {
    "documents",
    "fingerprinted",
    "band_memberships",
    "candidate_pairs",
    "scored_pairs",
    "duplicate_pairs",
    "clusters",
    "deduped_documents",
    "manifest",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _graphql(port: int, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        payload = json.loads(response.read())
    assert "errors" not in payload, payload
    return payload["data"]


def _wait(predicate, timeout: float, what: str):
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
    raise AssertionError(f"timed out waiting for {what}; last: {last}")


def test_dagster_dev_shows_the_assets_and_runs_the_job(tmp_path):
    port = _free_port()
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "WEBDEDUP_STORAGE_ROOT": str(tmp_path / "storage"),
        "WEBDEDUP_OUTPUT_DIR": str(tmp_path / "output"),
    }
    dagster = Path(sys.executable).with_name("dagster")
    log = open(tmp_path / "dagster_dev.log", "w")
    proc = subprocess.Popen(
        [str(dagster), "dev", "-w", str(REPO / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5).status == 200,
            180,
            "the webserver",
        )

        def location_loaded():
            data = _graphql(
                port,
                """{ workspaceOrError { ... on Workspace { locationEntries {
                name loadStatus locationOrLoadError { __typename ... on PythonError { message } } } } } }""",
            )
            entries = data["workspaceOrError"]["locationEntries"]
            return entries and entries[0]["loadStatus"] == "LOADED" and entries[0]

        entry = _wait(location_loaded, 180, "the code location")
        assert entry["name"] == "webdedup"
        assert entry["locationOrLoadError"]["__typename"] == "RepositoryLocation", entry
        nodes = _graphql(port, "{ assetNodes { assetKey { path } groupName description } }")["assetNodes"]
        assert {n["assetKey"]["path"][-1] for n in nodes} == ASSETS
        assert all(n["groupName"] == "webdedup" and n["description"] for n in nodes)

        # Launch the daily job over the fixture's crawl days as one single-run backfill range; the
        # global stages then run on their own: the run-status sensor is on by default.
        launched = _graphql(
            port,
            """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
            __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
            ... on RunConfigValidationInvalid { errors { message } } } }""",
            {
                "params": {
                    "selector": {
                        "repositoryLocationName": "webdedup",
                        "repositoryName": "__repository__",
                        "jobName": "webdedup_daily",
                    },
                    "runConfigData": {},
                    "executionMetadata": {
                        "tags": [
                            {"key": "dagster/asset_partition_range_start", "value": "2026-03-01"},
                            {"key": "dagster/asset_partition_range_end", "value": "2026-03-22"},
                        ]
                    },
                }
            },
        )["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        run_id = launched["run"]["runId"]

        def finished(run_id=run_id):
            status = _graphql(
                port, """query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }""", {"id": run_id}
            )["runOrError"]["status"]
            return status if status in {"SUCCESS", "FAILURE", "CANCELED"} else None

        def log_tail():
            return (tmp_path / "dagster_dev.log").read_text()[-3000:]

        assert _wait(finished, 300, "the daily run") == "SUCCESS", log_tail()
        manifest_path = tmp_path / "output" / "manifest.json"
        _wait(manifest_path.exists, 300, "the sensor-triggered global run to write the manifest")
        manifest = json.loads(manifest_path.read_text())
        assert manifest["counts"]["candidate_pairs"] == 18 and manifest["counts"]["representatives"] == 12
        runs = _graphql(port, "{ runsOrError { ... on Runs { results { jobName status } } } }")
        assert "webdedup_global" in {r["jobName"] for r in runs["runsOrError"]["results"]}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        log.close()
