"""The daily assets (documents, fingerprinted, band_memberships, per crawl month) and what every
asset shares: run_stage (writer lock, errors as Failures), run_contract, materialized. Thin: read
config, run the stage, report metadata (per month: report_months). The global assets are in
global_assets.py."""

import base64
import json
import logging
import re
from collections.abc import Callable
from typing import Any

import dagster as dg

from .. import engine
from ..core.fingerprint import fingerprint_method
from ..core.minhash import candidate_probability
from ..core.simhash import candidate_probability_at_distance
from ..engine.preview import markdown_table, partition_previews, preview
from ..engine.stage import StageResult
from ..ingest.inputs import resolve_input
from ..params import BandingParams, ColumnParams, ParamGroup
from ..storage.serial import stored_value
from ..storage.state import writer_lock
from ..storage.store import Store
from . import charts
from .columns import table_schema
from .config import (
    BandConfig,
    DocumentsConfig,
    FingerprintConfig,
)
from .partitions import CRAWL_MONTHS
from .resources import WebdedupEngine, WebdedupStorage

GROUP = "webdedup"
KINDS = {"parquet", "duckdb"}


PROGRESS = logging.getLogger("webdedup.progress")
DAILY_STAGES = {"documents", "fingerprinted", "band_memberships"}
# A stage waits this long for the storage's writer lock (another run's global stages, a
# `webdedup run`) before it fails naming the holder.
LOCK_TIMEOUT_SECONDS = 600.0


def run_stage(name: str, store: Store, call: Callable[[], Any]) -> Any:
    """Run a stage under the storage's writer lock (shared by the daily stages of different
    months, exclusive for the global ones); engine errors become a dagster Failure whose
    description is the user-facing message."""
    PROGRESS.info("%-18s running", name)
    try:
        with writer_lock(store.root, exclusive=name not in DAILY_STAGES, timeout=LOCK_TIMEOUT_SECONDS, purpose=name):
            result = call()
    except engine.WebdedupError as err:
        PROGRESS.info("%-18s failed", name)
        raise dg.Failure(description=str(err), allow_retries=False) from None
    if isinstance(result, StageResult):
        rows, seconds = result.rows, result.seconds
    else:  # documents and manifest: a dict of figures
        rows = result.get("rows", result.get("counts", {}).get("representatives"))
        seconds = result.get("seconds") or result.get("timings_seconds", {}).get("manifest")
    PROGRESS.info("%-18s done: %s rows in %.2f s", name, rows, seconds or 0.0)
    return result


def run_contract(
    name: str,
    storage: WebdedupStorage,
    params: ParamGroup | None,
    months: list[str] | None = None,
    engine_choice: WebdedupEngine | None = None,
) -> StageResult:
    """A stage of the contract (engine.stage) on the chosen engine (DuckDB when none), under run_stage."""
    store = storage.store()
    if engine_choice is None:
        return run_stage(name, store, lambda: engine.DUCKDB.run(name, store, params, months))
    return run_stage(name, store, lambda: engine_choice.run(name, store, params, months))


def materialized(
    storage: WebdedupStorage,
    result: StageResult,
    parameters: dict[str, Any],
    order_by: str | None = None,
    **extra: Any,
) -> dg.MaterializeResult:
    """Row count, column schema, parameters, each figure as its own number (the UI plots it
    across materializations), a Markdown preview and the path."""
    store = storage.store()
    asset = result.stage
    numeric = charts.numeric(result.figures)
    metadata: dict[str, Any] = {
        "dagster/row_count": dg.MetadataValue.int(int(result.rows)),
        "dagster/column_schema": column_schema(store, asset),
        "parameters": dg.MetadataValue.json(parameters),
        "stats": dg.MetadataValue.json({**numeric, "seconds": result.seconds}),
        **figure_entries({**numeric, "seconds": result.seconds}),
        "path": dg.MetadataValue.path(str(store.asset_dir(asset))),
    }
    if storage.ui_previews:
        metadata["preview"] = dg.MetadataValue.md(preview(store, asset, order_by=order_by))
    metadata.update(extra)
    return dg.MaterializeResult(metadata=metadata)


