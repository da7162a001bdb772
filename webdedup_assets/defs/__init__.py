"""Dagster definitions: nine assets, their checks, the storage resource, two jobs, a daily
schedule and a sensor that runs the global stages after every successful daily run."""

from __future__ import annotations

import warnings

import dagster as dg

from .assets import GLOBAL_ASSETS, build_daily_assets
from .checks import CHECKS
from .partitions import daily_partitions, input_day_partitions
from .resources import WebdedupStorage

DAILY_JOB = "webdedup_daily"
GLOBAL_JOB = "webdedup_global"
DAILY_ASSETS = ["documents", "fingerprinted", "band_memberships"]


def build_defs(days: list[str] | None = None) -> dg.Definitions:
    """The Definitions. With `days`, the daily assets are partitioned by exactly those crawl days
    (what `webdedup run` uses); otherwise by calendar day (see defs/partitions.py)."""
    partitions_def = input_day_partitions(days) if days else daily_partitions()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)  # BackfillPolicy is beta in 1.13, and what we need
        daily_assets = build_daily_assets(partitions_def)
    daily_job = dg.define_asset_job(
        DAILY_JOB,
        selection=dg.AssetSelection.assets(*DAILY_ASSETS),
        description="documents, fingerprinted and band_memberships for one crawl day or a range of days.",
    )
    global_job = dg.define_asset_job(
        GLOBAL_JOB,
        selection=dg.AssetSelection.assets(*(a.key for a in GLOBAL_ASSETS)),
        description="candidate_pairs -> manifest over every materialized crawl day (candidates are global).",
    )

    @dg.run_status_sensor(
        run_status=dg.DagsterRunStatus.SUCCESS,
        monitored_jobs=[daily_job],
        request_job=global_job,
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=30,
        description="After a daily run (a scheduled day, a single-run backfill, or a UI/CLI materialization) "
        "succeeds, run the global stages so the results include the new days.",
    )
    def global_after_daily(context: dg.RunStatusSensorContext):
        return dg.RunRequest(run_key=f"global-after-{context.dagster_run.run_id}")

    schedules = []
    if not days:
        schedules.append(
            dg.build_schedule_from_partitioned_job(
                daily_job,
                name="webdedup_daily_schedule",
                hour_of_day=1,
                minute_of_hour=0,
                default_status=dg.DefaultScheduleStatus.STOPPED,
                description="Every day at 01:00 UTC: the previous crawl day; the sensor then runs the global stages.",
            )
        )
    return dg.Definitions(
        assets=[*daily_assets, *GLOBAL_ASSETS],
        asset_checks=CHECKS,
        jobs=[daily_job, global_job],
        schedules=schedules,
        sensors=[global_after_daily],
        resources={"storage": WebdedupStorage()},
    )


defs = build_defs()
