"""One parameter model: the CLI and the Dagster config take every default, range and description
from webdedup_assets.params, and every parameter is validated before any stage runs."""

import subprocess
import sys

import dagster as dg
import pytest

from webdedup_assets import params
from webdedup_assets.cli.main import _parser, flag, main, run_params
from webdedup_assets.defs import build_defs
from webdedup_assets.defs.config import CONFIG_OF_ASSET, DuplicateConfig, FingerprintConfig, InvalidConfig

from .conftest import FIXTURE, job_config


def _run_args(*extra: str):
    return _parser().parse_args(["run", str(FIXTURE), *extra])


def test_cli_defaults_and_dagster_config_defaults_come_from_the_model():
    args = _run_args()
    for asset, group in params.STAGE_OF_ASSET.items():
        model = params.STAGE_GROUPS[group]
        config = CONFIG_OF_ASSET[asset]
        for name, field in model.model_fields.items():
            dagster_field = config.model_fields[name]
            assert dagster_field.default == field.default, (asset, name)
            assert dagster_field.description == field.description, (asset, name)
            assert dagster_field.metadata == field.metadata, (asset, name)  # the same ranges
            assert dagster_field.annotation == field.annotation, (asset, name)
            if name != "rows":  # --rows defaults to num-perm / bands, which is the model's rows
                assert getattr(args, name) == field.default, (asset, name)
    assert params.FingerprintParams().num_perm == params.BandingParams().bands * params.BandingParams().rows
    # what the CLI launches with no flags is exactly the model's defaults
    launched = run_params(args).stage_values()
    expected = params.RunParams().stage_values()
    for asset, values in expected.items():
        assert launched[asset] == values, asset
    # and so do the Dagster configs built with no config at all
    for asset, config_cls in CONFIG_OF_ASSET.items():
        if asset in expected:
            assert config_cls().params().model_dump() == expected[asset]


def test_help_text_is_the_model_description_with_default_and_range():
    help_text = " ".join(_parser()._subparsers._group_actions[0].choices["run"].format_help().split())
    for model in params.STAGE_GROUPS.values():
        for name, field in model.model_fields.items():
            assert flag(name) in help_text
            if name not in ("rows",):
                assert " ".join(field.description.split()) in help_text, name
    assert "Default: 130; an integer >= 1." in help_text
    assert "Default: 0.7; a number > 0 and <= 1." in help_text


BAD_FLAGS = [
    (["--max-record-bytes", "0"], "--max-record-bytes 0: must be an integer >= 1"),
    (["--cc-concurrency", "0"], "--cc-concurrency 0: must be an integer >= 1"),
    (["--cc-timeout", "0"], "--cc-timeout 0.0: must be a number > 0"),
    (["--cc-retries", "-1"], "--cc-retries -1: must be an integer >= 0"),
    (["--cc-backoff", "-1"], "--cc-backoff -1.0: must be a number >= 0"),
    (["--warc-workers", "-1"], "--warc-workers -1: must be an integer >= 0"),
    (["--num-perm", "0"], "--num-perm 0: must be an integer >= 1"),
    (["--seed", "-1"], "--seed -1: must be an integer >= 0"),
    (["--shingle-size", "0"], "--shingle-size 0: must be an integer >= 1"),
    (["--threshold", "1.5"], "--threshold 1.5: must be a number > 0 and <= 1"),
    (["--threshold", "0"], "--threshold 0.0: must be a number > 0 and <= 1"),
    (["--bands", "0"], "--bands 0: must be an integer >= 1"),
    (["--num-perm", "64", "--bands", "5"], "--num-perm 64 is not divisible by --bands 5"),
    (["--bands", "20", "--rows", "5"], "--bands 20 x --rows 5 = 100 must equal --num-perm 130"),
    (["--max-pair-slots", "-1"], "--max-pair-slots -1: must be an integer >= 0"),
    (["--hot-bucket-size", "1"], "--hot-bucket-size 1: must be an integer >= 2"),
    (["--cc-base-url", ""], "--cc-base-url '': must be non-empty text"),
    (
        ["--engine", "spark", "--spark-remote", "http://127.0.0.1:15002"],
        "--spark-remote must be a Spark Connect URL (sc://host:15002), not 'http://127.0.0.1:15002'",
    ),
    (
        ["--engine", "spark", "--verify-against-representative"],
        "--verify-against-representative is implemented by the DuckDB engine only: run without --engine spark",
    ),
    (
        ["--engine", "spark", "--spark-master", "nonsense://x"],
        "--spark-master must be a Spark master URL (local[*], local[4], spark://host:7077, yarn, "
        "k8s://https://host:443), not 'nonsense://x'",
    ),
    (
        ["--engine", "spark", "--spark-master", "local[2]", "--spark-remote", "sc://127.0.0.1:15002"],
        "give --spark-master or --spark-remote, not both",
    ),
]


