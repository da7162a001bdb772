"""WARC files (in a process pool) or Common Crawl targets -> one Parquet of documents, merged in input order."""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import urllib3

from ..progress import task
from ..storage.fileio import atomic_path, file_sha256
from ..storage.objects import ObjectPath, file_size
from .commoncrawl import read_commoncrawl
from .options import WarcOptions
from .warc.collect import DOCUMENT_SCHEMA, Collector, FileReport, doc_id_for, rejection_row
from .warc.records import read_warc_file

PROGRESS = logging.getLogger("webdedup.progress")
CONVERTER_VERSION = 3  # bump when the documents or rejections a conversion yields change


@dataclass
class FileResult:
    """What converting one WARC file yields (sent back from a worker process)."""

    name: str
    part: str
    report: FileReport
    rejected: list[dict[str, Any]]
    seen_ids: dict[str, str]
    documents: dict[str, tuple[str, int, int, str | None]]
    response_digests: set[str]
    revisits: list[tuple[str | None, str | None]]


def convert_file(path: Path | ObjectPath, name: str, options: WarcOptions, part: str) -> FileResult:
    """Convert one WARC file or object into a Parquet part of documents (runs in a worker process)."""
    with atomic_path(Path(part)) as temp:
        with pq.ParquetWriter(temp, DOCUMENT_SCHEMA, compression="zstd") as writer:
            collector = Collector(writer, options)
            read_warc_file(collector, path, name, options)
            collector.flush()
    return FileResult(
        name,
        part,
        collector.report(name),
        collector.rejected,
        collector.seen_ids,
        collector.documents,
        collector.response_digests,
        collector.revisits,
    )


def convert_files(files: list[tuple[Path | ObjectPath, str]], target: Path, options: WarcOptions) -> list[FileResult]:
    """Convert each file (in parallel processes when there are several), then merge in input order.

    A record id that is already a document in an earlier file is rejected as a duplicate, so
    the result does not depend on the number of workers.
    """
    parts = [str(target.with_name(f"{target.stem}.part{i}.parquet")) for i in range(len(files))]
    workers = options.workers or os.cpu_count() or 1
    workers = max(1, min(workers, len(files)))
    jobs = [(path, name, options, part) for (path, name), part in zip(files, parts)]
    results = None
    if workers > 1:
        context = multiprocessing.get_context("spawn")  # never fork a process that runs threads
        try:
            with (
                ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool,
                task("warc files", len(jobs), "files") as shown,
            ):
                done = []
                for result in pool.map(convert_file, *zip(*jobs)):  # in input order, as each is done
                    done.append(result)
                    shown.advance(1, records=sum(r.report.records for r in done))
                results = done
        except BrokenProcessPool:  # e.g. a __main__ that spawn cannot re-import (a script on stdin)
            PROGRESS.warning("warc input: worker processes failed to start; converting in this process")
    if results is None:
        results = [convert_file(*job) for job in jobs]
    documents: dict[str, str] = {}
    with atomic_path(target) as temp:
        with pq.ParquetWriter(temp, DOCUMENT_SCHEMA, compression="zstd") as writer:
            for result in results:
                drop = []
                for record_id, (name, offset, length, url) in result.documents.items():
                    if record_id in documents:
                        drop.append(doc_id_for(record_id))
                        result.report.documents -= 1
                        result.report.rejected["duplicate_record_id"] += 1
                        reason = f"WARC-Record-ID already a document from {documents[record_id]}"
                        result.rejected.append(
                            rejection_row(
                                name, offset, length, "duplicate_record_id", reason, record_id, url, "response"
                            )
                        )
                    else:
                        documents[record_id] = f"{name} at offset {offset}"
                with pq.ParquetFile(result.part) as part:
                    for batch in part.iter_batches(batch_size=4096):
                        if drop:
                            batch = batch.filter(pc.invert(pc.is_in(batch.column("doc_id"), pa.array(drop))))
                        writer.write_batch(batch)
                Path(result.part).unlink()
    return results


def convert_warc_input(
    files: list[tuple[Path | ObjectPath, str]],
    target: Path,
    options: WarcOptions,
    commoncrawl_targets: Path | ObjectPath | None = None,
    http: urllib3.PoolManager | None = None,
) -> dict[str, Any]:
    """Read WARC files (or Common Crawl targets) into a Parquet of documents at target.

    Returns a summary: input file descriptions with per-file record counts, skip and
    rejection counts by kind, revisit resolution and the rejection rows. `http`: the client
    Common Crawl ranges are fetched with (default: commoncrawl.http_client(options)).
    """
    started = time.perf_counter()
    described: list[dict[str, Any]] = []
    if commoncrawl_targets is not None:
        with atomic_path(target) as temp:
            with pq.ParquetWriter(temp, DOCUMENT_SCHEMA, compression="zstd") as writer:
                collector = Collector(writer, options)
                targets = read_commoncrawl(collector, commoncrawl_targets, options, http)
                collector.flush()
        described.append(
            {
                "path": str(commoncrawl_targets),
                "format": "commoncrawl",
                "sha256": file_sha256(commoncrawl_targets),
                "bytes": file_size(commoncrawl_targets),
                "base_url": options.cc_base_url,
                "targets": len(targets),
                "warc_files": {n: r.describe() for n, r in sorted(collector.reports.items())},
            }
        )
        reports = list(collector.reports.values())
        rejected_rows, seen_ids = collector.rejected, collector.seen_ids
        digests, revisits = collector.response_digests, collector.revisits
    else:
        results = convert_files(files, target, options)
        for (path, name), result in zip(files, results):
            described.append({"path": str(path), "format": "warc", "warc_filename": name, **result.report.describe()})
        reports = [r.report for r in results]
        rejected_rows = [row for r in results for row in r.rejected]
        seen_ids, digests, revisits = {}, set(), []
        for r in results:
            for record_id, where in r.seen_ids.items():
                seen_ids.setdefault(record_id, where)
            digests |= r.response_digests
            revisits += r.revisits
    resolved = sum(
        1 for refers_to, digest in revisits if (refers_to and refers_to in seen_ids) or (digest and digest in digests)
    )
    skipped: Counter = Counter()
    rejected: Counter = Counter()
    leniency: Counter = Counter()
    for report in reports:
        skipped.update(report.skipped)
        rejected.update(report.rejected)
        leniency.update(report.leniency)
    return {
        "files": described,
        "summary": {
            "records": sum(r.records for r in reports),
            "documents": sum(r.documents for r in reports),
            "skipped": dict(sorted(skipped.items())),
            "rejected": dict(sorted(rejected.items())),
            "not_documents": sum(skipped.values()) + sum(rejected.values()),
            "leniency": dict(sorted(leniency.items())),
            "revisits": len(revisits),
            "revisits_pointing_into_input": resolved,
            "seconds": round(time.perf_counter() - started, 4),
        },
        "rejected_rows": rejected_rows,
    }
