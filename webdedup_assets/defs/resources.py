"""Where assets are stored and where the published outputs go."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from ..engine.storage import Store

DEFAULT_STORAGE_ROOT = os.environ.get("WEBDEDUP_STORAGE_ROOT", ".webdedup/storage")
DEFAULT_OUTPUT_DIR = os.environ.get("WEBDEDUP_OUTPUT_DIR", ".webdedup/output")


class WebdedupStorage(dg.ConfigurableResource):
    """Parquet per asset under storage_root; CSV/Parquet/JSON deliverables under output_dir.

    Relative paths resolve against the working directory of the process running the step.
    Defaults come from WEBDEDUP_STORAGE_ROOT and WEBDEDUP_OUTPUT_DIR.
    """

    storage_root: str = DEFAULT_STORAGE_ROOT
    output_dir: str = DEFAULT_OUTPUT_DIR

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Every asset of a run needs storage: its setup checks the whole run config (ranges and
        cross-field rules) before the first step of the run computes anything."""
        run = context.run
        if run is not None and run.run_config:
            from .config import validate_run_config

            selected = {key.to_user_string() for key in run.asset_selection or ()}
            validate_run_config(run.run_config, selected)

    def store(self) -> Store:
        return Store(Path(self.storage_root))

    def outputs(self) -> Path:
        path = Path(self.output_dir).expanduser().resolve()
        path.mkdir(parents=True, exist_ok=True)
        return path
