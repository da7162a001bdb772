"""Where assets are stored and where the published outputs go."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
from pydantic import PrivateAttr

from ..params import EngineParams
from ..storage.fileio import make_folder
from ..storage.objects import ObjectPath, is_uri
from ..storage.remote import working_copy
from ..storage.store import Store
from .config import DEFAULT_STORAGE_ROOT, JOB_ASSETS, InvalidConfig, validate_run_config

DEFAULT_OUTPUT_DIR = os.environ.get("WEBDEDUP_OUTPUT_DIR", ".webdedup/output")
# How long a step waits for another step of this machine to finish with a storage in object storage.
STEP_WAIT_SECONDS = 6 * 3600.0


class WebdedupStorage(dg.ConfigurableResource):
    """Parquet per asset under storage_root; CSV/Parquet/JSON deliverables under output_dir.

    Relative paths resolve against the working directory of the process running the step.
    Defaults come from WEBDEDUP_STORAGE_ROOT and WEBDEDUP_OUTPUT_DIR. A storage_root in object
    storage (`s3://bucket/prefix`) is worked on through this machine's copy (storage.remote): a
    step brings the copy up to date, holds the storage's writer lease, and uploads what it
    changed; the steps of a run take turns.
    """

    storage_root: str = DEFAULT_STORAGE_ROOT
    output_dir: str = DEFAULT_OUTPUT_DIR
    # Charts and data previews in the materialization metadata, for the UI: each scans stored
    # data. Off for runs on a throwaway instance (tests), where no one could look at them.
    ui_previews: bool = True
    _working_copy: Path | None = PrivateAttr(default=None)
    _invalid: InvalidConfig | None = PrivateAttr(default=None)

    @contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext) -> Iterator[WebdedupStorage]:
        """Every asset of a run needs storage: the whole run config is checked (ranges and
        cross-field rules) before the first step of the run computes anything. A config found
        invalid fails the step that asks for the storage, with the one-line message as the step's
        failure (raised here, Dagster would report a failed resource, the message a cause deep in
        its stack), and the storage is never touched."""
        run = context.run
        if run is not None and run.run_config:
            selected = {key.to_user_string() for key in run.asset_selection or ()} or JOB_ASSETS.get(
                run.job_name, set()
            )
            try:
                validate_run_config(run.run_config, selected)
            except InvalidConfig as invalid:
                self._invalid = invalid
                yield self
                return
        if not is_uri(self.storage_root):
            yield self
            return
        purpose = f"dagster run {run.run_id}" if run is not None else "dagster"
        with working_copy(ObjectPath.of(self.storage_root), True, purpose, wait=STEP_WAIT_SECONDS) as local:
            self._working_copy = local
            yield self

    def store(self) -> Store:
        if self._invalid is not None:
            raise self._invalid
        return Store(self._working_copy or Path(self.storage_root))

    def outputs(self) -> Path:
        if self._invalid is not None:
            raise self._invalid
        return make_folder(Path(self.output_dir).expanduser().resolve())


_ENGINE_FIELDS = EngineParams.model_fields


class WebdedupEngine(dg.ConfigurableResource):
    """The engine of fingerprinted, band_memberships and the global stages (fields, defaults and
    descriptions from params.EngineParams; documents and the manifest always run on DuckDB):
    duckdb (embedded) or spark on `spark_master` (local[*] when empty) or the Spark Connect URL
    `spark_remote`. The Spark session is created by the first stage that needs it and reused."""

    engine: str = _ENGINE_FIELDS["engine"].default
    spark_master: str = _ENGINE_FIELDS["spark_master"].default
    spark_remote: str = _ENGINE_FIELDS["spark_remote"].default

    def params(self) -> EngineParams:
        return EngineParams.checked(self.model_dump())

    def run(self, name: str, store: Store, params, months=None):
        """Run a stage of the contract on the chosen engine."""
        from ..engine.pipeline import stage_runner

        return stage_runner(self.params())(name, store, params, months)
