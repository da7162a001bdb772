"""Common Crawl targets: (warc_filename, warc_offset, warc_length) rows fetched by byte range.

A target's warc_filename is checked to be a safe relative path before any I/O (else `bad_target`).
Ranges come from an http(s) base through urllib3 (one pool of connections, its Retry policy:
retries after a timeout, a connection error, a 5xx or a 429, waiting cc_retry_backoff_seconds and
doubling; redirects never followed) or from a local mirror folder. The HTTP client can be passed
in (any object with urllib3's `request`), so tests can drive the fetch without a network.
"""

from __future__ import annotations

import csv
import re
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import unquote, urlsplit

import urllib3
from urllib3.exceptions import MaxRetryError, ProtocolError, ReadTimeoutError
from urllib3.util.retry import Retry

from ..errors import WebdedupError
from ..progress import task
from ..storage.objects import ObjectPath, open_text
from .options import TERMS_URL, WarcOptions
from .warc.collect import Collector
from .warc.framing import INFLATE_LIMIT_FACTOR, frame_plain, inflate_member
from .warc.records import handle_framed

USER_AGENT = "webdedup (issue 5)"
RETRY_STATUSES = frozenset({429, *range(500, 600)})


def require_terms(options: WarcOptions) -> None:
    if not options.cc_accept_terms_of_use:
        raise WebdedupError(
            "Common Crawl fetching is refused until you acknowledge the Common Crawl terms of use "
            f"({TERMS_URL}): set cc_accept_terms_of_use: true in the documents config "
            "(CLI: --accept-commoncrawl-terms)"
        )


def read_targets(path: Path | ObjectPath) -> tuple[list[tuple[int, str, int, int]], list[tuple[int, str]]]:
    """Rows of (warc_filename, warc_offset, warc_length): (valid targets, (line, problem)).
    The CSV may be a local file or an object (read as a stream, like every object input)."""
    if not isinstance(path, ObjectPath) and not path.is_file():
        raise WebdedupError(f"Common Crawl targets file {str(path)!r} does not exist")
    targets, problems = [], []
    with open_text(path) as handle:
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


class DoublingRetry(Retry):
    """urllib3's Retry, waiting backoff x 2^(n-1) before retry n (urllib3 itself does not wait before the first)."""

    def get_backoff_time(self) -> float:
        done = len(self.history)  # no redirect is ever followed, so every entry is a failed attempt
        return 0.0 if done == 0 else self.backoff_factor * 2 ** (done - 1)


def retry_policy(options: WarcOptions) -> Retry:
    """cc_max_retries retries after a timeout, a connection error, a 5xx or a 429; a 3xx is returned, not followed."""
    return DoublingRetry(
        total=options.cc_max_retries,
        redirect=False,
        status_forcelist=RETRY_STATUSES,
        allowed_methods=frozenset({"GET"}),
        backoff_factor=options.cc_retry_backoff_seconds,
        raise_on_status=False,  # the last 5xx/429 response is returned and named
        respect_retry_after_header=False,  # the configured backoff bounds every wait
    )


def http_client(options: WarcOptions) -> urllib3.PoolManager:
    """The client of one conversion: a connection per request in flight, the retry policy and timeouts.

    A proxy set in the environment (https_proxy, http_proxy; no_proxy) is used for the base's
    scheme and host, as urllib and requests do.
    """
    settings = {
        "maxsize": max(1, options.cc_concurrency),
        "retries": retry_policy(options),
        "timeout": urllib3.Timeout(connect=options.cc_timeout_seconds, read=options.cc_timeout_seconds),
    }
    base = urlsplit(options.cc_base_url)
    proxy = urllib.request.getproxies().get(base.scheme)
    if proxy and not urllib.request.proxy_bypass(base.hostname or ""):
        return urllib3.ProxyManager(proxy, **settings)
    return urllib3.PoolManager(**settings)


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


