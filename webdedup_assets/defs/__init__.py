"""Dagster definitions: the nine assets, their checks, the storage resource and the job."""

from __future__ import annotations

import dagster as dg

from .assets import ASSETS
from .checks import CHECKS
from .resources import WebdedupStorage

webdedup_job = dg.define_asset_job(
    "webdedup_job",
    selection=dg.AssetSelection.assets(*ASSETS),
    description="All nine assets and their checks, in order, over the configured input.",
)

defs = dg.Definitions(
    assets=ASSETS,
    asset_checks=CHECKS,
    jobs=[webdedup_job],
    resources={"storage": WebdedupStorage()},
)
