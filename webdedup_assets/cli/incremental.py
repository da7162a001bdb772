"""`webdedup add` and `webdedup check`: parsers and commands, hooked into cli.py.

`add INPUT --output DIR` extends the corpus held in DIR's storage with INPUT's crawl days (a
day INPUT holds again replaces it): the daily stages run for those days only, then the
global assets are updated incrementally (engine.incremental.update; a full rebuild when it
has to, and it says why), then the outputs are published as one set.
`check NEW_INPUT --against STORAGE` writes, for each document of NEW_INPUT, whether it
duplicates a document of the corpus, without changing the corpus.

`add` is engine.pipeline.add (under the writer locks, in a storage transaction: a failed add
changes nothing); `check` (engine.incremental.check_input, also the Dagster asset
`checked_documents`) only reads the storage.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .. import params
from ..storage.objects import ObjectPath
from .flags import error_text, warn_of_empty_text
from .folders import output_of, require_same_corpus, storage_to_read, storage_to_write, warn_of_unread_files
from .progress import progress_shown

EXIT_OK, EXIT_ERROR = 0, 2


REFUSED, REBUILDS = "another value is refused", "another value rebuilds the global assets"


def held_values(argv: list[str]) -> dict[str, tuple[Any, str]]:
    """For `add --help` with the corpus' --output (or --storage): each parameter flag's value in the
    held corpus and what giving another one does, shown in its help instead of the package's
    default (an add keeps the held values). Empty when no local corpus is found there."""
    from ..engine.columns import held_mapping
    from ..engine.incremental import load_state
    from ..errors import WebdedupError
    from ..storage.objects import is_uri
    from ..storage.serial import stored_value
    from ..storage.store import Store

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--output", default="output")
    pre.add_argument("--storage", default=None)
    known, _ = pre.parse_known_args(argv)
    if is_uri(known.output) or (known.storage and is_uri(known.storage)):
        return {}  # (not downloaded for a help text)
    try:
        store = Store(storage_to_write(Path(known.output).expanduser().resolve(), known.storage))
        mapping = held_mapping(store)
        if mapping is None:
            return {}
        values = {k: (v, REFUSED) for k, v in mapping.model_dump().items() if k != "default_date"}
        for group, asset in (("fingerprint", "fingerprinted"), ("banding", "band_memberships")):
            model, stored = params.STAGE_GROUPS[group], store.params(asset).get(group)
            values.update({k: (stored_value(model, stored, k), REFUSED) for k in model.model_fields})
        held = (load_state(store, damaged_as_absent=True) or {}).get("parameters", {})
        for group in ("candidates", "scoring", "representative"):
            model = params.STAGE_GROUPS[group]
            values.update({k: (stored_value(model, held.get(group), k), REBUILDS) for k in model.model_fields})
        return values
    except (WebdedupError, OSError, ValueError):
        return {}


def add_incremental_parsers(sub, add_params, held: dict[str, tuple[Any, str]] | None = None) -> None:
    """`held`: the corpus' values for `add --help` (held_values)."""
    add = sub.add_parser(
        "add",
        help="add INPUT's crawl days to the corpus held in --output (incremental update)",
        description="Run the daily stages for INPUT's crawl days only (a day already held is replaced by "
        "INPUT's version of it; one that would lose documents INPUT does not give needs --replace-days), then "
        "update the global assets for the documents that changed, and publish. "
        "Fingerprint and banding parameters are those of the held corpus: a different value is refused. "
        "A change of a candidates, scoring or representative parameter, a storage written by `webdedup run` "
        "since, or --full-rebuild rebuilds the global assets from scratch (and says so).",
    )
    add.add_argument(
        "input", help="CSV, Parquet, JSON Lines, .warc or .warc.gz file, a folder of them, or a glob (quote it)"
    )
    add.add_argument("--output", default="output", help="folder of the corpus' published outputs (default: output)")
    add.add_argument(
        "--storage",
        default=None,
        help="storage root (default: the one the output was published from, else OUTPUT/_storage)",
    )
    add.add_argument("--format", dest="input_format", default="auto", help="input format (default: auto)")
    add.add_argument("--full-rebuild", action="store_true", help="rebuild every global asset from scratch")
    add.add_argument(
        "--replace-days",
        action="store_true",
        help="a held day INPUT gives again loses the documents INPUT does not give (without it, such an add is "
        "refused: a day's files added one by one would keep only the last)",
    )
    held = held or {}

    def option(name: str, field, generic: str | None = None) -> dict[str, Any]:
        if name in held:
            value, other = held[name]
            value = "(none)" if value in ("", None) else str(value).lower() if isinstance(value, bool) else value
            return {"default": None, "help": f"{field.description} Held corpus: {value}; {other}."}
        return {"default": None, **({"help": field.description + generic} if generic else {})}

    same = " Default: the mapping the held corpus was read with (another one is refused)."
    own = " Default: none; each add may give its own (the held days keep theirs)."
    add_params(
        add,
        params.ColumnParams,
        **{n: option(n, f, own if n == "default_date" else same) for n, f in params.ColumnParams.model_fields.items()},
    )
    for name in ("fingerprint", "banding", "candidates", "scoring", "representative"):
        model = params.STAGE_GROUPS[name]
        add_params(add, model, **{f: option(f, info) for f, info in model.model_fields.items()})
    add.add_argument("--json", action="store_true", help="print the update report as JSON")
    check = sub.add_parser(
        "check",
        help="is each page of NEW_INPUT a duplicate of the corpus? (the corpus is not changed)",
        description="Fingerprint NEW_INPUT with the corpus' parameters, look its band keys up in the corpus' band "
        "index, verify each candidate by exact Jaccard, and write one row per new document (is_duplicate, the "
        "best-matching corpus document and its cluster, the exact Jaccard, the candidates verified) to "
        "--report (default: check.parquet). Nothing in the storage changes.",
    )
    check.add_argument("input", metavar="NEW_INPUT")
    check.add_argument(
        "--against", required=True, help="the corpus: the output folder of a run or add (or its storage root)"
    )
    check.add_argument("--format", dest="input_format", default="auto", help="input format (default: auto)")
    check.add_argument(
        "--report",
        default=None,
        help="where the per-document answer goes (Parquet; default: check.parquet in the corpus' output folder)",
    )
    check.add_argument(
        "--default-date",
        default=None,
        help="crawl date (YYYY-MM-DD) of a page of NEW_INPUT without one (default: the corpus' own; a check does "
        "not date the corpus)",
    )
    check.add_argument("--json", action="store_true", help="print the summary as JSON")


