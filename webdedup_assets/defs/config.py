"""Run configuration of each asset, generated from the parameter model (`webdedup_assets/params.py`).

Every field, range and description comes from the model; nothing is restated here. The defaults
are the parameters in force for the corpus: read once, when the definitions load, from what the
default storage root (WEBDEDUP_STORAGE_ROOT) stored with each asset (`Store.params`, written by
`webdedup run` and by the Dagster assets alike), so that after a run at threshold 0.9 the launchpad
opens at 0.9. An asset never materialized there, or a stored value the model no longer accepts,
keeps the model's default (5-token shingles, 130 MinHash values in 26 bands of 5 rows, threshold
0.7: the seed's rule; see the README for why). Reloading the code location reads them again.

Invalid values never reach a stage: building a Config object with an out-of-range value fails
the step with a description naming the field, the value and the allowed range, and the
storage resource checks the whole run config (cross-field rules included: bands x rows =
num_perm, one threshold) before the first step of a run (`validate_run_config`).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import dagster as dg
from pydantic import Field, ValidationError, create_model
from pydantic.fields import FieldInfo

from ..params import (
    STAGE_GROUPS,
    STAGE_OF_ASSET,
    InputParams,
    ParamError,
    ParamGroup,
    RunParams,
    ScoringParams,
    param_error,
)

FIXTURE_INPUT = str(Path(__file__).resolve().parents[2] / "fixtures" / "documents.csv")
DEFAULT_INPUT = os.environ.get("WEBDEDUP_INPUT", FIXTURE_INPUT)
# The storage resource's default root (resources.py); relative to the working directory.
DEFAULT_STORAGE_ROOT = os.environ.get("WEBDEDUP_STORAGE_ROOT", ".webdedup/storage")

# The group under which each asset stores its own parameters (`storage/serial.py`).
STORED_GROUP = {
    "documents": "input",
    "fingerprinted": "fingerprint",
    "band_memberships": "banding",
    "candidate_pairs": "candidates",
    "scored_pairs": "scoring",
    "deduped_documents": "representatives",
}
# Not parameters of the corpus: the input's location follows WEBDEDUP_INPUT (what the sensor reads).
NOT_CARRIED = {"input_path"}


def parameters_in_force(storage_root: str | Path) -> dict[str, dict[str, Any]]:
    """{asset: {field: value}}: the parameters each asset was last built with under this storage
    root, each group valid for today's model; assets never built there (or whose stored group the
    model no longer accepts) are left out."""
    from ..errors import WebdedupError
    from ..storage.objects import ObjectPath, is_uri
    from ..storage.remote import cache_folder
    from ..storage.store import Store

    if is_uri(str(storage_root)):  # as this machine's copy last held it
        storage_root = cache_folder(ObjectPath.of(str(storage_root)))
    store = Store(Path(storage_root))
    in_force: dict[str, dict[str, Any]] = {}
    for asset, group in STORED_GROUP.items():
        model = STAGE_GROUPS[STAGE_OF_ASSET[asset]]
        try:
            stored = store.params(asset).get(group) or {}
            values = {k: v for k, v in stored.items() if k in model.model_fields and k not in NOT_CARRIED}
            model.checked(values)
        except (WebdedupError, ParamError, OSError, ValueError, TypeError):
            continue
        if values:
            in_force[asset] = values
    return in_force


IN_FORCE = parameters_in_force(DEFAULT_STORAGE_ROOT)


class InvalidConfig(dg.Failure):
    """A run config value outside its allowed range; the description names field, value and range."""

    def __init__(self, where: str, err: ParamError) -> None:
        super().__init__(description=f"invalid config of {where}: {err}", allow_retries=False)


class StageConfig(dg.Config):
    """A Dagster Config generated from a parameter group; `params()` gives the frozen model."""

    params_model: ClassVar[type[ParamGroup]] = ParamGroup  # set per generated class
    asset_name: ClassVar[str] = ""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as err:  # an out-of-range value: a named failure, not a traceback
            raise InvalidConfig(self.asset_name or type(self).__name__, param_error(type(self), err)) from None

    def params(self) -> Any:
        fields = self.params_model.model_fields
        return self.params_model(**{k: v for k, v in self.model_dump().items() if k in fields})


def _in_force(field: FieldInfo, value: Any) -> FieldInfo:
    """The model's field with the value in force as its default."""
    field = copy.copy(field)
    field.default, field.default_factory = value, None
    return field


