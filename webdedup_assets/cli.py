"""`webdedup` command line: runs the same Dagster Definitions in-process, checks included."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from . import params
from .core.minhash import candidate_probability
from .errors import WebdedupError
from .evaluate_cli import add_evaluate_parser, add_tune_parser, cmd_evaluate, cmd_tune
from .exiting import end_process
from .explain_cli import add_explain_parsers, cmd_explain, cmd_inspect
from .incremental_cli import add_incremental_parsers, cmd_add, cmd_check
from .progress import installed
from .progress_cli import announce_cold_kernels, stderr_sink

PROGRESS_LOGGER = "webdedup.progress"
EXIT_OK, EXIT_CHECK_FAILED, EXIT_ERROR = 0, 1, 2


# Flags whose name is not the parameter's own (`--shingle-size` for shingle_size).
FLAG_NAMES = {
    "input_format": "--format",
    "warc_max_record_bytes": "--max-record-bytes",
    "cc_accept_terms_of_use": "--accept-commoncrawl-terms",
    "cc_timeout_seconds": "--cc-timeout",
    "cc_max_retries": "--cc-retries",
    "cc_retry_backoff_seconds": "--cc-backoff",
}


def flag(name: str) -> str:
    """The command line flag of a parameter of webdedup_assets.params."""
    return FLAG_NAMES.get(name) or "--" + name.replace("_", "-")


def _shown(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) and value >= 10_000 else str(value)


def _add_params(parser: argparse.ArgumentParser, model: type[BaseModel], **overrides: dict[str, Any]) -> None:
    """One flag per field of a parameter group: its type, choices, default and help come from the model."""
    for name, field in model.model_fields.items():
        options: dict[str, Any] = {"dest": name, "default": field.default}
        annotation = params.base_type(field.annotation)
        if annotation is bool:  # a switch; --no-... as well if the model's default is true
            action = argparse.BooleanOptionalAction if field.default else "store_true"
            options.update(action=action, help=field.description)
        else:
            choices = params.choices(field)
            allowed = "" if choices else f"; {params.allowed(field)}"  # argparse lists the choices itself
            options.update(
                type=type(choices[0]) if choices else annotation,
                help=f"{field.description} Default: {_shown(field.default)}{allowed}.",
            )
            if choices:
                options["choices"] = list(choices)
            else:
                options["metavar"] = {int: "N", float: "X"}.get(annotation, "VALUE")
        options.update(overrides.get(name, {}))
        options["help"] = options["help"].replace("%", "%%")  # argparse formats help with %
        parser.add_argument(flag(name), **options)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="webdedup",
        description="Near-duplicate detection for web text: MinHash LSH candidates confirmed by exact "
        "shingle Jaccard, connected-component clusters, one representative per cluster.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run",
        help="run all nine assets and their checks on INPUT and print a summary",
        description="Materialize documents -> ... -> manifest on INPUT in-process (asset checks "
        "included), print progress per stage and a summary. Exit 0 on success, 1 when an asset "
        "check fails, 2 on bad input or parameters. Every parameter is checked before any stage runs.",
    )
    run.add_argument(
        "input",
        help="CSV, Parquet, JSON Lines (.jsonl, .jsonl.gz, .jsonl.zst, .json.gz, .json.zst), .warc or .warc.gz "
        "file, a folder of them, or a glob (quote it); with "
        "--format commoncrawl a CSV of warc_filename,warc_offset,warc_length targets",
    )
    run.add_argument("--output", default="output", help="folder for the published outputs (default: output)")
    run.add_argument(
        "--storage", default=None, help="storage root for the per-asset Parquet (default: OUTPUT/_storage)"
    )
    default_rows = params.BandingParams.model_fields["rows"].default
    for model in params.STAGE_GROUPS.values():
        _add_params(
            run,
            model,
            rows={
                "default": None,
                "help": f"MinHash values per band; bands x rows must equal num-perm. Default: num-perm / bands "
                f"({default_rows} with the defaults).",
            },
        )
    _add_params(run, params.EngineParams)
    run.add_argument("--quiet", action="store_true", help="no progress on stderr (per-stage lines, live counts)")
    run.add_argument("--json", action="store_true", help="print the manifest counts as JSON instead of a table")
    prob = sub.add_parser("probability", help="P(candidate | Jaccard) for a banding")
    _add_params(prob, params.BandingParams)
    _add_params(prob, params.ScoringParams)
    add_evaluate_parser(sub)
    add_tune_parser(sub)
    add_explain_parsers(sub)
    add_incremental_parsers(sub, _add_params)
    return parser


def run_params(args: argparse.Namespace) -> params.RunParams:
    """The parameters of `webdedup run`, validated; a ParamError names the first bad one."""

    def group(name: str, **given: Any) -> Any:
        model = params.STAGE_GROUPS[name]
        return model.checked({k: getattr(args, k) for k in model.model_fields} | given)

    fingerprint = group("fingerprint")
    rows = args.rows
    if rows is None:
        bands = params.BandingParams.checked({"bands": args.bands}).bands
        if fingerprint.num_perm % bands:
            raise params.ParamError(
                ("num_perm", "bands"),
                "{p0} {num_perm} is not divisible by {p1} {bands}; give --rows explicitly or choose bands "
                "that divide num-perm",
                num_perm=fingerprint.num_perm,
                bands=bands,
            )
        rows = fingerprint.num_perm // bands
    groups = {
        "input": group("input"),
        "fingerprint": fingerprint,
        "banding": group("banding", rows=rows),
        "candidates": group("candidates"),
        "scoring": group("scoring"),
        "representative": group("representative"),
    }
    try:
        return params.RunParams(**groups)
    except ValidationError as err:
        raise params.param_error(params.RunParams, err) from None


def run_config(args: argparse.Namespace, storage_root: Path, output_dir: Path) -> dict[str, Any]:
    """The Dagster run config of `webdedup run`; a ValueError (one line, flags named) when a parameter is bad."""
    from .defs.config import run_config_ops

    try:
        run = run_params(args)
        chosen = params.EngineParams.checked(
            {k: getattr(args, k) for k in params.EngineParams.model_fields if hasattr(args, k)}
        )
    except params.ParamError as err:
        raise ValueError(err.render(flag)) from None
    ops = run_config_ops(run, str(Path(args.input).expanduser()))
    # run = exactly this input, from scratch: never an incremental update of what the storage held
    ops["candidate_pairs"]["config"]["full_rebuild"] = True
    return {
        "ops": ops,
        "resources": {
            # no charts or data previews in the metadata: the in-process instance is thrown away
            "storage": {
                "config": {"storage_root": str(storage_root), "output_dir": str(output_dir), "ui_previews": False}
            },
            "engine": {"config": chosen.model_dump()},
        },
        "loggers": {"console": {"config": {"log_level": "CRITICAL"}}},
    }


def _failure_message(event) -> str:
    data = event.step_failure_data
    if data.user_failure_data is not None and data.user_failure_data.description:
        return data.user_failure_data.description
    error = data.error
    while error.cause is not None and "dagster" in error.cls_name.lower():
        error = error.cause
    if error.cls_name == "DagsterInvalidConfigError" or "config" in error.message.lower()[:80]:
        return error.message.strip()
    return f"{error.cls_name}: {error.message.strip().splitlines()[0] if error.message.strip() else ''}"


def _summary_table(manifest: dict[str, Any]) -> str:
    counts = manifest["counts"]
    lsh = manifest["lsh"]
    keys = [
        "documents",
        "possible_pairs",
        "candidate_pairs",
        "candidate_reduction_ratio",
        "duplicate_pairs",
        "exact_duplicate_pairs",
        "near_duplicate_pairs",
        "cross_domain_duplicates",
        "clusters",
        "duplicate_clusters",
        "singletons",
        "max_cluster_size",
        "max_bucket_size",
        "representatives",
        "removed",
        "retained_ratio",
    ]
    lines = [f"  {k:<28}{counts[k]}" for k in keys]
    lines.append(
        f"  {'P(candidate | threshold)':<28}{lsh['candidate_probability_at_threshold']} "
        f"(threshold {lsh['threshold']}, {lsh['bands']} bands x {lsh['rows']} rows)"
    )
    return "\n".join(lines)


RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


def _split_config(config: dict[str, Any], ops: list[str]) -> dict[str, Any]:
    return {**config, "ops": {k: v for k, v in config["ops"].items() if k in ops}}


def execute(input_path: str, config: dict[str, Any], input_format: str = "auto") -> RunOutcome:
    """Deduplicate exactly this input: one run over every crawl day it holds, then the global stages.

    Holds the writer locks of the output folder and the storage root for the whole run (a
    second writer is refused, naming this one), removes what dead runs left there, completes
    a publish a killed run left half done, and clears the crawl days the storage holds that
    this input does not (a line on stderr says so): the results never mix two corpora.
    The same Definitions as `dagster dev`: the input's months are registered as the crawl_months
    partitions of a fresh instance, so a corpus spread over years is one run over exactly its
    months, not one run per month, and no page is left out for its date.
    Returns a RunOutcome: the events of both runs (a list) and their results (stops after the
    first run if it failed).
    Raises WebdedupError (e.g. LockBusy) before anything is changed.
    """
    from .engine.publish import recover
    from .engine.state import writer_lock

    resources = config["resources"]["storage"]["config"]
    storage_root = Path(resources["storage_root"]).expanduser().resolve()
    output_dir = Path(resources["output_dir"]).expanduser().resolve()
    purpose = f"webdedup run {input_path}"
    with writer_lock(output_dir, purpose=purpose) as output_lock, writer_lock(storage_root, purpose=purpose) as lock:
        for report in (output_lock, lock):
            for stale in report.stale:
                _notice(
                    f"took over the writer lock of {report.path} left by pid {stale.get('pid')} "
                    f"(started {stale.get('started')}), which is no longer running"
                )
        _tidy(storage_root, output_dir)
        if recover(output_dir):
            _notice(f"completed the publishing of {output_dir} that an interrupted run had begun")
        return _execute_locked(input_path, config, input_format, storage_root)


def _notice(message: str) -> None:
    print(f"webdedup: {message}", file=sys.stderr)


def _tidy(storage_root: Path, output_dir: Path) -> None:
    """Temporary files and staging folders of dead runs (the exclusive locks are held)."""
    from .engine.state import remove_leftovers

    removed = remove_leftovers(storage_root) + remove_leftovers(output_dir)
    if removed:
        _notice(f"removed {len(removed)} temporary file(s) left by interrupted runs (first: {removed[0]})")


def _execute_locked(input_path: str, config: dict[str, Any], input_format: str, storage_root: Path) -> RunOutcome:
    import dagster as dg

    from .defs import DAILY_ASSETS, DAILY_JOB, GLOBAL_JOB, defs, one_planned_event_per_asset, register_months
    from .defs.config import DocumentsConfig
    from .engine.publish import publication_prepared
    from .engine.reading import input_days
    from .engine.state import clear_days, held_days, months_of, reset_outdated
    from .engine.storage import Store

    documents = DocumentsConfig(**config["ops"]["documents"]["config"])  # WARC input is converted once, here
    storage = Store(storage_root)
    if reset_outdated(storage):
        _notice(f"{storage_root} was written by an earlier webdedup in another layout: rebuilt from the input")
    days = input_days(
        input_path, input_format, store=storage, warc_options=documents.warc_options(), mapping=documents.mapping()
    )
    stale = [day for day in held_days(storage) if day not in set(days)]
    if stale:
        clear_days(storage, stale)
        _notice(
            f"cleared {len(stale)} crawl day(s) held in {storage_root} that this input does not hold "
            f"({stale[0]} .. {stale[-1]}); the results cover exactly {input_path}"
        )
    if not days:  # empty or unreadable input: one day so that documents validates and reports it
        days = [datetime.now(UTC).date().isoformat()]
    # Dagster leaves a context variable pointing at the instance's state storage after a run
    # (dagster 1.13); once the throwaway instance is collected, the next Definitions built in this
    # process fails ("undefined DagsterInstance weakref"). The variable is restored on the way out.
    from dagster._core.storage.defs_state.base import set_defs_state_storage

    with set_defs_state_storage(None):
        instance = dg.DagsterInstance.ephemeral()
        months = months_of(days)
        register_months(instance, months)  # the crawl_months partitions of `dagster dev`: the input's months
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
        # the fingerprints are final: their publication is built while the global stages run
        with publication_prepared(storage, Path(config["resources"]["storage"]["config"]["output_dir"])):
            result = defs.resolve_job_def(GLOBAL_JOB).execute_in_process(
                run_config=_split_config(config, global_ops), instance=instance, raise_on_error=False
            )
        return RunOutcome([daily, result])


class RunOutcome(list):
    """The events of a `webdedup run` (the daily range run, then the global run), read through
    Dagster's result API: a list of all events, plus the runs' results."""

    def __init__(self, results: list) -> None:
        super().__init__(event for result in results for event in result.all_events)
        self.results = results

    @property
    def step_failures(self) -> list:
        return [event for result in self.results for event in result.get_step_failure_events()]

    @property
    def check_evaluations(self) -> list:
        return [evaluation for result in self.results for evaluation in result.get_asset_check_evaluations()]

    @property
    def completed(self) -> bool:
        """The manifest was materialized: every stage ran."""
        return any(
            event.asset_key.to_user_string() == "manifest"
            for result in self.results
            for event in result.get_asset_materialization_events()
        )


def _blocking_check_failed(event) -> bool:
    error = event.step_failure_data.error
    return error is not None and error.cls_name == "DagsterAssetCheckFailedError"


def _print_failed_checks(failed: list[tuple[str, dict[str, Any], str | None]]) -> None:
    """One line per failed check: its whole message (first offending doc_ids included), else its figures."""
    for label, details, description in failed:
        message = description or json.dumps(details, default=str)
        print(f"webdedup: check failed: {label}: {message}", file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> int:
    from .ingest.inputs import hash_in_background

    hash_in_background(str(Path(args.input).expanduser()), args.input_format)  # while Dagster is imported
    output_dir = Path(args.output).expanduser().resolve()
    storage_root = Path(args.storage).expanduser().resolve() if args.storage else output_dir / "_storage"
    try:
        config = run_config(args, storage_root, output_dir)
    except ValueError as err:
        print(f"webdedup: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    progress = logging.getLogger(PROGRESS_LOGGER)
    handler = logging.StreamHandler(sys.stderr)
    if not args.quiet:
        handler.setFormatter(logging.Formatter("  %(message)s"))
        progress.addHandler(handler)
        progress.setLevel(logging.INFO)
        print(f"webdedup: {args.input} -> {output_dir}", file=sys.stderr)
        announce_cold_kernels()
    try:
        with installed(None if args.quiet else stderr_sink()):
            return _run_and_report(args, config, output_dir, storage_root)
    finally:
        progress.removeHandler(handler)  # a second call in the same process does not print twice


def _run_and_report(args: argparse.Namespace, config: dict[str, Any], output_dir: Path, storage_root: Path) -> int:
    import dagster as dg

    from .engine.manifest import load_manifest
    from .engine.storage import Store

    try:
        outcome = execute(config["ops"]["documents"]["config"]["input_path"], config, args.input_format)
    except WebdedupError as err:  # e.g. another run holds the folder
        print(f"webdedup: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    except dg.DagsterInvalidConfigError as err:
        print(f"webdedup: error: invalid parameters: {err.errors[0].message if err.errors else err}", file=sys.stderr)
        return EXIT_ERROR
    for failure in outcome.step_failures:
        if not _blocking_check_failed(failure):  # a blocking check's own message is printed below
            print(f"webdedup: error in {failure.step_key}: {_failure_message(failure)}", file=sys.stderr)
            return EXIT_ERROR
    failed_checks, skipped_checks = [], []
    for evaluation in outcome.check_evaluations:
        if not evaluation.passed:
            label = f"{evaluation.asset_key.to_user_string()}:{evaluation.check_name}"
            details = {k: v.value for k, v in evaluation.metadata.items()}
            target = skipped_checks if evaluation.severity == dg.AssetCheckSeverity.WARN else failed_checks
            target.append((label, details, evaluation.description))
    succeeded = outcome.completed
    if failed_checks and not succeeded:  # a blocking check stopped the run
        _print_failed_checks(failed_checks)
        return EXIT_CHECK_FAILED
    if not succeeded:
        print("webdedup: error: the run did not complete", file=sys.stderr)
        return EXIT_ERROR
    manifest = load_manifest(Store(storage_root))
    if args.json:
        print(json.dumps(manifest["counts"], indent=2))
    else:
        print(f"webdedup summary ({output_dir}):")
        print(_summary_table(manifest))
    warc = manifest["input"].get("warc")
    if warc:
        print(
            f"webdedup: WARC input: {warc['records']} records -> {warc['documents']} documents; "
            f"{warc['not_documents']} skipped or rejected (skipped {warc['skipped']}, rejected {warc['rejected']}); "
            f"listed in {output_dir / 'rejected_records.csv'}",
            file=sys.stderr,
        )
    skipped = [details for _, details, _ in skipped_checks if "skipped" in details]
    if skipped and not args.quiet:
        print(f"  {len(skipped)} count check(s) skipped: {skipped[0].get('skipped')}", file=sys.stderr)
    for label, details, description in skipped_checks:
        if "skipped" not in details:  # a warning: the results stand, but look at these
            print(f"webdedup: warning: {label}: {description}", file=sys.stderr)
    if failed_checks:
        _print_failed_checks(failed_checks)
        return EXIT_CHECK_FAILED
    return EXIT_OK


def cmd_probability(args: argparse.Namespace) -> int:
    try:
        params.BandingParams.checked({"bands": args.bands, "rows": args.rows})
        params.ScoringParams.checked({"threshold": args.threshold})
    except params.ParamError as err:
        print(f"webdedup: error: {err.render(flag)}", file=sys.stderr)
        return EXIT_ERROR
    for jaccard in sorted({0.3, 0.5, 0.6, 0.7, 0.8, 0.9, args.threshold}):
        mark = "  <- threshold" if jaccard == args.threshold else ""
        print(f"J={jaccard:.2f}  P(candidate)={candidate_probability(jaccard, args.bands, args.rows):.4f}{mark}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "run":
        return cmd_run(args)
    if args.command == "evaluate":
        return cmd_evaluate(args)
    if args.command == "tune":
        return cmd_tune(args)
    if args.command in ("add", "check"):
        return cmd_add(args) if args.command == "add" else cmd_check(args)
    if args.command in ("explain", "inspect"):
        return cmd_explain(args) if args.command == "explain" else cmd_inspect(args)
    return cmd_probability(args)


def entry() -> None:
    """The `webdedup` command and `python -m webdedup_assets.cli`: main(), then the process ends
    with its status (exiting.end_process: no module teardown)."""
    end_process(main())


if __name__ == "__main__":
    entry()
