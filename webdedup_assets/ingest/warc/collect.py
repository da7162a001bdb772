"""What a WARC conversion collects: document and rejection schemas, per-file reports, rejection rows.

Every record that does not become a document is listed in `rejected_records` with a kind:
the skip kinds (request, metadata, revisit, warcinfo, non_html, http_status, ...) and the
error kinds (truncated_gzip, bad_content_length, over_size_cap, not_html, fetch_failed, ...).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..contract import CONTRACT_SCHEMA
from ..options import WarcOptions

PROVENANCE_COLUMNS = (
    "warc_record_id",
    "capture_url",
    "warc_filename",
    "warc_offset",
    "warc_length",
    "warc_date",
    "http_status",
    "content_type",
    "payload_digest",
)
DOCUMENT_SCHEMA = pa.schema(
    [
        *CONTRACT_SCHEMA,
        ("warc_record_id", pa.string()),
        ("capture_url", pa.string()),
        ("warc_filename", pa.string()),
        ("warc_offset", pa.int64()),
        ("warc_length", pa.int64()),
        ("warc_date", pa.timestamp("ms", tz="UTC")),  # Parquet has no seconds unit
        ("http_status", pa.int32()),
        ("content_type", pa.string()),
        ("payload_digest", pa.string()),
    ]
)
REJECTED_SCHEMA = pa.schema(
    [
        ("warc_filename", pa.string()),
        ("warc_offset", pa.int64()),
        ("warc_length", pa.int64()),
        ("warc_record_id", pa.string()),
        ("doc_id", pa.string()),
        ("capture_url", pa.string()),
        ("record_type", pa.string()),
        ("kind", pa.string()),
        ("reason", pa.string()),
    ]
)


@dataclass
class FileReport:
    """Per input WARC (or per Common Crawl warc_filename): what became of its records."""

    records: int = 0
    documents: int = 0
    skipped: Counter = field(default_factory=Counter)
    rejected: Counter = field(default_factory=Counter)
    leniency: Counter = field(default_factory=Counter)  # quirks read leniently, by kind (see LENIENCY)

    def describe(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "documents": self.documents,
            "skipped": dict(sorted(self.skipped.items())),
            "rejected": dict(sorted(self.rejected.items())),
            "leniency": dict(sorted(self.leniency.items())),
        }


class Collector:
    """Accumulates documents and rejections, streaming documents to a Parquet file in batches."""

    BATCH = 2000

    def __init__(self, writer: pq.ParquetWriter, options: WarcOptions | None = None) -> None:
        self.writer = writer
        self.options = options or WarcOptions()
        self.rows: list[dict[str, Any]] = []
        self.rejected: list[dict[str, Any]] = []
        self.reports: dict[str, FileReport] = {}
        self.seen_ids: dict[str, str] = {}  # every record id -> where it was first seen
        self.documents: dict[str, tuple[str, int, int, str | None]] = {}  # record id -> (file, offset, length, url)
        self.response_digests: set[str] = set()
        self.revisits: list[tuple[str | None, str | None]] = []
        self.warcinfo_dates: dict[str, datetime | None] = {}  # file -> its first warcinfo record's date

    def report(self, name: str) -> FileReport:
        report = self.reports.get(name)
        if report is None:
            report = self.reports[name] = FileReport()
        return report

    def add_document(self, name: str, row: dict[str, Any]) -> None:
        self.report(name).documents += 1
        self.documents[row["warc_record_id"]] = (name, row["warc_offset"], row["warc_length"], row["capture_url"])
        self.rows.append(row)
        if len(self.rows) >= self.BATCH:
            self.flush()

    def reject(
        self,
        name: str,
        offset: int | None,
        length: int | None,
        kind: str,
        reason: str,
        record_id: str | None = None,
        url: str | None = None,
        record_type: str | None = None,
        skipped: bool = False,
    ) -> None:
        report = self.report(name)
        (report.skipped if skipped else report.rejected)[kind] += 1
        self.rejected.append(rejection_row(name, offset, length, kind, reason, record_id, url, record_type))

    def flush(self) -> None:
        if self.rows:
            self.writer.write_table(pa.Table.from_pylist(self.rows, schema=DOCUMENT_SCHEMA))
            self.rows = []


def rejection_row(
    name: str,
    offset: int | None,
    length: int | None,
    kind: str,
    reason: str,
    record_id: str | None = None,
    url: str | None = None,
    record_type: str | None = None,
) -> dict[str, Any]:
    return {
        "warc_filename": name,
        "warc_offset": offset,
        "warc_length": length,
        "warc_record_id": record_id,
        "doc_id": doc_id_for(record_id) if record_id else None,
        "capture_url": url,
        "record_type": record_type,
        "kind": kind,
        "reason": reason,
    }


def doc_id_for(record_id: str) -> str:
    """Stable doc_id from a WARC-Record-ID: `warc-` + the first 24 hex digits of its sha256."""
    return "warc-" + hashlib.sha256(record_id.strip().strip("<>").encode()).hexdigest()[:24]
