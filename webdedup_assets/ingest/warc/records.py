"""One framed WARC record -> a document row or a listed rejection.

FastWARC parses the record and HTTP headers of each framed record; payload.py undoes the HTTP
codings; html.py decides the charset and extracts title and main text with Resiliparse. Here:
which records are pages (type, HTTP status, Content-Type, HTTP/0.9 responses), the provenance
columns, and the kind and reason of every record that does not become a document.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, date, datetime
from pathlib import Path
from urllib.parse import urlsplit

from fastwarc.warc import WarcRecord, WarcRecordType

from ...progress import task
from ...storage.objects import ObjectPath, open_buffer
from ..options import WarcOptions
from .collect import Collector, doc_id_for
from .framing import MAX_HEADER_BYTES, Framed, frame_gzip, frame_plain
from .html import HtmlTooDeep, decode_html, extract
from .payload import PayloadError, decode_payload, looks_like_html

SKIP_KINDS = ("warcinfo", "request", "metadata", "revisit", "resource", "conversion", "continuation", "unknown")
HTML_TYPES = ("text/html", "application/xhtml+xml")


def host_of(url: str) -> str:
    try:
        return (urlsplit(url.strip()).hostname or "").lower()
    except ValueError:
        return ""


DATE_PREFIX = re.compile(r"\s*(\d{4})-(\d{2})-(\d{2})")


def valid_date_part(value: str | None) -> datetime | None:
    """The calendar day a malformed WARC-Date starts with (ClueWeb09 has `2008-10-294T05:21:46-0700`:
    2008-10-29), as midnight UTC; None when it does not start with one."""
    match = DATE_PREFIX.match(value or "")
    try:
        return datetime(*(int(part) for part in match.groups()), tzinfo=UTC) if match else None
    except ValueError:  # 2008-02-30
        return None


def lenient_date(collector: Collector, name: str, value: str | None) -> tuple[datetime | None, str]:
    """A record's date when its WARC-Date cannot be parsed: the valid day it starts with, else the
    file's warcinfo date, else the default date; with the leniency kind it is counted under."""
    day = valid_date_part(value)
    if day is not None:
        return day, "warc_date_valid_part"
    if collector.warcinfo_dates.get(name) is not None:
        return collector.warcinfo_dates[name], "warc_date_from_warcinfo"
    if collector.options.default_date:
        return datetime.combine(date.fromisoformat(collector.options.default_date), datetime.min.time(), UTC), (
            "warc_date_default"
        )
    return None, ""


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
    if record.record_type == WarcRecordType.warcinfo:  # its date is the fallback of the file's records
        info_date = record.record_date or valid_date_part(headers.get("WARC-Date"))
        collector.warcinfo_dates.setdefault(name, info_date.astimezone(UTC) if info_date else None)
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
    captured = record.record_date
    if captured is None:
        captured, leniency = lenient_date(collector, name, headers.get("WARC-Date"))
        if captured is None:
            reject(
                "bad_record",
                f"WARC-Date missing or unparsable: {headers.get('WARC-Date')!r}, and no warcinfo date or "
                "default_date to take instead",
            )
            return
        collector.report(name).leniency[leniency] += 1
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
    captured = captured.astimezone(UTC)
    collector.add_document(
        name,
        {
            "doc_id": doc_id_for(record_id),
            "source": "warc",
            "domain": host_of(url or ""),
            "crawled_at": captured.date(),
            "title": title,
            "body": body,
            "warc_record_id": record_id,
            "capture_url": url,
            "warc_filename": name,
            "warc_offset": offset,
            "warc_length": length,
            "warc_date": captured.replace(microsecond=0) if record.record_date is not None else None,
            "http_status": status,
            "content_type": content_type or None,
            "payload_digest": digest,
        },
    )


def read_warc_file(collector: Collector, path: Path | ObjectPath, name: str, options: WarcOptions) -> None:
    """Every record of a local file (memory-mapped) or an object (read by ranges, in order)."""
    collector.report(name)
    with open_buffer(path) as buf:
        size = len(buf)
        if size == 0:
            return
        gz = buf[:2] == b"\x1f\x8b"
        framer = frame_gzip if gz else frame_plain
        with task("warc records", size, "B") as shown:  # bytes read of this file, with its records so far
            done = 0
            for records, framed in enumerate(framer(buf, options.max_record_bytes), start=1):
                handle_framed(collector, name, framed)
                end = framed.offset + framed.length
                shown.advance(max(0, end - done), records=records)
                done = max(done, end)
