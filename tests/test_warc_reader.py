"""WARC reading: framing, charsets, extraction, skip and rejection accounting (the ingest package)."""

from __future__ import annotations

import random
import sys
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_warc_fixtures import (  # noqa: E402
    ARTICLE,
    CHINESE,
    JAPANESE,
    OTHER,
    RUSSIAN,
    Rec,
    corpus,
    gzip_member,
    lying_content_length,
    page,
    record_bytes,
    response_digest,
    truncated_member,
    write_warc,
)

from webdedup_assets.ingest.convert import convert_warc_input  # noqa: E402
from webdedup_assets.ingest.inputs import resolve_input  # noqa: E402
from webdedup_assets.ingest.options import WarcOptions  # noqa: E402
from webdedup_assets.ingest.warc.collect import doc_id_for  # noqa: E402
from webdedup_assets.ingest.warc.html import decode_html  # noqa: E402


def convert(tmp_path: Path, *paths: Path, **options):
    out = tmp_path / "staged.parquet"
    result = convert_warc_input([(p, p.name) for p in paths], out, WarcOptions(**options))
    rows = {r["capture_url"]: r for r in pq.read_table(out).to_pylist()}
    return result, rows


@pytest.mark.parametrize("gz", [True, False])
def test_mixed_corpus_documents_skips_and_rejections(tmp_path, gz):
    recs = corpus()
    original = recs["original"]
    revisit_in = Rec("revisit", original.url, refers_to=original.record_id, date="2024-04-01T00:00:00Z")
    revisit_out = Rec("revisit", "http://elsewhere.example/", payload_digest="sha1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
    revisit_digest = Rec("revisit", "http://bread.example/sourdough", payload_digest=response_digest(recs["other"]))
    path = tmp_path / ("corpus.warc.gz" if gz else "corpus.warc")
    spans = write_warc(path, [Rec("warcinfo", ""), *recs.values(), revisit_in, revisit_out, revisit_digest])
    result, rows = convert(tmp_path, path)
    summary = result["summary"]

    assert summary["records"] == 1 + len(recs) + 3
    assert summary["documents"] == 9
    assert summary["skipped"] == {
        "http_status": 1,
        "metadata": 1,
        "non_html": 1,
        "request": 1,
        "revisit": 3,
        "warcinfo": 1,
    }
    assert summary["rejected"] == {"not_html": 1}
    assert summary["revisits"] == 3 and summary["revisits_pointing_into_input"] == 2
    # nothing lost: every record is a document or a listed row
    assert summary["documents"] + len(result["rejected_rows"]) == summary["records"]
    listed = {(r["kind"], r["capture_url"]) for r in result["rejected_rows"]}
    assert ("not_html", "http://marlow.example/image") in listed
    assert ("non_html", "http://marlow.example/leaflet.pdf") in listed
    assert ("http_status", "http://marlow.example/missing") in listed
    assert result["files"][0]["records"] == summary["records"]

    doc = rows[original.url]
    assert doc["doc_id"] == doc_id_for(original.record_id)
    assert doc["source"] == "warc" and doc["domain"] == "marlow.example"
    assert str(doc["crawled_at"]) == "2024-03-01"
    assert doc["title"] == "Boat museum"
    assert ARTICLE in doc["body"] and "Copyright" not in doc["body"]  # main content, no footer
    assert doc["warc_record_id"] == original.record_id and doc["warc_filename"] == path.name
    index = 1 + list(recs).index("original")
    # offsets and lengths: of the gzip member (as in a Common Crawl index) or of the plain record
    assert (doc["warc_offset"], doc["warc_length"]) == spans[index]
    assert doc["http_status"] == 200 and doc["content_type"] == "text/html; charset=utf-8"
    assert doc["payload_digest"].startswith("sha1:")
    assert doc["warc_date"].isoformat() == "2024-03-01T10:00:00+00:00"


def test_legacy_encodings_come_out_as_correct_text(tmp_path):
    recs = corpus()
    path = tmp_path / "enc.warc.gz"
    write_warc(path, [recs[k] for k in ("sjis", "eucjp", "cp1251", "gbk")])
    _result, rows = convert(tmp_path, path)
    sjis, eucjp = rows["http://sento.example.jp/"], rows["http://sento-mirror.example.jp/"]
    assert JAPANESE in sjis["body"] and JAPANESE in eucjp["body"]  # HTTP header / meta tag
    assert sjis["title"] == eucjp["title"] == "銭湯の話"
    assert RUSSIAN in rows["http://books.example.ru/"]["body"]  # undeclared: detected
    assert rows["http://books.example.ru/"]["title"] == "Книжный магазин"
    assert CHINESE in rows["http://tea.example.cn/a"]["body"]  # gb2312 label, GBK bytes


def test_charset_precedence_and_wrong_declarations():
    text = "Le café est très réputé à Paris; les élèves étudient près de la rivière."
    html = page("t", text, "windows-1252").encode("cp1252")
    assert decode_html(html, None)[1:] == ("cp1252", "meta")
    assert decode_html(html, "iso-8859-1")[1:] == ("cp1252", "http")  # latin-1 label means windows-1252
    # a header that lies (utf-8) on bytes that are not UTF-8 falls through to the meta tag
    assert decode_html(html, "utf-8")[1:] == ("cp1252", "meta")
    decoded, codec, source = decode_html(page("t", JAPANESE).encode("shift_jis"), "no-such-charset")
    assert JAPANESE in decoded and source == "detected" and codec in ("shift_jis", "cp932")
    assert decode_html("\ufeff<p>x</p>".encode(), "latin-1")[2] == "bom"
    legacy = (
        '<html><head><META HTTP-EQUIV="Content-Type" CONTENT="text/html; charset=Shift_JIS">'
        f"<title>t</title></head><body>{JAPANESE}</body></html>"
    ).encode("shift_jis")
    decoded, codec, source = decode_html(legacy, None)
    assert (codec, source) == ("cp932", "meta") and JAPANESE in decoded
    # cp932 (what browsers use for Shift_JIS) also decodes the NEC/IBM extensions, e.g. circled digits
    assert decode_html("①②".encode("cp932") + b"<p>", "shift_jis")[0].startswith("①②")


@pytest.mark.parametrize("seed", range(8))
def test_truncated_member_and_lying_content_length_do_not_stop_the_file(tmp_path, seed):
    random.seed(seed)
    good = [Rec("response", f"http://site{i}.example/", page(f"P{i}", OTHER + str(i)).encode()) for i in range(3)]
    gz = tmp_path / "broken.warc.gz"
    write_warc(
        gz, [record_bytes(good[0], True), truncated_member(good[1]), b"garbage" * 10, record_bytes(good[2], True)]
    )
    plain = tmp_path / "lies.warc"
    longer = lying_content_length(Rec("response", "http://long.example/", page("L", ARTICLE).encode()), +25)
    shorter = lying_content_length(Rec("response", "http://short.example/", page("S", ARTICLE).encode()), -25)
    more = [Rec("response", f"http://plain{i}.example/", page(f"Q{i}", OTHER + str(i)).encode()) for i in range(2)]
    write_warc(plain, [record_bytes(more[0], False), longer, shorter, record_bytes(more[1], False)], gz=False)
    result, rows = convert(tmp_path, gz, plain)
    by_file = {f["warc_filename"]: f for f in result["files"]}
    assert by_file["broken.warc.gz"]["documents"] == 2
    # the truncated member runs into the garbage and the next member: zlib reports corrupt data or
    # a member that never ends; either way one rejection up to the next good member
    [(kind, count)] = by_file["broken.warc.gz"]["rejected"].items()
    assert kind in ("truncated_gzip", "corrupt_gzip") and count == 1
    assert by_file["lies.warc"]["rejected"] == {"bad_content_length": 2}
    assert by_file["lies.warc"]["documents"] == 2
    reasons = [r for r in result["rejected_rows"] if r["kind"] == "bad_content_length"]
    assert {r["capture_url"] for r in reasons} == {"http://long.example/", "http://short.example/"}
    assert all("Content-Length says" in r["reason"] and r["warc_record_id"] for r in reasons)
    assert set(rows) == {
        "http://site0.example/",
        "http://site2.example/",
        "http://plain0.example/",
        "http://plain1.example/",
    }


def test_truncated_last_member_is_listed(tmp_path):
    rec = Rec("response", "http://a.example/", page("A", OTHER).encode())
    path = tmp_path / "t.warc.gz"
    spans = write_warc(path, [rec, truncated_member(Rec("response", "http://b.example/", page("B", OTHER).encode()))])
    result, rows = convert(tmp_path, path)
    [row] = result["rejected_rows"]
    assert row["kind"] == "truncated_gzip" and row["warc_offset"] == spans[1][0]
    assert "truncated gzip member" in row["reason"]
    assert list(rows) == ["http://a.example/"]


def test_record_over_the_cap_is_rejected_without_stopping(tmp_path):
    big = b"<html><body><p>" + b"word " * (10 * 1024 * 1024) + b"</p></body></html>"  # 50 MB
    rec_big = Rec("response", "http://big.example/", big)
    after = Rec("response", "http://after.example/", page("After", OTHER).encode())
    path = tmp_path / "big.warc.gz"
    raw = record_bytes(rec_big, False)
    write_warc(path, [gzip_member(raw), after])
    result, rows = convert(tmp_path, path)
    [row] = result["rejected_rows"]
    assert row["kind"] == "over_size_cap" and "exceeds the cap of 16777216" in row["reason"]
    assert list(rows) == ["http://after.example/"]
    # plain WARC: the declared Content-Length is over the cap; the record is skipped without reading it
    plain = tmp_path / "big.warc"
    write_warc(plain, [raw, after], gz=False)
    result, rows = convert(tmp_path, plain, max_record_bytes=1_000_000)
    assert result["summary"]["rejected"] == {"over_size_cap": 1} and list(rows) == ["http://after.example/"]
    assert result["rejected_rows"][0]["capture_url"] == "http://big.example/"


def test_whole_file_gzip_over_the_cap_says_so(tmp_path):
    recs = [Rec("response", f"http://w{i}.example/", page(f"W{i}", OTHER * 3).encode()) for i in range(20)]
    raw = b"".join(record_bytes(r, False) for r in recs)
    path = tmp_path / "whole.warc.gz"
    path.write_bytes(gzip_member(raw))
    result, rows = convert(tmp_path, path, max_record_bytes=len(raw) // 2)
    [row] = result["rejected_rows"]
    assert row["kind"] == "over_size_cap" and "holds more than one WARC record" in row["reason"]
    result, rows = convert(tmp_path, path)  # under the cap: every record of the one member is read
    assert len(rows) == 20 and result["summary"]["records"] == 20
    assert {(r["warc_offset"], r["warc_length"]) for r in rows.values()} == {(0, path.stat().st_size)}


def test_mostly_utf8_page_with_a_stray_byte_keeps_its_declared_charset():
    html = page("t", ARTICLE + " caf\u00e9").encode() + b"\xff"
    text, codec, source = decode_html(html, "utf-8")
    assert (codec, source) == ("utf_8", "http (lenient)") and "caf\u00e9" in text


def test_duplicate_record_ids_are_rejected_not_fatal(tmp_path):
    rec = Rec("response", "http://a.example/", page("A", OTHER).encode())
    write_warc(tmp_path / "one.warc.gz", [rec])
    write_warc(tmp_path / "two.warc.gz", [rec])
    result, rows = convert(tmp_path, tmp_path / "one.warc.gz", tmp_path / "two.warc.gz")
    assert len(rows) == 1
    [row] = result["rejected_rows"]
    assert row["kind"] == "duplicate_record_id" and "one.warc.gz at offset 0" in row["reason"]


def test_parallel_conversion_gives_the_same_result(tmp_path):
    recs = corpus()
    shared = recs["original"]  # the same record in two files: a document once, then a listed duplicate
    files = []
    for i, keys in enumerate([("original", "mirror", "request"), ("sjis", "metadata", "pdf"), ("gbk", "other")]):
        path = tmp_path / f"part{i}.warc.gz"
        write_warc(path, [recs[k] for k in keys] + ([shared] if i == 2 else []))
        files.append(path)
    one, rows_one = convert(tmp_path, *files, workers=1)
    two, rows_two = convert(tmp_path, *files, workers=3)
    assert rows_one == rows_two and len(rows_one) == 5
    assert one["rejected_rows"] == two["rejected_rows"] and one["files"] == two["files"]
    assert {k: v for k, v in one["summary"].items() if k != "seconds"} == {
        k: v for k, v in two["summary"].items() if k != "seconds"
    }
    [dup] = [r for r in two["rejected_rows"] if r["kind"] == "duplicate_record_id"]
    assert dup["warc_filename"] == "part2.warc.gz" and "part0.warc.gz at offset 0" in dup["reason"]
    assert two["files"][2]["documents"] == 2 and two["files"][2]["rejected"] == {"duplicate_record_id": 1}


def test_resolve_input_detects_warc_names(tmp_path):
    for name in ("a.warc.gz", "b.WARC", "c.csv", "notes.txt"):
        (tmp_path / name).write_bytes(b"")
    found = {f.path.name: f.format for f in resolve_input(str(tmp_path))}
    assert found == {"a.warc.gz": "warc", "b.WARC": "warc", "c.csv": "csv"}
    assert [f.path.name for f in resolve_input(str(tmp_path / "a.*"))] == ["a.warc.gz"]
    assert [f.format for f in resolve_input(str(tmp_path), "warc")] == ["warc", "warc"]


def nested_page(depth: int, leaves: int = 0) -> bytes:
    return (
        "<html><body>" + "<div>" * depth + "<i>x</i>" * leaves + "deep" + "</div>" * depth + "</body></html>"
    ).encode()


def test_hostile_nesting_is_rejected_and_the_next_page_still_read(tmp_path):
    hostile = Rec("response", "http://deep.example/", nested_page(100_000))
    wide = Rec("response", "http://wide.example/", nested_page(1_000, 100_000))
    fine = Rec("response", "http://fine.example/", page("Fine", OTHER).encode())
    nested = Rec("response", "http://nested.example/", page("Nested", OTHER).replace("<p>", "<div>" * 1500).encode())
    path = tmp_path / "deep.warc.gz"
    write_warc(path, [hostile, fine, wide, nested])
    assert path.stat().st_size < 200_000  # the hostile page is a few KB once gzipped
    result, rows = convert(tmp_path, path)
    assert result["summary"]["rejected"] == {"html_too_deep": 2}
    deep, wide_row = result["rejected_rows"]
    assert deep["capture_url"] == "http://deep.example/" and deep["doc_id"] == doc_id_for(hostile.record_id)
    assert deep["reason"] == (
        "HTML nested more than 499 elements deep (the bound for a page of 100003 elements; "
        "max_html_depth 2000 holds up to 25000 elements): text extraction refused"
    )
    # 101,003 elements at depth 1,003: the bound is lowered in proportion (25,000 elements at full depth)
    assert wide_row["capture_url"] == "http://wide.example/"
    assert wide_row["reason"].startswith("HTML nested more than 495 elements deep (the bound for a page of 101003")
    assert sorted(rows) == ["http://fine.example/", "http://nested.example/"]  # 1,500 levels are allowed
    assert OTHER in rows["http://fine.example/"]["body"]
    result, rows = convert(tmp_path, path, max_html_depth=1000)  # configurable
    assert sorted(rows) == ["http://fine.example/"]
    nested_row = result["rejected_rows"][-1]
    assert nested_row["reason"].startswith("HTML nested more than 1000 elements deep (max_html_depth 1000)")


def test_depth_bound_formula():
    from webdedup_assets.ingest.warc.html import depth_bound

    assert depth_bound(100, 2000) == 2000 and depth_bound(25_000, 2000) == 2000
    assert depth_bound(50_000, 2000) == 1000 and depth_bound(10**8, 2000) == 64
    assert depth_bound(10**8, 10) == 10


def test_gzip_bomb_member_is_given_up_at_a_bound(tmp_path):
    bomb = Rec("response", "http://bomb.example/", b"<html><body><p>" + b"a" * 40_000_000 + b"</p></body></html>")
    after = Rec("response", "http://after.example/", page("After", OTHER).encode())
    path = tmp_path / "bomb.warc.gz"
    spans = write_warc(path, [gzip_member(record_bytes(bomb, False)), after])
    result, rows = convert(tmp_path, path, max_record_bytes=1_000_000)
    [row] = result["rejected_rows"]
    assert row["kind"] == "over_size_cap" and (row["warc_offset"], row["warc_length"]) == spans[0]
    assert row["reason"] == "record of more than 16000000 bytes (inflating given up there) exceeds the cap of 1000000"
    assert list(rows) == ["http://after.example/"]


def raw_record(
    http: bytes,
    url: str = "http://raw.example/",
    version: bytes = b"WARC/1.0",
    eol: bytes = b"\r\n",
    content_type: bytes = b"application/http; msgtype=response",
    declared: int | None = None,
) -> bytes:
    """A response record written by hand (for the quirks warcio does not write)."""
    head = [
        version,
        b"WARC-Type: response",
        b"WARC-Date: 2009-01-13T18:05:10Z",
        b"WARC-Record-ID: <urn:uuid:" + str(uuid.uuid5(uuid.NAMESPACE_URL, url)).encode() + b">",
        b"WARC-Target-URI: " + url.encode(),
        b"Content-Type: " + content_type,
        b"Content-Length: " + str(len(http) if declared is None else declared).encode(),
    ]
    return eol.join(head) + eol + eol + http + eol + eol


def http_response(body: bytes, *headers: str, eol: bytes = b"\r\n") -> bytes:
    lines = [b"HTTP/1.1 200 OK", *(h.encode() for h in headers)]
    return eol.join(lines) + eol + eol + body


def test_content_encoding_bomb_is_capped(tmp_path):
    import gzip as gz

    bomb = http_response(
        gz.compress(b"<html><p>" + b"a" * 20_000_000), "Content-Type: text/html", "Content-Encoding: gzip"
    )
    after = Rec("response", "http://after.example/", page("After", OTHER).encode())
    path = tmp_path / "ce.warc.gz"
    write_warc(path, [gzip_member(raw_record(bomb, "http://bomb.example/")), after])
    result, rows = convert(tmp_path, path, max_record_bytes=1_000_000)
    [row] = result["rejected_rows"]
    assert row["kind"] == "over_size_cap" and row["capture_url"] == "http://bomb.example/"
    assert row["reason"] == "payload decoded from Content-Encoding gzip exceeds the cap of 1000000 bytes"
    assert list(rows) == ["http://after.example/"]
