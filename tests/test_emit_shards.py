"""--emit-shards: the kept records in the input's own form, one output shard per input shard.

The fixture's documents as Dolma-style JSON Lines shards of mixed codecs in two folders, as CSV
with a body spanning lines, and as zstd Parquet with a nested field: each emitted shard has the
input shard's path and name, holds exactly the records whose document was kept (byte for byte for
JSON Lines and CSV, every field in its order for Parquet), and a reused output folder holds only
the latest run's shards."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq

from webdedup_assets.cli.main import main

from .test_jsonl import DOLMA_FLAGS, SUFFIXES, dolma_record, fixture_rows, write_shard


def _lines(path) -> list[bytes]:
    with pa.input_stream(str(path), compression="detect") as stream:
        return list(io.BufferedReader(stream))


def _removed(out) -> set[str]:
    with open(out / "removed.csv", newline="") as handle:
        return {row["doc_id"] for row in csv.DictReader(handle)}


def test_json_lines_shards_come_back_with_the_kept_lines_byte_for_byte(tmp_path):
    rows = fixture_rows()
    shards = []
    for shard, suffix in enumerate(SUFFIXES):
        folder = tmp_path / "in" / ("2026-03" if shard < 4 else "2026-04")
        records = [dolma_record(r) for r in rows[shard :: len(SUFFIXES)]]
        shards.append(write_shard(folder / f"shard-{shard:02d}{suffix}", records))
    out = tmp_path / "out"
    code = main(["run", str(tmp_path / "in"), "--output", str(out), "--quiet", "--emit-shards", *DOLMA_FLAGS])
    assert code == 0
    removed = _removed(out)
    assert len(removed) == len(rows) - 12  # the fixture's 12 representatives
    emitted = sorted(p.relative_to(out / "shards") for p in (out / "shards").rglob("*") if p.is_file())
    assert emitted == sorted(p.relative_to(tmp_path / "in") for p in shards)
    kept_ids = []
    for source in shards:
        expected = [line for line in _lines(source) if line_id(line) not in removed]
        written = _lines(out / "shards" / source.relative_to(tmp_path / "in"))
        assert written == expected
        kept_ids += [line_id(line) for line in written]
    assert sorted(kept_ids) == sorted({r["doc_id"] for r in rows} - removed)


def line_id(line: bytes) -> str:
    return json.loads(line)["id"]


def test_lines_duckdb_reads_leniently_and_numeric_ids_come_back_as_written(tmp_path):
    """Which record is kept follows the doc_ids the documents stage read, in the file's order: a
    line with a trailing comma (DuckDB reads it; Python's json refused it after every stage had
    run) and numeric ids beside text ids (1.10 is held as 1.1) come back as they were written."""
    rows = fixture_rows()
    lines = []
    for number, row in enumerate(rows):
        record = json.dumps({**dolma_record(row), "id": row["doc_id"]})
        if number == 0:
            record = record[:-1] + ', "extra": 1,}'  # trailing comma
        if number == 1:
            record = record.replace(json.dumps(row["doc_id"]), "1.10")  # a number among text ids
        lines.append(record + "\n")
    source = tmp_path / "in" / "pages.jsonl"
    source.parent.mkdir()
    source.write_text("".join(lines) + "\n")  # and a blank line last
    out = tmp_path / "out"
    assert main(["run", str(source), "--output", str(out), "--quiet", "--emit-shards", *DOLMA_FLAGS]) == 0
    removed = _removed(out)
    assert len(removed) == len(rows) - 12
    ids = [rows[0]["doc_id"], "1.1"] + [r["doc_id"] for r in rows[2:]]
    expected = [line for line, doc_id in zip(lines, ids) if doc_id not in removed]
    assert (out / "shards" / "pages.jsonl").read_text() == "".join(expected)


def test_csv_records_spanning_lines_come_back_as_written(tmp_path):
    rows = fixture_rows()
    rows.append({**rows[0], "doc_id": "spanning", "body": 'A page of its own,\nwith a second line and a "quote"'})
    columns = list(rows[0])
    source = tmp_path / "in" / "pages.csv"
    source.parent.mkdir()
    with open(source, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(rows)
    out = tmp_path / "out"
    assert main(["run", str(source), "--output", str(out), "--quiet", "--emit-shards"]) == 0
    removed = _removed(out)
    expected = io.StringIO(newline="")
    writer = csv.DictWriter(expected, columns)
    writer.writeheader()
    writer.writerows(r for r in rows if r["doc_id"] not in removed)
    assert (out / "shards" / "pages.csv").read_bytes() == expected.getvalue().encode()
    assert b'"A page of its own,\nwith a second line and a ""quote"""' in (out / "shards" / "pages.csv").read_bytes()


