"""The six global assets (candidate_pairs ... deduped_documents, manifest): one regular mapping
(GLOBAL_STAGES -> build_global_asset) over the stage contract, and the incremental update of the
whole chain when a run materializes all of it (engine.incremental)."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dagster as dg

from .. import engine
from ..core.fingerprint import fingerprint_method
from ..core.minhash import candidate_probability
from ..engine import diagnostics as engine_diagnostics
from ..engine import incremental
from ..engine.preview import markdown_table, pair_preview, preview
from ..engine.stage import StageResult
from ..engine.stages.documents_warc import rejections_by_kind as engine_rejections
from ..params import ParamGroup, ScoringParams
from ..storage.state import writer_lock
from ..storage.store import Store
from . import charts
from .assets import (
    GROUP,
    KINDS,
    LOCK_TIMEOUT_SECONDS,
    candidate_probability_table,
    column_schema,
    figure_entries,
    materialized,
    png_markdown,
    run_contract,
    run_stage,
    s_curve_table,
)
from .config import (
    CandidateConfig,
    DuplicateConfig,
    RepresentativeConfig,
    ScoreConfig,
    StageConfig,
)
from .resources import WebdedupEngine, WebdedupStorage


def simhash(parameters: dict[str, Any]) -> bool:
    return fingerprint_method(parameters.get("fingerprint") or {}) == "simhash"


def _scored_metadata(result: StageResult, store: Store, previews: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The candidates' Jaccard histogram and the banding's S-curve, as charts and numbers."""
    scoring, banding = result.parameters["scoring"], result.parameters.get("banding") or {}
    extra = {"reasons": dg.MetadataValue.json(result.figures["reasons"])}
    if previews:
        counts = charts.jaccard_counts(store)
        extra["pairs_side_by_side"] = dg.MetadataValue.md(pair_preview(store, "scored_pairs"))
        extra["jaccard_histogram"] = png_markdown(
            "candidates by exact Jaccard", charts.jaccard_histogram_png(counts, scoring["threshold"])
        )
        extra["jaccard_counts"] = dg.MetadataValue.md(markdown_table(["jaccard from", "candidates"], counts))
    if previews and banding:
        extra["candidate_probability"] = candidate_probability_table(result.parameters, scoring["threshold"])
    if "bands" in banding and not simhash(result.parameters):  # SimHash: no closed form of P(candidate | J)
        if previews:
            extra["s_curve"] = png_markdown(
                "LSH S-curve", charts.s_curve_png(banding["bands"], banding["rows"], scoring["threshold"])
            )
        extra["candidate_probability_at_threshold"] = dg.MetadataValue.float(
            round(candidate_probability(scoring["threshold"], banding["bands"], banding["rows"]), 6)
        )
    return scoring, extra