def fetch_range(
    base: str, name: str, offset: int, length: int, options: WarcOptions, http: urllib3.PoolManager | None = None
) -> bytes:
    """Bytes [offset, offset+length) of a WARC under base (http(s) URL or local mirror folder).

    The name must be a safe relative path (else `bad_target`, before any I/O); HTTP redirects are
    not followed (a 3xx is a `fetch_failed` naming the refused Location). `http` is the client
    (default: http_client(options)); a body that stalls or breaks off is retried under its policy.
    """
    problem = target_name_problem(name)
    if problem:
        raise FetchError("bad_target", f"warc_filename {name!r} {problem}")
    if length > options.max_record_bytes:
        raise FetchError("over_size_cap", f"warc_length {length} exceeds the cap of {options.max_record_bytes}")
    if not base.startswith(("http://", "https://")):
        return _mirror_range(base, name, offset, length)
    url = base.rstrip("/") + "/" + name
    client = http if http is not None else http_client(options)
    headers = {"Range": f"bytes={offset}-{offset + length - 1}", "User-Agent": USER_AGENT}
    attempts = f"after {options.cc_max_retries + 1} attempts"
    retries = None  # the client's own policy for the first request
    while True:
        deadline = time.monotonic() + options.cc_timeout_seconds  # of this attempt, its last byte included
        try:
            response = client.request(
                "GET",
                url,
                headers=headers,
                retries=retries,
                redirect=False,
                preload_content=False,
                decode_content=False,
            )
        except MaxRetryError as err:
            raise FetchError("fetch_failed", f"{_failure(url, err.reason)} ({attempts})") from None
        try:
            status = response.status
            if 300 <= status < 400:
                location = response.headers.get("Location")
                raise FetchError(
                    "fetch_failed",
                    f"HTTP {status} redirect to {location!r} refused for {url} (redirects are not followed)",
                )
            if status in RETRY_STATUSES:  # returned once the policy's retries are spent
                raise FetchError("fetch_failed", f"HTTP {status} for {url} ({attempts})")
            if not 200 <= status < 300:
                raise FetchError("fetch_failed", f"HTTP {status} for {url}")
            if status != 206:
                raise FetchError("fetch_failed", f"HTTP {status} instead of 206: the server ignored the Range")
            data = _read_by(response, length + 1, deadline)
        except (ReadTimeoutError, TimeoutError, ProtocolError) as err:  # stalled, too slow or broke off: retried
            response.close()
            try:
                retries = (response.retries or retry_policy(options)).increment("GET", url, error=err)
            except MaxRetryError:
                raise FetchError("fetch_failed", f"{_failure(url, err)} ({attempts})") from None
            retries.sleep()
            continue
        except FetchError:
            response.close()
            raise
        if len(data) != length:
            response.close()
            raise FetchError("fetch_failed", f"range returned {len(data)} bytes, expected {length}")
        response.release_conn()
        return data


def _read_by(response: urllib3.BaseHTTPResponse, limit: int, deadline: float) -> bytes:
    """At most `limit` bytes of the body, all of them before `deadline`: the client's read timeout
    bounds each read only, so a server sending a byte now and then would hold the fetch forever."""
    chunks: list[bytes] = []
    got = 0
    while got < limit:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{got} of {limit - 1} bytes received before the request's deadline")
        sock = getattr(getattr(response, "connection", None), "sock", None)
        if sock is not None:
            sock.settimeout(left)  # the next read waits no longer than the deadline either
        chunk = response.read1(min(limit - got, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _failure(url: str, reason: BaseException | None) -> str:
    timed_out = isinstance(reason, TimeoutError | urllib3.exceptions.TimeoutError) or "timed out" in str(reason)
    return f"{'timeout' if timed_out else 'error'} fetching {url}: {reason}"


def check_member(data: bytes, options: WarcOptions) -> bytes:
    """The range must be exactly one complete gzip member; returns it inflated."""
    if data[:3] != b"\x1f\x8b\x08":
        raise FetchError("not_gzip", "range does not start a gzip member (wrong offset?)")
    end, inflated, total, error = inflate_member(data, 0, options.max_record_bytes)
    if error:
        raise FetchError("truncated_gzip" if error.startswith("truncated") else "corrupt_gzip", error)
    if inflated is None:
        size = f"{total} bytes" if end >= 0 else f"more than {options.max_record_bytes * INFLATE_LIMIT_FACTOR} bytes"
        raise FetchError("over_size_cap", f"record of {size} exceeds the cap of {options.max_record_bytes}")
    if end != len(data):
        raise FetchError("bad_range", f"gzip member ends at {end} of {len(data)} bytes (wrong warc_length?)")
    return inflated


def read_commoncrawl(
    collector: Collector, targets_path: Path | ObjectPath, options: WarcOptions, http: urllib3.PoolManager | None = None
) -> list[tuple]:
    """Fetch every valid target (cc_concurrency at a time) and collect its record; list bad rows and failed fetches."""
    require_terms(options)
    client = http if http is not None else http_client(options)
    targets, problems = read_targets(targets_path)
    for _line, problem in problems:
        collector.report(targets_path.name).records += 1
        collector.reject(targets_path.name, None, None, "bad_target", problem)

    def fetch(target):
        _line, name, offset, length = target
        try:
            return (
                target,
                check_member(fetch_range(options.cc_base_url, name, offset, length, options, client), options),
                None,
            )
        except FetchError as err:
            return target, None, err
        except Exception as err:  # e.g. a malformed URL: listed for this target, the run goes on
            return target, None, FetchError("fetch_failed", f"{type(err).__name__}: {err}")

    failed = 0
    with (
        ThreadPoolExecutor(max_workers=max(1, options.cc_concurrency)) as pool,
        task("cc ranges", len(targets), "ranges") as shown,
    ):
        for (_line, name, offset, length), inflated, err in pool.map(fetch, targets):
            failed += err is not None
            shown.advance(1, failed=failed)
            if err is not None:
                collector.report(name).records += 1
                collector.reject(name, offset, length, err.kind, str(err))
                continue
            records = list(frame_plain(inflated, options.max_record_bytes))
            for framed in records:
                framed.offset, framed.length = offset, length
                handle_framed(collector, name, framed)
    if http is None:
        client.clear()
    return targets
