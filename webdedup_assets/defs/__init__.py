"""Dagster definitions: the nine assets of the chain and their checks, the on-demand `evaluation`
and `checked_documents` assets with their jobs, the storage resource, two jobs, a daily
schedule, a sensor that registers the input's crawl months as partitions, and a sensor that runs
the global stages after every successful materialization of band_memberships, however it was
launched (job, Catalog backfill, CLI), with the parameters in force in the storage."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, timedelta
from typing import Any

import dagster as dg

from ..engine.reading import combined_sha256, input_days
from ..errors import WebdedupError
from ..ingest.inputs import WARC_FORMATS, resolve_input
from ..progress import log_sink, set_default
from ..storage.state import crawl_month
from .assets import build_daily_assets
from .check import check_job, checked_documents
from .checks import ASSET_CHECKS
from .config import DAILY_JOB, DEFAULT_STORAGE_ROOT, GLOBAL_JOB, DocumentsConfig, parameters_in_force
from .evaluation import evaluate_job, evaluation
from .global_assets import GLOBAL_ASSETS
from .partitions import CRAWL_MONTHS, crawl_months, new_months, register_months
from .resources import WebdedupEngine, WebdedupStorage

# Progress of long stages (docs/s, pairs scored, WARC records, Common Crawl ranges) as log lines of
# the run in the UI; `webdedup run` shows it on stderr instead (or not at all with --quiet).
set_default(log_sink(dg.get_dagster_logger("webdedup.progress")))

DAILY_ASSETS = ["documents", "fingerprinted", "band_memberships"]
BAND_MEMBERSHIPS = dg.AssetKey("band_memberships")
DAILY_KEYS = {dg.AssetKey(name) for name in DAILY_ASSETS}
BACKFILL_TAG = "dagster/backfill"
# The sensor daemon looks at sensors every 5 s at most: the global run follows a daily one within
# about that much.
GLOBAL_SENSOR_INTERVAL_SECONDS = 5
RECENT_BACKFILLS = 100
IN_PROGRESS = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]

__all__ = [
    "CRAWL_MONTHS",
    "DAILY_ASSETS",
    "DAILY_JOB",
    "GLOBAL_JOB",
    "build_defs",
    "defs",
    "one_planned_event_per_asset",
    "register_months",
]
PLANNED_EVENTS_ENV = "DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS"


@contextmanager
def one_planned_event_per_asset() -> Iterator[None]:
    """While a range run is created, Dagster (SQLite or in-memory storage) logs one "planned"
    event per partition per asset unless this switch of dagster 1.13 is set; with it, one per
    asset (its caveat: a failed run does not mark the partitions failed, which an in-process
    `webdedup run` with its throwaway instance does not need)."""
    before = os.environ.get(PLANNED_EVENTS_ENV)
    os.environ[PLANNED_EVENTS_ENV] = "true"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PLANNED_EVENTS_ENV, None)
        else:
            os.environ[PLANNED_EVENTS_ENV] = before


def config_fields(assets_def: dg.AssetsDefinition) -> set[str]:
    """The config fields an asset takes now (parameters stored by an older version may differ)."""
    schema = assets_def.op.config_schema
    fields = getattr(getattr(schema, "config_type", None), "fields", None)
    return set(fields or ())


def in_force_run_config(instance: dg.DagsterInstance, assets: list[dg.AssetsDefinition]) -> dict[str, Any]:
    """Run config holding, for each asset, the parameters in force in the storage that the latest
    materialization of band_memberships wrote (each asset stores its own, whether `webdedup run` or
    Dagster built it; read now, where the launchpad's defaults were read when the definitions
    loaded), restricted to the fields its config has today: what a user chose in the launchpad (a
    threshold of 0.9) or on the command line is kept by the runs the automation launches."""
    root = DEFAULT_STORAGE_ROOT
    event = instance.get_latest_materialization_event(BAND_MEMBERSHIPS)
    run = instance.get_run_by_id(event.run_id) if event else None
    if run is not None:
        root = run.run_config.get("resources", {}).get("storage", {}).get("config", {}).get("storage_root", root)
    in_force = parameters_in_force(root)
    ops: dict[str, Any] = {}
    for assets_def in assets:
        name = assets_def.key.to_user_string()
        kept = {k: v for k, v in in_force.get(name, {}).items() if k in config_fields(assets_def)}
        if kept:
            ops[name] = {"config": kept}
    return {"ops": ops} if ops else {}


def _backfill_settled(instance: dg.DagsterInstance, backfill_id: str) -> bool:
    """A backfill of daily assets only whose runs have all ended: the daily assets' single-run
    backfill policy puts the whole range in one run, so nothing of it is left to launch, even
    though the backfill daemon (every 30 s) has not yet marked the backfill completed."""
    runs = instance.get_runs(filters=dg.RunsFilter(tags={BACKFILL_TAG: backfill_id}))
    return bool(runs) and all(run.status not in IN_PROGRESS for run in runs)


def _daily_runs_in_progress(instance: dg.DagsterInstance) -> list[str]:
    """Runs and backfills not finished that (may) materialize band_memberships, or a global run."""
    busy = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=IN_PROGRESS)):
        selection = run.asset_selection or set()
        if run.job_name in (DAILY_JOB, GLOBAL_JOB) or BAND_MEMBERSHIPS in selection:
            busy.append(f"run {run.run_id[:8]} ({run.job_name})")
    # the newest backfills; filtered by status value (dagster 1.13 does not export the status enum)
    for backfill in instance.get_backfills(limit=RECENT_BACKFILLS):
        selection = set(backfill.asset_selection or ())
        if backfill.status.value != "REQUESTED" or BAND_MEMBERSHIPS not in selection:
            continue
        if selection <= DAILY_KEYS and _backfill_settled(instance, backfill.backfill_id):
            continue
        busy.append(f"backfill {backfill.backfill_id}")
    return busy


def build_defs(months: list[str] | None = None) -> dg.Definitions:
    """The Definitions that `dagster dev` and `webdedup run` execute.

    The daily assets are partitioned by the dynamic partitions `crawl_months` (the crawl months
    present). `months` is a convenience for tests that materialize a few assets without an
    instance holding those partitions: the daily assets are then partitioned by exactly `months`.
    """
    partitions_def = dg.StaticPartitionsDefinition(sorted(months)) if months else crawl_months
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)  # BackfillPolicy is beta in 1.13, and what we need
        daily_assets = build_daily_assets(partitions_def)
    daily_job = dg.define_asset_job(
        DAILY_JOB,
        selection=dg.AssetSelection.assets(*DAILY_ASSETS),
        executor_def=dg.multiprocess_executor,
        description="documents, fingerprinted and band_memberships for one crawl month or a range of months.",
    )
    global_job = dg.define_asset_job(
        GLOBAL_JOB,
        selection=dg.AssetSelection.assets(*(a.key for a in GLOBAL_ASSETS)),
        executor_def=dg.in_process_executor,
        description="candidate_pairs -> manifest over every materialized crawl day (candidates are global); "
        "its steps run in one process.",
    )
    by_name = {a.key.to_user_string(): a for a in [*daily_assets, *GLOBAL_ASSETS]}

    @dg.sensor(
        job=global_job,
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=GLOBAL_SENSOR_INTERVAL_SECONDS,
        description="After band_memberships is materialized by a successful run, however launched (the daily job, "
        "a Catalog backfill, the schedule), run the global stages once for the batch (it waits while daily runs "
        "or backfills are in progress), with the parameters in force in the storage.",
    )
    def global_after_daily(context: dg.SensorEvaluationContext):
        instance = context.instance
        records = instance.fetch_materializations(BAND_MEMBERSHIPS, limit=1).records
        if not records:
            return dg.SkipReason("band_memberships has not been materialized yet")
        latest = records[0]
        if latest.storage_id <= int(context.cursor or 0):
            return dg.SkipReason("no materialization of band_memberships since the last global run request")
        busy = _daily_runs_in_progress(instance)
        if busy:
            return dg.SkipReason(f"waiting for {', '.join(busy[:3])} to finish")
        run = instance.get_run_by_id(latest.run_id)
        context.update_cursor(str(latest.storage_id))
        published = instance.fetch_materializations(dg.AssetKey("manifest"), limit=1).records
        if published and published[0].storage_id > latest.storage_id:  # e.g. "Materialize all": it ran them
            return dg.SkipReason(f"run {published[0].run_id[:8]} materialized the global assets after band_memberships")
        if run is not None and run.status != dg.DagsterRunStatus.SUCCESS:
            return dg.SkipReason(f"run {latest.run_id[:8]} that materialized band_memberships ended {run.status.value}")
        return dg.RunRequest(
            run_key=f"global-after-{latest.storage_id}",
            run_config=in_force_run_config(instance, GLOBAL_ASSETS),
            tags={"webdedup/after_run": latest.run_id},
        )

    @dg.sensor(
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=30,
        description="Adds the crawl months of the configured input (WEBDEDUP_INPUT, CSV or Parquet) as "
        "crawl_months partitions whenever its files change. WARC input is not read here (it needs a conversion): "
        "use `webdedup run`, or add the months in the launchpad.",
    )
    def discover_crawl_months(context: dg.SensorEvaluationContext):
        config = DocumentsConfig()
        try:
            files = resolve_input(config.input_path, config.input_format)
        except WebdedupError as err:
            return dg.SkipReason(f"input {config.input_path}: {err}")
        if config.input_format == "commoncrawl" or any(f.format in WARC_FORMATS for f in files):
            return dg.SkipReason("WARC or Common Crawl input: months are added by `webdedup run` or by hand")
        signature = combined_sha256(files)
        if signature == context.cursor:
            return dg.SkipReason("input unchanged")
        days = input_days(config.input_path, config.input_format, mapping=config.mapping())
        added = new_months(context.instance, days)
        context.update_cursor(signature)
        if not added:
            return dg.SkipReason("no new crawl month in the input")
        return dg.SensorResult(dynamic_partitions_requests=[crawl_months.build_add_request(added)])

    @dg.schedule(
        name="webdedup_daily_schedule",
        job=daily_job,
        cron_schedule="0 1 * * *",
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description="Every day at 01:00 UTC: (re)materializes the crawl month of the previous day (adding it as a "
        "crawl_months partition when new) with the fingerprint and banding parameters in force, when the "
        "input holds pages of that day; global_after_daily follows.",
    )
    def webdedup_daily_schedule(context: dg.ScheduleEvaluationContext):
        day = (context.scheduled_execution_time.astimezone(UTC).date() - timedelta(days=1)).isoformat()
        config = DocumentsConfig()
        try:
            files = resolve_input(config.input_path, config.input_format)
            # A month is registered only for pages the input holds: a tick (or the UI's test of one)
            # for a day without pages added an empty month to every later backfill.
            if config.input_format != "commoncrawl" and not any(f.format in WARC_FORMATS for f in files):
                if day not in input_days(config.input_path, config.input_format, mapping=config.mapping()):
                    return dg.SkipReason(f"the input {config.input_path} holds no page of {day}")
        except WebdedupError as err:
            return dg.SkipReason(f"input {config.input_path}: {err}")
        register_months(context.instance, [day])
        carried = [by_name["fingerprinted"], by_name["band_memberships"]]
        return dg.RunRequest(
            run_key=day, partition_key=crawl_month(day), run_config=in_force_run_config(context.instance, carried)
        )

    return dg.Definitions(
        assets=[*daily_assets, *GLOBAL_ASSETS, evaluation, checked_documents],
        asset_checks=ASSET_CHECKS,
        jobs=[daily_job, global_job, evaluate_job, check_job],
        schedules=[] if months else [webdedup_daily_schedule],
        sensors=[global_after_daily, discover_crawl_months],
        resources={"storage": WebdedupStorage(), "engine": WebdedupEngine()},
        executor=dg.in_process_executor,
    )


defs = build_defs()
