"""`webdedup check` as a Dagster asset (and its job): new data compared with the held corpus.

Thin: the config names the new input and the report; engine.incremental.check_input stages the
new input in a scratch storage with the corpus' parameters and writes one row per new page to the
report; the figures become metadata. Nothing in the corpus storage changes (the report may not be
written inside it). Not part of the global job: launched on demand (the `webdedup_check` job, or
the asset in the catalog).
"""

# No `from __future__ import annotations`: Dagster resolves the config class of the asset function
# from its real annotation.
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field

from .. import engine
from ..engine.incremental import CHECK_SCHEMA, check_input
from ..ingest.inputs import resolve_input
from ..params import InputParams, ParamError
from .assets import GROUP
from .columns import table_schema
from .resources import WebdedupStorage

CHECK_JOB = "webdedup_check"
CHECK_REPORT = "check.parquet"
_FORMAT = InputParams.model_fields["input_format"]


class CheckConfig(dg.Config):
    """What `webdedup check NEW_INPUT --against STORAGE` takes (the storage is the resource's)."""

    input_path: str = Field(
        min_length=1, description="The new data: CSV, Parquet, .warc or .warc.gz file, folder or glob."
    )
    input_format: _FORMAT.annotation = Field(default=_FORMAT.default, description=_FORMAT.description)  # type: ignore[valid-type]
    report_path: str | None = Field(
        default=None,
        description=f"Where the per-page answer goes (Parquet); default: <output_dir>/{CHECK_REPORT}. "
        "Never inside the storage root.",
    )


def duplicates_markdown(preview: list[dict[str, Any]]) -> str:
    """The first duplicates found, as a Markdown table (or a sentence when there are none)."""
    if not preview:
        return "No page of the new input duplicates a page of the corpus."
    lines = [
        "| new doc_id | corpus doc_id | corpus cluster | exact Jaccard |",
        "|---|---|---|---|",
    ]
    for row in preview:
        lines.append(
            f"| {row['doc_id']} | {row['matched_doc_id']} | {row['matched_cluster_id'] or ''} "
            f"| {row['exact_jaccard']:.4f} |"
        )
    return "\n".join(lines)


@dg.asset(
    group_name=GROUP,
    kinds={"python", "parquet"},
    deps=["manifest"],
    description=(
        "New data checked against the held corpus (webdedup check): each new page, whether it duplicates a "
        "corpus page (exact Jaccard >= the corpus' threshold), which page and cluster, the Jaccard and the "
        "candidates verified. Written to the report path; the corpus storage is not changed."
    ),
    metadata={
        "dagster/column_schema": table_schema("checked_documents", [(f.name, str(f.type)) for f in CHECK_SCHEMA])
    },
)
def checked_documents(config: CheckConfig, storage: WebdedupStorage) -> dg.MaterializeResult:
    report = Path(config.report_path) if config.report_path else Path(storage.outputs()) / CHECK_REPORT
    try:
        resolve_input(config.input_path, config.input_format)  # a missing input is named as such
        summary = check_input(storage.store(), config.input_path, config.input_format, report)
    except (engine.WebdedupError, ParamError) as err:
        raise dg.Failure(description=str(err), allow_retries=False) from None
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": dg.MetadataValue.int(summary["documents"]),
            "documents": dg.MetadataValue.int(summary["documents"]),
            "duplicates": dg.MetadataValue.int(summary["duplicates"]),
            "candidates_verified": dg.MetadataValue.int(summary["candidate_pairs"]),
            "threshold": dg.MetadataValue.float(float(summary["threshold"])),
            "input_path": dg.MetadataValue.text(config.input_path),
            "input_days": dg.MetadataValue.json(summary["input_days"]),
            "report": dg.MetadataValue.path(summary["report"]),
            "first_duplicates": dg.MetadataValue.md(duplicates_markdown(summary["preview"])),
            "seconds": dg.MetadataValue.float(float(summary["seconds"])),
        }
    )


check_job = dg.define_asset_job(
    CHECK_JOB,
    selection=dg.AssetSelection.assets(checked_documents),
    executor_def=dg.in_process_executor,
    description="Check new data against the held corpus (webdedup check): config input_path, input_format, "
    "report_path. Changes nothing in the storage.",
)
