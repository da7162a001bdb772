"""WARC input for the documents stage: local .warc/.warc.gz files and Common Crawl byte ranges.

Framing (where one record starts and ends) is done here, not by the parser library, so that
every byte of the input is accounted for: a .warc.gz is walked gzip member by gzip member with
zlib (offsets and lengths are the member's, as in Common Crawl indexes), a plain .warc record by
record using its Content-Length, which must be followed by the CRLFCRLF record end. A truncated
or corrupt member, a Content-Length that does not match the bytes, a record over the size cap:
each becomes a rejection row (file, offset, length, record id, reason) and the walk resumes at
the next member or `WARC/1.` line. FastWARC parses the record and HTTP headers of each framed
record; Resiliparse detects the charset and extracts the title and main text from the HTML.

Every record that does not become a document is listed in `rejected_records` with a kind:
the skip kinds (request, metadata, revisit, warcinfo, non_html, http_status, ...) and the
error kinds (truncated_gzip, bad_content_length, over_size_cap, not_html, fetch_failed, ...).
"""

from __future__ import annotations

import csv
import functools
import hashlib
import http.client
import json
import logging
import mmap
import multiprocessing
import os
import re
import time
import urllib.error
import urllib.request
import zlib
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fastwarc.warc import WarcRecord, WarcRecordType
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import detect_encoding
from resiliparse.parse.html import HTMLTree

from .contract import CONTRACT_SCHEMA
from .errors import WebdedupError
from .storage import Store, atomic_path, file_sha256, write_text

