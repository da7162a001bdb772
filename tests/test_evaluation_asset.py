"""The evaluation as a Dagster asset/job (defs/evaluation.py): materialized with config, its
metadata carries P/R/F1, the miss rate per Jaccard bin and the files it wrote."""

from __future__ import annotations

import csv
from pathlib import Path

import dagster as dg
import pytest

from webdedup_assets.defs import build_defs
from webdedup_assets.defs.evaluation import EVALUATE_JOB

from .conftest import run_job

LABELLED = Path(__file__).resolve().parents[1] / "fixtures" / "labelled"


@pytest.fixture(scope="module")
def labelled_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("evaluation_asset")
    events, store = run_job(tmp, LABELLED / "documents.csv")
    assert events.success
    return tmp


def _evaluate(tmp: Path, config: dict) -> dict:
    defs = build_defs()
    run_config = {
        "ops": {"evaluation": {"config": config}},
        "resources": {"storage": {"config": {"storage_root": str(tmp / "storage"), "output_dir": str(tmp / "output")}}},
    }
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(EVALUATE_JOB).execute_in_process(
            run_config=run_config, instance=instance, raise_on_error=False
        )
        assert result.success, [e.message for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
        [materialization] = result.asset_materializations_for_node("evaluation")
    return {k: v.value for k, v in materialization.metadata.items()}


def test_evaluation_with_labels_reports_the_labelled_metrics(labelled_run):
    metadata = _evaluate(labelled_run, {"labels_path": str(LABELLED / "pairs.csv"), "thresholds": [0.6, 0.7, 0.8]})
    # the labelled set's pinned figures at the defaults (tests/test_labelled_set.py, BENCHMARKS.md)
    with open(labelled_run / "output" / "evaluation" / "threshold_sweep.csv", newline="") as handle:
        sweep = {float(r["threshold"]): r for r in csv.DictReader(handle)}
    assert set(sweep) == {0.6, 0.7, 0.8}
    assert metadata["labels/precision"] == pytest.approx(float(sweep[0.7]["precision"]))
    assert metadata["labels/recall"] == pytest.approx(float(sweep[0.7]["recall"]))
    assert metadata["labels/f1"] == pytest.approx(float(sweep[0.7]["f1"]))
    assert metadata["labels/labelled_pairs"] == 900
    assert metadata["reference/lsh_recall_at_threshold"] == 1.0
    sweep_md = metadata["threshold_sweep"].splitlines()
    assert sweep_md[0].startswith("| threshold | duplicate_pairs | precision | recall | f1")
    assert len(sweep_md) == 2 + 3
    bins = metadata["miss_rate_by_jaccard_bin"].splitlines()
    assert bins[0].startswith("| jaccard_from | jaccard_to | exact_pairs | lsh_candidates | miss_rate")
    for name in ("s_curve_png", "precision_recall_png", "candidate_jaccard_png", "jaccard_bins"):
        assert Path(metadata[f"file/{name}"]).exists(), name


def test_evaluation_without_labels_or_reference(labelled_run):
    metadata = _evaluate(labelled_run, {"reference": False, "plots": False})
    assert not any(k.startswith("labels/") or k.startswith("reference/") for k in metadata)
    assert "miss_rate_by_jaccard_bin" not in metadata and "threshold_sweep" not in metadata
    assert metadata["run/threshold"] == 0.7 and metadata["clusters/low_cohesion"] == 1
    assert "file/s_curve_png" not in metadata


def test_a_bad_labels_path_fails_the_step_with_the_message(labelled_run):
    defs = build_defs()
    run_config = {
        "ops": {"evaluation": {"config": {"labels_path": str(labelled_run / "missing.csv")}}},
        "resources": {
            "storage": {
                "config": {"storage_root": str(labelled_run / "storage"), "output_dir": str(labelled_run / "output")}
            }
        },
    }
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(EVALUATE_JOB).execute_in_process(
            run_config=run_config, instance=instance, raise_on_error=False
        )
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "missing.csv" in failure.event_specific_data.error.message or "missing.csv" in str(
        failure.event_specific_data
    )
