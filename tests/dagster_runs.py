"""What `dagster dev` does for a corpus, in-process, for the tests of the Dagster layer: the input's
crawl months registered as partitions of a fresh instance, one single-run backfill of the daily
assets over them, then the global job (the in-process equivalent of the UI's backfill followed by
the global_after_daily sensor). `webdedup run` itself no longer goes through Dagster
(engine.pipeline); these runs must give the same results."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg

from webdedup_assets.defs import DAILY_ASSETS, DAILY_JOB, GLOBAL_JOB, defs, one_planned_event_per_asset, register_months
from webdedup_assets.defs.config import DocumentsConfig
from webdedup_assets.engine.publish import publication_prepared, recover
from webdedup_assets.engine.reading import input_days
from webdedup_assets.storage.state import (
    clear_days,
    held_days,
    months_of,
    remove_leftovers,
    reset_outdated,
    writer_lock,
)
from webdedup_assets.storage.store import Store

RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


def _split_config(config: dict[str, Any], ops: list[str]) -> dict[str, Any]:
    return {**config, "ops": {k: v for k, v in config["ops"].items() if k in ops}}


class RunOutcome(list):
    """The events of both runs (a list), plus the runs' results."""

    def __init__(self, results: list) -> None:
        super().__init__(event for result in results for event in result.all_events)
        self.results = results


def execute(input_path: str, config: dict[str, Any], input_format: str = "auto") -> RunOutcome:
    """The daily range run over every crawl month of the input, then the global run (stops after
    the first if it failed). The storage holds exactly this input afterwards, as with `webdedup run`."""
    resources = config["resources"]["storage"]["config"]
    storage_root = Path(resources["storage_root"]).expanduser().resolve()
    output_dir = Path(resources["output_dir"]).expanduser().resolve()
    with writer_lock(output_dir), writer_lock(storage_root):
        remove_leftovers(storage_root)
        remove_leftovers(output_dir)
        recover(output_dir)
        documents = DocumentsConfig(**config["ops"]["documents"]["config"])
        storage = Store(storage_root)
        reset_outdated(storage)
        days = input_days(input_path, input_format, store=storage, warc_options=documents.warc_options())
        stale = [day for day in held_days(storage) if day not in set(days)]
        if stale:
            clear_days(storage, stale)
        months = months_of(days or [datetime.now(UTC).date().isoformat()])  # documents then says why
        with dg.DagsterInstance.ephemeral() as instance:
            register_months(instance, months)
            with one_planned_event_per_asset():
                daily = defs.resolve_job_def(DAILY_JOB).execute_in_process(
                    run_config=_split_config(config, DAILY_ASSETS),
                    instance=instance,
                    raise_on_error=False,
                    tags={RANGE_START_TAG: months[0], RANGE_END_TAG: months[-1]},
                )
            if not daily.success:
                return RunOutcome([daily])
            global_ops = [k for k in config["ops"] if k not in DAILY_ASSETS]
            with publication_prepared(storage, output_dir):
                result = defs.resolve_job_def(GLOBAL_JOB).execute_in_process(
                    run_config=_split_config(config, global_ops), instance=instance, raise_on_error=False
                )
            return RunOutcome([daily, result])
