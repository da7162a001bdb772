from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from webdedup_assets.defs import defs
from webdedup_assets.engine.storage import Store

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "documents.csv"

CLASSIC = {"shingle_size": 5, "num_perm": 64, "bands": 8, "rows": 8, "threshold": 0.7}


def job_config(
    storage_root: Path,
    output_dir: Path,
    input_path: Path | str = FIXTURE,
    *,
    shingle_size: int = 5,
    num_perm: int = 120,
    seed: int = 1,
    bands: int = 20,
    rows: int = 6,
    threshold: float = 0.8,
    **candidates: Any,
) -> dict[str, Any]:
    ops = {
        "documents": {"input_path": str(input_path)},
        "fingerprinted": {"shingle_size": shingle_size, "num_perm": num_perm, "seed": seed},
        "band_memberships": {"bands": bands, "rows": rows},
        "candidate_pairs": candidates,
        "scored_pairs": {"threshold": threshold},
        "duplicate_pairs": {"threshold": threshold},
    }
    return {
        "ops": {k: {"config": v} for k, v in ops.items()},
        "resources": {"storage": {"config": {"storage_root": str(storage_root), "output_dir": str(output_dir)}}},
        "loggers": {"console": {"config": {"log_level": "CRITICAL"}}},
    }


def run_job(tmp_path: Path, input_path: Path | str = FIXTURE, **params: Any) -> tuple[dg.ExecuteInProcessResult, Store]:
    storage_root = tmp_path / "storage"
    result = defs.resolve_job_def("webdedup_job").execute_in_process(
        run_config=job_config(storage_root, tmp_path / "output", input_path, **params),
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    return result, Store(storage_root)


def failure_messages(result: dg.ExecuteInProcessResult) -> list[str]:
    messages = []
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE":
            data = event.step_failure_data
            if data.user_failure_data is not None and data.user_failure_data.description:
                messages.append(data.user_failure_data.description)
            else:
                messages.append(data.error.to_string())
    return messages


def check_results(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    return {
        e.event_specific_data.check_name: e.event_specific_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }


@pytest.fixture(scope="session")
def fixture_run(tmp_path_factory) -> tuple[dg.ExecuteInProcessResult, Store, Path]:
    tmp = tmp_path_factory.mktemp("fixture_run")
    result, store = run_job(tmp)
    assert result.success, failure_messages(result)
    return result, store, tmp / "output"