TERMS_URL = "https://commoncrawl.org/terms-of-use"
WARC_FORMATS = ("warc", "commoncrawl")
PROGRESS = logging.getLogger("webdedup.progress")
CONVERTER_VERSION = 2  # bump when the documents or rejections a conversion yields change
DEFAULT_CC_BASE_URL = "https://data.commoncrawl.org/"
DEFAULT_MAX_RECORD_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_HTML_DEPTH = 2000
# Main-content extraction costs about (elements x nesting depth): a page may nest max_html_depth
# levels while it has at most this many elements; a larger page may nest proportionally less
# (never less than MIN_DEPTH_BOUND), so the work of one record stays bounded.
ELEMENTS_AT_FULL_DEPTH = 25_000
MIN_DEPTH_BOUND = 64
INFLATE_LIMIT_FACTOR = 16  # a gzip member is inflated at most this many times the record cap
SKIP_KINDS = ("warcinfo", "request", "metadata", "revisit", "resource", "conversion", "continuation", "unknown")
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
HTML_TYPES = ("text/html", "application/xhtml+xml")
WARC_START = re.compile(rb"WARC/(1\.[01]|0\.1[78])\r?\n")  # 0.17/0.18: drafts used by ClueWeb09 and others
CONTENT_LENGTH = re.compile(rb"(?im)^content-length[ \t]*:[ \t]*(\d+)[ \t]*\r?$")
META_CHARSET = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]{1,40})""", re.IGNORECASE)
MAX_HEADER_BYTES = 64 * 1024
READ_CHUNK = 1 << 20
# WHATWG labels map some charsets to supersets; browsers decode these so, and so must we.
CHARSET_SUPERSETS = {
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "shift_jis": "cp932",
    "euc_kr": "cp949",
    "big5": "big5hkscs",
    "latin_1": "cp1252",
    "iso8859_1": "cp1252",
    "ascii": "cp1252",
    "iso8859_9": "cp1254",
    "tis_620": "cp874",
    "iso8859_11": "cp874",
}


@dataclass(frozen=True)
class WarcOptions:
    """How WARC input is read and, for Common Crawl targets, fetched."""

    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    cc_base_url: str = DEFAULT_CC_BASE_URL
    cc_accept_terms_of_use: bool = False
    cc_timeout_seconds: float = 30.0
    cc_max_retries: int = 3
    cc_retry_backoff_seconds: float = 1.0
    cc_concurrency: int = 4
    workers: int = 1  # processes converting local WARC files; 0: one per CPU; never more than files
    max_html_depth: int = DEFAULT_MAX_HTML_DEPTH  # deeper HTML is rejected (html_too_deep) before extraction


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


# --------------------------------------------------------------------------- pure helpers


def doc_id_for(record_id: str) -> str:
    """Stable doc_id from a WARC-Record-ID: `warc-` + the first 24 hex digits of its sha256."""
    return "warc-" + hashlib.sha256(record_id.strip().strip("<>").encode()).hexdigest()[:24]


def host_of(url: str) -> str:
    try:
        return (urlsplit(url.strip()).hostname or "").lower()
    except ValueError:
        return ""


def _codec(label: str | None) -> str | None:
    """Python codec name for a charset label (with WHATWG superset mapping), or None if unknown."""
    if not label:
        return None
    import codecs

    try:
        name = codecs.lookup(label.strip().strip("\"'").lower()).name
    except LookupError:
        return None
    name = name.replace("-", "_")
    return CHARSET_SUPERSETS.get(name, name)


def decode_html(payload: bytes, http_charset: str | None) -> tuple[str, str, str]:
    """Decode HTML bytes: BOM, then HTTP header charset, then <meta> charset, then detection.

    A declared charset is used only if the bytes decode with it (up to a few stray bytes);
    otherwise the next source is tried. Returns (text, codec, source of the decision).
    """
    declared = [("http", _codec(http_charset))]
    if payload.startswith(b"\xef\xbb\xbf"):
        declared.insert(0, ("bom", "utf_8_sig"))
    elif payload[:2] in (b"\xff\xfe", b"\xfe\xff"):
        declared.insert(0, ("bom", "utf_16"))
    meta = META_CHARSET.search(payload[:4096])
    if meta:
        declared.append(("meta", _codec(meta.group(1).decode("ascii", "replace"))))
    # Pages in the wild are often in their declared charset but for a stray byte or two: a source
    # is kept when at most 0.5 % of the characters (or 2) do not decode, rather than guessing anew.
    for source, codec in declared:
        if not codec:
            continue
        try:
            return payload.decode(codec), codec, source
        except UnicodeDecodeError:
            text = payload.decode(codec, errors="replace")
            if text.count("\ufffd") <= max(2, len(text) // 200):
                return text, codec, f"{source} (lenient)"
    codec = _codec(detect_encoding(payload)) or "utf_8"
    return payload.decode(codec, errors="replace"), codec, "detected"


def looks_like_html(payload: bytes) -> bool:
    """Text (no NUL bytes at the start) with some markup."""
    head = payload[:2048]
    if not head.strip() or b"\x00" in head:
        return False
    return b"<" in head


class HtmlTooDeep(Exception):
    """The page nests deeper than the bound: extracting its text could take minutes."""


@functools.lru_cache(maxsize=8)
def _deeper_than(depth: int) -> str:
    """A CSS selector matching an element with at least `depth` element ancestors."""
    return " > ".join(["*"] * (depth + 1))


def depth_bound(elements: int, max_depth: int) -> int:
    """The nesting depth a page of this many elements may reach (see ELEMENTS_AT_FULL_DEPTH)."""
    budget = max_depth * ELEMENTS_AT_FULL_DEPTH
    return min(max_depth, max(MIN_DEPTH_BOUND, budget // max(1, elements)))


def check_depth(tree: HTMLTree, max_depth: int) -> None:
    """Raise HtmlTooDeep if an element of the parsed tree is nested deeper than the bound.

    Parsing (lexbor) is linear in the input; the check is done in C by two selector queries, the
    second only when the page has more elements than the bound (a page of n elements cannot nest
    deeper than n), at a cost of at most elements x bound steps.
    """
    elements = len(tree.document.query_selector_all("*"))
    bound = depth_bound(elements, max_depth)
    if elements <= bound:
        return
    if tree.document.query_selector(_deeper_than(bound)) is not None:
        why = (
            f"max_html_depth {max_depth}"
            if bound == max_depth
            else f"the bound for a page of {elements} elements; max_html_depth {max_depth} holds up to "
            f"{ELEMENTS_AT_FULL_DEPTH} elements"
        )
        raise HtmlTooDeep(f"HTML nested more than {bound} elements deep ({why}): text extraction refused")


def extract(html: str, max_depth: int = DEFAULT_MAX_HTML_DEPTH) -> tuple[str, str]:
    """(title, main text) of an HTML page; falls back to all visible text if no main content.

    Raises HtmlTooDeep for a page nested deeper than max_depth (see check_depth).
    """
    tree = HTMLTree.parse(html)
    check_depth(tree, max_depth)
    title = (tree.title or "").strip()
    body = extract_plain_text(tree, main_content=True).strip()
    if not body:
        body = extract_plain_text(tree).strip()
    return title, body


# --------------------------------------------------------------------------- payload decoding


class PayloadError(Exception):
    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


CHUNK_SIZE_LINE = re.compile(rb"[ \t]*([0-9A-Fa-f]{1,15})[ \t]*(?:;[^\r\n]*)?\r?\n")


def dechunk(data: bytes) -> tuple[bytes | None, str | None]:
    """Undo HTTP chunked transfer coding: (body, None), (None, None) if data does not start as
    chunked at all, or (partial body, "truncated") when the data ends before the last chunk.

    Raises PayloadError(bad_http) for a stream that starts chunked and breaks in the middle.
    """
    parts: list[bytes] = []
    pos, size = 0, len(data)
    while True:
        match = CHUNK_SIZE_LINE.match(data, pos, min(size, pos + 1024))
        if not match:
            if not parts:
                return None, None
            if pos >= size:
                return b"".join(parts), "truncated"
            raise PayloadError("bad_http", f"invalid chunk size line at byte {pos} of the chunked payload")
        length = int(match.group(1), 16)
        pos = match.end()
        if length == 0:
            return b"".join(parts), None  # trailers, if any, are ignored
        parts.append(data[pos : pos + length])
        pos += length
        if pos >= size:
            return b"".join(parts), "truncated"
        if data.startswith(b"\r\n", pos):
            pos += 2
        elif data.startswith(b"\n", pos):
            pos += 1
        else:
            raise PayloadError("bad_http", f"chunk of {length} bytes not followed by a line end at byte {pos}")


def decode_content(data: bytes, coding: str, cap: int) -> tuple[bytes, bool]:
    """Inflate a gzip/deflate Content-Encoding into at most cap bytes: (body, complete).

    `deflate` is tried zlib-wrapped (as HTTP says) and raw (as many servers send it). Raises
    zlib.error if the data is not in that coding, PayloadError(over_size_cap) past the cap.
    """
    last: zlib.error | None = None
    for wbits in (47,) if coding in ("gzip", "x-gzip") else (15, -15):
        inflater = zlib.decompressobj(wbits)
        try:
            out = inflater.decompress(data, cap + 1)
        except zlib.error as err:
            last = err
            continue
        if len(out) > cap:
            raise PayloadError(
                "over_size_cap", f"payload decoded from Content-Encoding {coding} exceeds the cap of {cap} bytes"
            )
        return out, inflater.eof
    raise last or zlib.error("no data")


def decode_payload(raw: bytes, http_headers, cap: int, lenient: Counter) -> bytes:
    """The entity body of an HTTP response as stored: transfer coding, then content codings undone.

    Archives often store what the crawler saw after decoding while keeping the headers: a
    `Transfer-Encoding: chunked` payload that is not chunked, or a `Content-Encoding: gzip` payload
    that is plain HTML. Those are read as they are (as browsers and warcio do) and counted in
    `lenient`; a payload that is truly broken raises PayloadError.
    """
    body = raw
    transfer = (http_headers.get("Transfer-Encoding") or "").lower()
    if "chunked" in transfer:
        decoded, problem = dechunk(raw)
        if decoded is None:
            lenient["chunked_header_payload_not_chunked"] += 1
        else:
            body = decoded
            if problem:
                lenient["chunked_payload_truncated"] += 1
    codings = [c.strip() for c in (http_headers.get("Content-Encoding") or "").lower().split(",")]
    for coding in reversed([c for c in codings if c not in ("", "identity")]):
        if coding not in ("gzip", "x-gzip", "deflate"):
            if looks_like_html(body):
                lenient["content_encoding_unsupported_but_plain"] += 1
                break
            raise PayloadError("bad_content_encoding", f"Content-Encoding {coding!r} is not supported")
        try:
            body, complete = decode_content(body, coding, cap)
        except zlib.error as err:
            if looks_like_html(body):  # stored decoded under the original header
                lenient["content_encoding_already_decoded"] += 1
                break
            raise PayloadError("bad_content_encoding", f"payload is not valid {coding} data: {err}") from None
        lenient[f"content_encoding_{coding.removeprefix('x-')}"] += 1
        if not complete:
            lenient["content_encoding_truncated"] += 1
    return body


# --------------------------------------------------------------------------- framing


@dataclass
class Framed:
    """One framed piece of input: a record (data) or a problem (kind, reason)."""

    offset: int
    length: int
    data: bytes | None = None
    kind: str | None = None
    reason: str | None = None
    block_at: int = -1  # where the record block starts in data (a good record)
    lenient: tuple[str, ...] = ()  # quirks this record was read despite (counted per file)


def _inflate_member(
    buf, pos: int, cap: int, limit_factor: int = INFLATE_LIMIT_FACTOR
) -> tuple[int, bytes | None, int, str | None]:
    """Inflate the gzip member at pos: (end, data or None if over cap, inflated size, error).

    Past the cap the output is dropped but inflating goes on to find the member's end, up to
    INFLATE_LIMIT_FACTOR x cap bytes; a gzip bomb beyond that is given up: end -1 (unknown).
    """
    inflater = zlib.decompressobj(31)
    parts: list[bytes] = []
    total = 0
    p = pos
    size = len(buf)
    pending = b""
    step = 16 * 1024
    try:
        while not inflater.eof:
            if not pending:
                if p >= size:
                    break
                pending = buf[p : p + step]  # small first reads: members are mostly a few KiB
                p += len(pending)
                step = min(step * 4, READ_CHUNK)
            out = inflater.decompress(pending, READ_CHUNK)
            pending = inflater.unconsumed_tail
            total += len(out)
            if total <= cap:
                parts.append(out)
            elif total > cap * limit_factor:
                return -1, None, total, None
            else:
                parts = []
    except zlib.error as err:
        return p, None, total, f"corrupt gzip data: {err}"
    if not inflater.eof:
        return size, None, total, f"truncated gzip member: the input ends after {size - pos} bytes inside the member"
    end = p - len(inflater.unused_data)  # at the end, CPython also mirrors the rest in unconsumed_tail
    return end, (b"".join(parts) if total <= cap else None), total, None


def _next_member(buf, start: int, cap: int) -> int:
    """Offset of the next gzip member at or after start that inflates cleanly (end of input if none)."""
    size = len(buf)
    candidate = buf.find(b"\x1f\x8b\x08", start)
    while candidate >= 0:
        if _inflate_member(buf, candidate, cap, 1)[3] is None:  # inflates cleanly (or past the cap)
            return candidate
        candidate = buf.find(b"\x1f\x8b\x08", candidate + 1)
    return size


def _over_cap_reason(buf, pos: int, total: int, cap: int, known: bool) -> str:
    """Why a member is over the cap: one big record, or many records in one member (whole-file gzip)."""
    head = zlib.decompressobj(31).decompress(buf[pos : pos + 65536], 65536)
    header_end = head.find(b"\r\n\r\n")
    match = CONTENT_LENGTH.search(head[:header_end]) if WARC_START.match(head[:12]) and header_end > 0 else None
    size = f"{total} bytes" if known else f"more than {cap * INFLATE_LIMIT_FACTOR} bytes (inflating given up there)"
    if match and header_end + 4 + int(match.group(1)) + 4 < min(total, cap):
        return (
            f"gzip member of {size} holds more than one WARC record (the first is "
            f"{int(match.group(1))} bytes): a whole-file gzip over the cap of {cap}; recompress it one "
            f"record per member (e.g. `warcio recompress`) or raise max_record_bytes"
        )
    return f"record of {size} exceeds the cap of {cap}"


def frame_gzip(buf, cap: int) -> Iterator[Framed]:
    """Walk a .warc.gz member by member (one record per member in a well-formed file).

    After a bad stretch (bytes that are no gzip member, a corrupt or truncated member) reading
    resumes at the next offset where a whole member inflates, so a member cut short and followed
    by good ones loses only itself.
    """
    pos = 0
    size = len(buf)
    while pos < size:
        if buf[pos : pos + 3] != b"\x1f\x8b\x08":
            end = _next_member(buf, pos + 1, cap)
            yield Framed(pos, end - pos, kind="not_gzip", reason=f"{end - pos} bytes that are not a gzip member")
            pos = end
            continue
        end, data, total, error = _inflate_member(buf, pos, cap)
        if error:
            end = _next_member(buf, pos + 1, cap)
            if error.startswith("corrupt"):
                yield Framed(pos, end - pos, kind="corrupt_gzip", reason=f"{error} ({end - pos} bytes skipped)")
            elif end < size:
                reason = f"truncated gzip member: {end - pos} bytes, cut off where the next member starts"
                yield Framed(pos, end - pos, kind="truncated_gzip", reason=reason)
            else:
                yield Framed(pos, end - pos, kind="truncated_gzip", reason=error)
            pos = end
            continue
        if data is None:
            known = end >= 0
            if not known:  # a gzip bomb: where the member ends is unknown; resume at the next one
                end = _next_member(buf, pos + 1, cap)
            reason = _over_cap_reason(buf, pos, total, cap, known)
            yield Framed(pos, end - pos, kind="over_size_cap", reason=reason)
        else:
            records = list(frame_plain(data, cap))
            for r in records:  # provenance is the member, the range a reader can fetch and inflate
                if len(records) > 1:  # a whole-file gzip
                    r.reason = r.reason and f"{r.reason} (at {r.offset} inside the gzip member)"
                r.offset, r.length = pos, end - pos
            yield from records
        pos = end


def _record_end(buf, at: int, lf_only: bool) -> int | None:
    """Length of the record end (CRLFCRLF; LF LF in an LF-only record) at `at`, None if absent."""
    if buf[at : at + 4] == b"\r\n\r\n":
        return 4
    if lf_only and buf[at : at + 2] == b"\n\n":
        return 2
    return None


def frame_plain(buf, cap: int) -> Iterator[Framed]:
    """Walk an uncompressed WARC record by record, checking each Content-Length.

    Leniency for old archives: `WARC/0.17` and `WARC/0.18` version lines, and WARC headers whose
    lines end in LF only (ClueWeb09). Such a header is rewritten with CRLF for the parser. In an
    LF-only record a Content-Length that overshoots (counted before CRs were stripped) is
    corrected to where the next record starts, if that is within the declared length and the
    block keeps at least half of it; otherwise, as always, the record is `bad_content_length`.
    """
    pos = 0
    size = len(buf)
    while pos < size:
        while pos < size and buf[pos : pos + 1] in (b"\r", b"\n"):
            pos += 1
        if pos >= size:
            break
        start = WARC_START.match(buf[pos : pos + 12])
        if not start:
            nxt = _next_warc_line(buf, pos)
            yield Framed(pos, nxt - pos, kind="not_warc", reason=f"{nxt - pos} bytes that do not start a WARC record")
            pos = nxt
            continue
        lenient = [] if start.group(1).startswith(b"1.") else [f"warc_version_{start.group(1).decode()}"]
        crlf_end = buf.find(b"\r\n\r\n", pos, pos + MAX_HEADER_BYTES)
        lf_end = buf.find(b"\n\n", pos, crlf_end if crlf_end >= 0 else pos + MAX_HEADER_BYTES)
        lf_only = lf_end >= 0 and (crlf_end < 0 or lf_end < crlf_end)
        head_end = lf_end if lf_only else crlf_end
        if head_end < 0:
            nxt = _next_warc_line(buf, pos + 1)
            yield Framed(pos, nxt - pos, kind="bad_header", reason="WARC header does not end within 64 KiB")
            pos = nxt
            continue
        header = bytes(buf[pos:head_end])
        block_start = head_end + (2 if lf_only else 4)
        if lf_only:
            header = b"\r\n".join(line.rstrip(b"\r") for line in header.split(b"\n"))
            lenient.append("warc_header_lf_only")
        match = CONTENT_LENGTH.search(header)
        if not match:
            nxt = _next_warc_line(buf, pos + 1)
            yield Framed(pos, nxt - pos, data=None, kind="bad_header", reason="WARC header has no Content-Length")
            pos = nxt
            continue
        declared = int(match.group(1))
        block_end = block_start + declared
        end_len = _record_end(buf, block_end, lf_only) if block_end <= size else None
        if end_len is None and lf_only and block_end >= size and size - block_start == declared:
            end_len = 0  # an LF-only record that ends with its block (no record end at all)
        if end_len is None and lf_only:
            nxt = _next_warc_line(buf, block_start)
            block = bytes(buf[block_start:nxt])
            for _ in range(2):  # the record end before the next record
                block = block.removesuffix(b"\n").removesuffix(b"\r")
            if nxt <= block_end + 4 and len(block) >= declared // 2:
                lenient.append("content_length_corrected")
                header = header[: match.start(1)] + str(len(block)).encode() + header[match.end(1) :]
                data = header + b"\r\n\r\n" + block + b"\r\n\r\n"
                yield Framed(pos, nxt - pos, data=data, block_at=len(header) + 4, lenient=tuple(lenient))
                pos = nxt
                continue
        if end_len is None:
            nxt = _next_warc_line(buf, block_start)
            actual = max(0, (nxt if nxt < size else size) - block_start)
            yield Framed(
                pos,
                nxt - pos,
                data=header + b"\r\n\r\n",
                kind="bad_content_length",
                reason=f"Content-Length says {declared} bytes but the record block is about {actual} bytes "
                f"(no record end after {declared} bytes)",
            )
            pos = nxt
            continue
        length = block_end + end_len - pos
        if declared > cap:
            yield Framed(
                pos,
                length,
                data=header + b"\r\n\r\n",
                kind="over_size_cap",
                reason=f"record of {declared} bytes exceeds the cap of {cap}",
            )
        elif lf_only:
            data = header + b"\r\n\r\n" + bytes(buf[block_start:block_end]) + b"\r\n\r\n"
            yield Framed(pos, length, data=data, block_at=len(header) + 4, lenient=tuple(lenient))
        else:
            data = bytes(buf[pos : block_end + 4])
            yield Framed(pos, length, data=data, block_at=block_start - pos, lenient=tuple(lenient))
        pos = block_end + end_len


def _next_warc_line(buf, start: int) -> int:
    """Offset of the next line that starts a WARC record at or after start (end of input if none)."""
    size = len(buf)
    p = start
    while True:
        hit = buf.find(b"WARC/", p)
        if hit < 0:
            return size
        if hit == 0 or buf[hit - 1 : hit] == b"\n":
            if WARC_START.match(buf[hit : hit + 12]):
                return hit
        p = hit + 1


# --------------------------------------------------------------------------- records


def _header_value(header: bytes, name: str) -> str | None:
    match = re.search(rb"(?im)^" + re.escape(name.encode()) + rb"[ \t]*:[ \t]*([^\r\n]*)", header)
    return match.group(1).decode("utf-8", "replace").strip() if match else None


def handle_framed(collector: Collector, name: str, framed: Framed) -> None:
    """Turn one framed piece into a document or a listed rejection."""
    collector.report(name).records += 1
    if framed.kind:
        head = framed.data or b""
        rtype = _header_value(head, "WARC-Type")
        collector.reject(
            name,
            framed.offset,
            framed.length,
            framed.kind,
            framed.reason or framed.kind,
            record_id=_header_value(head, "WARC-Record-ID"),
            url=_header_value(head, "WARC-Target-URI"),
            record_type=rtype,
        )
        return
    try:
        record = WarcRecord.from_bytes(framed.data)
    except OSError as err:
        collector.reject(name, framed.offset, framed.length, "bad_record", f"unparsable WARC record: {err}")
        return
    collector.report(name).leniency.update(framed.lenient)
    try:
        block_head = framed.data[framed.block_at : framed.block_at + 512] if framed.block_at >= 0 else b""
        handle_record(collector, name, framed.offset, framed.length, record, block_head)
    except Exception as err:  # one odd record must not stop the run; it is listed instead
        head = framed.data[:MAX_HEADER_BYTES]
        collector.reject(
            name,
            framed.offset,
            framed.length,
            "bad_record",
            f"unexpected {type(err).__name__}: {err}",
            record_id=_header_value(head, "WARC-Record-ID"),
            url=_header_value(head, "WARC-Target-URI"),
        )


CHARSET_PARAM = re.compile(r"""charset\s*=\s*["']?([^"';\s]+)""", re.IGNORECASE)


def handle_record(
    collector: Collector, name: str, offset: int, length: int, record: WarcRecord, block_head: bytes = b""
) -> None:
    headers = record.headers
    record_id = record.record_id or headers.get("WARC-Record-ID")
    url = headers.get("WARC-Target-URI")
    rtype = record.record_type.name if hasattr(record.record_type, "name") else str(record.record_type)

    def reject(kind: str, reason: str, skipped: bool = False) -> None:
        collector.reject(name, offset, length, kind, reason, record_id, url, rtype, skipped)

    if not record_id:
        reject("bad_record", "WARC record has no WARC-Record-ID")
        return
    collector.seen_ids.setdefault(record_id, f"{name} at offset {offset}")
    if record.record_type == WarcRecordType.revisit:
        collector.revisits.append((headers.get("WARC-Refers-To"), headers.get("WARC-Payload-Digest")))
        refers = headers.get("WARC-Refers-To") or headers.get("WARC-Refers-To-Target-URI") or "an earlier capture"
        reject("revisit", f"revisit record: duplicate of {refers}", skipped=True)
        return
    if record.record_type != WarcRecordType.response:
        kind = rtype if rtype in SKIP_KINDS else "unknown"
        reject(kind, f"{rtype} record", skipped=True)
        return
    warc_type = (headers.get("Content-Type") or "").strip()
    # HTTP/0.9 style: a response block that is the page itself, no status line or HTTP headers
    http09 = not block_head.lstrip()[:5].upper().startswith(b"HTTP/") and (
        warc_type.split(";")[0].strip().lower() in HTML_TYPES or (record.is_http and looks_like_html(block_head))
    )
    if not record.is_http and not http09:
        reject("non_http", f"response record of content type {warc_type!r} is not HTTP", True)
        return
    lenient: Counter = Counter()
    digest = headers.get("WARC-Payload-Digest")
    if http09:
        lenient["http09_no_http_headers"] += 1
        raw = record.reader.read()
        status, http_headers, http_charset = None, {}, None
        content_type = warc_type if warc_type.split(";")[0].strip().lower() in HTML_TYPES else ""
        charset = CHARSET_PARAM.search(content_type)
        http_charset = charset.group(1) if charset else None
        if digest:
            collector.response_digests.add(digest)
    else:
        first_line = block_head.split(b"\n", 1)[0]
        if b"\n" in block_head and not first_line.endswith(b"\r"):
            lenient["http_header_lf_only"] += 1
        try:
            record.parse_http(auto_decode="none", quirks_mode=True)
            raw = record.reader.read()
        except (OSError, ValueError) as err:
            reject("bad_http", f"unparsable HTTP response: {err}")
            return
        status = record.http_headers.status_code
        http_headers, http_charset = record.http_headers, record.http_charset
        content_type = (record.http_headers.get("Content-Type") or "").strip()
        mime = (record.http_content_type or "").lower()
        if digest:
            collector.response_digests.add(digest)
        if status is None or not 200 <= status < 300:
            reject("http_status", f"HTTP status {status}: not a page", skipped=True)
            return
        if mime and mime not in HTML_TYPES:
            reject("non_html", f"Content-Type {content_type!r} is not HTML", skipped=True)
            return
    try:
        payload = decode_payload(raw, http_headers, collector.options.max_record_bytes, lenient)
    except PayloadError as err:
        reject(err.kind, str(err))
        return
    finally:
        collector.report(name).leniency.update(lenient)
    if not looks_like_html(payload):
        reject("not_html", f"payload of {len(payload)} bytes is not HTML text (Content-Type {content_type!r})")
        return
    date = record.record_date
    if date is None:
        reject("bad_record", f"WARC-Date missing or unparsable: {headers.get('WARC-Date')!r}")
        return
    text, _codec_used, _source = decode_html(payload, http_charset)
    try:
        title, body = extract(text, collector.options.max_html_depth)
    except HtmlTooDeep as err:
        reject("html_too_deep", str(err))
        return
    except Exception as err:  # the HTML parser raises its own exception types
        reject("bad_html", f"HTML extraction failed: {err}")
        return
    if record_id in collector.documents:
        first = collector.documents[record_id]
        reject("duplicate_record_id", f"WARC-Record-ID already a document from {first[0]} at offset {first[1]}")
        return
    date = date.astimezone(UTC)
    collector.add_document(
        name,
        {
            "doc_id": doc_id_for(record_id),
            "source": "warc",
            "domain": host_of(url or ""),
            "crawled_at": date.date(),
            "title": title,
            "body": body,
            "warc_record_id": record_id,
            "capture_url": url,
            "warc_filename": name,
            "warc_offset": offset,
            "warc_length": length,
            "warc_date": date.replace(microsecond=0),
            "http_status": status,
            "content_type": content_type or None,
            "payload_digest": digest,
        },
    )


def read_warc_file(collector: Collector, path: Path, name: str, options: WarcOptions) -> None:
    collector.report(name)
    size = path.stat().st_size
    if size == 0:
        return
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        gz = buf[:2] == b"\x1f\x8b"
        framer = frame_gzip if gz else frame_plain
        for framed in framer(buf, options.max_record_bytes):
            handle_framed(collector, name, framed)


# --------------------------------------------------------------------------- Common Crawl


def require_terms(options: WarcOptions) -> None:
    if not options.cc_accept_terms_of_use:
        raise WebdedupError(
            "Common Crawl fetching is refused until you acknowledge the Common Crawl terms of use "
            f"({TERMS_URL}): set cc_accept_terms_of_use: true in the documents config "
            "(CLI: --accept-commoncrawl-terms)"
        )


def read_targets(path: Path) -> tuple[list[tuple[int, str, int, int]], list[tuple[int, str]]]:
    """Rows of (warc_filename, warc_offset, warc_length): (valid targets, (line, problem))."""
    if not path.is_file():
        raise WebdedupError(f"Common Crawl targets file {str(path)!r} does not exist")
    targets, problems = [], []
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        needed = ("warc_filename", "warc_offset", "warc_length")
        missing = [c for c in needed if c not in (reader.fieldnames or [])]
        if missing:
            raise WebdedupError(
                f"{path}: Common Crawl targets need columns {', '.join(needed)}; missing {', '.join(missing)}; "
                f"found: {', '.join(reader.fieldnames or [])}"
            )
        for line, row in enumerate(reader, start=2):
            name = (row["warc_filename"] or "").strip()
            try:
                offset, length = int(row["warc_offset"]), int(row["warc_length"])
                if not name or offset < 0 or length <= 0:
                    raise ValueError
            except (TypeError, ValueError):
                problems.append((line, f"bad target row {line}: {row}"))
                continue
            problem = target_name_problem(name)
            if problem:
                problems.append((line, f"bad target row {line}: warc_filename {name!r} {problem}"))
                continue
            targets.append((line, name, offset, length))
    return targets, problems


URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def target_name_problem(name: str, _decoded: bool = False) -> str | None:
    """Why a target's warc_filename is unsafe to join to the base (None if it is a plain relative path).

    A warc_filename must be a relative path of non-empty segments that stays inside the base: no
    scheme, no absolute path, no `.`/`..` segment, no backslash, NUL, control character, `?`/`#`
    or whitespace, and no percent-encoding (checked again after decoding, so `%2e%2e` is named as
    the traversal it is). Checked before any I/O.
    """
    if not name:
        return "is empty"
    if "\x00" in name:
        return "contains a NUL byte"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "contains a control character"
    if "\\" in name:
        return "contains a backslash (a Windows path separator; use '/')"
    scheme = URL_SCHEME.match(name)
    if scheme:
        return f"has a URL scheme or drive ({scheme.group(0)!r}): give a path relative to the base"
    if name.startswith("/"):
        return "is an absolute path: give a path relative to the base"
    if "%" in name and not _decoded:
        decoded = name
        for _ in range(4):  # undo nested encodings (%252e -> %2e -> .)
            decoded, before = unquote(decoded), decoded
            if decoded == before:
                break
        problem = target_name_problem(decoded, True) if decoded != name else None
        if problem:
            return f"is percent-encoded and decodes to {decoded!r}, which {problem}"
        return "contains '%': percent-encoding is not accepted in a warc_filename"
    if any(c.isspace() for c in name):
        return "contains whitespace"
    if "?" in name or "#" in name:
        return "contains '?' or '#' (a URL query or fragment)"
    segments = name.split("/")
    if any(s == ".." for s in segments):
        return "has a '..' segment: it would leave the base"
    if any(s == "." for s in segments):
        return "has a '.' segment"
    if any(s == "" for s in segments):
        return "has an empty path segment ('//' or a trailing '/')"
    return None


class FetchError(Exception):
    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects are not followed: a 3xx becomes an HTTPError, turned into a fetch_failed naming the Location."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001
        return None


_OPENER = urllib.request.build_opener(_RefuseRedirects)


def _mirror_range(base: str, name: str, offset: int, length: int) -> bytes:
    """Bytes of name under a local mirror folder; the resolved path must stay inside the folder.

    A missing file says no more than an HTTP 404 would (nothing about files elsewhere).
    """
    root = Path(base[7:] if base.startswith("file://") else base).expanduser().resolve()
    missing = FetchError("fetch_failed", f"mirror file {name} does not exist (HTTP 404 equivalent)")
    try:
        real = (root / name).resolve(strict=True)
    except (OSError, RuntimeError):  # missing, or a symlink loop
        raise missing from None
    if not real.is_relative_to(root):
        raise FetchError("bad_target", f"warc_filename {name!r} resolves outside the mirror folder (a symlink)")
    if not real.is_file():
        raise missing
    with open(real, "rb") as handle:
        handle.seek(offset)
        data = handle.read(length)
    if len(data) != length:
        raise FetchError("fetch_failed", f"mirror file {name} holds only {len(data)} of {length} bytes at {offset}")
    return data


def fetch_range(base: str, name: str, offset: int, length: int, options: WarcOptions) -> bytes:
    """Bytes [offset, offset+length) of a WARC under base (http(s) URL or local mirror folder).

    The name must be a safe relative path (else `bad_target`, before any I/O); HTTP redirects are
    not followed (a 3xx is a `fetch_failed` naming the refused Location).
    """
    problem = target_name_problem(name)
    if problem:
        raise FetchError("bad_target", f"warc_filename {name!r} {problem}")
    if length > options.max_record_bytes:
        raise FetchError("over_size_cap", f"warc_length {length} exceeds the cap of {options.max_record_bytes}")
    if not base.startswith(("http://", "https://")):
        return _mirror_range(base, name, offset, length)
    url = base.rstrip("/") + "/" + name
    request = urllib.request.Request(
        url, headers={"Range": f"bytes={offset}-{offset + length - 1}", "User-Agent": "webdedup (issue 5)"}
    )
    last = ""
    for attempt in range(options.cc_max_retries + 1):
        if attempt:
            time.sleep(options.cc_retry_backoff_seconds * (2 ** (attempt - 1)))
        try:
            with _OPENER.open(request, timeout=options.cc_timeout_seconds) as response:
                if response.status != 206:
                    raise FetchError(
                        "fetch_failed", f"HTTP {response.status} instead of 206: the server ignored the Range"
                    )
                data = response.read(length + 1)
            if len(data) != length:
                raise FetchError("fetch_failed", f"range returned {len(data)} bytes, expected {length}")
            return data
        except urllib.error.HTTPError as err:
            location = err.headers.get("Location") if err.headers else None
            err.close()
            if 300 <= err.code < 400:
                raise FetchError(
                    "fetch_failed",
                    f"HTTP {err.code} redirect to {location!r} refused for {url} (redirects are not followed)",
                ) from None
            last = f"HTTP {err.code} for {url}"
            if err.code < 500 and err.code != 429:
                raise FetchError("fetch_failed", last) from None
        except (TimeoutError, urllib.error.URLError, ConnectionError, OSError, http.client.HTTPException) as err:
            reason = getattr(err, "reason", err)
            kind = "timeout" if isinstance(reason, TimeoutError) or "timed out" in str(reason) else "error"
            last = f"{kind} fetching {url}: {reason}"
    raise FetchError("fetch_failed", f"{last} (after {options.cc_max_retries + 1} attempts)")


def check_member(data: bytes, options: WarcOptions) -> bytes:
    """The range must be exactly one complete gzip member; returns it inflated."""
    if data[:3] != b"\x1f\x8b\x08":
        raise FetchError("not_gzip", "range does not start a gzip member (wrong offset?)")
    end, inflated, total, error = _inflate_member(data, 0, options.max_record_bytes)
    if error:
        raise FetchError("truncated_gzip" if error.startswith("truncated") else "corrupt_gzip", error)
    if inflated is None:
        size = f"{total} bytes" if end >= 0 else f"more than {options.max_record_bytes * INFLATE_LIMIT_FACTOR} bytes"
        raise FetchError("over_size_cap", f"record of {size} exceeds the cap of {options.max_record_bytes}")
    if end != len(data):
        raise FetchError("bad_range", f"gzip member ends at {end} of {len(data)} bytes (wrong warc_length?)")
    return inflated


def read_commoncrawl(collector: Collector, targets_path: Path, options: WarcOptions) -> list[tuple]:
    require_terms(options)
    targets, problems = read_targets(targets_path)
    for _line, problem in problems:
        collector.report(targets_path.name).records += 1
        collector.reject(targets_path.name, None, None, "bad_target", problem)

    def fetch(target):
        _line, name, offset, length = target
        try:
            return target, check_member(fetch_range(options.cc_base_url, name, offset, length, options), options), None
        except FetchError as err:
            return target, None, err
        except Exception as err:  # e.g. a malformed URL: listed for this target, the run goes on
            return target, None, FetchError("fetch_failed", f"{type(err).__name__}: {err}")

    with ThreadPoolExecutor(max_workers=max(1, options.cc_concurrency)) as pool:
        for (_line, name, offset, length), inflated, err in pool.map(fetch, targets):
            if err is not None:
                collector.report(name).records += 1
                collector.reject(name, offset, length, err.kind, str(err))
                continue
            records = list(frame_plain(inflated, options.max_record_bytes))
            for framed in records:
                framed.offset, framed.length = offset, length
                handle_framed(collector, name, framed)
    return targets


# --------------------------------------------------------------------------- stage entry


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


def convert_file(path: str, name: str, options: WarcOptions, part: str) -> FileResult:
    """Convert one WARC file into a Parquet part of documents (runs in a worker process)."""
    with atomic_path(Path(part)) as temp:
        with pq.ParquetWriter(temp, DOCUMENT_SCHEMA, compression="zstd") as writer:
            collector = Collector(writer, options)
            read_warc_file(collector, Path(path), name, options)
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


def _convert_files(files: list[tuple[Path, str]], target: Path, options: WarcOptions) -> list[FileResult]:
    """Convert each file (in parallel processes when there are several), then merge in input order.

    A record id that is already a document in an earlier file is rejected as a duplicate, so
    the result does not depend on the number of workers.
    """
    parts = [str(target.with_name(f"{target.stem}.part{i}.parquet")) for i in range(len(files))]
    workers = options.workers or os.cpu_count() or 1
    workers = max(1, min(workers, len(files)))
    jobs = [(str(path), name, options, part) for (path, name), part in zip(files, parts)]
    results = None
    if workers > 1:
        context = multiprocessing.get_context("spawn")  # never fork a process that runs threads
        try:
            with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
                results = list(pool.map(convert_file, *zip(*jobs)))
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
    files: list[tuple[Path, str]],
    target: Path,
    options: WarcOptions,
    commoncrawl_targets: Path | None = None,
) -> dict[str, Any]:
    """Read WARC files (or Common Crawl targets) into a Parquet of documents at target.

    Returns a summary: input file descriptions with per-file record counts, skip and
    rejection counts by kind, revisit resolution and the rejection rows.
    """
    started = time.perf_counter()
    described: list[dict[str, Any]] = []
    if commoncrawl_targets is not None:
        with atomic_path(target) as temp:
            with pq.ParquetWriter(temp, DOCUMENT_SCHEMA, compression="zstd") as writer:
                collector = Collector(writer, options)
                targets = read_commoncrawl(collector, commoncrawl_targets, options)
                collector.flush()
        described.append(
            {
                "path": str(commoncrawl_targets),
                "format": "commoncrawl",
                "sha256": file_sha256(commoncrawl_targets),
                "bytes": commoncrawl_targets.stat().st_size,
                "base_url": options.cc_base_url,
                "targets": len(targets),
                "warc_files": {n: r.describe() for n, r in sorted(collector.reports.items())},
            }
        )
        reports = list(collector.reports.values())
        rejected_rows, seen_ids = collector.rejected, collector.seen_ids
        digests, revisits = collector.response_digests, collector.revisits
    else:
        results = _convert_files(files, target, options)
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