def test_tsv_and_a_quoted_header_after_a_byte_order_mark_come_back_as_written(tmp_path):
    """A .tsv shard, and the "CSV UTF-8" spreadsheets write (a byte order mark, every name
    quoted): the run read them, then --emit-shards failed with "'doc_id' is not in list"."""
    rows = fixture_rows()
    columns = list(rows[0])
    for name, dialect, mark in (("pages.tsv", "excel-tab", ""), ("sheet.csv", "excel", "\ufeff")):
        source = tmp_path / name / name
        source.parent.mkdir()
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, columns, dialect=dialect, quoting=csv.QUOTE_ALL)
        writer.writeheader()
        writer.writerows(rows)
        source.write_text(mark + text.getvalue(), encoding="utf-8", newline="")
        out = tmp_path / name / "out"
        assert main(["run", str(source), "--output", str(out), "--quiet", "--emit-shards"]) == 0
        removed = _removed(out)
        assert len(removed) == 12
        expected = io.StringIO(newline="")
        writer = csv.DictWriter(expected, columns, dialect=dialect, quoting=csv.QUOTE_ALL)
        writer.writeheader()
        writer.writerows(r for r in rows if r["doc_id"] not in removed)
        assert (out / "shards" / name).read_bytes() == (mark + expected.getvalue()).encode()


def _emitted_parquet(tmp_path, table: pa.Table, name: str, codec: str, date_column: str):
    """`table` as the Parquet input in/<name> (id, text and url fields), run with --emit-shards:
    (the emitted shard, the removed doc_ids)."""
    source = tmp_path / "in" / name
    source.parent.mkdir()
    pq.write_table(table, source, compression=codec)
    out = tmp_path / "out"
    flags = ["--id-column", "id", "--text-column", "text", "--date-column", date_column, "--url-column", "url"]
    assert main(["run", str(source), "--output", str(out), "--quiet", "--emit-shards", *flags]) == 0
    return pq.ParquetFile(out / "shards" / name), _removed(out)


def test_parquet_rows_keep_every_field_in_order_and_the_codec(tmp_path):
    rows = fixture_rows()
    table = pa.table(
        {
            "url": [f"https://{r['domain']}/{r['doc_id']}" for r in rows],
            "text": [r["body"] for r in rows],
            "id": [r["doc_id"] for r in rows],
            "date": [r["crawled_at"] for r in rows],
            "meta": [{"dump": "CC-MAIN-2026-10", "score": float(i)} for i in range(len(rows))],
        }
    )
    written, removed = _emitted_parquet(tmp_path, table, "fineweb.parquet", "zstd", "date")
    assert written.metadata.row_group(0).column(0).compression == "ZSTD"
    assert written.schema_arrow.names == table.column_names
    assert written.read().to_pylist() == [r for r in table.to_pylist() if r["id"] not in removed]


def test_parquet_rows_keep_the_inputs_schema_time_zones_and_nullability(tmp_path):
    rows = fixture_rows()
    schema = pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("text", pa.large_string()),
            pa.field("seen", pa.timestamp("us", tz="America/Sao_Paulo"), nullable=False),
            pa.field("url", pa.string()),
        ],
        metadata={b"origin": b"crawler-7"},
    )
    seen = [datetime.fromisoformat(f"{r['crawled_at'][:10]}T10:00:00") for r in rows]
    table = pa.table(
        [[r["doc_id"] for r in rows], [r["body"] for r in rows], seen, [f"https://{r['domain']}/" for r in rows]],
        schema=schema,
    )
    written, removed = _emitted_parquet(tmp_path, table, "day.parquet", "snappy", "seen")
    assert written.schema_arrow.equals(schema, check_metadata=True)
    assert written.metadata.row_group(0).column(0).compression == "SNAPPY"
    assert removed and written.read().to_pylist() == [r for r in table.to_pylist() if r["id"] not in removed]


