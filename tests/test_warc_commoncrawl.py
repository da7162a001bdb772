"""Common Crawl byte-range targets against a Range-capable HTTP server on 127.0.0.1 (no network)."""

from __future__ import annotations

import csv
import http.server
import json
import re
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_warc_fixtures import ARTICLE, Rec, corpus, page, write_warc  # noqa: E402

from webdedup_assets.cli.main import main  # noqa: E402
from webdedup_assets.engine.stages.documents import stage_documents  # noqa: E402
from webdedup_assets.errors import WebdedupError  # noqa: E402
from webdedup_assets.ingest.options import TERMS_URL, WarcOptions  # noqa: E402
from webdedup_assets.storage.store import Store  # noqa: E402

WARC_PATH = "crawl-data/CC-TEST/segments/1/warc/test-00000.warc.gz"


class RangeHandler(http.server.BaseHTTPRequestHandler):
    root: Path
    requests: list[str]
    redirect_to: str = ""  # base URL that /redirect/<path> answers 302 to

    def do_GET(self):  # noqa: N802
        self.requests.append(self.path)
        if self.path.startswith("/redirect/") and self.redirect_to:
            self.send_response(302)
            self.send_header("Location", self.redirect_to + self.path.removeprefix("/redirect/"))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/slow/"):
            time.sleep(1.5)
        path = self.root / self.path.removeprefix("/slow/").lstrip("/")
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        match = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if not match:
            self.send_error(416)
            return
        start, end = int(match.group(1)), min(int(match.group(2)), len(data) - 1)
        body = data[start : end + 1]
        try:
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