def write_rejections(rows: list[dict[str, Any]], parquet_path: Path, csv_path: Path | None) -> None:
    """rejected_records as Parquet (beside the documents asset) and CSV (in the output folder)."""
    table = pa.Table.from_pylist(rows, schema=REJECTED_SCHEMA)
    with atomic_path(parquet_path) as temp:
        pq.write_table(table, temp, compression="zstd")
    if csv_path is not None:
        with atomic_path(csv_path) as temp, open(temp, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=REJECTED_SCHEMA.names)
            writer.writeheader()
            writer.writerows(rows)


def clear_rejections(store: Store, output_dir: Path | None) -> None:
    """A non-WARC run leaves no stale rejected_records from an earlier WARC run."""
    store.path("rejected_records").unlink(missing_ok=True)
    if output_dir is not None:
        (output_dir / "rejected_records.csv").unlink(missing_ok=True)


def _staging_dir(store: Store) -> Path:
    return store.root / ".warc_staging"


def discard_staging(store: Store) -> None:
    """Drop the staged conversion once the documents asset is written."""
    folder = _staging_dir(store)
    if folder.is_dir():
        for path in folder.iterdir():
            path.unlink(missing_ok=True)


def _staging_key(warcs: list, targets: list, options: WarcOptions) -> str:
    spec = {
        "version": CONVERTER_VERSION,
        "warc": [(str(f.path), f.sha256, f.bytes) for f in warcs],
        "targets": [(str(f.path), f.sha256) for f in targets],
        "options": asdict(options),
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:32]