def _config_class(
    name: str,
    model: type[ParamGroup],
    doc: str,
    base: type[StageConfig] = StageConfig,
    in_force: Mapping[str, Any] | None = None,
    **extra: Any,
) -> type[StageConfig]:
    """A Config class with the model's fields (annotation, default, range, description) plus `extra`;
    a field in `in_force` takes that value as its default."""
    in_force = in_force or {}
    fields: dict[str, Any] = dict(extra)
    fields.update(
        {
            k: (f.annotation, _in_force(f, in_force[k]) if k in in_force else copy.copy(f))
            for k, f in model.model_fields.items()
        }
    )
    cls = create_model(name, __base__=base, __module__=__name__, __doc__=doc, **fields)
    cls.params_model = model
    return cls


class _InputConfig(StageConfig):
    def warc_options(self):
        from ..engine.stages.documents_warc import warc_options_of

        return warc_options_of(self.params())

    def mapping(self):
        from ..engine.columns import mapping_of

        return mapping_of(self.params())


_INPUT_PATH = Field(
    default=DEFAULT_INPUT,
    min_length=1,
    description="CSV, Parquet, JSON Lines (.jsonl, .jsonl.gz, .jsonl.zst, .json.gz, .json.zst), .warc or .warc.gz "
    "file, folder or glob; for commoncrawl a CSV of "
    "(warc_filename, warc_offset, warc_length) targets. Default: WEBDEDUP_INPUT, else the fixture.",
)

DocumentsConfig = _config_class(
    "DocumentsConfig",
    InputParams,
    "Input of the documents asset: path and format, column mapping, WARC and Common Crawl options.",
    base=_InputConfig,
    in_force=IN_FORCE.get("documents"),
    input_path=(str, _INPUT_PATH),
)


FingerprintConfig = _config_class(
    "FingerprintConfig", STAGE_GROUPS["fingerprint"], "Shingles and MinHash.", in_force=IN_FORCE.get("fingerprinted")
)
BandConfig = _config_class(
    "BandConfig",
    STAGE_GROUPS["banding"],
    "LSH banding; bands x rows = num_perm.",
    in_force=IN_FORCE.get("band_memberships"),
)
CandidateConfig = _config_class(
    "CandidateConfig",
    STAGE_GROUPS["candidates"],
    "The band join and its budget; full_rebuild: the global chain's mode.",
    in_force=IN_FORCE.get("candidate_pairs"),
    full_rebuild=(
        bool,
        Field(
            default=False,
            description="Rebuild every global asset from scratch instead of the incremental update (when the "
            "run materializes the whole global chain). Not carried to the next automated run.",
        ),
    ),
)
ScoreConfig = _config_class(
    "ScoreConfig", ScoringParams, "The one duplicate threshold.", in_force=IN_FORCE.get("scored_pairs")
)
RepresentativeConfig = _config_class(
    "RepresentativeConfig",
    STAGE_GROUPS["representative"],
    "Which member of a cluster is kept.",
    in_force=IN_FORCE.get("deduped_documents"),
)

DuplicateConfig = create_model(
    "DuplicateConfig",
    __base__=StageConfig,
    __module__=__name__,
    __doc__="duplicate_pairs uses the threshold scored_pairs was built with.",
    threshold=(
        float | None,
        FieldInfo.merge_field_infos(  # the model's range, but optional
            ScoringParams.model_fields["threshold"],
            default=None,
            description="Leave unset: the threshold scored_pairs was built with is used (one threshold). "
            "If set it must equal scored_pairs' threshold.",
        ),
    ),
)