def test_shards_keep_their_path_below_the_input_folder(tmp_path):
    """Even when every shard is in one subfolder of the input folder."""
    rows = fixture_rows()
    folder = tmp_path / "in"
    write_shard(folder / "2026" / "a.jsonl", [dolma_record(r) for r in rows[::2]])
    write_shard(folder / "2026" / "b.jsonl.gz", [dolma_record(r) for r in rows[1::2]])
    out = tmp_path / "out"
    assert main(["run", str(folder), "--output", str(out), "--quiet", "--emit-shards", *DOLMA_FLAGS]) == 0
    assert sorted(str(p.relative_to(out / "shards")) for p in (out / "shards").rglob("*") if p.is_file()) == [
        "2026/a.jsonl",
        "2026/b.jsonl.gz",
    ]


def test_shards_that_are_symbolic_links_keep_the_links_names_and_folders(tmp_path):
    """A linked shard was emitted under its target's name and outside its folder."""
    rows = fixture_rows()
    store = tmp_path / "store"
    write_shard(store / "part-0001.jsonl", [dolma_record(r) for r in rows[::2]])
    write_shard(store / "part-0002.jsonl.gz", [dolma_record(r) for r in rows[1::2]])
    folder = tmp_path / "in"
    (folder / "2026").mkdir(parents=True)
    (folder / "2026" / "march-a.jsonl").symlink_to(store / "part-0001.jsonl")
    (folder / "2026" / "march-b.jsonl.gz").symlink_to(store / "part-0002.jsonl.gz")
    out = tmp_path / "out"
    assert main(["run", str(folder), "--output", str(out), "--quiet", "--emit-shards", *DOLMA_FLAGS]) == 0
    assert sorted(str(p.relative_to(out / "shards")) for p in (out / "shards").rglob("*") if p.is_file()) == [
        "2026/march-a.jsonl",
        "2026/march-b.jsonl.gz",
    ]


def test_a_reused_output_folder_holds_only_the_latest_runs_shards(tmp_path):
    rows = fixture_rows()
    folder = tmp_path / "in"
    write_shard(folder / "a.jsonl", [dolma_record(r) for r in rows[::2]])
    write_shard(folder / "b.jsonl.gz", [dolma_record(r) for r in rows[1::2]])
    out = tmp_path / "out"
    assert main(["run", str(folder), "--output", str(out), "--quiet", "--emit-shards", *DOLMA_FLAGS]) == 0
    assert sorted(p.name for p in (out / "shards").iterdir()) == ["a.jsonl", "b.jsonl.gz"]
    (folder / "b.jsonl.gz").unlink()
    write_shard(folder / "c.json.zst", [dolma_record(r) for r in rows[1::2]])
    assert main(["run", str(folder), "--output", str(out), "--quiet", "--emit-shards", *DOLMA_FLAGS]) == 0
    assert sorted(p.name for p in (out / "shards").iterdir()) == ["a.jsonl", "c.json.zst"]
    assert not [p for p in out.iterdir() if p.name.startswith((".publish", ".replaced"))]  # no staging left
    assert main(["run", str(folder), "--output", str(out), "--quiet", *DOLMA_FLAGS]) == 0
    assert not (out / "shards").exists()  # a run without --emit-shards publishes none


def test_warc_input_is_refused_before_anything_is_written(tmp_path, capsys):
    source = tmp_path / "crawl.warc"
    source.write_bytes(b"")
    out = tmp_path / "out"
    assert main(["run", str(source), "--output", str(out), "--emit-shards"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"webdedup: error: --emit-shards writes CSV, Parquet and JSON Lines inputs back in their own form; "
        f"{source} is WARC: its kept documents are in deduped_documents.parquet"
    )
    assert not out.exists()


def test_an_add_says_that_the_shards_of_the_run_before_go(tmp_path, capsys):
    """The shards answer for the corpus they were emitted from: an add publishes without them (it
    removed them without a word)."""
    rows = fixture_rows()
    write_shard(tmp_path / "in" / "a.jsonl", [dolma_record(r) for r in rows[1:]])
    write_shard(tmp_path / "late" / "b.jsonl", [dolma_record(rows[0]) | {"id": "late", "created": "2026-03-30"}])
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "in"), "--output", str(out), "--quiet", "--emit-shards", *DOLMA_FLAGS]) == 0
    capsys.readouterr()
    assert main(["add", str(tmp_path / "late"), "--output", str(out), "--quiet"]) == 0
    assert f"webdedup: {out / 'shards'} goes: an add does not emit shards" in capsys.readouterr().err
    assert not (out / "shards").exists()
