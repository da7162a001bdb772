"""The documents stage's WARC step: convert WARC input (or Common Crawl targets) once per storage root.

The conversion (ingest.convert) is staged under the storage root, keyed by the inputs' sha256,
the options and the converter version, so that `webdedup run` reads (or fetches) each record
once although it asks for the input's crawl days before the documents stage runs. The staging
folder is named like every other run's staging folder (`.staging-*`): what an interrupted run
left there is removed with the other leftovers when the next writer takes the lock
(state.remove_leftovers), never reused. `rejected_records` is written here, beside documents.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import WebdedupError
from ...ingest.commoncrawl import require_terms
from ...ingest.convert import CONVERTER_VERSION, convert_warc_input
from ...ingest.inputs import WARC_FORMATS, InputFile
from ...ingest.options import WarcOptions
from ...ingest.warc.collect import REJECTED_SCHEMA
from ...params import ColumnParams, InputParams
from ...storage.fileio import atomic_path, file_sha256, write_text
from ...storage.store import Store

PROGRESS = logging.getLogger("webdedup.progress")
STAGING_FOLDER = ".staging-warc"


def write_rejections(rows: list[dict[str, Any]], parquet_path: Path) -> None:
    """rejected_records as Parquet beside the documents asset (published as CSV by engine.publish)."""
    table = pa.Table.from_pylist(rows, schema=REJECTED_SCHEMA)
    with atomic_path(parquet_path) as temp:
        pq.write_table(table, temp, compression="zstd")


def rejections_by_kind(store: Store) -> dict[str, int]:
    """Rejected input records per kind (none without WARC input)."""
    path = store.path("rejected_records")
    if not path.exists():
        return {}
    kinds = pq.read_table(path, columns=["kind"]).column("kind").to_pylist()
    counts: dict[str, int] = {}
    for kind in kinds:
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items()))


def clear_rejections(store: Store) -> None:
    """A non-WARC run leaves no stale rejected_records from an earlier WARC run."""
    store.path("rejected_records").unlink(missing_ok=True)


def _staging_dir(store: Store) -> Path:
    return store.root / STAGING_FOLDER


def discard_staging(store: Store) -> None:
    """Drop the staged conversion once the documents asset is written."""
    shutil.rmtree(_staging_dir(store), ignore_errors=True)


def _staging_key(warcs: list[InputFile], targets: list[InputFile], options: WarcOptions) -> str:
    spec = {
        "version": CONVERTER_VERSION,
        "warc": [(str(f.path), f.sha256, f.bytes) for f in warcs],
        "targets": [(str(f.path), f.sha256) for f in targets],
        "options": asdict(options),
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:32]


def _holds_no_warc_record(described: dict[str, Any]) -> bool:
    """A converted input file all of whose bytes were rejected as not starting a WARC record."""
    return described["records"] > 0 and described["rejected"].get("not_warc", 0) == described["records"]


def stage_warc(
    store: Store, files: list[InputFile], options: WarcOptions | None
) -> tuple[list[InputFile], list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """Convert WARC inputs (or Common Crawl targets) into one staged Parquet; list what was skipped.

    Returns (files for the documents stage: the non-WARC inputs + the staged Parquet,
    descriptions of the real inputs with record counts, summary). The conversion is kept under
    the storage root, keyed by the inputs' sha256 and the options, until `discard_staging`, so
    that `webdedup run` reads (or fetches) each record once although it asks for the input's
    crawl days before the documents stage runs.
    """
    options = options or WarcOptions()
    warcs = [f for f in files if f.format == "warc"]
    targets = [f for f in files if f.format == "commoncrawl"]
    others = [f for f in files if f.format not in WARC_FORMATS]
    if targets and (len(targets) > 1 or warcs or others):
        raise WebdedupError("input_format commoncrawl takes exactly one CSV of targets (warc_filename, offset, length)")
    names = [f.path.name for f in warcs]
    names = [n if names.count(n) == 1 else str(f.path) for n, f in zip(names, warcs)]
    key = _staging_key(warcs, targets, options)
    staged = _staging_dir(store) / f"{key}.parquet"
    summary_path = staged.with_suffix(".json")
    rejected_path = staged.with_suffix(".rejected.parquet")
    if staged.is_file() and summary_path.is_file() and rejected_path.is_file():
        result = json.loads(summary_path.read_text())
        result["rejected_rows"] = pq.read_table(rejected_path).to_pylist()
    else:
        discard_staging(store)  # one conversion at a time
        if targets:
            require_terms(options)
        what = f"{targets[0].path.name} (Common Crawl targets)" if targets else f"{len(warcs)} WARC file(s)"
        PROGRESS.info("%-18s reading %s", "warc input", what)
        result = convert_warc_input(
            [(f.path, n) for f, n in zip(warcs, names)], staged, options, targets[0].path if targets else None
        )
        done = result["summary"]
        PROGRESS.info(
            "%-18s done: %s records -> %s documents, %s skipped or rejected in %.2f s",
            "warc input",
            done["records"],
            done["documents"],
            done["not_documents"],
            done["seconds"],
        )
        write_rejections(result["rejected_rows"], rejected_path)
        write_text(summary_path, json.dumps({k: v for k, v in result.items() if k != "rejected_rows"}, default=str))
    if warcs and all(_holds_no_warc_record(d) for d in result["files"]):
        # Not one WARC record in any file: a wrong --format or a wrong file, never a crawl to publish as empty.
        raise WebdedupError(
            f"{warcs[0].path}: not a WARC file (no WARC record in it"
            + (f" nor in the {len(warcs) - 1} other WARC input(s)" if len(warcs) > 1 else "")
            + "); CSV, Parquet and JSON Lines input takes --format auto, csv, parquet or jsonl"
        )
    described = [f.describe() for f in others]
    if targets:
        described.append({**targets[0].describe(), **result["files"][0]})
    else:
        described += [{**f.describe(), **d} for f, d in zip(warcs, result["files"])]
    staged_file = InputFile(staged, "parquet", file_sha256(staged), staged.stat().st_size, stored=True)
    return others + [staged_file], described, result["summary"], result["rejected_rows"]


def record_rejections(store: Store, rows: list[dict[str, Any]], input_files: list[InputFile], extend: bool) -> None:
    """The conversion's rejected `rows` as rejected_records: for `webdedup add` (`extend`), beside
    the held rows of the WARC files this input does not give again."""
    held = store.path("rejected_records")
    if extend and held.is_file():
        given = {r["warc_filename"] for r in rows}  # and the input's WARC files without a rejected record:
        given |= {name for f in input_files if f.format == "warc" for name in (f.path.name, str(f.path))}
        rows = [r for r in pq.read_table(held).to_pylist() if r["warc_filename"] not in given] + rows
    write_rejections(rows, held)


def input_params(
    input_format: str = "auto", warc_options: WarcOptions | None = None, mapping: ColumnParams | None = None
) -> InputParams:
    """The documents stage's parameters (stored with its data) from the input format, the column
    mapping and the WARC options (a WARC record's fallback date is the mapping's default_date)."""
    w = warc_options or WarcOptions()
    return InputParams(
        **(mapping or ColumnParams(default_date=w.default_date)).model_dump(),
        input_format=input_format,
        warc_max_record_bytes=w.max_record_bytes,
        cc_base_url=w.cc_base_url,
        cc_accept_terms_of_use=w.cc_accept_terms_of_use,
        cc_timeout_seconds=w.cc_timeout_seconds,
        cc_max_retries=w.cc_max_retries,
        cc_retry_backoff_seconds=w.cc_retry_backoff_seconds,
        cc_concurrency=w.cc_concurrency,
        warc_workers=w.workers,
    )


def warc_options_of(p: InputParams) -> WarcOptions:
    return WarcOptions(
        default_date=p.default_date,
        max_record_bytes=p.warc_max_record_bytes,
        cc_base_url=p.cc_base_url,
        cc_accept_terms_of_use=p.cc_accept_terms_of_use,
        cc_timeout_seconds=p.cc_timeout_seconds,
        cc_max_retries=p.cc_max_retries,
        cc_retry_backoff_seconds=p.cc_retry_backoff_seconds,
        cc_concurrency=p.cc_concurrency,
        workers=p.warc_workers,
    )