CONFIG_OF_ASSET: dict[str, type[StageConfig]] = {
    "documents": DocumentsConfig,
    "fingerprinted": FingerprintConfig,
    "band_memberships": BandConfig,
    "candidate_pairs": CandidateConfig,
    "scored_pairs": ScoreConfig,
    "duplicate_pairs": DuplicateConfig,
    "deduped_documents": RepresentativeConfig,
}
assert set(STAGE_OF_ASSET) <= set(CONFIG_OF_ASSET)
for _asset, _cls in CONFIG_OF_ASSET.items():
    _cls.asset_name = _asset


def _op_config(run_config: Mapping[str, Any], asset: str) -> dict[str, Any] | None:
    op = (run_config.get("ops") or {}).get(asset)
    if op is None:
        return None
    return dict(op.get("config") or {}) if isinstance(op, Mapping) else {}


def _params_of(asset: str, values: dict[str, Any]) -> ParamGroup:
    """The asset's parameters for a run with these config values: its config class (ranges, and
    the parameters in force as defaults), then its model's own rules."""
    config = CONFIG_OF_ASSET[asset](**values)
    fields = config.params_model.model_fields
    try:
        return config.params_model.checked({k: v for k, v in config.model_dump().items() if k in fields})
    except ParamError as err:
        raise InvalidConfig(asset, err) from None


DAILY_JOB = "webdedup_daily"
GLOBAL_JOB = "webdedup_global"
# The configurable assets of each job: a job run selects no asset, it runs them all.
JOB_ASSETS = {
    DAILY_JOB: {"documents", "fingerprinted", "band_memberships"},
    GLOBAL_JOB: {"candidate_pairs", "scored_pairs", "duplicate_pairs", "deduped_documents"},
}


def validate_run_config(run_config: Mapping[str, Any], selected: set[str] | None = None) -> None:
    """Check every asset's config in a run config before any stage runs; raise InvalidConfig.

    Each value is checked against its range; then the cross-field rules over the assets of the
    run (those configured, and `selected`: the run's asset selection, or its job's assets), with
    the values they will use (an asset of the run without config has its config class' defaults:
    the parameters in force): bands x rows = num_perm when fingerprinted and band_memberships run
    together, and duplicate_pairs' threshold, when set, equals scored_pairs' when both run. An
    asset whose upstream is not part of the run is checked by its stage against the stored
    upstream parameters.
    """
    configured = {a: c for a in CONFIG_OF_ASSET if (c := _op_config(run_config, a)) is not None}
    present = set(configured) | (set(selected or ()) & set(CONFIG_OF_ASSET))
    groups: dict[str, ParamGroup] = {}
    for asset in sorted(present, key=list(CONFIG_OF_ASSET).index):
        values = configured.get(asset, {})
        if asset == "duplicate_pairs":
            if values.get("threshold") is not None:
                groups["duplicate_threshold"] = DuplicateConfig(**values)  # type: ignore[assignment]
            continue
        groups[STAGE_OF_ASSET[asset]] = _params_of(asset, values)
    if "fingerprint" in groups and "banding" in groups:
        try:
            RunParams(fingerprint=groups["fingerprint"], banding=groups["banding"])
        except ValidationError as err:
            raise InvalidConfig("band_memberships", param_error(RunParams, err)) from None
    if "scoring" in groups and "duplicate_threshold" in groups:
        scored, dup = groups["scoring"].threshold, groups["duplicate_threshold"].threshold  # type: ignore[attr-defined]
        if scored != dup:
            raise InvalidConfig(
                "duplicate_pairs",
                ParamError(
                    ("threshold",),
                    "{p0} {dup} differs from scored_pairs' {p0} {scored}; there is one threshold: "
                    "set it on scored_pairs and leave duplicate_pairs' unset",
                    dup=dup,
                    scored=scored,
                ),
            )


def run_config_ops(params: RunParams, input_path: str) -> dict[str, Any]:
    """The `ops` section of a run config for these parameters (what the CLI and tests launch)."""
    values = params.stage_values()
    values["documents"] = {"input_path": input_path, **values["documents"]}
    return {asset: {"config": config} for asset, config in values.items()}
