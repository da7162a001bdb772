"""Bad input: a clear error that names the problem, or a documented valid outcome; nothing lost."""

import subprocess
import sys

import duckdb
import pytest

from webdedup_assets.engine import Store, WebdedupError, stage_documents
from webdedup_assets.engine.manifest import load_manifest

from .conftest import failure_messages, run_job

HEADER = "doc_id,source,domain,crawled_at,title,body\n"


def _write(tmp_path, text, name="input.csv"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_missing_required_column_is_named(tmp_path):
    path = _write(tmp_path, "doc_id,source,domain,title,body\na,s,d,t,b\n")
    with pytest.raises(WebdedupError, match=r"input.csv: missing required column\(s\) crawled_at"):
        stage_documents(Store(tmp_path / "s"), str(path))


def test_duplicate_doc_ids_are_named(tmp_path):
    rows = "".join(f"{d},s,d.example,2026-01-01,t,body {i}\n" for i, d in enumerate(["a", "b", "a", "c", "c", "c"]))
    path = _write(tmp_path, HEADER + rows)
    with pytest.raises(WebdedupError, match=r"2 doc_id\(s\) appear more than once, first: 'a' x2 .*; 'c' x3"):
        stage_documents(Store(tmp_path / "s"), str(path))


def test_unparsable_crawled_at_names_the_doc_id(tmp_path):
    path = _write(tmp_path, HEADER + "ok,s,d,2026-01-01,t,b\nbad-date,s,d,last tuesday,t,b\n")
    with pytest.raises(
        WebdedupError,
        match=r"crawled_at is not a date or timestamp for 1 document\(s\), "
        r"first: 'bad-date' \('last tuesday'\)",
    ):
        stage_documents(Store(tmp_path / "s"), str(path))


def test_missing_crawled_at_names_the_doc_id(tmp_path):
    path = _write(tmp_path, HEADER + "ok,s,d,2026-01-01,t,b\nundated,s,d,,t,b\n")
    with pytest.raises(WebdedupError, match=r"crawled_at is missing for 1 document\(s\).*'undated'"):
        stage_documents(Store(tmp_path / "s"), str(path))


def test_timestamps_become_their_utc_day(tmp_path):
    path = _write(tmp_path, HEADER + "a,s,d,2026-01-01T23:30:00-02:00,t,b\nb,s,d,2026-01-02 08:00:00,t,b\n")
    store = Store(tmp_path / "s")
    stage_documents(store, str(path))
    days = dict(duckdb.sql(f"SELECT doc_id, crawled_at::VARCHAR FROM {store.scan_sql('documents')}").fetchall())
    assert days == {"a": "2026-01-02", "b": "2026-01-02"}


def test_invalid_utf8_names_the_file_and_byte_offset(tmp_path):
    path = _write(tmp_path, HEADER.encode() + b"a,s,d,2026-01-01,t,caf\xe9 au lait\n")
    with pytest.raises(WebdedupError, match=r"input.csv: invalid UTF-8 at byte offset 65 \(line 2\): byte 0xe9"):
        stage_documents(Store(tmp_path / "s"), str(path))


def test_missing_input_and_unknown_format(tmp_path):
    with pytest.raises(WebdedupError, match="does not exist"):
        stage_documents(Store(tmp_path / "s"), str(tmp_path / "nope.csv"))
    odd = _write(tmp_path, "x", name="input.txt")
    with pytest.raises(WebdedupError, match="cannot tell the format of .*input.txt"):
        stage_documents(Store(tmp_path / "s"), str(odd))


def test_null_and_empty_bodies_are_singletons_never_candidates(tmp_path):
    rows = 'e1,s,a.example,2026-01-01,t,\ne2,s,b.example,2026-01-01,t,""\ne3,s,c.example,2026-01-01,t,...\n'
    rows += "full,s,d.example,2026-01-01,t,some words to make one real document here\n"
    result, store = run_job(tmp_path, _write(tmp_path, HEADER + rows))
    assert result.success, failure_messages(result)
    counts = load_manifest(store)["counts"]
    assert counts["documents"] == 4 and counts["empty_documents"] == 3
    assert counts["candidate_pairs"] == 0 and counts["singletons"] == 4 and counts["representatives"] == 4
    tokens = dict(duckdb.sql(f"SELECT doc_id, token_count FROM {store.scan_sql('fingerprinted')}").fetchall())
    assert tokens == {"e1": 0, "e2": 0, "e3": 0, "full": 8}


def test_empty_input_is_a_valid_run_with_zero_of_everything(tmp_path):
    result, store = run_job(tmp_path, _write(tmp_path, HEADER))
    assert result.success, failure_messages(result)
    counts = load_manifest(store)["counts"]
    assert counts["documents"] == 0
    assert counts["candidate_pairs"] == counts["duplicate_pairs"] == counts["clusters"] == 0
    assert counts["representatives"] == 0 and counts["retained_ratio"] == 0.0


def test_extra_columns_are_kept_through_to_deduped_documents(tmp_path):
    rows = "a,s,x.example,2026-01-01,t,alpha beta gamma delta epsilon zeta,rec-1,http://x.example/a\n"
    rows += "b,s,y.example,2026-01-02,t,alpha beta gamma delta epsilon zeta,rec-2,http://y.example/a\n"
    path = _write(tmp_path, HEADER.strip() + ",warc_record_id,capture_url\n" + rows)
    result, store = run_job(tmp_path, path)
    assert result.success, failure_messages(result)
    kept = duckdb.sql(f"SELECT doc_id, warc_record_id, capture_url FROM {store.scan_sql('deduped_documents')}")
    assert kept.fetchall() == [("b", "rec-2", "http://y.example/a")]


def test_one_20_mb_document_completes(tmp_path):
    words = ("lorem ipsum dolor sit amet consectetur " * 550_000)[: 20 * 1024 * 1024]
    path = _write(tmp_path, HEADER + f"huge,s,d.example,2026-01-01,t,{words}\nsmall,s,e.example,2026-01-01,t,x y z\n")
    result, store = run_job(tmp_path, path)
    assert result.success, failure_messages(result)
    tokens = dict(duckdb.sql(f"SELECT doc_id, token_count FROM {store.scan_sql('fingerprinted')}").fetchall())
    assert tokens["huge"] == len(words.split())
    assert load_manifest(store)["counts"]["documents"] == 2


def test_cli_reports_bad_input_without_a_traceback(tmp_path):
    path = _write(tmp_path, "doc_id,body\na,b\n")
    proc = subprocess.run(
        [sys.executable, "-m", "webdedup_assets.cli", "run", str(path), "--output", str(tmp_path / "out"), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "missing required column(s) source, domain, crawled_at, title" in proc.stderr
    assert "Traceback" not in proc.stderr
