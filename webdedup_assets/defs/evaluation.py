"""The evaluation as a Dagster asset (and its job): `webdedup evaluate` materializable from the UI.

Thin: the config maps onto quality.evaluate.evaluate_run's options; the figures become metadata
through quality.evaluate_report. Not part of the global job: evaluating costs an exact similarity
join and is launched on demand (the `webdedup_evaluate` job, or the asset in the catalog).
"""

# No `from __future__ import annotations`: Dagster resolves the config class of the asset function
# from its real annotation.
from pathlib import Path

import dagster as dg
from pydantic import Field

from .. import engine
from ..quality import evaluate as engine_evaluate
from ..quality import evaluate_report
from .assets import GROUP
from .resources import WebdedupStorage

EVALUATE_JOB = "webdedup_evaluate"


class EvaluateConfig(dg.Config):
    """What `webdedup evaluate` takes; every field optional (no labels: the exact reference only)."""

    labels_path: str | None = Field(
        default=None, description="Pairs file (left_doc_id, right_doc_id, is_duplicate), CSV or Parquet."
    )
    label_column: str | None = Field(default=None, description="A column of the documents naming the true cluster.")
    thresholds: list[float] = Field(
        default=list(engine_evaluate.DEFAULT_THRESHOLDS), description="Thresholds of the sweep (the run's is added)."
    )
    reference: bool = Field(default=True, description="Compute the exact reference (LSH miss rate per Jaccard bin).")
    reference_floor: float | None = Field(default=None, description="Lowest Jaccard of the reference (default 0.5).")
    sample: int | None = Field(default=None, description="Evaluate on this many sampled documents.")
    seed: int = Field(default=0, description="Seed of the sample.")
    giant_size: int = Field(default=engine_evaluate.DEFAULT_GIANT_SIZE, description="Cluster size flagged giant.")
    plots: bool = Field(default=True, description="Draw the PNG plots.")
    max_pair_slots: int = Field(
        default=engine_evaluate.MAX_PAIR_SLOTS,
        description="Budget of the exact reference's join (pair slots); over it, refused.",
    )


@dg.asset(
    group_name=GROUP,
    kinds={"python", "csv"},
    deps=["manifest"],
    description=(
        "Quality of the run: with labels, pairwise precision, recall, F1 and ARI for the run and a threshold "
        "sweep; without, the LSH miss rate per Jaccard bin against an exact similarity join; cluster "
        "diagnostics; CSV tables and PNG plots in <output>/evaluation (webdedup evaluate)."
    ),
)
def evaluation(config: EvaluateConfig, storage: WebdedupStorage) -> dg.MaterializeResult:
    store = storage.store()
    out_dir = Path(storage.outputs()) / "evaluation"

    def call() -> dict:
        return engine_evaluate.evaluate_run(
            store,
            out_dir,
            labels_path=Path(config.labels_path) if config.labels_path else None,
            label_column=config.label_column,
            thresholds=list(config.thresholds),
            sample=config.sample,
            reference=config.reference,
            reference_floor=config.reference_floor,
            giant_size=config.giant_size,
            seed=config.seed,
            plots=config.plots,
            max_pair_slots=config.max_pair_slots,
        )

    try:
        summary = call()
    except engine.WebdedupError as err:
        raise dg.Failure(description=str(err), allow_retries=False) from None
    metadata: dict[str, dg.MetadataValue] = {
        name: dg.MetadataValue.float(value) for name, value in evaluate_report.evaluation_numbers(summary).items()
    }
    metadata.update(
        {name: dg.MetadataValue.md(text) for name, text in evaluate_report.evaluation_tables(summary).items()}
    )
    metadata.update(
        {
            f"file/{name}": dg.MetadataValue.path(path)
            for name, path in evaluate_report.evaluation_files(summary).items()
        }
    )
    metadata["seconds"] = dg.MetadataValue.float(float(summary.get("seconds") or 0.0))
    return dg.MaterializeResult(metadata=metadata)


evaluate_job = dg.define_asset_job(
    EVALUATE_JOB,
    selection=dg.AssetSelection.assets(evaluation),
    executor_def=dg.in_process_executor,
    description="Evaluate the stored run (webdedup evaluate): config labels_path (optional), thresholds, reference.",
)
