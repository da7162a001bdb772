"""WARC fixtures written by warcio (an independent implementation of the format) for the WARC tests.

Imported by the other test_warc_* modules; its own tests check the fixtures themselves.
"""

from __future__ import annotations

import gzip
import io
import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

ARTICLE = (
    "The river town of Marlow keeps a small museum of boat building. Its volunteers restore wooden "
    "skiffs each winter and open the workshop to visitors on the first Sunday of every month. Children "
    "learn to plane oak planks, steam ribs into shape and caulk seams with cotton and pitch. The museum "
    "was founded by a retired shipwright who collected tools from yards that closed along the coast, "
    "and today it holds more than four hundred planes, augers, adzes and mallets, each labelled with "
    "the name of the yard where it worked. Local schools visit in spring, and a summer regatta raises "
    "money for the roof, which leaks whenever the wind turns to the west."
)
ARTICLE_REVISED = ARTICLE.replace("four hundred", "five hundred")
OTHER = (
    "A practical guide to sourdough: feed the starter twice a day with equal weights of flour and water, "
    "keep it warm, and bake when it doubles within six hours. Autolyse the dough for an hour, fold it "
    "four times at half hour intervals, shape it tight, and proof it overnight in the fridge before a hot "
    "bake in a covered pot. The crust darkens in the last fifteen minutes with the lid off."
)
JAPANESE = (
    "東京の下町には古い銭湯がまだ残っている。朝早くから湯を沸かし、近所の人々が集まって世間話をする。"
    "番台に座る主人は三代目で、祖父の代から続く富士山の壁画を大切に守っている。最近は若い人や外国からの旅行者も"
    "訪れるようになり、週末には行列ができることもある。"
)
RUSSIAN = (
    "Старый книжный магазин на углу улицы открыт уже сорок лет. Хозяин сам выбирает каждую книгу, "
    "знает постоянных покупателей по именам и по субботам устраивает чтения для детей. В подвале "
    "хранятся редкие издания, которые он показывает только тем, кто спросит."
)
CHINESE = (
    "杭州西湖边的茶园每年春天都会迎来采茶季节。茶农们清晨上山，手工采摘嫩芽，再用铁锅炒制。龙井茶的香气清新，"
    "口感甘甜，深受各地茶客喜爱。游客可以在茶园里品茶，听老茶农讲述种茶的故事和传统制茶的技艺。"
)
CHINESE_EDIT = CHINESE.replace("清晨", "凌晨")


def page(title: str, text: str, charset: str | None = None, meta: bool = True) -> str:
    head = f'<meta charset="{charset}">' if (charset and meta) else ""
    return (
        f"<!DOCTYPE html><html><head>{head}<title>{title}</title></head><body>"
        f"<nav><a href='/'>Home</a> <a href='/about'>About</a></nav>"
        f"<article><h1>{title}</h1><p>{text}</p></article>"
        f"<footer>Copyright 2024</footer></body></html>"
    )


@dataclass
class Rec:
    """One record to write: kind is response, request, metadata, revisit, resource or warcinfo."""

    kind: str
    url: str
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    status: str = "200 OK"
    date: str = "2024-03-01T10:00:00Z"
    record_id: str = field(default_factory=lambda: f"<urn:uuid:{uuid.UUID(int=random.getrandbits(128), version=4)}>")
    refers_to: str | None = None
    payload_digest: str | None = None


def record_bytes(rec: Rec, gz: bool) -> bytes:
    """One record (one gzip member if gz), written by warcio."""
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=gz)
    headers = {"WARC-Date": rec.date, "WARC-Record-ID": rec.record_id}
    if rec.kind == "response":
        http = StatusAndHeaders(rec.status, [("Content-Type", rec.content_type)], protocol="HTTP/1.1")
        record = writer.create_warc_record(
            rec.url, "response", payload=io.BytesIO(rec.body), http_headers=http, warc_headers_dict=headers
        )
    elif rec.kind == "request":
        http = StatusAndHeaders("GET / HTTP/1.1", [("Host", rec.url.split("/")[2])], is_http_request=True)
        record = writer.create_warc_record(
            rec.url, "request", payload=io.BytesIO(b""), http_headers=http, warc_headers_dict=headers
        )
    elif rec.kind == "revisit":
        http = StatusAndHeaders(rec.status, [("Content-Type", rec.content_type)], protocol="HTTP/1.1")
        headers["WARC-Profile"] = "http://netpreserve.org/warc/1.0/revisit/identical-payload-digest"
        if rec.refers_to:
            headers["WARC-Refers-To"] = rec.refers_to
        if rec.payload_digest:
            headers["WARC-Payload-Digest"] = rec.payload_digest
        record = writer.create_warc_record(
            rec.url, "revisit", payload=io.BytesIO(b""), http_headers=http, warc_headers_dict=headers
        )
    elif rec.kind == "warcinfo":
        record = writer.create_warc_record(
            "",
            "warcinfo",
            payload=io.BytesIO(b"software: test\r\n"),
            warc_content_type="application/warc-fields",
            warc_headers_dict=headers,
        )
    else:  # metadata / resource
        record = writer.create_warc_record(
            rec.url,
            rec.kind,
            payload=io.BytesIO(rec.body or b"fetchTimeMs: 12\r\n"),
            warc_content_type="application/warc-fields",
            warc_headers_dict=headers,
        )
    writer.write_record(record)
    return out.getvalue()


