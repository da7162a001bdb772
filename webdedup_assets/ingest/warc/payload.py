"""The entity body of a stored HTTP response: transfer and content codings undone, with leniency counts."""

from __future__ import annotations

import re
import zlib
from collections import Counter


def looks_like_html(payload: bytes) -> bool:
    """Text (no NUL bytes at the start) with some markup."""
    head = payload[:2048]
    if not head.strip() or b"\x00" in head:
        return False
    return b"<" in head


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
