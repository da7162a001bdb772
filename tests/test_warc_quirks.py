"""WARC as archives really are: old versions, LF-only headers, stored-decoded payloads, HTTP/0.9.

Every record here is written by hand (warcio writes none of these quirks). Each quirk that is read
leniently becomes a document with the expected text and is counted under `leniency`; what is
truly broken is still rejected with its reason.
"""

from __future__ import annotations

import gzip
import json
import sys
import uuid
import zlib
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))
from test_warc_fixtures import ARTICLE, JAPANESE, OTHER, RUSSIAN, Rec, gzip_member, page, record_bytes  # noqa: E402

from webdedup_assets.cli.main import main  # noqa: E402
from webdedup_assets.ingest.convert import convert_warc_input  # noqa: E402
from webdedup_assets.ingest.options import WarcOptions  # noqa: E402
from webdedup_assets.ingest.warc.collect import doc_id_for  # noqa: E402
from webdedup_assets.ingest.warc.payload import dechunk  # noqa: E402


def warc_record(
    block: bytes,
    url: str,
    version: bytes = b"WARC/1.0",
    eol: bytes = b"\r\n",
    content_type: bytes = b"application/http; msgtype=response",
    record_type: bytes = b"response",
    declared: int | None = None,
    extra: tuple[bytes, ...] = (),
) -> bytes:
    head = [
        version,
        b"WARC-Type: " + record_type,
        b"WARC-Target-URI: " + url.encode(),
        b"WARC-Date: 2009-01-13T18:05:10Z",
        b"WARC-Record-ID: <urn:uuid:" + str(uuid.uuid5(uuid.NAMESPACE_URL, url)).encode() + b">",
        b"Content-Type: " + content_type,
        *extra,
        b"Content-Length: " + str(len(block) if declared is None else declared).encode(),
    ]
    return eol.join(head) + eol + eol + block + eol + eol


def http(body: bytes, *headers: str, eol: bytes = b"\r\n", status: bytes = b"HTTP/1.1 200 OK") -> bytes:
    return eol.join([status, *(h.encode() for h in headers)]) + eol + eol + body


def chunked(body: bytes, size: int = 100) -> bytes:
    parts = [b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size]) for i in range(0, len(body), size)]
    return b"".join(parts) + b"0\r\n\r\n"


def rec_id(url: str) -> str:
    return f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, url)}>"


def convert(tmp_path: Path, path: Path):
    out = tmp_path / f"{path.name}.parquet"
    result = convert_warc_input([(path, path.name)], out, WarcOptions())
    return result, {r["capture_url"]: r for r in pq.read_table(out).to_pylist()}


def clueweb_style(eucjp: bytes) -> bytes:
    """ClueWeb09-like: WARC/0.18, LF-only WARC and HTTP headers, Content-Lengths counted before the
    CRs were stripped (so they overshoot by one per header line), a warcinfo record first."""
    info = b"software: Nutch 1.0-dev (modified for clueweb09)\nformat: WARC file version 0.18\n"
    records = [warc_record(info, "", b"WARC/0.18", b"\n", b"application/warc-fields", b"warcinfo")]
    for url, body in (("http://clue.example.jp/", eucjp), ("http://clue.example.org/", page("Clue", OTHER).encode())):
        block = http(body, "Content-Type: text/html", "Server: Apache", eol=b"\n")
        records.append(warc_record(block, url, b"WARC/0.18", b"\n", declared=len(block) + 4))
    return b"".join(records)


