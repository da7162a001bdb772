"""`webdedup add` and `webdedup check`: parsers and commands, hooked into cli.py.

`add INPUT --output DIR` extends the corpus held in DIR's storage with INPUT's crawl days (a
day INPUT holds again replaces it): the daily stages run for those days only, then the
global assets are updated incrementally (engine.incremental.update; a full rebuild when it
has to, and it says why), then the outputs are published as one set.
`check NEW_INPUT --against STORAGE` writes, for each document of NEW_INPUT, whether it
duplicates a document of the corpus, without changing the corpus.

Both call the engine directly (not through the Dagster job that `run` executes): `add` under the
storage's writer lock; `check` (engine.incremental.check_input, also the Dagster asset
`checked_documents`) only reads the storage.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from . import params

EXIT_OK, EXIT_ERROR = 0, 2


def add_incremental_parsers(sub, add_params) -> None:
    add = sub.add_parser(
        "add",
        help="add INPUT's crawl days to the corpus held in --output (incremental update)",
        description="Run the daily stages for INPUT's crawl days only (a day already held is replaced by "
        "INPUT's version of it), then update the global assets for the documents that changed, and publish. "
        "Fingerprint and banding parameters are those of the held corpus: a different value is refused. "
        "A change of a candidates, scoring or representative parameter, a storage written by `webdedup run` "
        "since, or --full-rebuild rebuilds the global assets from scratch (and says so).",
    )
    add.add_argument(
        "input", help="CSV, Parquet, JSON Lines, .warc or .warc.gz file, a folder of them, or a glob (quote it)"
    )
    add.add_argument("--output", default="output", help="folder of the corpus' published outputs (default: output)")
    add.add_argument("--storage", default=None, help="storage root (default: OUTPUT/_storage)")
    add.add_argument("--format", dest="input_format", default="auto", help="input format (default: auto)")
    add.add_argument("--full-rebuild", action="store_true", help="rebuild every global asset from scratch")
    held = " Default: the mapping the held corpus was read with (another one is refused)."
    mapping = {n: {"default": None, "help": f.description + held} for n, f in params.ColumnParams.model_fields.items()}
    add_params(add, params.ColumnParams, **mapping)
    for name in ("fingerprint", "banding", "candidates", "scoring", "representative"):
        add_params(
            add, params.STAGE_GROUPS[name], **{f: {"default": None} for f in params.STAGE_GROUPS[name].model_fields}
        )
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
    check.add_argument("--against", required=True, help="storage root of the corpus (OUTPUT/_storage of a run)")
    check.add_argument("--format", dest="input_format", default="auto", help="input format (default: auto)")
    check.add_argument("--report", default="check.parquet", help="where the per-document answer goes (Parquet)")
    check.add_argument("--json", action="store_true", help="print the summary as JSON")


def _given(args: argparse.Namespace, group: str) -> dict[str, Any]:
    return {k: getattr(args, k) for k in params.STAGE_GROUPS[group].model_fields if getattr(args, k) is not None}


def _held(store, asset: str, group: str) -> dict[str, Any] | None:
    if not store.files(asset):
        return None
    return store.params(asset).get(group)


def _daily_params(store, args: argparse.Namespace):
    """Fingerprint and banding: the held corpus' (a different value given is refused)."""
    chosen = {}
    for group, asset, model in (
        ("fingerprint", "fingerprinted", params.FingerprintParams),
        ("banding", "band_memberships", params.BandingParams),
    ):
        held = _held(store, asset, group)
        given = _given(args, group)
        if held is not None:
            values = {k: held[k] for k in model.model_fields}
            differ = {k: (values[k], v) for k, v in given.items() if values[k] != v}
            if differ and not args.full_rebuild:
                shown = ", ".join(f"{k}={a} (held) vs {b} (given)" for k, (a, b) in differ.items())
                raise params.ParamError(
                    (),
                    "add: {shown}: changing a {group} parameter needs a full rebuild of every day; run `webdedup run` "
                    "on the whole input instead",
                    shown=shown,
                    group=group,
                )
            chosen[group] = model.checked(values)
        else:
            chosen[group] = model.checked(given)
    if chosen["banding"].bands * chosen["banding"].rows != chosen["fingerprint"].num_perm and "rows" not in _given(
        args, "banding"
    ):
        chosen["banding"] = params.BandingParams.checked(
            {"bands": chosen["banding"].bands, "rows": chosen["fingerprint"].num_perm // chosen["banding"].bands}
        )
    params.check_banding(chosen["fingerprint"], chosen["banding"])
    return chosen["fingerprint"], chosen["banding"]


def _global_params(args: argparse.Namespace):
    out = []
    for group in ("candidates", "scoring", "representative"):
        given = _given(args, group)
        out.append(params.STAGE_GROUPS[group].checked(given) if given else None)
    return out


def cmd_add(args: argparse.Namespace) -> int:
    from .ingest.inputs import hash_in_background

    hash_in_background(args.input, args.input_format)  # while the engine is imported
    from .engine import incremental
    from .engine.documents import mapping_for_add, stage_documents
    from .engine.fingerprint import stage_band_memberships, stage_fingerprinted
    from .engine.manifest import stage_manifest
    from .engine.publish import publication_prepared
    from .engine.reading import input_days
    from .engine.state import months_of, remove_leftovers, writer_lock
    from .engine.storage import Store
    from .errors import WebdedupError

    output_dir = Path(args.output).expanduser().resolve()
    storage_root = Path(args.storage).expanduser().resolve() if args.storage else output_dir / "_storage"
    store = Store(storage_root)
    try:
        with (
            writer_lock(output_dir, purpose=f"webdedup add {args.input}"),
            writer_lock(storage_root, purpose=f"webdedup add {args.input}"),
        ):
            remove_leftovers(storage_root)
            fingerprint, banding = _daily_params(store, args)
            candidates, scoring, representative = _global_params(args)
            given = {k: getattr(args, k) for k in params.ColumnParams.model_fields if getattr(args, k) is not None}
            mapping = mapping_for_add(store, params.ColumnParams.checked(given) if given else None)
            days = input_days(args.input, args.input_format, store=store, mapping=mapping, explain=True)
            if not days:
                raise WebdedupError(f"{args.input}: no crawl day found in the input (is crawled_at a date?)")
            months = months_of(days)  # the held days of these months that INPUT lacks are kept
            steps: dict[str, float] = {}  # seconds of each step, for the report

            def timed(name: str, step, *positional, **named):
                started = time.perf_counter()
                result = step(*positional, **named)
                steps[name] = round(time.perf_counter() - started, 3)
                return result

            timed(
                "documents",
                stage_documents,
                store,
                args.input,
                args.input_format,
                months=months,
                extend=True,
                mapping=mapping,
            )
            timed("fingerprinted", stage_fingerprinted, store, fingerprint, months)
            timed("band_memberships", stage_band_memberships, store, banding, months)
            # the day's fingerprints are final: their publication is built while the update runs
            with publication_prepared(store, output_dir):
                report = timed(
                    "update",
                    incremental.update,
                    store,
                    candidates,
                    scoring,
                    representative,
                    full_rebuild_flag=args.full_rebuild,
                )
                manifest = timed("publish", stage_manifest, store, output_dir)
    except params.ParamError as err:
        print(f"webdedup: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    except WebdedupError as err:
        print(f"webdedup: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    summary = {"input_days": days, **report.as_dict(), "step_seconds": steps, "counts": manifest["counts"]}
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        how = {"full": f"full rebuild ({report.reason})", "incremental": "incremental", "unchanged": "nothing changed"}
        print(f"webdedup add: {len(days)} crawl day(s) of {args.input} -> {output_dir}: {how[report.mode]}")
        print(
            f"  documents added {report.documents_added}, removed {report.documents_removed}; "
            f"buckets touched {report.touched_buckets}; pairs scored {report.pairs_scored}; "
            f"clusters touched {report.clusters_touched}; {report.seconds.get('total', 0):.2f} s"
        )
        print("  seconds: " + ", ".join(f"{name} {seconds:.2f}" for name, seconds in steps.items()))
        for key in ("documents", "duplicate_pairs", "clusters", "representatives"):
            print(f"  {key:<28}{manifest['counts'][key]}")
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    from .engine.incremental import check_input
    from .engine.storage import Store
    from .errors import WebdedupError

    store = Store(Path(args.against))
    try:
        summary = check_input(store, args.input, args.input_format, Path(args.report))
    except (WebdedupError, params.ParamError) as err:
        print(f"webdedup: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print(
            f"webdedup check: {summary['documents']} document(s) of {args.input}, {summary['duplicates']} duplicate(s) "
            f"of the corpus in {store.root} (exact Jaccard >= {summary['threshold']}); {summary['candidate_pairs']} "
            f"candidate pair(s) verified in {summary['seconds']:.2f} s -> {args.report}"
        )
    return EXIT_OK