def _clusters_metadata(result: StageResult, store: Store, previews: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The cluster-size distribution, as a chart and a table."""
    if not previews:
        return {}, {}
    sizes = charts.cluster_sizes(store)
    return {}, {
        "cluster_sizes": png_markdown("cluster sizes", charts.cluster_sizes_png(sizes)),
        "cluster_size_counts": dg.MetadataValue.md(markdown_table(["documents in the cluster", "clusters"], sizes)),
    }


def _duplicate_metadata(result: StageResult, store: Store, previews: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    threshold = result.parameters["duplicates"]["threshold"]  # scored_pairs' threshold: there is one
    banding = result.parameters.get("banding") or {}
    extra = {"pairs_side_by_side": dg.MetadataValue.md(pair_preview(store, "duplicate_pairs"))} if previews else {}
    if "bands" in banding and not simhash(result.parameters):
        extra["candidate_probability_at_threshold"] = dg.MetadataValue.float(
            round(candidate_probability(threshold, banding["bands"], banding["rows"]), 6)
        )
    return {"threshold": threshold}, extra


DIAGNOSTIC_FIGURES = (
    "multi_document_clusters",
    "low_cohesion_clusters",
    "giant_clusters",
    "members_below_threshold",
    "members_checked",
    "member_cap",
    "clusters_unchecked",
    "largest_cluster",
)


def _deduped_metadata(result: StageResult, store: Store, previews: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The cluster diagnostics' figures, each its own numeric entry, and the worst clusters."""
    extra: dict[str, Any] = {
        f"diagnostics/{name}": dg.MetadataValue.int(int(result.figures[name]))
        for name in DIAGNOSTIC_FIGURES
        if name in result.figures
    }
    extra["worst_clusters"] = dg.MetadataValue.md(engine_diagnostics.diagnostics_preview(store))
    extra["cluster_diagnostics"] = dg.MetadataValue.path(
        str(engine_diagnostics.report_path(store, engine_diagnostics.REPORT))
    )
    return result.parameters.get("representatives") or {}, extra


@dataclass(frozen=True)
class GlobalAsset:
    """One global stage of the contract as an asset: its config, and how its metadata differs."""

    stage: str
    deps: str
    description: str
    config: type[StageConfig] | None = None
    order_by: str | None = None
    # The stage's parameters from its config (default: config.params()).
    params: Callable[[Any], ParamGroup | None] | None = None
    # (parameters shown, extra metadata) from the result, the store and whether the storage
    # resource wants charts and previews (default: the config, none).
    metadata: Callable[[StageResult, Store, bool], tuple[dict[str, Any], dict[str, Any]]] | None = None


GLOBAL_STAGES = [
    GlobalAsset(
        "candidate_pairs",
        "band_memberships",
        "Candidate pairs from one global self-join on (band_index, band_hash), left_doc_id < right_doc_id, "
        "with the number of shared bands. Pair slots are counted per bucket first and the join refuses to "
        "run over the budget.",
        CandidateConfig,
    ),
    GlobalAsset(
        "scored_pairs",
        "candidate_pairs",
        "Every candidate with its exact shingle Jaccard, MinHash estimate, is_duplicate (exact >= threshold) "
        "and reason.",
        ScoreConfig,
        metadata=_scored_metadata,
    ),
    GlobalAsset(
        "duplicate_pairs",
        "scored_pairs",
        "Scored pairs whose exact Jaccard reaches the threshold scored_pairs was built with (one threshold), "
        "marked exact (1.0) or near. A new threshold: re-materialize scored_pairs and downstream (no "
        "re-fingerprinting).",
        DuplicateConfig,
        params=lambda c: ScoringParams(threshold=c.threshold) if c.threshold is not None else None,
        metadata=_duplicate_metadata,
    ),
    GlobalAsset(
        "clusters",
        "duplicate_pairs",
        "Connected components over duplicate pairs (union-find). Every document is in exactly one cluster; "
        "cluster_id = 'cluster-' + the smallest doc_id, stable when unrelated documents arrive.",
        order_by="cluster_size DESC, cluster_id, doc_id",
        metadata=_clusters_metadata,
    ),
    GlobalAsset(
        "deduped_documents",
        "clusters",
        "One representative per cluster with every input column; default policy: newest crawled_at, then "
        "most tokens, then smallest doc_id.",
        RepresentativeConfig,
        order_by="cluster_size DESC, cluster_id",
        metadata=_deduped_metadata,
    ),
]


GLOBAL_CHAIN = {spec.stage for spec in GLOBAL_STAGES}


def _whole_chain(context: dg.AssetExecutionContext) -> bool:
    """Whether this run materializes every global stage (then they are updated as one chain)."""
    # the run's selection; empty for a job run of its whole selection: then the job's assets
    selection = context.run.asset_selection or context.job_def.asset_layer.selected_asset_keys
    return GLOBAL_CHAIN <= {key.to_user_string() for key in selection}


def _chain_params(context: dg.AssetExecutionContext) -> tuple[Any, Any, Any, bool]:
    """The parameters of the whole global chain from this run's config (each stage's config, its
    defaults where none is given), and candidate_pairs' full_rebuild flag."""
    ops = context.run.run_config.get("ops") or {}

    def given(asset: str) -> dict[str, Any]:
        return dict((ops.get(asset) or {}).get("config") or {})

    candidates = CandidateConfig(**given("candidate_pairs"))
    return (
        candidates.params(),
        ScoreConfig(**given("scored_pairs")).params(),
        RepresentativeConfig(**given("deduped_documents")).params(),
        bool(candidates.full_rebuild),
    )


# The open chain update of each run (a run's global assets execute in one process, one after another).
_CHAINS: dict[str, incremental.ChainUpdate] = {}


def _chain_update(context: dg.AssetExecutionContext, store: Store) -> incremental.ChainUpdate:
    """This run's chain update, opened by its first global asset with the run's parameters."""
    for run_id in [run_id for run_id, chain in _CHAINS.items() if chain.closed]:
        del _CHAINS[run_id]
    chain = _CHAINS.get(context.run.run_id)
    if chain is None:
        candidates, scoring, representative, full = _chain_params(context)
        chain = _CHAINS[context.run.run_id] = incremental.ChainUpdate(
            store, candidates, scoring, representative, full, lock_timeout=LOCK_TIMEOUT_SECONDS
        )
    return chain


def _update_metadata(report: dict[str, Any], stage: str) -> dict[str, Any]:
    """The update that wrote `stage`, as far as it had gone then (the clusters it touched are
    known from the clusters stage on)."""
    mode = report["mode"] if report["mode"] != "full" else f"full: {report['reason']}"
    touched = {"clusters_touched": dg.MetadataValue.int(int(report["clusters_touched"]))}
    return {
        "update_mode": dg.MetadataValue.text(mode),
        "days_added": dg.MetadataValue.json(report["days_added"]),
        "days_removed": dg.MetadataValue.json(report["days_removed"]),
        **(touched if stage in ("clusters", "deduped_documents") else {}),
        "update": dg.MetadataValue.json(report),
    }


def build_global_asset(spec: GlobalAsset) -> dg.AssetsDefinition:
    """The asset of a global stage: read the config, run the stage, report its metadata.

    When the run materializes the whole global chain (the global job, the automation after a
    daily run, "materialize all") on DuckDB, the chain is one update (engine.incremental.ChainUpdate:
    incremental, or a full rebuild when nothing incremental is held yet, a parameter changed or
    candidate_pairs' full_rebuild is set) and each asset advances it through its own stage; each
    reports the update that wrote it. A run of only some global assets runs their stages from
    scratch (the next update then rebuilds, and says why)."""

    def compute(
        context: dg.AssetExecutionContext, config: Any, storage: WebdedupStorage, engine_choice: WebdedupEngine
    ) -> dg.MaterializeResult:
        store = storage.store()
        if _whole_chain(context) and engine_choice.params().engine == "duckdb":
            reports: list[dict[str, Any]] = []

            def call() -> StageResult:
                result, report = _chain_update(context, store).advance(spec.stage)
                reports.append(report)
                return result

            result = run_stage(spec.stage, store, call)
            update = _update_metadata(reports[0], spec.stage)
        else:
            params = None if config is None else (spec.params(config) if spec.params else config.params())
            result = run_contract(spec.stage, storage, params, engine_choice=engine_choice)
            update = {
                "update_mode": dg.MetadataValue.text("full: only part of the global chain was selected, or Spark")
            }
        shown = {k: v for k, v in config.model_dump().items() if k != "full_rebuild"} if config is not None else {}
        parameters, extra = spec.metadata(result, store, storage.ui_previews) if spec.metadata else (shown, {})
        return materialized(storage, result, parameters, order_by=spec.order_by, **extra, **update)

    if spec.config is None:

        def stage_asset(
            context: dg.AssetExecutionContext, storage: WebdedupStorage, engine: WebdedupEngine
        ) -> dg.MaterializeResult:
            return compute(context, None, storage, engine)

    else:

        def stage_asset(
            context: dg.AssetExecutionContext,
            config: spec.config,  # type: ignore[name-defined]
            storage: WebdedupStorage,
            engine: WebdedupEngine,
        ) -> dg.MaterializeResult:
            return compute(context, config, storage, engine)

    return dg.asset(name=spec.stage, group_name=GROUP, kinds=KINDS, deps=[spec.deps], description=spec.description)(
        stage_asset
    )


@dg.asset(
    group_name=GROUP,
    kinds={"json"},
    deps=["deduped_documents"],
    description=(
        "Parameters of every stage as used, counts and ratios, P(candidate | threshold), input checksums, "
        "package versions and per-stage timings (manifest.json)."
    ),
)
def manifest(storage: WebdedupStorage) -> dg.MaterializeResult:
    store = storage.store()
    with writer_lock(storage.outputs(), timeout=LOCK_TIMEOUT_SECONDS, purpose="publish"):
        result = run_stage("manifest", store, lambda: engine.stage_manifest(store, storage.outputs()))
    counts = result["counts"]
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": dg.MetadataValue.int(counts["representatives"]),
            "counts": dg.MetadataValue.json(counts),
            "parameters": dg.MetadataValue.json(result["parameters"]),
            "lsh": dg.MetadataValue.json(result["lsh"]),
            "timings_seconds": dg.MetadataValue.json(result["timings_seconds"]),
            **figure_entries(counts, "counts/"),
            **(
                {
                    "s_curve": png_markdown(
                        "LSH S-curve",
                        charts.s_curve_png(result["lsh"]["bands"], result["lsh"]["rows"], result["lsh"]["threshold"]),
                    ),
                    "candidate_probability": s_curve_table(
                        result["lsh"]["bands"], result["lsh"]["rows"], result["lsh"]["threshold"]
                    ),
                }
                if storage.ui_previews and "bands" in result["lsh"]  # a SimHash run has blocks, no S-curve
                else {}
            ),
            "preview": dg.MetadataValue.md(markdown_table(["metric", "value"], list(counts.items()))),
            "path": dg.MetadataValue.path(str(storage.outputs() / "manifest.json")),
        }
    )