def test_clueweb09_style_records_become_documents(tmp_path):
    eucjp = page("銭湯の話", JAPANESE, "euc-jp").encode("euc_jp")
    data = clueweb_style(eucjp)
    assert data.startswith(b"WARC/0.18\nWARC-Type: warcinfo\n") and b"\r" not in data
    plain = tmp_path / "clue.warc"
    plain.write_bytes(data)
    whole = tmp_path / "clue.warc.gz"  # ClueWeb09 files are one gzip stream
    whole.write_bytes(gzip.compress(data))
    for path in (plain, whole):
        result, rows = convert(tmp_path, path)
        summary = result["summary"]
        assert summary["records"] == 3 and summary["documents"] == 2 and summary["rejected"] == {}, path
        assert summary["skipped"] == {"warcinfo": 1}
        assert summary["leniency"] == {
            "content_length_corrected": 2,
            "http_header_lf_only": 2,
            "warc_header_lf_only": 3,
            "warc_version_0.18": 3,
        }
        jp = rows["http://clue.example.jp/"]
        assert JAPANESE in jp["body"] and jp["title"] == "銭湯の話"
        assert jp["doc_id"] == doc_id_for(rec_id("http://clue.example.jp/"))
        assert str(jp["crawled_at"]) == "2009-01-13" and jp["http_status"] == 200
        assert OTHER in rows["http://clue.example.org/"]["body"]
    # the gzip member is the provenance of a whole-file gzip; the record's own span in a plain file
    assert rows["http://clue.example.jp/"]["warc_offset"] == 0


def test_warc_017_and_lf_only_with_exact_lengths(tmp_path):
    records = [
        warc_record(http(page("Old", ARTICLE).encode(), "Content-Type: text/html"), "http://a.example/", b"WARC/0.17"),
        warc_record(http(page("Lf", OTHER).encode(), "Content-Type: text/html"), "http://b.example/", eol=b"\n"),
    ]
    path = tmp_path / "old.warc.gz"
    path.write_bytes(b"".join(gzip_member(r) for r in records))
    result, rows = convert(tmp_path, path)
    assert result["summary"]["documents"] == 2 and result["summary"]["rejected"] == {}
    assert result["summary"]["leniency"] == {"warc_header_lf_only": 1, "warc_version_0.17": 1}
    assert ARTICLE in rows["http://a.example/"]["body"] and OTHER in rows["http://b.example/"]["body"]


