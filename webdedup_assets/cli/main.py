"""`webdedup` command line: the pipeline (engine.pipeline) and the tools around it. Dagster is not
imported: `dagster dev` runs the same stage functions as assets (defs/)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, NoReturn

from pydantic import BaseModel, ValidationError

from .. import params
from ..core.minhash import candidate_probability
from ..errors import WebdedupError
from ..storage.objects import ObjectPath, is_uri
from ..storage.remote import working_copy
from .evaluate import add_evaluate_parser, add_tune_parser, cmd_evaluate, cmd_tune
from .explain import add_explain_parsers, cmd_explain, cmd_inspect
from .flags import error_text, flag, warn_of_empty_text
from .folders import output_of, remote_storage, storage_to_write, warn_of_unread_files
from .incremental import add_incremental_parsers, cmd_add, cmd_check, held_values
from .progress import progress_shown
from .verify import add_verify_parser, cmd_verify

EXIT_OK, EXIT_CHECK_FAILED, EXIT_ERROR = 0, 1, 2


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


class _Parser(argparse.ArgumentParser):
    """A mistake on the command line is one line naming it and where the help is, not the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """`argv`: `add --help` shows the values of the corpus its --output holds."""
    parser = _Parser(
        prog="webdedup",
        description="Near-duplicate detection for web text: MinHash LSH candidates confirmed by exact "
        "shingle Jaccard, connected-component clusters, one representative per cluster.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run",
        help="deduplicate exactly INPUT: every stage and its checks, then publish the outputs",
        description="Run documents -> ... -> manifest on INPUT (each stage's checks after it), print progress "
        "per stage and a summary, and leave the state that `webdedup add` extends. Exit 0 on success, 1 when a "
        "check fails, 2 on bad input or parameters. Every parameter is checked before any stage runs, and a run "
        "that fails changes nothing in the storage or the outputs.",
    )
    run.add_argument(
        "input",
        help="CSV, Parquet, JSON Lines (.jsonl, .jsonl.gz, .jsonl.zst, .json.gz, .json.zst), .warc or .warc.gz "
        "file, a folder of them, or a glob (quote it); with "
        "--format commoncrawl a CSV of warc_filename,warc_offset,warc_length targets",
    )
    run.add_argument("--output", default="output", help="folder for the published outputs (default: output)")
    run.add_argument(
        "--storage",
        default=None,
        help="storage root for the per-asset Parquet (default: the one the output was published from, else "
        "OUTPUT/_storage)",
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
    run.add_argument(
        "--emit-shards",
        action="store_true",
        help="also write the kept records in the input's own form: OUTPUT/shards/, one shard per input shard "
        "(same name and compression), each kept record as it was read (CSV, Parquet and JSON Lines input)",
    )
    run.add_argument("--json", action="store_true", help="print the manifest counts as JSON instead of a table")
    prob = sub.add_parser("probability", help="P(candidate | Jaccard) for a banding")
    _add_params(prob, params.BandingParams)
    _add_params(prob, params.ScoringParams)
    add_evaluate_parser(sub)
    add_tune_parser(sub)
    add_explain_parsers(sub)
    asks_help = argv is not None and argv[:1] == ["add"] and ("-h" in argv or "--help" in argv)
    add_incremental_parsers(sub, _add_params, held_values(argv[1:]) if asks_help else None)
    add_verify_parser(sub)
    for command in sub.choices.values():  # one meaning on every command, so scripts can pass it to any
        command.add_argument(
            "--quiet",
            action="store_true",
            help="stderr for errors and warnings only: no progress (per-stage lines, live counts, verify's "
            "tally), no notices of transfers to or from object storage",
        )
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
    if lsh.get("fingerprint_method") == "simhash":
        keys = (
            f"{lsh['blocks']} blocks"
            if lsh.get("key_blocks", 1) == 1
            else (f"{lsh['keys']} keys of {lsh['key_blocks']} of {lsh['blocks']} blocks")
        )
        lines.append(f"  {'SimHash blocking':<28}pairs within {lsh['max_hamming']} of 64 bits ({keys})")
    else:
        lines.append(
            f"  {'P(candidate | threshold)':<28}{lsh['candidate_probability_at_threshold']} "
            f"(threshold {lsh['threshold']}, {lsh['bands']} bands x {lsh['rows']} rows)"
        )
    return "\n".join(lines)


def _notice(message: str) -> None:
    print(f"webdedup: {message}", file=sys.stderr)


def _print_failed_checks(failed: list) -> None:
    """One line per failed check: its whole message (first offending doc_ids included)."""
    for outcome in failed:
        print(f"webdedup: check failed: {outcome.check.label}: {outcome.message}", file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> int:
    from ..core.kernel.warm import load_in_background
    from ..engine.stages.clustering_spark import require_on_spark
    from ..ingest.inputs import hash_in_background

    input_path = args.input if is_uri(args.input) else str(Path(args.input).expanduser())
    hash_in_background(input_path, args.input_format)  # while the engine is imported
    warn_of_unread_files(input_path)
    output_dir = output_of(args.output)
    try:
        storage_root = storage_to_write(output_dir, args.storage)
    except WebdedupError as err:
        print(f"webdedup: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    try:
        run = run_params(args)
        chosen = params.EngineParams.checked(
            {k: getattr(args, k) for k in params.EngineParams.model_fields if hasattr(args, k)}
        )
        if chosen.engine == "spark":
            require_on_spark(run.representative)
    except (params.ParamError, WebdedupError) as err:
        print(f"webdedup: error: {error_text(err)}", file=sys.stderr)
        return EXIT_ERROR
    if chosen.engine == "duckdb":  # on Spark the executors run the kernels
        load_in_background()
    with progress_shown(args.quiet, f"webdedup: {args.input} -> {output_dir}"):
        return _run_and_report(args, input_path, run, chosen, output_dir, storage_root)


def _run_and_report(
    args: argparse.Namespace,
    input_path: str,
    run: params.RunParams,
    chosen: params.EngineParams,
    output_dir: Path | ObjectPath,
    storage_root: Path,
) -> int:
    from ..engine import pipeline

    try:
        outcome = pipeline.run(
            input_path, storage_root, output_dir, run, chosen, notice=_notice, emit_shards=args.emit_shards
        )
    except pipeline.ChecksFailed as err:  # a blocking check stopped the run
        _print_failed_checks([o for o in err.checks if o.passed is False and o.check.kind != "warning"])
        return EXIT_CHECK_FAILED
    except pipeline.StageFailed as err:
        print(f"webdedup: error in {err.stage}: {error_text(err)}", file=sys.stderr)
        return EXIT_ERROR
    except params.ParamError as err:
        print(f"webdedup: error: {err.render(flag)}", file=sys.stderr)
        return EXIT_ERROR
    except WebdedupError as err:  # e.g. another run holds the folder, or the input is missing
        print(f"webdedup: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    manifest = outcome.manifest
    if args.json:
        print(json.dumps(manifest["counts"], indent=2))
    else:
        print(f"webdedup summary ({output_dir}):")
        print(_summary_table(manifest))
    warn_of_empty_text(manifest["counts"])
    warc = manifest["input"].get("warc")
    if isinstance(output_dir, ObjectPath):  # in the set its CURRENT names
        output_dir = ObjectPath(*output_dir.parts, "sets", "<CURRENT>")
    if warc:
        print(
            f"webdedup: WARC input: {warc['records']} records -> {warc['documents']} documents; "
            f"{warc['not_documents']} skipped or rejected (skipped {warc['skipped']}, rejected {warc['rejected']}); "
            f"listed in {output_dir / 'rejected_records.csv'}",
            file=sys.stderr,
        )
    skipped = outcome.skipped_checks
    if skipped and not args.quiet:
        print(f"  {len(skipped)} count check(s) skipped: {skipped[0].details['skipped']}", file=sys.stderr)
    for warning in outcome.warnings:  # the results stand, but look at these
        print(f"webdedup: warning: {warning.check.label}: {warning.message}", file=sys.stderr)
    if outcome.failed_checks:
        _print_failed_checks(outcome.failed_checks)
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
        shown = f"{jaccard:.2f}" if round(jaccard, 2) == jaccard else f"{jaccard:g}"  # 0.701 is not 0.70
        print(f"J={shown}  P(candidate)={candidate_probability(jaccard, args.bands, args.rows):.4f}{mark}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser(argv).parse_args(argv)
    output = getattr(args, "output", None)
    if args.command in ("evaluate", "tune") and isinstance(output, str) and is_uri(output):
        print(
            f"webdedup: error: --output {output}: {args.command} writes its tables into --output; give a local "
            "folder (and --storage, the run's storage root)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    try:
        remote = remote_storage(args)
        if remote is None:
            return _dispatch(args)
        notice = None if args.quiet else _notice
        with working_copy(remote, args.command in ("run", "add"), f"webdedup {args.command}", notice=notice) as local:
            if args.command == "check":
                if args.report is None and not is_uri(args.against):  # into the output folder, as always
                    args.report = str(Path(args.against).expanduser() / "check.parquet")
                args.against = str(local)
            else:
                args.storage = str(local)
            return _dispatch(args)
    except WebdedupError as err:  # the storage in object storage: unreachable, or another writer holds it
        print(f"webdedup: error: {err}", file=sys.stderr)
        return EXIT_ERROR


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "run":
        return cmd_run(args)
    if args.command == "evaluate":
        return cmd_evaluate(args)
    if args.command == "tune":
        return cmd_tune(args)
    if args.command in ("add", "check"):
        return cmd_add(args) if args.command == "add" else cmd_check(args)
    if args.command == "verify":
        return cmd_verify(args)
    if args.command in ("explain", "inspect"):
        return cmd_explain(args) if args.command == "explain" else cmd_inspect(args)
    return cmd_probability(args)


if __name__ == "__main__":
    from . import entry

    entry()