@dg.asset(
    group_name=GROUP,
    kinds=KINDS,
    deps=["documents"],
    description=(
        "The input records that are not documents (WARC input): one row per record with its file, offset, "
        "length, record id, capture URL, kind (e.g. not_html, not_warc, too_large) and reason. Written by "
        "the documents stage as it reads the input; published as rejected_records.csv. Empty for CSV or "
        "Parquet input."
    ),
)
def rejected_records(storage: WebdedupStorage) -> dg.MaterializeResult:
    store = storage.store()
    path = store.path("rejected_records")
    by_kind = engine_rejections(store)
    rows = sum(by_kind.values())
    metadata: dict[str, Any] = {
        "dagster/row_count": dg.MetadataValue.int(rows),
        "by_kind": dg.MetadataValue.json(by_kind),
        **figure_entries(by_kind, "kind/"),
        "path": dg.MetadataValue.path(str(path)),
    }
    if path.exists():
        metadata["dagster/column_schema"] = column_schema(store, "rejected_records")
        if storage.ui_previews:
            metadata["preview"] = dg.MetadataValue.md(
                preview(store, "rejected_records", order_by="warc_filename, warc_offset")
            )
    else:
        metadata["preview"] = dg.MetadataValue.md("no WARC input: no record was rejected")
    return dg.MaterializeResult(metadata=metadata)


GLOBAL_ASSETS = [*(build_global_asset(spec) for spec in GLOBAL_STAGES), manifest, rejected_records]