def _given(args: argparse.Namespace, group: str) -> dict[str, Any]:
    return {k: getattr(args, k) for k in params.STAGE_GROUPS[group].model_fields if getattr(args, k) is not None}


def cmd_add(args: argparse.Namespace) -> int:
    from ..core.kernel.warm import load_in_background
    from ..ingest.inputs import hash_in_background

    hash_in_background(args.input, args.input_format)  # while the engine is imported
    load_in_background()
    warn_of_unread_files(args.input)
    from ..engine import pipeline
    from ..errors import WebdedupError

    output_dir = output_of(args.output)
    try:
        storage_root = storage_to_write(output_dir, args.storage)
        if args.storage:
            require_same_corpus(output_dir, storage_root)
    except WebdedupError as err:
        print(f"webdedup: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    groups = ("fingerprint", "banding", "candidates", "scoring", "representative")
    given = {group: _given(args, group) for group in groups}
    given["columns"] = {k: getattr(args, k) for k in params.ColumnParams.model_fields if getattr(args, k) is not None}
    notice = lambda message: print(f"webdedup: {message}", file=sys.stderr)  # noqa: E731
    try:
        with progress_shown(args.quiet):
            outcome = pipeline.add(
                args.input,
                args.input_format,
                storage_root,
                output_dir,
                given,
                args.full_rebuild,
                notice=notice,
                replace_days=args.replace_days,
            )
    except (params.ParamError, WebdedupError) as err:  # a stage's error too: an add's stages are one update
        print(f"webdedup: error: {error_text(err)}", file=sys.stderr)
        return EXIT_ERROR
    report, manifest, steps = outcome.report, outcome.manifest, outcome.step_seconds
    warn_of_empty_text(manifest["counts"])
    summary = {"input_days": outcome.days, **report.as_dict(), "step_seconds": steps, "counts": manifest["counts"]}
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        how = {"full": f"full rebuild ({report.reason})", "incremental": "incremental", "unchanged": "nothing changed"}
        print(f"webdedup add: {len(outcome.days)} crawl day(s) of {args.input} -> {output_dir}: {how[report.mode]}")
        print(
            f"  documents added {report.documents_added}, removed {report.documents_removed}; "
            f"buckets touched {report.touched_buckets}; pairs scored {report.pairs_scored}; "
            f"clusters touched {report.clusters_touched}; {report.seconds.get('total', 0):.2f} s"
        )
        print("  seconds: " + ", ".join(f"{name} {seconds:.2f}" for name, seconds in steps.items()))
        for key in ("documents", "duplicate_pairs", "clusters", "representatives"):
            print(f"  {key:<28}{manifest['counts'][key]}")
    return EXIT_OK


def corpus_folders(against: Path | ObjectPath, report: str | None) -> tuple[Path, Path]:
    """`check --against`: an output folder (its _storage) or a storage root; the report goes into
    the output folder unless --report says otherwise (the working folder when there is none). An
    output in object storage: the storage root its current set was published from."""
    if isinstance(against, ObjectPath):
        storage_root, output_dir = storage_to_read(against, None), Path.cwd()
    elif (against / "_storage").is_dir() or (against / "manifest.json").is_file():
        storage_root, output_dir = storage_to_read(against, None), against
    else:
        storage_root = against
        output_dir = against.parent if against.name == "_storage" else Path.cwd()
    return storage_root, Path(report).expanduser() if report else output_dir / "check.parquet"


def require_replaceable_report(report: Path) -> None:
    """check writes its report over a file at --report only when that file is an earlier check
    report (it overwrote whatever was there: the input checked, a published output)."""
    if not report.exists():
        return
    import pyarrow.parquet as pq

    from ..engine.incremental.check import CHECK_SCHEMA
    from ..errors import WebdedupError

    try:
        columns = set(pq.read_schema(report).names) if report.is_file() else set()
    except (OSError, ValueError):  # pyarrow.ArrowInvalid is a ValueError
        columns = set()
    if not set(CHECK_SCHEMA.names) <= columns:
        raise WebdedupError(f"--report {report} exists and is not a check report: give another path")


def cmd_check(args: argparse.Namespace) -> int:
    from ..engine.incremental import check_input
    from ..engine.verify import damage_named
    from ..errors import WebdedupError
    from ..storage.store import Store
    from ..storage.transaction import reading_warnings

    try:
        storage_root, report = corpus_folders(output_of(args.against), args.report)
        require_replaceable_report(report)
        for warning in reading_warnings(storage_root):  # (check reads the storage only)
            print(f"webdedup: warning: {warning}", file=sys.stderr)
        store = Store(storage_root)
        with damage_named(store):
            summary = check_input(store, args.input, args.input_format, report, args.default_date)
    except (WebdedupError, params.ParamError) as err:
        print(f"webdedup: error: {error_text(err)}", file=sys.stderr)
        return EXIT_ERROR
    held = summary["held_doc_ids"]
    if held["count"]:
        print(
            f"webdedup: warning: {held['count']} page(s) of {args.input} carry doc_ids the corpus holds already "
            f"(first: {', '.join(held['first'])}): each is compared with the held page of its doc_id too",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print(
            f"webdedup check: {summary['documents']} document(s) of {args.input}, {summary['duplicates']} duplicate(s) "
            f"of the corpus in {store.root} ({summary['decided_by']}); {summary['candidate_pairs']} "
            f"candidate pair(s) verified in {summary['seconds']:.2f} s -> {report}"
        )
    return EXIT_OK