def serve(root: Path):
    """A Range-capable server on 127.0.0.1 for root: (server, thread, handler class, base URL)."""
    handler = type("Handler", (RangeHandler,), {"root": root, "requests": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread, handler, f"http://127.0.0.1:{server.server_address[1]}/"


def stop(server, thread) -> None:
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture
def crawl(tmp_path):
    """A generated WARC laid out like the Common Crawl bucket, served with Range support."""
    recs = corpus()
    extra = Rec("response", "http://copy.example.org/museum", page("Boat museum", ARTICLE).encode())
    parts = [recs["original"], recs["request"], recs["mirror"], recs["other"], recs["sjis"], recs["eucjp"], extra]
    root = tmp_path / "bucket"
    warc = root / WARC_PATH
    warc.parent.mkdir(parents=True)
    spans = write_warc(warc, parts)
    server, thread, handler, url = serve(root)
    try:
        yield {"root": root, "spans": spans, "recs": parts, "url": url, "handler": handler, "tmp": tmp_path}
    finally:
        stop(server, thread)


def write_targets(path: Path, rows: list[tuple[str, int, int]]) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["url", "warc_filename", "warc_offset", "warc_length"])
        for name, offset, length in rows:
            writer.writerow(["http://ignored.example/", name, offset, length])
    return path


def test_targets_fetched_and_parsed_with_404_and_timeout_counted(crawl, capsys):
    spans = crawl["spans"]
    rows = [(WARC_PATH, *spans[i]) for i in (0, 1, 2, 3, 4, 5, 6)]
    rows.append(("crawl-data/CC-TEST/missing.warc.gz", 0, 500))  # 404
    rows.append(("slow/" + WARC_PATH, *spans[3]))  # the server answers after the timeout
    rows.append((WARC_PATH, spans[0][0] + 5, spans[0][1]))  # wrong offset: not a gzip member
    targets = write_targets(crawl["tmp"] / "targets.csv", rows)
    out = crawl["tmp"] / "out"
    args = ["run", str(targets), "--format", "commoncrawl", "--output", str(out), "--quiet"]
    args += ["--cc-base-url", crawl["url"], "--accept-commoncrawl-terms", "--cc-timeout", "0.5", "--cc-retries", "1"]
    code = main(args)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "10 records -> 6 documents; 4 skipped or rejected" in captured.err

    rejected = list(csv.DictReader(open(out / "rejected_records.csv", encoding="utf-8")))
    by_kind = {}
    for row in rejected:
        by_kind.setdefault(row["kind"], []).append(row)
    assert sorted(by_kind) == ["fetch_failed", "not_gzip", "request"]
    reasons = sorted(r["reason"] for r in by_kind["fetch_failed"])
    assert reasons[0].startswith("HTTP 404 for ") and "missing.warc.gz" in reasons[0]
    assert "timeout" in reasons[1] and "after 2 attempts" in reasons[1]
    assert sum(1 for p in crawl["handler"].requests if p.startswith("/slow/")) == 2  # bounded retries
    # each target is fetched once, although `webdedup run` reads the input's crawl days first
    assert len(crawl["handler"].requests) == 11
    assert by_kind["not_gzip"][0]["warc_offset"] == str(spans[0][0] + 5)

    docs = pq.read_table(out / "deduped_documents.parquet").to_pylist()
    offsets = {(d["warc_filename"], d["warc_offset"], d["warc_length"]) for d in docs}
    assert (WARC_PATH, *spans[2]) in offsets  # the mirror is the newest copy of the museum page
    manifest = json.loads((out / "manifest.json").read_text())
    [entry] = manifest["input"]["files"]
    assert entry["format"] == "commoncrawl" and entry["targets"] == 10 and len(entry["sha256"]) == 64
    assert entry["warc_files"][WARC_PATH]["documents"] == 6
    assert manifest["counts"]["documents"] == 6 and manifest["counts"]["representatives"] == 3


def test_local_mirror_and_size_cap(crawl):
    spans = crawl["spans"]
    rows = [(WARC_PATH, *spans[0]), (WARC_PATH, spans[3][0], 50_000_000), ("crawl-data/none.warc.gz", 0, 10)]
    targets = write_targets(crawl["tmp"] / "targets.csv", rows)
    store = Store(crawl["tmp"] / "store")
    options = WarcOptions(cc_base_url=str(crawl["root"]), cc_accept_terms_of_use=True)
    info = stage_documents(store, str(targets), "commoncrawl", warc_options=options)
    assert info["rows"] == 1
    assert info["warc"]["rejected"] == {"fetch_failed": 1, "over_size_cap": 1}
    rejected = {r["kind"]: r for r in pq.read_table(store.path("rejected_records")).to_pylist()}
    assert "does not exist" in rejected["fetch_failed"]["reason"]
    assert "warc_length 50000000 exceeds the cap of 16777216" == rejected["over_size_cap"]["reason"]
    assert len(rejected) == 2
    assert crawl["handler"].requests == []  # a mirror path never touches HTTP


def test_refused_without_terms_acknowledgement(crawl, capsys):
    targets = write_targets(crawl["tmp"] / "targets.csv", [(WARC_PATH, *crawl["spans"][0])])
    with pytest.raises(WebdedupError) as err:
        stage_documents(Store(crawl["tmp"] / "s"), str(targets), "commoncrawl", warc_options=WarcOptions())
    assert "cc_accept_terms_of_use" in str(err.value) and TERMS_URL in str(err.value)
    code = main(["run", str(targets), "--format", "commoncrawl", "--output", str(crawl["tmp"] / "o"), "--quiet"])
    captured = capsys.readouterr()
    assert code == 2
    assert "--accept-commoncrawl-terms" in captured.err and TERMS_URL in captured.err
    assert crawl["handler"].requests == []


def test_bad_target_rows_are_listed(crawl):
    path = crawl["tmp"] / "targets.csv"
    path.write_text(f"warc_filename,warc_offset,warc_length\n{WARC_PATH},abc,10\n{WARC_PATH},0,0\n")
    options = WarcOptions(cc_base_url=crawl["url"], cc_accept_terms_of_use=True)
    info = stage_documents(Store(crawl["tmp"] / "s"), str(path), "commoncrawl", warc_options=options)
    assert info["rows"] == 0 and info["warc"]["rejected"] == {"bad_target": 2}
    rejected = pq.read_table(Store(crawl["tmp"] / "s").path("rejected_records")).to_pylist()
    assert [r["kind"] for r in rejected] == ["bad_target", "bad_target"]
    assert "bad target row 2" in rejected[0]["reason"]
    missing = crawl["tmp"] / "bad.csv"
    missing.write_text("filename,offset\nx,1\n")
    with pytest.raises(WebdedupError, match="missing warc_filename, warc_offset, warc_length"):
        stage_documents(Store(crawl["tmp"] / "s"), str(missing), "commoncrawl", warc_options=options)


UNSAFE_NAMES = {
    "../secret/outside.warc.gz": "'..' segment",
    "/etc/hostname": "absolute path",
    "/proc/self/environ": "absolute path",
    "file:///etc/passwd": "URL scheme",
    "http://127.0.0.1:1/x.warc.gz": "URL scheme",
    "..\\x": "backslash",
    "%2e%2e/x": "decodes to '../x', which has a '..' segment",
    "crawl-data/%252e%252e/x": "decodes to 'crawl-data/../x'",
    "crawl-data//x.warc.gz": "empty path segment",
    "crawl-data/./x.warc.gz": "'.' segment",
    "C:/x.warc.gz": "URL scheme or drive",
    "x.warc.gz?a=1": "URL query",
}


def test_target_name_checks():
    from webdedup_assets.ingest.commoncrawl import target_name_problem

    for name, expected in UNSAFE_NAMES.items():
        assert expected in (target_name_problem(name) or ""), name
    assert "NUL" in target_name_problem("a\x00b")
    assert "control" in target_name_problem("a\nb")
    assert target_name_problem(WARC_PATH) is None
    assert target_name_problem("crawl-data/CC-MAIN-2024-10/segments/1707947473347.0/warc/x-00000.warc.gz") is None


@pytest.mark.parametrize("base", ["mirror", "http"])
def test_unsafe_targets_are_rejected_before_any_io(crawl, base):
    # a valid record outside the mirror: it must never become a document
    secret = crawl["tmp"] / "secret"
    secret.mkdir()
    start, length = crawl["spans"][0]
    (secret / "outside.warc.gz").write_bytes((crawl["root"] / WARC_PATH).read_bytes()[start : start + length])
    rows = [(name, 0, length) for name in UNSAFE_NAMES] + [(WARC_PATH, start, length)]
    targets = write_targets(crawl["tmp"] / "targets.csv", rows)
    store = Store(crawl["tmp"] / "store")
    url = str(crawl["root"]) if base == "mirror" else crawl["url"]
    options = WarcOptions(cc_base_url=url, cc_accept_terms_of_use=True, cc_max_retries=0)
    info = stage_documents(store, str(targets), "commoncrawl", warc_options=options)
    assert info["rows"] == 1 and info["warc"]["rejected"] == {"bad_target": len(UNSAFE_NAMES)}
    rejected = pq.read_table(store.path("rejected_records")).to_pylist()
    by_line = {int(r["reason"].split(":")[0].removeprefix("bad target row ")): r["reason"] for r in rejected}
    for line, (name, expected) in enumerate(UNSAFE_NAMES.items(), start=2):
        assert f"warc_filename {name!r}" in by_line[line] and expected in by_line[line]
    # the one valid target was fetched, nothing else
    expected_requests = [] if base == "mirror" else ["/" + WARC_PATH]
    assert crawl["handler"].requests == expected_requests


def test_mirror_symlink_out_and_missing_file_disclose_nothing(crawl):
    secret = crawl["tmp"] / "secret"
    secret.mkdir()
    start, length = crawl["spans"][0]
    (secret / "outside.warc.gz").write_bytes((crawl["root"] / WARC_PATH).read_bytes()[start : start + length])
    link = crawl["root"] / "crawl-data" / "link.warc.gz"
    link.symlink_to(secret / "outside.warc.gz")
    (crawl["root"] / "crawl-data" / "etc").symlink_to("/etc")
    rows = [
        ("crawl-data/link.warc.gz", 0, length),
        ("crawl-data/etc/hostname", 0, 10),
        ("crawl-data/none.warc.gz", 0, 10),
        ("crawl-data/CC-TEST", 0, 10),  # a folder, not a file
    ]
    targets = write_targets(crawl["tmp"] / "targets.csv", rows)
    store = Store(crawl["tmp"] / "store")
    options = WarcOptions(cc_base_url=str(crawl["root"]), cc_accept_terms_of_use=True)
    info = stage_documents(store, str(targets), "commoncrawl", warc_options=options)
    assert info["rows"] == 0 and info["warc"]["rejected"] == {"bad_target": 2, "fetch_failed": 2}
    rejected = pq.read_table(store.path("rejected_records")).to_pylist()
    reasons = [r["reason"] for r in rejected]
    assert "resolves outside the mirror folder" in reasons[0] and "link.warc.gz" in reasons[0]
    assert "resolves outside the mirror folder" in reasons[1]
    assert reasons[2] == "mirror file crawl-data/none.warc.gz does not exist (HTTP 404 equivalent)"
    assert reasons[3] == "mirror file crawl-data/CC-TEST does not exist (HTTP 404 equivalent)"
    assert not any(str(secret) in r or " /etc" in r or "bytes" in r for r in reasons)


def test_redirect_to_another_port_is_refused(crawl):
    other_root = crawl["tmp"] / "other"
    (other_root / WARC_PATH).parent.mkdir(parents=True)
    (other_root / WARC_PATH).write_bytes((crawl["root"] / WARC_PATH).read_bytes())
    server, thread, other, other_url = serve(other_root)
    try:
        crawl["handler"].redirect_to = other_url
        start, length = crawl["spans"][0]
        targets = write_targets(crawl["tmp"] / "targets.csv", [("redirect/" + WARC_PATH, start, length)])
        store = Store(crawl["tmp"] / "store")
        options = WarcOptions(cc_base_url=crawl["url"], cc_accept_terms_of_use=True, cc_max_retries=2)
        info = stage_documents(store, str(targets), "commoncrawl", warc_options=options)
    finally:
        stop(server, thread)
    assert info["rows"] == 0 and info["warc"]["rejected"] == {"fetch_failed": 1}
    [row] = pq.read_table(store.path("rejected_records")).to_pylist()
    assert row["reason"].startswith(f"HTTP 302 redirect to '{other_url}{WARC_PATH}' refused")
    assert "redirects are not followed" in row["reason"]
    assert other.requests == []  # the other origin never saw a request (nor the Range header)
    assert crawl["handler"].requests == ["/redirect/" + WARC_PATH]  # not retried


def test_fetched_gzip_bomb_is_given_up_at_a_bound():
    from test_warc_fixtures import gzip_member, record_bytes

    from webdedup_assets.ingest.commoncrawl import FetchError, check_member

    bomb = Rec("response", "http://bomb.example/", b"<html><p>" + b"a" * 40_000_000)
    data = gzip_member(record_bytes(bomb, False))
    assert len(data) < 1_000_000  # the range itself is under the cap
    with pytest.raises(FetchError) as err:
        check_member(data, WarcOptions(max_record_bytes=1_000_000))
    assert err.value.kind == "over_size_cap"
    assert str(err.value) == "record of more than 16000000 bytes exceeds the cap of 1000000"


class ScriptedHandler(RangeHandler):
    """RangeHandler that first answers each path with its scripted failures: a status code, or "stall"
    (headers and half the body, then silence past the client's timeout)."""

    script: dict[str, list] = {}
    stopped: threading.Event

    def do_GET(self):  # noqa: N802
        pending = self.script.get(self.path)
        if not pending:
            return super().do_GET()
        action = pending.pop(0)
        self.requests.append(self.path)
        if action == "drip":  # headers at once, then one byte of the body every half second
            self.send_response(206)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            try:
                for byte in (b"\x1f\x8b\x08" + b"x" * 997)[:1000]:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    if self.stopped.wait(0.5):
                        return
            except (BrokenPipeError, ConnectionResetError):  # the client gave up: what the test wants
                pass
            return
        if action == "stall":
            self.send_response(206)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"\x1f\x8b\x08" + b"x" * 497)
            self.wfile.flush()
            time.sleep(1.0)
            return
        self.send_response(action)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def scripted(crawl):
    handler = type(
        "Handler",
        (ScriptedHandler,),
        {"root": crawl["root"], "requests": [], "script": {}, "stopped": threading.Event()},
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield handler, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        handler.stopped.set()  # a dripping answer ends too
        stop(server, thread)


def test_fetch_retries_5xx_and_429_with_doubling_backoff_and_not_4xx(crawl, scripted):
    from webdedup_assets.ingest.commoncrawl import FetchError, fetch_range

    handler, url = scripted
    start, length = crawl["spans"][0]
    expected = (crawl["root"] / WARC_PATH).read_bytes()[start : start + length]
    options = WarcOptions(cc_max_retries=3, cc_retry_backoff_seconds=0.2, cc_timeout_seconds=5)
    handler.script["/" + WARC_PATH] = [503, 429]
    began = time.perf_counter()
    assert fetch_range(url, WARC_PATH, start, length, options) == expected
    waited = time.perf_counter() - began
    assert handler.requests == ["/" + WARC_PATH] * 3
    assert 0.6 <= waited < 3  # 0.2 s before the first retry, 0.4 s before the second

    handler.requests.clear()
    handler.script["/" + WARC_PATH] = [500] * 5
    with pytest.raises(FetchError) as err:
        fetch_range(url, WARC_PATH, start, length, WarcOptions(cc_max_retries=2, cc_retry_backoff_seconds=0))
    assert err.value.kind == "fetch_failed"
    assert str(err.value) == f"HTTP 500 for {url}{WARC_PATH} (after 3 attempts)"
    assert len(handler.requests) == 3

    handler.requests.clear()
    handler.script["/" + WARC_PATH] = [403]
    with pytest.raises(FetchError) as err:
        fetch_range(url, WARC_PATH, start, length, options)
    assert str(err.value) == f"HTTP 403 for {url}{WARC_PATH}"
    assert len(handler.requests) == 1  # a 4xx other than 429 is not retried


def test_a_stalled_body_is_retried_under_the_same_policy(crawl, scripted):
    from webdedup_assets.ingest.commoncrawl import FetchError, fetch_range

    handler, url = scripted
    start, length = crawl["spans"][0]
    expected = (crawl["root"] / WARC_PATH).read_bytes()[start : start + length]
    options = WarcOptions(cc_max_retries=1, cc_retry_backoff_seconds=0, cc_timeout_seconds=0.3)
    handler.script["/" + WARC_PATH] = ["stall"]
    assert fetch_range(url, WARC_PATH, start, length, options) == expected
    assert len(handler.requests) == 2

    handler.requests.clear()
    handler.script["/" + WARC_PATH] = ["stall", "stall"]
    with pytest.raises(FetchError) as err:
        fetch_range(url, WARC_PATH, start, length, options)
    assert "timeout fetching" in str(err.value) and str(err.value).endswith("(after 2 attempts)")
    assert len(handler.requests) == 2


def test_cc_timeout_bounds_the_whole_request_not_each_read(crawl, scripted):
    """A server sending one byte every half second: every read succeeds within the timeout, so
    only a deadline over the whole request ends it (before, the fetch took 1000 x 0.5 s)."""
    from webdedup_assets.ingest.commoncrawl import FetchError, fetch_range

    handler, url = scripted
    start, length = crawl["spans"][0]
    expected = (crawl["root"] / WARC_PATH).read_bytes()[start : start + length]
    options = WarcOptions(cc_max_retries=1, cc_retry_backoff_seconds=0, cc_timeout_seconds=1.2)
    handler.script["/" + WARC_PATH] = ["drip", "drip"]
    outcome: list = []

    def fetch() -> None:
        try:
            outcome.append(fetch_range(url, WARC_PATH, start, length, options))
        except FetchError as err:
            outcome.append(err)

    began = time.perf_counter()
    worker = threading.Thread(target=fetch, daemon=True)
    worker.start()
    worker.join(timeout=20)
    took = time.perf_counter() - began
    assert not worker.is_alive(), "the fetch was still running after 20 s"
    assert isinstance(outcome[0], FetchError) and outcome[0].kind == "fetch_failed"
    assert re.fullmatch(
        rf"timeout fetching {re.escape(url + WARC_PATH)}: \d of {length} bytes received before the request's deadline "
        r"\(after 2 attempts\)",
        str(outcome[0]),
    ), str(outcome[0])
    assert 2.4 <= took < 4.5  # two attempts of 1.2 s each
    assert len(handler.requests) == 2

    handler.requests.clear()  # one slow attempt, then a whole answer: the retry gets it
    handler.script["/" + WARC_PATH] = ["drip"]
    assert fetch_range(url, WARC_PATH, start, length, options) == expected
    assert len(handler.requests) == 2


def test_the_http_client_is_injectable(crawl, tmp_path):
    import urllib3

    from webdedup_assets.ingest.commoncrawl import http_client
    from webdedup_assets.ingest.convert import convert_warc_input

    class Recording(urllib3.PoolManager):
        def __init__(self, options):
            base = http_client(options)
            super().__init__(retries=base.connection_pool_kw["retries"], timeout=base.connection_pool_kw["timeout"])
            self.sent = []

        def request(self, method, url, **kw):
            self.sent.append((method, url, kw["headers"]["Range"], kw["redirect"]))
            return super().request(method, url, **kw)

    spans = crawl["spans"]
    targets = write_targets(tmp_path / "targets.csv", [(WARC_PATH, *spans[0]), (WARC_PATH, *spans[2])])
    options = WarcOptions(cc_base_url=crawl["url"], cc_accept_terms_of_use=True, cc_concurrency=1)
    client = Recording(options)
    result = convert_warc_input([], tmp_path / "docs.parquet", options, targets, http=client)
    assert result["summary"]["documents"] == 2
    ranges = [f"bytes={s}-{s + n - 1}" for s, n in (spans[0], spans[2])]
    assert client.sent == [("GET", crawl["url"] + WARC_PATH, r, False) for r in ranges]
    assert len(crawl["handler"].requests) == 2


def test_the_http_client_uses_the_environment_proxy_like_urllib(monkeypatch):
    import urllib3

    from webdedup_assets.ingest.commoncrawl import http_client

    for name in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    options = WarcOptions(cc_base_url="https://data.commoncrawl.org/")
    assert not isinstance(http_client(options), urllib3.ProxyManager)
    monkeypatch.setenv("https_proxy", "http://proxy.example:3128")
    client = http_client(options)
    assert isinstance(client, urllib3.ProxyManager) and client.proxy.host == "proxy.example"
    monkeypatch.setenv("no_proxy", "commoncrawl.org")
    assert not isinstance(http_client(options), urllib3.ProxyManager)
