from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from webdedup_assets.defs.config import run_config_ops
from webdedup_assets.params import STAGE_GROUPS, RunParams
from webdedup_assets.storage.store import Store

from .dagster_runs import execute

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "documents.csv"

CLASSIC = {"shingle_size": 5, "num_perm": 64, "bands": 8, "rows": 8, "threshold": 0.7}


def stage_params(**overrides: Any) -> dict[str, Any]:
    """{group: model} of webdedup_assets.params with the given fields overridden, each group
    validated alone (so a test can build deliberately inconsistent runs, e.g. new num_perm only)."""
    groups = {}
    for group, model in STAGE_GROUPS.items():
        groups[group] = model.checked({k: v for k, v in overrides.items() if k in model.model_fields})
    unknown = set(overrides) - {f for model in STAGE_GROUPS.values() for f in model.model_fields}
    assert not unknown, f"not parameters: {unknown}"
    return groups


def job_config(
    storage_root: Path, output_dir: Path, input_path: Path | str = FIXTURE, **overrides: Any
) -> dict[str, Any]:
    """The run config `webdedup run` would use: the model's defaults with `overrides` (any field)."""
    run = RunParams.model_construct(**stage_params(**overrides))  # not cross-checked: see stage_params
    return {
        "ops": run_config_ops(run, str(input_path)),
        "resources": {"storage": {"config": {"storage_root": str(storage_root), "output_dir": str(output_dir)}}},
        "loggers": {"console": {"config": {"log_level": "CRITICAL"}}},
    }


class RunEvents:
    """The events of a `webdedup run`-style execution (daily range run, then the global run)."""

    def __init__(self, events: list):
        self.all_events = events

    @property
    def success(self) -> bool:
        failed = any(e.event_type_value == "STEP_FAILURE" for e in self.all_events)
        done = any(
            e.event_type_value == "ASSET_MATERIALIZATION" and e.asset_key.to_user_string() == "manifest"
            for e in self.all_events
        )
        return done and not failed


def run_job(tmp_path: Path, input_path: Path | str = FIXTURE, **params: Any) -> tuple[RunEvents, Store]:
    """Run every crawl day of the input and then the global stages, as `webdedup run` does."""
    storage_root = tmp_path / "storage"
    config = job_config(storage_root, tmp_path / "output", input_path, **params)
    return RunEvents(execute(str(input_path), config)), Store(storage_root)


def failure_messages(result) -> list[str]:
    messages = []
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE":
            data = event.step_failure_data
            if data.user_failure_data is not None and data.user_failure_data.description:
                messages.append(data.user_failure_data.description)
            else:
                messages.append(data.error.to_string())
    return messages


def check_results(result) -> dict[str, Any]:
    return {
        e.event_specific_data.check_name: e.event_specific_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }


@pytest.fixture(scope="session")
def fixture_run(tmp_path_factory) -> tuple[RunEvents, Store, Path]:
    tmp = tmp_path_factory.mktemp("fixture_run")
    result, store = run_job(tmp)
    assert result.success, failure_messages(result)
    return result, store, tmp / "output"


@pytest.fixture(autouse=True)
def _drop_progress_handlers():
    """`webdedup run` (cmd_run) adds a stderr handler to the progress logger on each in-process
    call and never removes it; under pytest that stderr is a capture closed after the test, so a
    later test would log into a closed stream ("--- Logging error ---")."""
    import logging

    from webdedup_assets.cli.progress import PROGRESS_LOGGER

    yield
    logger = logging.getLogger(PROGRESS_LOGGER)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)


@pytest.fixture(autouse=True)
def _no_leaked_defs_state_storage():
    """Each test starts and ends without a current Dagster defs-state storage.

    Entering a DagsterInstance (instance_for_test, sensor and schedule contexts built without
    `with`) sets a context variable pointing at the instance's state storage; when such a context
    is finalized later by the garbage collector, it restores whatever the variable held before,
    possibly the storage of an instance already collected, and the next Definitions built in this
    process fail with "Attempted to resolve undefined DagsterInstance weakref" (seen only in some
    orders of the whole suite). Collecting garbage here runs those finalizers at a known point."""
    import gc

    from dagster._core.storage.defs_state.base import _current_storage

    gc.collect()
    _current_storage.set(None)
    yield
    gc.collect()
    _current_storage.set(None)


@pytest.fixture(scope="module")
def s3_server():
    """moto's S3 protocol server on 127.0.0.1 for one test module, the AWS variables pointing at it
    (and put back after); yields its endpoint URL."""
    pytest.importorskip("moto")
    from moto.server import ThreadedMotoServer

    from webdedup_assets.storage import objects

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no request log on stderr
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    names = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ENDPOINT_URL")
    saved = {k: os.environ.get(k) for k in names}
    endpoint = f"http://{host}:{port}"
    os.environ.update(
        AWS_ACCESS_KEY_ID="webdedup-test",
        AWS_SECRET_ACCESS_KEY="webdedup-test",
        AWS_REGION="us-east-1",
        AWS_ENDPOINT_URL=endpoint,
    )
    try:
        yield endpoint
    finally:
        objects._systems.clear()  # the next module's file systems are its own
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
