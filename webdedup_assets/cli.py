"""`webdedup` command line: runs the same Dagster Definitions in-process, checks included."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .core.minhash import candidate_probability

PROGRESS_LOGGER = "webdedup.progress"
EXIT_OK, EXIT_CHECK_FAILED, EXIT_ERROR = 0, 1, 2


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
        "check fails, 2 on bad input or parameters.",
    )
    run.add_argument(
        "input",
        help="CSV, Parquet, .warc or .warc.gz file, a folder of them, or a glob (quote it); with "
        "--format commoncrawl a CSV of warc_filename,warc_offset,warc_length targets",
    )
    run.add_argument("--output", default="output", help="folder for the published outputs (default: output)")
    run.add_argument(
        "--storage", default=None, help="storage root for the per-asset Parquet (default: OUTPUT/_storage)"
    )
    run.add_argument(
        "--format",
        dest="input_format",
        choices=["auto", "csv", "parquet", "warc", "commoncrawl"],
        default="auto",
        help="input format (default: from the file suffix); commoncrawl fetches byte ranges of WARC files",
    )
    run.add_argument(
        "--max-record-bytes",
        type=int,
        default=16 * 1024 * 1024,
        help="WARC records or fetched ranges larger than this are rejected (default 16 MiB)",
    )
    run.add_argument(
        "--cc-base-url",
        default="https://data.commoncrawl.org/",
        help="base URL or local mirror folder of the Common Crawl WARC paths (default the public bucket)",
    )
    run.add_argument(
        "--accept-commoncrawl-terms",
        action="store_true",
        help="acknowledge https://commoncrawl.org/terms-of-use (required for --format commoncrawl)",
    )
    run.add_argument("--cc-timeout", type=float, default=30.0, help="seconds per range request (default 30)")
    run.add_argument("--cc-retries", type=int, default=3, help="retries after a timeout or 5xx (default 3)")
    run.add_argument("--cc-concurrency", type=int, default=4, help="range requests in flight (default 4)")
    run.add_argument(
        "--warc-workers",
        type=int,
        default=1,
        help="processes converting local WARC files (default 1; 0: one per CPU, never more than files)",
    )
    run.add_argument("--shingle-size", type=int, default=5, help="tokens per shingle (default 5)")
    run.add_argument("--num-perm", type=int, default=120, help="MinHash values per document (default 120)")
    run.add_argument("--seed", type=int, default=1, help="MinHash seed (default 1)")
    run.add_argument("--bands", type=int, default=20, help="LSH bands (default 20)")
    run.add_argument(
        "--rows",
        type=int,
        default=None,
        help="values per band (default: num-perm / bands); bands x rows must equal num-perm",
    )
    run.add_argument("--threshold", type=float, default=0.8, help="exact Jaccard for a duplicate (default 0.8)")
    run.add_argument(
        "--max-pair-slots",
        type=int,
        default=1_000_000,
        help="budget of pair slots for the band join (default 1,000,000)",
    )
    run.add_argument(
        "--bucket-policy",
        choices=["fail", "star"],
        default="fail",
        help="over-budget behaviour: fail before the join, or star-link hot buckets",
    )
    run.add_argument(
        "--hot-bucket-size",
        type=int,
        default=1000,
        help="bucket size above which the star policy applies (default 1000)",
    )
    run.add_argument(
        "--representative-policy",
        choices=["newest", "oldest", "longest"],
        default="newest",
        help="which member of a cluster is kept (default newest)",
    )
    run.add_argument("--quiet", action="store_true", help="no per-stage progress lines")
    run.add_argument("--json", action="store_true", help="print the manifest counts as JSON instead of a table")
    prob = sub.add_parser("probability", help="P(candidate | Jaccard) for a banding")
    prob.add_argument("--bands", type=int, default=20)
    prob.add_argument("--rows", type=int, default=6)
    prob.add_argument("--threshold", type=float, default=0.8)
    return parser


def run_config(args: argparse.Namespace, storage_root: Path, output_dir: Path) -> dict[str, Any]:
    rows = args.rows
    if rows is None:
        if args.bands < 1 or args.num_perm % args.bands:
            raise ValueError(
                f"--num-perm {args.num_perm} is not divisible by --bands {args.bands}; "
                f"give --rows explicitly or choose bands that divide num-perm"
            )
        rows = args.num_perm // args.bands
    ops = {
        "documents": {
            "input_path": str(Path(args.input).expanduser()),
            "input_format": args.input_format,
            "warc_max_record_bytes": args.max_record_bytes,
            "cc_base_url": args.cc_base_url,
            "cc_accept_terms_of_use": args.accept_commoncrawl_terms,
            "cc_timeout_seconds": args.cc_timeout,
            "cc_max_retries": args.cc_retries,
            "cc_concurrency": args.cc_concurrency,
            "warc_workers": args.warc_workers,
        },
        "fingerprinted": {"shingle_size": args.shingle_size, "num_perm": args.num_perm, "seed": args.seed},
        "band_memberships": {"bands": args.bands, "rows": rows},
        "candidate_pairs": {
            "max_pair_slots": args.max_pair_slots,
            "bucket_policy": args.bucket_policy,
            "hot_bucket_size": args.hot_bucket_size,
        },
        "scored_pairs": {"threshold": args.threshold},
        "duplicate_pairs": {"threshold": args.threshold},
        "deduped_documents": {"representative_policy": args.representative_policy},
    }
    return {
        "ops": {name: {"config": config} for name, config in ops.items()},
        "resources": {"storage": {"config": {"storage_root": str(storage_root), "output_dir": str(output_dir)}}},
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


def execute(input_path: str, config: dict[str, Any], input_format: str = "auto") -> list:
    """Materialize every crawl day of the input in one run, then the global stages in a second.

    The same Definitions as `dagster dev`: the input's days are registered as the crawl_days
    partitions of a fresh instance, so a corpus spread over years is one run over exactly its
    days, not one run per day, and no page is left out for its date.
    Returns the events of both runs (stops after the first if it failed).
    """
    import dagster as dg

    from .defs import DAILY_ASSETS, DAILY_JOB, GLOBAL_JOB, defs, one_planned_event_per_asset, register_days
    from .defs.config import DocumentsConfig
    from .engine.documents import input_days
    from .engine.storage import Store
    from .engine.warc import discard_staging

    documents = DocumentsConfig(**config["ops"]["documents"]["config"])  # WARC input is converted once, here
    storage = Store(Path(config["resources"]["storage"]["config"]["storage_root"]))
    discard_staging(storage)  # a conversion left by an interrupted run is not reused
    days = input_days(input_path, input_format, store=storage, warc_options=documents.warc_options())
    if not days:  # empty or unreadable input: one day so that documents validates and reports it
        days = [datetime.now(UTC).date().isoformat()]
    instance = dg.DagsterInstance.ephemeral()
    register_days(instance, days)  # the crawl_days partitions of `dagster dev`: here, exactly the input's days
    with one_planned_event_per_asset():
        daily = defs.resolve_job_def(DAILY_JOB).execute_in_process(
            run_config=_split_config(config, DAILY_ASSETS),
            instance=instance,
            raise_on_error=False,
            tags={RANGE_START_TAG: days[0], RANGE_END_TAG: days[-1]},
        )
    events = list(daily.all_events)
    if not daily.success:
        return events
    global_ops = [k for k in config["ops"] if k not in DAILY_ASSETS]
    result = defs.resolve_job_def(GLOBAL_JOB).execute_in_process(
        run_config=_split_config(config, global_ops), instance=instance, raise_on_error=False
    )
    return events + list(result.all_events)


def cmd_run(args: argparse.Namespace) -> int:
    import dagster as dg

    from .engine.manifest import load_manifest
    from .engine.storage import Store

    output_dir = Path(args.output).expanduser().resolve()
    storage_root = Path(args.storage).expanduser().resolve() if args.storage else output_dir / "_storage"
    try:
        config = run_config(args, storage_root, output_dir)
    except ValueError as err:
        print(f"webdedup: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    if not args.quiet:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("  %(message)s"))
        progress = logging.getLogger(PROGRESS_LOGGER)
        progress.addHandler(handler)
        progress.setLevel(logging.INFO)
        print(f"webdedup: {args.input} -> {output_dir}", file=sys.stderr)
    try:
        events = execute(config["ops"]["documents"]["config"]["input_path"], config, args.input_format)
    except dg.DagsterInvalidConfigError as err:
        print(f"webdedup: error: invalid parameters: {err.errors[0].message if err.errors else err}", file=sys.stderr)
        return EXIT_ERROR
    failed_checks, skipped_checks = [], []
    succeeded = False
    for event in events:
        if event.event_type_value == "STEP_FAILURE":
            print(f"webdedup: error in {event.step_key}: {_failure_message(event)}", file=sys.stderr)
            return EXIT_ERROR
        if event.event_type_value == "ASSET_CHECK_EVALUATION":
            data = event.event_specific_data
            if not data.passed:
                label = f"{data.asset_key.to_user_string()}:{data.check_name}"
                details = {k: v.value for k, v in data.metadata.items()}
                (skipped_checks if data.severity.value == "WARN" else failed_checks).append((label, details))
        if event.event_type_value == "ASSET_MATERIALIZATION" and event.asset_key.to_user_string() == "manifest":
            succeeded = True
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
    if skipped_checks and not args.quiet:
        print(f"  {len(skipped_checks)} count check(s) skipped: {skipped_checks[0][1].get('skipped')}", file=sys.stderr)
    if failed_checks:
        for label, details in failed_checks:
            print(f"webdedup: check failed: {label}: {json.dumps(details, default=str)}", file=sys.stderr)
        return EXIT_CHECK_FAILED
    return EXIT_OK


def cmd_probability(args: argparse.Namespace) -> int:
    for jaccard in sorted({0.3, 0.5, 0.6, 0.7, 0.8, 0.9, args.threshold}):
        mark = "  <- threshold" if jaccard == args.threshold else ""
        print(f"J={jaccard:.2f}  P(candidate)={candidate_probability(jaccard, args.bands, args.rows):.4f}{mark}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "run":
        return cmd_run(args)
    return cmd_probability(args)


if __name__ == "__main__":
    sys.exit(main())
