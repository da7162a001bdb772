"""Bad input: a clear error that names the problem, or a documented valid outcome; nothing lost."""

import datetime
import re
import subprocess
import sys

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from webdedup_assets.cli.main import main
from webdedup_assets.engine import Store, WebdedupError, stage_documents
from webdedup_assets.engine.stages.manifest import load_manifest
from webdedup_assets.params import ColumnParams

from .conftest import FIXTURE, failure_messages, run_job

HEADER = "doc_id,source,domain,crawled_at,title,body\n"


def _write(tmp_path, text, name="input.csv"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_missing_required_column_is_named(tmp_path):
    path = _write(tmp_path, "doc_id,source,domain,title,body\na,s,d,t,b\n")
    with pytest.raises(WebdedupError, match=r"input.csv: missing required column\(s\) crawled_at"):
        stage_documents(Store(tmp_path / "s"), str(path))


def test_an_input_without_dates_takes_the_default_date(tmp_path):
    """No date field at all: refused as a missing column even with --default-date (which applied to
    records whose date is missing, not to a file without the field); the refusal names the flag."""
    path = _write(tmp_path, "doc_id,source,domain,title,body\na,s,d.example,t,some words\n")
    with pytest.raises(WebdedupError) as caught:
        stage_documents(Store(tmp_path / "s"), str(path))
    assert str(caught.value).endswith(
        "found columns: doc_id, source, domain, title, body; an input without dates takes --default-date"
    )
    mapping = ColumnParams(default_date="2026-01-05")
    stage_documents(Store(tmp_path / "dated"), str(path), mapping=mapping)
    stored = pq.read_table(tmp_path / "dated" / "documents" / "data.parquet").select(["doc_id", "crawled_at"])
    assert stored.to_pylist() == [{"doc_id": "a", "crawled_at": datetime.date(2026, 1, 5)}]


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


def test_a_parquet_file_given_as_csv_is_named_so(tmp_path):
    """--format csv on a Parquet file was reported as a text in another encoding, to convert."""
    path = tmp_path / "export.parquet"
    pq.write_table(pa.table({"doc_id": ["a"]}), path)
    with pytest.raises(WebdedupError, match=r"export.parquet is a Parquet file, not CSV: give --format parquet$"):
        stage_documents(Store(tmp_path / "s"), str(path), "csv")


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
        [
            sys.executable,
            "-m",
            "webdedup_assets.cli.main",
            "run",
            str(path),
            "--output",
            str(tmp_path / "out"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "missing required column(s) domain, crawled_at; found columns: doc_id, body" in proc.stderr
    assert "Traceback" not in proc.stderr


# ---- malformed CSV: the file and the line ----------------------------------------------

ROW = "s,d.example,2026-01-01,t,body"
MALFORMED_CSV = {
    "ragged_row_too_long": (
        HEADER + f"a,{ROW}\nb,{ROW},EXTRA\nc,{ROW}\n",
        r"input.csv: line 3: 7 field\(s\), but the header has 6",
    ),
    "ragged_row_too_short_after_a_multiline_field": (
        HEADER + f'a,s,d.example,2026-01-01,t,"two\nlines"\nb,s,d.example,2026-01-01,t\nc,{ROW}\n',
        r"input.csv: line 4: 5 field\(s\), but the header has 6",
    ),
    "unterminated_quote": (
        HEADER + f'a,{ROW}\nb,s,d.example,2026-01-01,t,"never closed\nc,{ROW}\n',
        r"input.csv: line 3: unterminated quoted field: the quote opened in this record is never closed",
    ),
    "text_after_a_closing_quote": (
        HEADER + f'a,{ROW}\nb,s,d.example,2026-01-01,t,"closed" then more\n',
        r"input.csv: line 3: text after a closing quote",
    ),
    "duplicate_header_name": (
        "doc_id,source,domain,crawled_at,title,body,body\n" + f"a,{ROW},x\n",
        r"input.csv: line 1: duplicate column name\(s\) in the header: 'body' in columns 6, 7",
    ),
    "empty_header_name": (
        "doc_id,source,domain,crawled_at,title,body,\n" + f"a,{ROW},x\n",
        r"input.csv: line 1: column\(s\) 7 of the header have no name",
    ),
    "semicolon_separated": (
        HEADER.replace(",", ";") + "a;s;d;2026-01-01;t;b\n",
        r"input.csv: line 1: the header is one column 'doc_id;source;.*', separated by semicolons; "
        r"webdedup reads comma-separated \(tab for .tsv\) files",
    ),
    "zero_byte_file": ("", r"input.csv: the file is empty \(0 bytes\); a CSV input needs at least its header line"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_CSV))
@pytest.mark.parametrize("months", [None, ["2026-01"]], ids=["whole", "by_month"])
def test_malformed_csv_names_the_file_and_line(tmp_path, case, months):
    text, message = MALFORMED_CSV[case]
    path = _write(tmp_path, text)
    with pytest.raises(WebdedupError, match=message):
        stage_documents(Store(tmp_path / "s"), str(path), months=months)


def test_header_only_csv_without_newline_is_a_valid_empty_input(tmp_path):
    path = _write(tmp_path, HEADER.strip())
    store = Store(tmp_path / "s")
    assert stage_documents(store, str(path))["rows"] == 0


def test_tsv_is_tab_separated_with_commas_in_text(tmp_path):
    path = _write(tmp_path, HEADER.replace(",", "\t") + "a\ts\td.example\t2026-01-01\tt\tone, two, three\n", "in.tsv")
    store = Store(tmp_path / "s")
    stage_documents(store, str(path))
    assert duckdb.sql(f"SELECT body FROM {store.scan_sql('documents')}").fetchall() == [("one, two, three",)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (HEADER + f"a,{ROW}\nb,{ROW},EXTRA\n", "input.csv: line 3: 7 field(s), but the header has 6"),
        ("", "input.csv: the file is empty (0 bytes)"),
    ],
    ids=["ragged", "empty"],
)
def test_cli_malformed_csv_exits_2_naming_file_and_line(tmp_path, capsys, text, message):
    path = _write(tmp_path, text)
    assert main(["run", str(path), "--output", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert "column0" not in err and "sniffing" not in err


@pytest.mark.parametrize("content", [b"abc", FIXTURE.read_bytes()], ids=["three_bytes", "a_csv"])
def test_a_file_read_as_parquet_that_is_not_one_is_named_with_the_flag_to_give(tmp_path, capsys, content):
    path = tmp_path / "input.parquet"
    path.write_bytes(content)
    assert main(["run", str(path), "--output", str(tmp_path / "out"), "--quiet"]) == 2
    assert capsys.readouterr().err.endswith(
        f"error in documents: {path}: not a Parquet file (no Parquet footer at its end): give the format it is "
        "in, --format csv, jsonl or warc\n"
    )


def test_a_file_named_by_its_day_that_cannot_be_read_is_named_not_skipped(tmp_path, capsys):
    """A daily file missing a column beside a good one: the run read no day, fell back to this
    month and skipped both files by the dates in their names, and exited 0 with 0 documents."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "2026-03-01.csv").write_text(HEADER + f"a,{ROW}\n")
    (folder / "2026-03-02.csv").write_text("doc_id,crawled_at,body\nb,2026-03-02,words\n")
    assert main(["run", str(folder), "--output", str(tmp_path / "out"), "--quiet"]) == 2
    assert capsys.readouterr().err.endswith(
        f"error in documents: {folder / '2026-03-02.csv'}: missing required column(s) domain; found columns: doc_id, "
        "crawled_at, body\n"
    )
    assert not (tmp_path / "out").exists()


# ---- strict types in Parquet text columns ----------------------------------------------


def _parquet(tmp_path, **columns):
    data = {
        "doc_id": ["a", "b", "c"],
        "source": ["s"] * 3,
        "domain": ["d.example"] * 3,
        "crawled_at": ["2026-01-01"] * 3,
        "title": ["t"] * 3,
        "body": ["x", "y", "z"],
    }
    data.update(columns)
    path = tmp_path / "input.parquet"
    pq.write_table(pa.table(data), path)
    return path


@pytest.mark.parametrize("months", [None, ["2026-01"]], ids=["whole", "by_month"])
def test_binary_body_holding_utf8_is_decoded_as_text(tmp_path, months):
    path = _parquet(tmp_path, body=pa.array([b"Caf\xc3\xa9 au lait", b"na\xc3\xafve", None], pa.binary()))
    store = Store(tmp_path / "s")
    stage_documents(store, str(path), months=months)
    rows = duckdb.sql(f"SELECT doc_id, body FROM {store.scan_sql('documents')} ORDER BY doc_id").fetchall()
    assert rows == [("a", "Café au lait"), ("b", "naïve"), ("c", "")]
    assert duckdb.sql(f"SELECT typeof(body) FROM {store.scan_sql('documents')} LIMIT 1").fetchall() == [("VARCHAR",)]


def test_binary_body_with_invalid_utf8_is_refused_naming_file_column_and_doc_ids(tmp_path):
    path = _parquet(tmp_path, body=pa.array([b"Caf\xc3\xa9", b"caf\xe9", b"\xff"], pa.binary()))
    with pytest.raises(
        WebdedupError,
        match=r"input.parquet: column body is binary and not valid UTF-8 for 2 document\(s\), "
        r"first doc_id\(s\): 'b', 'c'",
    ):
        stage_documents(Store(tmp_path / "s"), str(path))


def test_binary_title_is_checked_too(tmp_path):
    path = _parquet(tmp_path, title=pa.array([b"ok", b"ok", b"bad\xe9"], pa.large_binary()))
    with pytest.raises(WebdedupError, match=r"column title is binary and not valid UTF-8 .* 'c'"):
        stage_documents(Store(tmp_path / "s"), str(path))


def test_integer_doc_ids_become_text_other_types_are_refused(tmp_path):
    store = Store(tmp_path / "s")
    stage_documents(store, str(_parquet(tmp_path, doc_id=pa.array([10, 2, 3], pa.int64()))))
    ids = duckdb.sql(f"SELECT doc_id FROM {store.scan_sql('documents')} ORDER BY doc_id").fetchall()
    assert ids == [("10",), ("2",), ("3",)]
    for column, values, shown in [
        ("title", pa.array([1.5, 2.0, 3.0]), "DOUBLE"),
        ("body", pa.array([True, False, True]), "BOOLEAN"),
        ("domain", pa.array([[1], [2], [3]]), "BIGINT[]"),
    ]:
        with pytest.raises(WebdedupError, match=rf"input.parquet: column {column} has type {re.escape(shown)}; text"):
            stage_documents(Store(tmp_path / "s2"), str(_parquet(tmp_path, **{column: values})))


def test_cli_binary_body_refused_exits_2(tmp_path, capsys):
    path = _parquet(tmp_path, body=pa.array([b"ok", b"caf\xe9", b"ok"], pa.binary()))
    assert main(["run", str(path), "--output", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "input.parquet: column body is binary and not valid UTF-8 for 1 document(s), first doc_id(s): 'b'" in err


def test_invalid_utf8_in_the_first_lines_is_one_line_from_the_command(tmp_path, capsys):
    """Found while the header is read (the first block decoded), not only by the full check."""
    path = _write(tmp_path, HEADER.encode() + b"a,s,d,2026-01-01,t,caf\xe9 au lait\n")
    assert main(["run", str(path), "--output", str(tmp_path / "out"), "--quiet"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"webdedup: error in documents: {path}: invalid UTF-8 at byte offset 65 (line 2): byte 0xe9; convert the "
        "file to UTF-8 (for example `iconv -f latin1 -t utf-8`)"
    )


def test_a_timestamp_whose_utc_day_is_past_year_9999_is_not_a_date(tmp_path, capsys):
    path = _write(tmp_path, HEADER + "a,s,d,9999-12-31T23:59:59-05:00,t,b\nb,s,d,2026-01-01,t,b\n")
    assert main(["run", str(path), "--output", str(tmp_path / "out"), "--quiet"]) == 2
    line = capsys.readouterr().err.splitlines()[-1]
    assert line.startswith(
        "webdedup: error in documents: crawled_at is not a date or timestamp for 1 document(s), first: 'a' "
        f"('9999-12-31T23:59:59-05:00') in {path};"
    )
    assert "or epoch seconds (a number field of JSON Lines or Parquet; CSV text holds dates)" in line


def test_a_damaged_parquet_file_among_others_is_named(tmp_path):
    """A page overwritten inside one file of a folder: DuckDB's error named no file ("cannot read
    the input: TProtocolException: Invalid data"); a file cut short was called "not a Parquet file"
    with the advice to give another --format."""
    rows = 200
    table = pa.table(
        {
            "doc_id": [f"p{i}" for i in range(rows)],
            "source": ["s"] * rows,
            "domain": [f"site{i}.example" for i in range(rows)],
            "crawled_at": [datetime.date(2026, 3, 5)] * rows,
            "title": ["t"] * rows,
            "body": [
                f"page {i} of the mountain pass where travellers rest before the ridge {i * 7}" for i in range(rows)
            ],
        }
    )
    folder = tmp_path / "in"
    folder.mkdir()
    pq.write_table(table.slice(0, 100), folder / "a.parquet", row_group_size=50)
    pq.write_table(table.slice(100), folder / "b.parquet", row_group_size=50)
    data = bytearray((folder / "b.parquet").read_bytes())
    (tmp_path / "cut.parquet").write_bytes(bytes(data[: len(data) // 2]))
    third = len(data) // 3
    data[third : third + 200] = bytes(200)
    (folder / "b.parquet").write_bytes(bytes(data))
    with pytest.raises(WebdedupError) as caught:
        stage_documents(Store(tmp_path / "s"), str(folder))
    assert str(caught.value).startswith(f"{folder / 'b.parquet'}: ")
    with pytest.raises(WebdedupError) as caught:
        stage_documents(Store(tmp_path / "t"), str(tmp_path / "cut.parquet"))
    assert (
        str(caught.value)
        == f"{tmp_path / 'cut.parquet'}: a Parquet file cut short (no footer at its end): copy it again"
    )