def stage_warc(
    store: Store,
    files: list,
    options: WarcOptions | None,
    output_dir: Path | None,
) -> tuple[list, list[dict[str, Any]], dict[str, Any]]:
    """Convert WARC inputs (or Common Crawl targets) into one staged Parquet; list what was skipped.

    Returns (files for the documents stage: the non-WARC inputs + the staged Parquet,
    descriptions of the real inputs with record counts, summary). The conversion is kept under
    the storage root, keyed by the inputs' sha256 and the options, until `discard_staging`, so
    that `webdedup run` reads (or fetches) each record once although it asks for the input's
    crawl days before the documents stage runs.
    """
    from .documents import InputFile  # documents imports this module

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
        write_rejections(result["rejected_rows"], rejected_path, None)
        write_text(summary_path, json.dumps({k: v for k, v in result.items() if k != "rejected_rows"}, default=str))
    described = [f.describe() for f in others]
    if targets:
        described.append({**targets[0].describe(), **result["files"][0]})
    else:
        described += [{**f.describe(), **d} for f, d in zip(warcs, result["files"])]
    write_rejections(
        result["rejected_rows"],
        store.path("rejected_records"),
        output_dir / "rejected_records.csv" if output_dir is not None else None,
    )
    staged_file = InputFile(staged, "parquet", file_sha256(staged), staged.stat().st_size)
    return others + [staged_file], described, result["summary"]