def figure_entries(figures: dict[str, Any], prefix: str = "") -> dict[str, dg.MetadataValue]:
    """One numeric metadata entry per figure (`<prefix><name>`)."""
    return {
        f"{prefix}{name}": dg.MetadataValue.int(value) if isinstance(value, int) else dg.MetadataValue.float(value)
        for name, value in charts.numeric(figures).items()
    }


def column_schema(store: Store, asset: str) -> dg.TableSchema:
    """`dagster/column_schema`: the stored columns, their Arrow types and what each means."""
    return table_schema(asset, charts.column_schema(store, asset))


S_CURVE_JACCARDS = (0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
# The UI shows a Markdown entry inline below this many characters, behind [Show Markdown] beyond
# (dagster-webserver 1.13): a PNG chart never fits, its table of numbers always does.
INLINE_MARKDOWN_CHARS = 1000


def s_curve_table(bands: int, rows: int, threshold: float | None = None) -> dg.MetadataValue:
    """The banding's S-curve as numbers: P(candidate) at a few Jaccards (and at the threshold)."""
    jaccards = sorted({*S_CURVE_JACCARDS, *([threshold] if threshold is not None else [])})
    curve = [(j, round(candidate_probability(j, bands, rows), 4)) for j in jaccards]
    return dg.MetadataValue.md(markdown_table(["jaccard", "P(candidate)"], curve))


def candidate_probability_table(parameters: dict[str, Any], threshold: float | None = None) -> dg.MetadataValue:
    """P(candidate) as numbers for the stored parameters of a stage: the S-curve of MinHash bands, or
    for SimHash by the Hamming distance of two fingerprints (1 within max_hamming, then falling)."""
    banding = parameters.get("banding") or {}
    if fingerprint_method(parameters.get("fingerprint") or {}) != "simhash":
        return s_curve_table(banding["bands"], banding["rows"], threshold)
    max_hamming = stored_value(BandingParams, banding, "max_hamming")
    key_blocks = stored_value(BandingParams, banding, "key_blocks")
    curve = []
    for distance in range(65):
        probability = candidate_probability_at_distance(distance, max_hamming, key_blocks)
        if probability < 0.001:
            break
        curve.append((distance, round(probability, 4)))
    return dg.MetadataValue.md(markdown_table(["hamming distance", "P(candidate)"], curve))


def png_markdown(title: str, png: bytes) -> dg.MetadataValue:
    """A chart shown in the UI: a Markdown image with the PNG inline."""
    return dg.MetadataValue.md(f"![{title}](data:image/png;base64,{base64.b64encode(png).decode()})")


MONTH_KEY = re.compile(r"\d{4}-(0[1-9]|1[0-2])")


def _months(context: dg.AssetExecutionContext) -> list[str]:
    """The crawl months of this run: one partition, or a whole range in a single-run backfill."""
    months = sorted(context.partition_keys)
    wrong = [key for key in months if not MONTH_KEY.fullmatch(key)]
    if wrong:  # e.g. a crawl day: partitions of an older webdedup, or typed by hand
        raise dg.Failure(
            description=f"crawl_months partition keys are months (YYYY-MM); got {', '.join(map(repr, wrong[:3]))}",
            allow_retries=False,
        )
    return months


def _coverage(context: dg.AssetExecutionContext) -> list[str]:
    """The crawl months known as partitions (documents dated in any other month are reported)."""
    partitions_def = context.assets_def.partitions_def
    if isinstance(partitions_def, dg.DynamicPartitionsDefinition):
        return sorted(context.instance.get_dynamic_partitions(CRAWL_MONTHS))
    return sorted(partitions_def.get_partition_keys())  # build_defs(months): the months given


def report_months(context: dg.AssetExecutionContext, storage: WebdedupStorage, asset: str, months: list[str]) -> int:
    """Give each crawl month of the run its own row count, preview, figures and files.

    A single-run backfill materializes many partitions with one MaterializeResult, whose
    metadata Dagster copies to every partition; what differs per month is added per partition
    here, from the stats the engine wrote (one small JSON each) and one preview scan. Returns
    the rows of the run."""
    store = storage.store()
    previews = partition_previews(store, asset, months) if storage.ui_previews else {}
    per_month: dict[str, dict[str, Any]] = {}
    schema = column_schema(store, asset)
    total = 0
    for month in months:
        stats_path = store.stats_path(asset, month)
        stats = json.loads(stats_path.read_text()) if stats_path.exists() else {"rows": 0}
        rows = int(stats.get("rows", 0))
        total += rows
        files = [p.name for p in store.partition_files(asset, month)]
        per_month[month] = {
            "dagster/row_count": dg.MetadataValue.int(rows),
            **(
                {"preview": dg.MetadataValue.md(previews.get(month, f"no {asset} rows in {month}"))}
                if storage.ui_previews
                else {}
            ),
            "month_stats": dg.MetadataValue.json({k: v for k, v in stats.items() if k != "sources"}),
            "path": dg.MetadataValue.path(str(store.asset_dir(asset))),
            "files": dg.MetadataValue.json(files),
            "dagster/column_schema": schema,
        }
    _add_partition_metadata(context, per_month)
    return total


def _add_partition_metadata(context: dg.AssetExecutionContext, per_month: dict[str, dict[str, Any]]) -> None:
    """Each crawl month's own metadata, on its partition (the run's months: a few dozen calls)."""
    for month, metadata in per_month.items():
        context.add_asset_metadata(metadata, partition_key=month)


TABULAR_FORMATS = {"csv", "parquet", "jsonl"}
WARC_OPTIONS = {"warc_max_record_bytes", "warc_workers"}


def input_parameters(values: dict[str, Any]) -> dict[str, Any]:
    """The documents config restricted to what applies to the input's formats: the column mapping
    for CSV, Parquet and JSON Lines, the WARC options for WARC files, the Common Crawl settings for
    Common Crawl targets (always the path and the format)."""
    formats = {f.format for f in resolve_input(values["input_path"], values["input_format"])}
    keep = {"input_path", "input_format"}
    if formats & TABULAR_FORMATS:
        keep |= set(ColumnParams.model_fields)
    if "warc" in formats:
        keep |= WARC_OPTIONS
    if "commoncrawl" in formats:
        keep |= {"warc_max_record_bytes"} | {k for k in values if k.startswith("cc_")}
    return {k: v for k, v in values.items() if k in keep}


def run_metadata(seconds: float, parameters: dict[str, Any], months: list[str], rows: int) -> dict[str, Any]:
    """What every partition of a run shares: the parameters (the automation launches the next
    runs with them) and the run's range and total, labelled as the run's so that no month shows
    another month's figures. (Kept small: Dagster stores it once per partition.)"""
    return {
        "parameters": dg.MetadataValue.json(parameters),
        "run_months": dg.MetadataValue.text(
            f"{months[0]} .. {months[-1]} ({len(months)} month(s), {rows} rows in all, {seconds or 0:.2f} s)"
        ),
    }


def build_daily_assets(partitions_def: dg.PartitionsDefinition) -> list[dg.AssetsDefinition]:
    """documents, fingerprinted and band_memberships, partitioned by crawl month.

    A single-run backfill policy lets a range of months (`--partition-range`, UI backfills,
    `webdedup run`) run as one run: each stage reads the input once for the whole range.
    """
    daily = {
        "partitions_def": partitions_def,
        "backfill_policy": dg.BackfillPolicy.single_run(),
        "group_name": GROUP,
        "kinds": KINDS,
    }

    @dg.asset(
        **daily,
        description=(
            "Validated input documents of one crawl month (CSV, Parquet, JSON Lines or WARC: file, folder or glob; "
            "or Common Crawl byte ranges). Columns doc_id, source, domain, crawled_at, title, body, read through the "
            "column mapping (id_column, text_column, ...); keeps every other field; crawled_at typed as a date. "
            "Partitions are the crawl months present (dynamic partitions "
            "`crawl_months`); documents dated outside them are counted and named in the metadata; WARC records "
            "that are not pages are counted by kind and listed in rejected_records."
        ),
    )
    def documents(
        context: dg.AssetExecutionContext, config: DocumentsConfig, storage: WebdedupStorage
    ) -> dg.MaterializeResult:
        months = _months(context)
        coverage = _coverage(context)
        store = storage.store()
        info = run_stage(
            "documents",
            store,
            lambda: engine.stage_documents(
                store,
                config.input_path,
                config.input_format,
                months=months,
                coverage=coverage,
                warc_options=config.warc_options(),
                mapping=config.mapping(),
            ),
        )
        warc = {}
        if info.get("warc"):  # WARC input: what was skipped or rejected, by kind (listed in rejected_records)
            warc = {
                "warc": dg.MetadataValue.json(info["warc"]),
                "warc_not_documents": dg.MetadataValue.int(info["warc"]["not_documents"]),
            }
        outside = info.get("documents_outside_partitions", 0)
        if outside or info.get("files_outside_partitions"):
            context.log.warning(
                f"{outside} document(s) read are dated in months that are not crawl-month partitions "
                f"({', '.join(info['months_outside_partitions'])}), first: {info['doc_ids_outside_partitions']}; "
                f"files dated outside: "
                f"{info['files_outside_partitions']}. The discover_crawl_months sensor adds the input's months as "
                "partitions (or use `webdedup run`, which partitions by the input's months)."
            )
        rows = report_months(context, storage, "documents", months)
        return dg.MaterializeResult(
            metadata={
                **run_metadata(info.get("seconds"), input_parameters(config.model_dump()), months, rows),
                "documents_outside_partitions": dg.MetadataValue.int(outside),
                "doc_ids_outside_partitions": dg.MetadataValue.json(info.get("doc_ids_outside_partitions", [])),
                "months_outside_partitions": dg.MetadataValue.json(info.get("months_outside_partitions", [])),
                **warc,
            }
        )

    @dg.asset(
        **daily,
        deps=[documents],
        description=(
            "Per document: token count, shingle count and MinHash signature over ordered k-token shingles "
            "of the normalized text (compiled kernel, streamed in record batches). Built per crawl month."
        ),
    )
    def fingerprinted(
        context: dg.AssetExecutionContext, config: FingerprintConfig, storage: WebdedupStorage, engine: WebdedupEngine
    ) -> dg.MaterializeResult:
        months = _months(context)
        result = run_contract("fingerprinted", storage, config.params(), months, engine_choice=engine)
        rows = report_months(context, storage, "fingerprinted", months)
        return dg.MaterializeResult(metadata=run_metadata(result.seconds, config.model_dump(), months, rows))

    @dg.asset(
        **daily,
        deps=[fingerprinted],
        description=(
            "LSH band keys: one row per document per band (doc_id, band_index, band_hash). Documents without "
            "shingles get none and can never be candidates. Built per crawl month."
        ),
    )
    def band_memberships(
        context: dg.AssetExecutionContext, config: BandConfig, storage: WebdedupStorage, engine: WebdedupEngine
    ) -> dg.MaterializeResult:
        months = _months(context)
        result = run_contract("band_memberships", storage, config.params(), months, engine_choice=engine)
        rows = report_months(context, storage, "band_memberships", months)
        return dg.MaterializeResult(
            metadata={
                **run_metadata(result.seconds, config.model_dump(), months, rows),
                "candidate_probability": candidate_probability_table(result.parameters),
            }
        )

    return [documents, fingerprinted, band_memberships]
