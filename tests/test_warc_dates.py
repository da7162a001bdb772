"""Malformed WARC-Dates are read leniently: the valid day they start with, else the file's warcinfo
date, else the default date; each counted under `leniency` in the manifest.

The archive is ClueWeb09-style and written here: WARC/0.18, LF-only headers, a warcinfo record
first, and a garbled `WARC-Date: 2008-10-294T05:21:46-0700` on its pages.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from test_warc_fixtures import ARTICLE, JAPANESE, OTHER, RUSSIAN, page  # noqa: E402
from test_warc_quirks import convert, http, warc_record  # noqa: E402

from webdedup_assets.cli.main import main  # noqa: E402
from webdedup_assets.ingest.convert import convert_warc_input  # noqa: E402
from webdedup_assets.ingest.options import WarcOptions  # noqa: E402

VALID_DATE = b"WARC-Date: 2009-01-13T18:05:10Z"  # what test_warc_quirks.warc_record writes


def dated(record: bytes, date: bytes | None) -> bytes:
    """The record with another WARC-Date line (None: none at all)."""
    return record.replace(VALID_DATE + b"\n", b"" if date is None else b"WARC-Date: " + date + b"\n")


def clueweb_page(url: str, text: str, date: bytes | None) -> bytes:
    block = http(page(url, text).encode(), "Content-Type: text/html", eol=b"\n")
    return dated(warc_record(block, url, b"WARC/0.18", b"\n"), date)


def warcinfo(date: bytes | None) -> bytes:
    info = b"software: Nutch 1.0-dev (modified for clueweb09)\nformat: WARC file version 0.18\n"
    return dated(warc_record(info, "", b"WARC/0.18", b"\n", b"application/warc-fields", b"warcinfo"), date)


GARBLED = b"2008-10-294T05:21:46-0700"
PAGES = (("http://a.clue.example/", ARTICLE), ("http://b.clue.example/", OTHER), ("http://c.clue.example/", RUSSIAN))


def test_clueweb09_garbled_dates_keep_every_page(tmp_path):
    data = warcinfo(GARBLED) + b"".join(clueweb_page(url, text, GARBLED) for url, text in PAGES)
    assert data.startswith(b"WARC/0.18\nWARC-Type: warcinfo\n") and data.count(b"WARC-Date: " + GARBLED) == 4
    path = tmp_path / "ClueWeb09_sample.warc.gz"
    path.write_bytes(gzip.compress(data))
    result, rows = convert(tmp_path, path)
    summary = result["summary"]
    assert summary["documents"] == 3 and summary["rejected"] == {} and summary["skipped"] == {"warcinfo": 1}
    assert summary["leniency"]["warc_date_valid_part"] == 3
    assert {url: str(row["crawled_at"]) for url, row in rows.items()} == {url: "2008-10-29" for url, _ in PAGES}
    assert {row["warc_date"] for row in rows.values()} == {None}  # the header gave no usable time
    out = tmp_path / "out"
    assert main(["run", str(path), "--output", str(out), "--quiet"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["documents"] == 3
    assert manifest["input"]["warc"]["leniency"]["warc_date_valid_part"] == 3


def test_no_valid_part_takes_the_warcinfo_date_then_the_default_date(tmp_path):
    with_info = tmp_path / "with_info.warc"
    with_info.write_bytes(warcinfo(GARBLED) + clueweb_page("http://a.clue.example/", ARTICLE, b"garbage"))
    result, rows = convert(tmp_path, with_info)
    assert result["summary"]["leniency"]["warc_date_from_warcinfo"] == 1
    assert str(rows["http://a.clue.example/"]["crawled_at"]) == "2008-10-29"

    bare = tmp_path / "bare.warc"  # no warcinfo record, no date at all on the second page
    bare.write_bytes(clueweb_page("http://b.clue.example/", OTHER, b"soon") + clueweb_page(PAGES[2][0], JAPANESE, None))
    result, rows = convert(tmp_path, bare)
    assert result["summary"]["documents"] == 0 and result["summary"]["rejected"] == {"bad_record": 2}
    assert [r["reason"] for r in result["rejected_rows"]] == [
        "WARC-Date missing or unparsable: 'soon', and no warcinfo date or default_date to take instead",
        "WARC-Date missing or unparsable: None, and no warcinfo date or default_date to take instead",
    ]
    target = tmp_path / "bare.parquet"
    result = convert_warc_input([(bare, bare.name)], target, WarcOptions(default_date="2009-02-01"))
    assert result["summary"]["documents"] == 2 and result["summary"]["leniency"]["warc_date_default"] == 2