def test_payload_quirks_become_documents_and_broken_ones_are_rejected(tmp_path):
    html = page("Quirk", ARTICLE).encode()
    ctype = "Content-Type: text/html; charset=utf-8"
    cases = {
        # pywb/warcprox style: the stored payload is already de-chunked, the header kept
        "http://dechunked.example/": http(html, ctype, "Transfer-Encoding: chunked"),
        "http://chunked.example/": http(chunked(html), ctype, "Transfer-Encoding: chunked"),
        "http://gzip.example/": http(gzip.compress(html), ctype, "Content-Encoding: gzip"),
        "http://deflate.example/": http(zlib.compress(html), ctype, "Content-Encoding: deflate"),
        "http://rawdeflate.example/": http(zlib.compress(html, wbits=-15), ctype, "Content-Encoding: deflate"),
        "http://both.example/": http(
            chunked(gzip.compress(html)), ctype, "Transfer-Encoding: chunked", "Content-Encoding: gzip"
        ),
        "http://stored-decoded.example/": http(html, ctype, "Content-Encoding: gzip"),
        "http://cut.example/": http(chunked(html)[:-40], ctype, "Transfer-Encoding: chunked"),
    }
    broken = {
        "http://badchunk.example/": http(chunked(html)[:150] + b"zz\r\n" + html, ctype, "Transfer-Encoding: chunked"),
        "http://badgzip.example/": http(b"\x1f\x8b\x08\x00garbage" + bytes(100), ctype, "Content-Encoding: gzip"),
        "http://brotli.example/": http(b"\x8b\x05\x80binary" + bytes(50), ctype, "Content-Encoding: br"),
    }
    # HTTP/0.9 style: no status line nor headers; the WARC header says text/html (EUC-JP page)
    eucjp = page("銭湯の話", JAPANESE, "euc-jp").encode("euc_jp")
    http09 = warc_record(eucjp, "http://http09.example/", content_type=b"text/html")
    http09_app = warc_record(page("Ru", RUSSIAN).encode("cp1251"), "http://http09-app.example/")
    records = [warc_record(block, url) for url, block in {**cases, **broken}.items()] + [http09, http09_app]
    path = tmp_path / "quirks.warc.gz"
    path.write_bytes(b"".join(gzip_member(r) for r in records))
    result, rows = convert(tmp_path, path)
    summary = result["summary"]
    assert sorted(rows) == sorted([*cases, "http://http09.example/", "http://http09-app.example/"])
    for url in cases:
        assert rows[url]["title"] == "Quirk" and ARTICLE in rows[url]["body"], url
    assert rows["http://cut.example/"]["body"] != ""  # what arrived before the cut
    assert JAPANESE in rows["http://http09.example/"]["body"]
    assert rows["http://http09.example/"]["http_status"] is None
    assert rows["http://http09.example/"]["content_type"] == "text/html"
    assert RUSSIAN in rows["http://http09-app.example/"]["body"]
    assert summary["leniency"] == {
        "chunked_header_payload_not_chunked": 1,
        "chunked_payload_truncated": 1,
        "content_encoding_already_decoded": 1,
        "content_encoding_deflate": 2,
        "content_encoding_gzip": 2,
        "http09_no_http_headers": 2,
    }
    assert summary["rejected"] == {"bad_content_encoding": 2, "bad_http": 1}
    reasons = {r["capture_url"]: (r["kind"], r["reason"]) for r in result["rejected_rows"]}
    assert reasons["http://badchunk.example/"][0] == "bad_http"
    assert "chunk of 100 bytes not followed by a line end" in reasons["http://badchunk.example/"][1]
    assert reasons["http://badgzip.example/"][0] == "bad_content_encoding"
    assert reasons["http://badgzip.example/"][1].startswith("payload is not valid gzip data")
    assert reasons["http://brotli.example/"] == ("bad_content_encoding", "Content-Encoding 'br' is not supported")


def test_dechunk():
    assert dechunk(b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n") == (b"hello world", None)
    assert dechunk(b"5\nhello\n0\n\n") == (b"hello", None)
    assert dechunk(b"<!doctype html><p>x") == (None, None)
    assert dechunk(b"5\r\nhel") == (b"hel", "truncated")


def test_lf_only_record_with_a_short_content_length_is_still_rejected(tmp_path):
    block = http(page("Short", OTHER).encode(), "Content-Type: text/html", eol=b"\n")
    records = [
        warc_record(block, "http://short.example/", b"WARC/0.18", b"\n", declared=len(block) - 30),
        warc_record(block, "http://fine.example/", b"WARC/0.18", b"\n"),
        warc_record(block, "http://half.example/", b"WARC/0.18", b"\n", declared=len(block) * 3),
    ]
    path = tmp_path / "short.warc"
    path.write_bytes(b"".join(records))
    result, rows = convert(tmp_path, path)
    assert list(rows) == ["http://fine.example/"]
    assert result["summary"]["rejected"] == {"bad_content_length": 2}
    assert all("Content-Length says" in r["reason"] for r in result["rejected_rows"])


def test_leniency_counts_reach_the_manifest(tmp_path, capsys):
    path = tmp_path / "in.warc.gz"
    html = page("Quirk", ARTICLE).encode()
    path.write_bytes(
        gzip_member(warc_record(http(html, "Content-Type: text/html", "Transfer-Encoding: chunked"), "http://q/"))
        + record_bytes(Rec("response", "http://normal.example/", page("Normal", OTHER).encode()), True)
    )
    out = tmp_path / "out"
    code = main(["run", str(path), "--output", str(out), "--quiet"])
    assert code == 0, capsys.readouterr().err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["input"]["warc"]["leniency"] == {"chunked_header_payload_not_chunked": 1}
    assert manifest["input"]["files"][0]["leniency"] == {"chunked_header_payload_not_chunked": 1}
