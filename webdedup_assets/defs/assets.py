"""The nine assets. Thin: read config, call the engine stage, report metadata."""

import logging
from collections.abc import Callable
from typing import Any

import dagster as dg

from .. import engine
from ..core.minhash import candidate_probability
from ..engine.preview import markdown_table, preview
from ..engine.state import writer_lock
from ..engine.storage import Store
from .config import (
    BandConfig,
    CandidateConfig,
    DocumentsConfig,
    DuplicateConfig,
    FingerprintConfig,
    RepresentativeConfig,
    ScoreConfig,
)
from .resources import WebdedupStorage

GROUP = "webdedup"
KINDS = {"parquet", "duckdb"}


PROGRESS = logging.getLogger("webdedup.progress")
STAGE_ASSETS = {"fingerprint_days": "fingerprinted", "band_days": "band_memberships"}


DAILY_STAGES = {"documents", "fingerprinted", "band_memberships"}
# A stage waits this long for the storage's writer lock (another run's global stages, a
# `webdedup run`) before it fails naming the holder.
LOCK_TIMEOUT_SECONDS = 600.0


def run_stage(stage: Callable[..., dict[str, Any]], store: Store, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Run an engine stage under the storage's writer lock (shared by the daily stages of
    different days, exclusive for the global ones); engine errors become a dagster Failure
    whose description is the user-facing message."""
    name = STAGE_ASSETS.get(stage.__name__, stage.__name__.removeprefix("stage_"))
    PROGRESS.info("%-18s running", name)
    try:
        with writer_lock(store.root, exclusive=name not in DAILY_STAGES, timeout=LOCK_TIMEOUT_SECONDS, purpose=name):
            info = stage(store, *args, **kwargs)
    except engine.WebdedupError as err:
        PROGRESS.info("%-18s failed", name)
        raise dg.Failure(description=str(err), allow_retries=False) from None
    seconds = info.get("seconds") or info.get("timings_seconds", {}).get("manifest")
    rows = info.get("rows", info.get("counts", {}).get("representatives"))
    PROGRESS.info("%-18s done: %s rows in %.2f s", name, rows, seconds or 0.0)
    return info


def materialized(
    storage: WebdedupStorage,
    asset: str,
    info: dict[str, Any],
    parameters: dict[str, Any],
    order_by: str | None = None,
    partition: str | None = None,
    **extra: Any,
) -> dg.MaterializeResult:
    """Row count, parameters, figures, a Markdown preview (of `partition` when given) and the path."""
    store = storage.store()
    stats = {k: v for k, v in info.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "rows"}
    metadata: dict[str, Any] = {
        "dagster/row_count": dg.MetadataValue.int(int(info["rows"])),
        "parameters": dg.MetadataValue.json(parameters),
        "stats": dg.MetadataValue.json(stats),
        "preview": dg.MetadataValue.md(preview(store, asset, order_by=order_by, partition=partition)),
        "path": dg.MetadataValue.path(str(store.asset_dir(asset))),
    }
    metadata.update(extra)
    return dg.MaterializeResult(metadata=metadata)


def _days(context: dg.AssetExecutionContext) -> list[str]:
    """The crawl days of this run: one partition, or a whole range in a single-run backfill."""
    return sorted(context.partition_keys)


def _coverage(context: dg.AssetExecutionContext) -> tuple[str, str]:
    partitions_def = context.assets_def.partitions_def
    return partitions_def.get_first_partition_key(), partitions_def.get_last_partition_key()


def build_daily_assets(partitions_def: dg.PartitionsDefinition) -> list[dg.AssetsDefinition]:
    """documents, fingerprinted and band_memberships, partitioned by crawl day.

    A single-run backfill policy lets a range of days (`--partition-range`, UI backfills,
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
            "Validated input documents of one crawl day (CSV, Parquet or WARC: file, folder or glob; or Common "
            "Crawl byte ranges). Requires doc_id, source, domain, crawled_at, title, body; keeps every extra column; "
            "crawled_at typed as a date. Documents dated outside the partitions are counted and named in the "
            "metadata; WARC records that are not pages are counted by kind and listed in rejected_records."
        ),
    )
    def documents(
        context: dg.AssetExecutionContext, config: DocumentsConfig, storage: WebdedupStorage
    ) -> dg.MaterializeResult:
        days = _days(context)
        info = run_stage(
            engine.stage_documents,
            storage.store(),
            config.input_path,
            config.input_format,
            days=days,
            coverage=_coverage(context),
            warc_options=config.warc_options(),
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
                f"{outside} document(s) read are dated outside the partitions {_coverage(context)}, first: "
                f"{info['doc_ids_outside_partitions']}; files dated outside: {info['files_outside_partitions']}. "
                "Set WEBDEDUP_PARTITION_START / WEBDEDUP_PARTITION_END to cover them, or use `webdedup run`."
            )
        return materialized(
            storage,
            "documents",
            info,
            config.model_dump(),
            order_by="doc_id",
            partition=_first_built(storage, "documents", days),
            days=dg.MetadataValue.text(f"{days[0]} .. {days[-1]} ({len(days)} day(s))"),
            documents_outside_partitions=dg.MetadataValue.int(outside),
            doc_ids_outside_partitions=dg.MetadataValue.json(info.get("doc_ids_outside_partitions", [])),
            **warc,
        )

    @dg.asset(
        **daily,
        deps=[documents],
        description=(
            "Per document: token count, shingle count and MinHash signature over ordered k-token shingles "
            "of the normalized text (compiled kernel, streamed in record batches). Built per crawl day."
        ),
    )
    def fingerprinted(
        context: dg.AssetExecutionContext, config: FingerprintConfig, storage: WebdedupStorage
    ) -> dg.MaterializeResult:
        days = _days(context)
        info = run_stage(
            engine.fingerprint_days, storage.store(), days, config.shingle_size, config.num_perm, config.seed
        )
        return materialized(
            storage,
            "fingerprinted",
            info,
            config.model_dump(),
            order_by="doc_id",
            partition=_first_built(storage, "fingerprinted", days),
            days_built=dg.MetadataValue.json(info["days_built"]),
        )

    @dg.asset(
        **daily,
        deps=[fingerprinted],
        description=(
            "LSH band keys: one row per document per band (doc_id, band_index, band_hash). Documents without "
            "shingles get none and can never be candidates. Built per crawl day."
        ),
    )
    def band_memberships(
        context: dg.AssetExecutionContext, config: BandConfig, storage: WebdedupStorage
    ) -> dg.MaterializeResult:
        days = _days(context)
        info = run_stage(engine.band_days, storage.store(), days, config.bands, config.rows)
        curve = [
            (j, round(candidate_probability(j, config.bands, config.rows), 4))
            for j in (0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
        ]
        return materialized(
            storage,
            "band_memberships",
            info,
            config.model_dump(),
            order_by="doc_id, band_index",
            partition=_first_built(storage, "band_memberships", days),
            candidate_probability=dg.MetadataValue.md(markdown_table(["jaccard", "P(candidate)"], curve)),
        )

    return [documents, fingerprinted, band_memberships]


def _first_built(storage: WebdedupStorage, asset: str, days: list[str]) -> str | None:
    """The first day of the run that holds rows (previewed in the UI); None if none does."""
    present = set(storage.store().partitions(asset))
    return next((d for d in days if d in present), None)


@dg.asset(
    group_name=GROUP,
    kinds=KINDS,
    deps=["band_memberships"],
    description=(
        "Candidate pairs from one global self-join on (band_index, band_hash), left_doc_id < right_doc_id, "
        "with the number of shared bands. Pair slots are counted per bucket first and the join refuses to "
        "run over the budget."
    ),
)
def candidate_pairs(config: CandidateConfig, storage: WebdedupStorage) -> dg.MaterializeResult:
    info = run_stage(
        engine.stage_candidate_pairs,
        storage.store(),
        config.max_pair_slots,
        config.bucket_policy,
        config.hot_bucket_size,
        config.pair_slots_per_document,
    )
    return materialized(storage, "candidate_pairs", info, config.model_dump())


@dg.asset(
    group_name=GROUP,
    kinds=KINDS,
    deps=[candidate_pairs],
    description=(
        "Every candidate with its exact shingle Jaccard, MinHash estimate, is_duplicate (exact >= threshold) "
        "and reason."
    ),
)
def scored_pairs(config: ScoreConfig, storage: WebdedupStorage) -> dg.MaterializeResult:
    info = run_stage(engine.stage_scored_pairs, storage.store(), config.threshold)
    return materialized(
        storage, "scored_pairs", info, config.model_dump(), reasons=dg.MetadataValue.json(info["reasons"])
    )


@dg.asset(
    group_name=GROUP,
    kinds=KINDS,
    deps=[scored_pairs],
    description=(
        "Scored pairs whose exact Jaccard reaches the threshold scored_pairs was built with (one threshold), "
        "marked exact (1.0) or near. A new threshold: re-materialize scored_pairs and downstream (no "
        "re-fingerprinting)."
    ),
)
def duplicate_pairs(config: DuplicateConfig, storage: WebdedupStorage) -> dg.MaterializeResult:
    info = run_stage(engine.stage_duplicate_pairs, storage.store(), config.threshold)
    threshold = info["duplicates"]["threshold"]  # scored_pairs' threshold: there is one
    banding = info.get("banding") or {}
    extra = {}
    if banding:
        extra["candidate_probability_at_threshold"] = dg.MetadataValue.float(
            round(candidate_probability(threshold, banding["bands"], banding["rows"]), 6)
        )
    return materialized(storage, "duplicate_pairs", info, {"threshold": threshold}, **extra)


@dg.asset(
    group_name=GROUP,
    kinds=KINDS,
    deps=[duplicate_pairs],
    description=(
        "Connected components over duplicate pairs (union-find). Every document is in exactly one cluster; "
        "cluster_id = 'cluster-' + the smallest doc_id, stable when unrelated documents arrive."
    ),
)
def clusters(storage: WebdedupStorage) -> dg.MaterializeResult:
    info = run_stage(engine.stage_clusters, storage.store())
    return materialized(storage, "clusters", info, {}, order_by="cluster_size DESC, cluster_id, doc_id")


@dg.asset(
    group_name=GROUP,
    kinds=KINDS,
    deps=[clusters],
    description=(
        "One representative per cluster with every input column; default policy: newest crawled_at, then "
        "most tokens, then smallest doc_id."
    ),
)
def deduped_documents(config: RepresentativeConfig, storage: WebdedupStorage) -> dg.MaterializeResult:
    info = run_stage(engine.stage_deduped_documents, storage.store(), config.representative_policy)
    return materialized(
        storage, "deduped_documents", info, config.model_dump(), order_by="cluster_size DESC, cluster_id"
    )


@dg.asset(
    group_name=GROUP,
    kinds={"json"},
    deps=[deduped_documents],
    description=(
        "Parameters of every stage as used, counts and ratios, P(candidate | threshold), input checksums, "
        "package versions and per-stage timings (manifest.json)."
    ),
)
def manifest(storage: WebdedupStorage) -> dg.MaterializeResult:
    store = storage.store()
    with writer_lock(storage.outputs(), timeout=LOCK_TIMEOUT_SECONDS, purpose="publish"):
        result = run_stage(engine.stage_manifest, store, storage.outputs())
    counts = result["counts"]
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": dg.MetadataValue.int(counts["representatives"]),
            "counts": dg.MetadataValue.json(counts),
            "parameters": dg.MetadataValue.json(result["parameters"]),
            "lsh": dg.MetadataValue.json(result["lsh"]),
            "timings_seconds": dg.MetadataValue.json(result["timings_seconds"]),
            "preview": dg.MetadataValue.md(markdown_table(["metric", "value"], list(counts.items()))),
            "path": dg.MetadataValue.path(str(storage.outputs() / "manifest.json")),
        }
    )


GLOBAL_ASSETS = [candidate_pairs, scored_pairs, duplicate_pairs, clusters, deduped_documents, manifest]
