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

from webdedup_assets.cli import main  # noqa: E402
from webdedup_assets.engine.documents import stage_documents  # noqa: E402
from webdedup_assets.engine.errors import WebdedupError  # noqa: E402
from webdedup_assets.engine.storage import Store  # noqa: E402
from webdedup_assets.engine.warc import TERMS_URL, WarcOptions  # noqa: E402

WARC_PATH = "crawl-data/CC-TEST/segments/1/warc/test-00000.warc.gz"


class RangeHandler(http.server.BaseHTTPRequestHandler):
    root: Path
    requests: list[str]

    def do_GET(self):  # noqa: N802
        self.requests.append(self.path)
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
    handler = type("Handler", (RangeHandler,), {"root": root, "requests": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {
            "root": root,
            "spans": spans,
            "recs": parts,
            "url": f"http://127.0.0.1:{server.server_address[1]}/",
            "handler": handler,
            "tmp": tmp_path,
        }
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


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