@pytest.mark.parametrize(("flags", "message"), BAD_FLAGS, ids=[" ".join(f) for f, _ in BAD_FLAGS])
def test_cli_refuses_a_bad_parameter_before_any_stage_with_one_line(tmp_path, capsys, flags, message):
    out = tmp_path / "out"
    assert main(["run", str(FIXTURE), "--output", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"webdedup: error: {message}" or (message in err and len(err.strip().splitlines()) == 1)
    assert "Traceback" not in err
    assert not out.exists()  # nothing ran, nothing was written


def test_cli_bad_parameter_as_a_process_exits_2_without_traceback(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "webdedup_assets.cli.main",
            "run",
            str(FIXTURE),
            "--output",
            str(tmp_path),
            "--seed",
            "-1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "webdedup: error: --seed -1: must be an integer >= 0"


def test_probability_validates_too(capsys):
    assert main(["probability", "--threshold", "2"]) == 2
    assert "--threshold 2.0: must be a number > 0 and <= 1" in capsys.readouterr().err
    assert main(["probability"]) == 0
    assert "J=0.70  P(candidate)=0.9916  <- threshold" in capsys.readouterr().out
    assert main(["probability", "--threshold", "0.701"]) == 0  # next to 0.7, told apart
    assert "J=0.70  P(candidate)=0.9916\nJ=0.701  P(candidate)=0.9919  <- threshold\n" in capsys.readouterr().out


def test_param_error_names_field_value_and_range():
    with pytest.raises(params.ParamError) as err:
        params.FingerprintParams.checked({"num_perm": 0})
    assert str(err.value) == "num_perm 0: must be an integer >= 1"
    with pytest.raises(params.ParamError, match=r"bands 26 x rows 5 = 130 must equal num_perm 64"):
        params.RunParams.from_stage_values({"fingerprinted": {"num_perm": 64}})
    with pytest.raises(params.ParamError, match=r"bucket_policy 'ring': must be one of fail, star"):
        params.CandidateParams.checked({"bucket_policy": "ring"})
    with pytest.raises(params.ParamError, match=r"unknown parameter thresh \(known: threshold, verify\)"):
        params.ScoringParams.checked({"thresh": 0.5})
    with pytest.raises(Exception, match="frozen"):
        params.ScoringParams().threshold = 0.5  # type: ignore[misc]


def test_dagster_config_out_of_range_is_a_named_failure_not_a_traceback():
    with pytest.raises(InvalidConfig) as err:
        FingerprintConfig(num_perm=0)
    assert err.value.description == "invalid config of fingerprinted: num_perm 0: must be an integer >= 1"
    with pytest.raises(InvalidConfig, match="threshold 1.5: must be a number > 0 and <= 1"):
        DuplicateConfig(threshold=1.5)


def _daily_run(tmp_path, config):
    defs = build_defs(["2026-03"])
    ops = {k: v for k, v in config["ops"].items() if k in ("documents", "fingerprinted", "band_memberships")}
    return defs.resolve_job_def("webdedup_daily").execute_in_process(
        run_config={**config, "ops": ops},
        raise_on_error=False,
        partition_key="2026-03",
        instance=dg.DagsterInstance.ephemeral(),
    )


def _step_failure(result) -> str:
    """The description of the run's first failed step: the one line a user reads in the UI (a
    failure of the storage resource showed Dagster's own words, the message a cause in its stack)."""
    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failures, [e.event_type_value for e in result.all_events]
    return failures[0].event_specific_data.user_failure_data.description


@pytest.mark.parametrize(
    ("asset", "values", "message"),
    [
        ("fingerprinted", {"num_perm": 64}, "band_memberships: bands 26 x rows 5 = 130 must equal num_perm 64"),
        ("fingerprinted", {"seed": -1}, "invalid config of fingerprinted: seed -1: must be an integer >= 0"),
        ("documents", {"cc_concurrency": 0}, "invalid config of documents: cc_concurrency 0: must be an integer >= 1"),
        ("band_memberships", {"bands": 0}, "invalid config of band_memberships: bands 0: must be an integer >= 1"),
    ],
)
def test_dagster_run_with_invalid_config_fails_before_any_step(tmp_path, asset, values, message):
    config = job_config(tmp_path / "s", tmp_path / "o")
    config["ops"][asset]["config"].update(values)
    result = _daily_run(tmp_path, config)
    assert not result.success
    assert _step_failure(result).endswith(message)
    assert not result.get_asset_materialization_events()  # no stage ran
    assert not (tmp_path / "s").exists()


def test_dagster_run_config_with_two_thresholds_is_refused(tmp_path):
    config = job_config(tmp_path / "s", tmp_path / "o", threshold=0.9)
    config["ops"]["duplicate_pairs"] = {"config": {"threshold": 0.8}}
    defs = build_defs(["2026-03"])
    global_ops = {k: v for k, v in config["ops"].items() if k in ("candidate_pairs", "scored_pairs", "duplicate_pairs")}
    result = defs.resolve_job_def("webdedup_global").execute_in_process(
        run_config={**config, "ops": global_ops}, raise_on_error=False, instance=dg.DagsterInstance.ephemeral()
    )
    assert not result.success
    assert "threshold 0.8 differs from scored_pairs' threshold 0.9; there is one threshold" in _step_failure(result)
    assert not result.get_asset_materialization_events()
    # scored_pairs unconfigured in the job: it runs with its default (0.7), which duplicate_pairs' 0.8 contradicts
    only = {**config, "ops": {"duplicate_pairs": {"config": {"threshold": 0.8}}}}
    result = defs.resolve_job_def("webdedup_global").execute_in_process(
        run_config=only, raise_on_error=False, instance=dg.DagsterInstance.ephemeral()
    )
    assert "threshold 0.8 differs from scored_pairs' threshold 0.7; there is one threshold" in _step_failure(result)


def test_documented_parameter_table_matches_the_model():
    page = (FIXTURE.parents[1] / "docs" / "parameters.md").read_text()
    table = page[page.index("## Parameters and defaults") :]
    table = table[: table.index("**One threshold.**")]
    rows = {line.split("|")[2].strip().strip("`"): line for line in table.splitlines() if line.startswith("| `")}
    for asset, group in params.STAGE_OF_ASSET.items():
        for name, field in params.STAGE_GROUPS[group].model_fields.items():
            line = rows[name]
            cells = [c.strip() for c in line.split("|")[1:-1]]
            default = field.default
            shown = f"`{default}`" if isinstance(default, str) else str(default).lower()
            assert cells[0] == f"`{asset}`", name
            assert cells[2].startswith(shown), (name, cells[2])
            assert cells[3].startswith(params.allowed(field)), (name, cells[3])
            assert cells[4].startswith(f"`{flag(name)}`"), (name, cells[4])


def test_warc_options_defaults_match_the_model():
    """ingest/options.py still declares its own defaults (for callers without config): kept equal."""
    from webdedup_assets.defs.config import DocumentsConfig
    from webdedup_assets.ingest.options import WarcOptions

    assert DocumentsConfig().warc_options() == WarcOptions()


def test_the_one_threshold_rule_compares_with_the_threshold_in_force(monkeypatch):
    """duplicate_pairs' threshold is compared with the one scored_pairs will run with: its config
    default, the threshold in force (it was compared with the code's 0.7), when scored_pairs runs
    without config, selected or as part of a job (a job run selects no asset: 0.8 was ignored)."""
    from webdedup_assets.defs import config as config_module

    def only_duplicates(threshold: float) -> dict:
        return {"ops": {"duplicate_pairs": {"config": {"threshold": threshold}}}}

    in_the_job = config_module.JOB_ASSETS[config_module.GLOBAL_JOB]
    config_module.validate_run_config(only_duplicates(0.7), in_the_job)
    with pytest.raises(InvalidConfig, match="threshold 0.8 differs from scored_pairs' threshold 0.7"):
        config_module.validate_run_config(only_duplicates(0.8), in_the_job)
    held = config_module._config_class("ScoreConfig", params.ScoringParams, "held", in_force={"threshold": 0.9})
    held.asset_name = "scored_pairs"
    monkeypatch.setitem(config_module.CONFIG_OF_ASSET, "scored_pairs", held)
    config_module.validate_run_config(only_duplicates(0.9), {"scored_pairs", "duplicate_pairs"})
    with pytest.raises(InvalidConfig, match="threshold 0.7 differs from scored_pairs' threshold 0.9"):
        config_module.validate_run_config(only_duplicates(0.7), {"scored_pairs", "duplicate_pairs"})