def write_warc(path: Path, parts: list[Rec | bytes], gz: bool | None = None) -> list[tuple[int, int]]:
    """Write records (or raw byte strings, for broken input) and return each part's (offset, length)."""
    gz = path.name.endswith(".gz") if gz is None else gz
    spans = []
    with open(path, "wb") as handle:
        for part in parts:
            data = part if isinstance(part, bytes) else record_bytes(part, gz)
            spans.append((handle.tell(), len(data)))
            handle.write(data)
    return spans


def response_digest(rec: Rec) -> str:
    """The WARC-Payload-Digest warcio writes for a response record."""
    from warcio.archiveiterator import ArchiveIterator

    for record in ArchiveIterator(io.BytesIO(record_bytes(rec, gz=False))):
        return record.rec_headers.get_header("WARC-Payload-Digest")
    raise AssertionError("no record")


def lying_content_length(rec: Rec, delta: int) -> bytes:
    """An uncompressed record whose Content-Length header is off by delta."""
    raw = record_bytes(rec, gz=False)
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = []
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            line = b"Content-Length: " + str(int(line.split(b":")[1]) + delta).encode()
        lines.append(line)
    return b"\r\n".join(lines) + b"\r\n\r\n" + rest


def truncated_member(rec: Rec, keep: float = 0.5) -> bytes:
    data = record_bytes(rec, gz=True)
    return data[: int(len(data) * keep)]


def gzip_member(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=1)


def corpus() -> dict[str, list[Rec]]:
    """The standard mixed corpus: pages in UTF-8, Shift_JIS, EUC-JP, windows-1251 and GBK, a mirror on
    another host, a one-word revision, request/metadata/revisit/warcinfo records and a non-HTML response."""
    original = Rec("response", "http://marlow.example/museum", page("Boat museum", ARTICLE).encode("utf-8"))
    return {
        "original": original,
        "mirror": Rec(
            "response",
            "https://mirror.example.net/copy/museum.html",
            page("Boat museum", ARTICLE).encode("utf-8"),
            date="2024-03-05T08:00:00Z",
        ),
        "revision": Rec(
            "response",
            "http://marlow.example/museum?rev=2",
            page("Boat museum", ARTICLE_REVISED).encode("utf-8"),
            date="2024-03-02T09:00:00Z",
        ),
        "other": Rec("response", "http://bread.example/sourdough", page("Sourdough", OTHER).encode("utf-8")),
        # Shift_JIS declared only in the HTTP header
        "sjis": Rec(
            "response",
            "http://sento.example.jp/",
            page("銭湯の話", JAPANESE, "shift_jis", meta=False).encode("shift_jis"),
            content_type="text/html; charset=Shift_JIS",
        ),
        # EUC-JP declared only in the meta tag
        "eucjp": Rec(
            "response",
            "http://sento-mirror.example.jp/",
            page("銭湯の話", JAPANESE, "euc-jp").encode("euc_jp"),
            content_type="text/html",
        ),
        # windows-1251 declared nowhere: detected from the bytes
        "cp1251": Rec(
            "response",
            "http://books.example.ru/",
            page("Книжный магазин", RUSSIAN).encode("cp1251"),
            content_type="text/html",
        ),
        # GBK labelled gb2312 in the meta tag (the superset must be used)
        "gbk": Rec(
            "response",
            "http://tea.example.cn/a",
            page("西湖龙井", CHINESE, "gb2312").encode("gbk"),
            content_type="text/html",
        ),
        "gbk_edit": Rec(
            "response",
            "http://tea-copy.example.com/b",
            page("西湖龙井", CHINESE_EDIT, "utf-8").encode("utf-8"),
        ),
        "request": Rec("request", "http://marlow.example/museum"),
        "metadata": Rec("metadata", "http://marlow.example/museum"),
        "pdf": Rec("response", "http://marlow.example/leaflet.pdf", b"%PDF-1.4 binary", content_type="application/pdf"),
        "not_found": Rec(
            "response", "http://marlow.example/missing", page("Not found", "gone").encode(), status="404 Not Found"
        ),
        "png_as_html": Rec(
            "response", "http://marlow.example/image", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(200)
        ),
    }


def test_fixture_records_are_readable_by_warcio(tmp_path):
    from warcio.archiveiterator import ArchiveIterator

    recs = corpus()
    path = tmp_path / "a.warc.gz"
    write_warc(path, [Rec("warcinfo", ""), *recs.values()])
    with open(path, "rb") as handle:
        types = [r.rec_type for r in ArchiveIterator(handle)]
    assert len(types) == len(recs) + 1
    assert types.count("response") == 12
