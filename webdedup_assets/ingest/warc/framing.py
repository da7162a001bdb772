"""WARC framing: bytes -> framed records with offsets (pure: no parser, no I/O).

Framing (where one record starts and ends) is done here, not by the parser library, so that
every byte of the input is accounted for: a .warc.gz is walked gzip member by gzip member with
zlib (offsets and lengths are the member's, as in Common Crawl indexes), a plain .warc record by
record using its Content-Length, which must be followed by the CRLFCRLF record end. A truncated
or corrupt member, a Content-Length that does not match the bytes, a record over the size cap:
each becomes a Framed piece with a kind and a reason, and the walk resumes at the next member or
`WARC/1.` line.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

INFLATE_LIMIT_FACTOR = 16  # a gzip member is inflated at most this many times the record cap
WARC_START = re.compile(rb"WARC/(1\.[01]|0\.1[78])\r?\n")  # 0.17/0.18: drafts used by ClueWeb09 and others
CONTENT_LENGTH = re.compile(rb"(?im)^content-length[ \t]*:[ \t]*(\d+)[ \t]*\r?$")
MAX_HEADER_BYTES = 64 * 1024
READ_CHUNK = 1 << 20


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


def inflate_member(
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
        if inflate_member(buf, candidate, cap, 1)[3] is None:  # inflates cleanly (or past the cap)
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
        end, data, total, error = inflate_member(buf, pos, cap)
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
