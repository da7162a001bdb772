"""End to end: WARC files in -> the right pages deduplicated, provenance kept, skips counted and listed."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))
from test_warc_fixtures import Rec, corpus, page, truncated_member, write_warc  # noqa: E402

from webdedup_assets.cli.main import main  # noqa: E402
from webdedup_assets.engine.stages.documents_warc import STAGING_FOLDER  # noqa: E402
from webdedup_assets.ingest.warc.collect import PROVENANCE_COLUMNS, doc_id_for  # noqa: E402


def test_warc_folder_end_to_end(tmp_path, capsys):
    recs = corpus()
    revisit = Rec("revisit", recs["original"].url, refers_to=recs["original"].record_id)
    inputs = tmp_path / "in"
    inputs.mkdir()
    names = list(recs)
    write_warc(inputs / "a.warc.gz", [Rec("warcinfo", ""), *(recs[k] for k in names[:6])])
    broken = truncated_member(Rec("response", "http://cut.example/", page("Cut", "cut off").encode()))
    write_warc(inputs / "b.warc.gz", [*(recs[k] for k in names[6:]), revisit, broken])
    out = tmp_path / "out"

    code = main(["run", str(inputs), "--output", str(out), "--quiet"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "17 records -> 9 documents; 8 skipped or rejected" in captured.err
    assert "rejected_records.csv" in captured.err

    con = duckdb.connect()
    deduped = out / "deduped_documents.parquet"
    columns = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{deduped}')").fetchall()]
    assert set(PROVENANCE_COLUMNS) <= set(columns)

    clusters = {
        row["doc_id"]: row["cluster_id"] for row in csv.DictReader(open(out / "clusters.csv", encoding="utf-8"))
    }
    ids = {k: doc_id_for(recs[k].record_id) for k in recs}

    def same(a, b):
        return clusters[ids[a]] == clusters[ids[b]]

    assert same("original", "mirror") and same("original", "revision")  # mirror on another host, one-word edit
    assert same("sjis", "eucjp")  # same Japanese text in two legacy encodings
    assert same("gbk", "gbk_edit")  # CJK pair, one character changed (GBK vs UTF-8)
    assert not same("original", "other") and not same("cp1251", "other")
    kept = con.execute(
        f"SELECT doc_id, capture_url, warc_filename, warc_offset FROM read_parquet('{deduped}')"
    ).fetchall()
    assert len(kept) == 5  # museum, japanese, chinese, sourdough, russian
    museum = [r for r in kept if r[0] in (ids["original"], ids["mirror"], ids["revision"])]
    assert museum == [(ids["mirror"], recs["mirror"].url, "a.warc.gz", museum[0][3])]  # newest capture kept

    inspection = list(csv.DictReader(open(out / "cluster_inspection.csv", encoding="utf-8")))
    assert {"representative_warc_record_id", "representative_capture_url", "representative_warc_offset"} <= set(
        inspection[0]
    )

    rejected = list(csv.DictReader(open(out / "rejected_records.csv", encoding="utf-8")))
    assert len(rejected) == 8
    assert sorted(r["kind"] for r in rejected) == [
        "http_status",
        "metadata",
        "non_html",
        "not_html",
        "request",
        "revisit",
        "truncated_gzip",
        "warcinfo",
    ]
    cut = next(r for r in rejected if r["kind"] == "truncated_gzip")
    assert cut["warc_filename"] == "b.warc.gz" and int(cut["warc_offset"]) > 0

    manifest = json.loads((out / "manifest.json").read_text())
    files = {Path(f["path"]).name: f for f in manifest["input"]["files"]}
    assert set(files) == {"a.warc.gz", "b.warc.gz"}
    assert all(len(f["sha256"]) == 64 for f in files.values())
    assert files["a.warc.gz"]["records"] == 7 and files["a.warc.gz"]["documents"] == 6
    assert files["b.warc.gz"]["records"] == 10 and files["b.warc.gz"]["documents"] == 3
    warc = manifest["input"]["warc"]
    assert warc["records"] == 17 and warc["documents"] == 9 and warc["not_documents"] == 8
    assert warc["revisits"] == 1 and warc["revisits_pointing_into_input"] == 1
    assert warc["skipped"]["request"] == 1 and warc["rejected"]["truncated_gzip"] == 1


def test_documents_asset_reports_skips_in_materialization_metadata(tmp_path):
    import dagster as dg

    from webdedup_assets.defs import build_defs
    from webdedup_assets.defs.resources import WebdedupStorage

    recs = corpus()
    path = tmp_path / "crawl.dat"  # no WARC suffix: the format is set explicitly
    write_warc(path, [recs["original"], recs["request"], recs["metadata"], recs["pdf"]], gz=True)
    defs = build_defs(["2024-03"])
    [documents] = [a for a in defs.assets if a.key.to_user_string() == "documents"]
    storage = WebdedupStorage(storage_root=str(tmp_path / "store"), output_dir=str(tmp_path / "out"))
    config = {"input_path": str(path), "input_format": "warc"}
    result = dg.materialize(
        [documents],
        resources={"storage": storage},
        run_config={"ops": {"documents": {"config": config}}},
        partition_key="2024-03",
    )
    assert result.success
    [materialization] = result.asset_materializations_for_node("documents")
    metadata = materialization.metadata
    assert metadata["dagster/row_count"].value == 1
    assert metadata["warc_not_documents"].value == 3
    assert metadata["warc"].data["skipped"] == {"metadata": 1, "non_html": 1, "request": 1}
    # stored beside documents; published as rejected_records.csv with the run's other outputs (by manifest)
    assert pq.read_table(tmp_path / "store" / "rejected_records" / "data.parquet").num_rows == 3
    assert not (tmp_path / "out" / "rejected_records.csv").exists()
    assert not (tmp_path / "store" / STAGING_FOLDER).exists()  # the staged conversion is discarded
    # the rejected_records asset (downstream of documents) shows what the documents stage set aside
    [rejected] = [a for a in defs.assets if a.key.to_user_string() == "rejected_records"]
    shown = dg.materialize([rejected], resources={"storage": storage})
    [materialization] = shown.asset_materializations_for_node("rejected_records")
    assert materialization.metadata["dagster/row_count"].value == 3
    assert materialization.metadata["by_kind"].data == {"metadata": 1, "non_html": 1, "request": 1}
    assert materialization.metadata["kind/request"].value == 1
    columns = [c.name for c in materialization.metadata["dagster/column_schema"].value.columns]
    assert columns == pq.read_schema(tmp_path / "store" / "rejected_records" / "data.parquet").names


def test_a_conversion_left_by_an_interrupted_run_is_removed_not_reused(tmp_path, capsys):
    recs = corpus()
    inputs = tmp_path / "in"
    inputs.mkdir()
    write_warc(inputs / "a.warc.gz", [recs["original"], recs["other"]])
    storage = tmp_path / "store"
    leftover = storage / STAGING_FOLDER
    leftover.mkdir(parents=True)
    (leftover / "0123.parquet").write_bytes(b"not a conversion")  # what a killed run may leave
    args = ["run", str(inputs), "--output", str(tmp_path / "out"), "--storage", str(storage), "--quiet"]
    assert main(args) == 0, capsys.readouterr().err
    assert "removed 1 temporary file(s) left by interrupted runs" in capsys.readouterr().err
    assert not leftover.exists()
    assert len(pq.read_table(tmp_path / "out" / "deduped_documents.parquet")) == 2


def test_an_add_of_a_warc_keeps_the_rejected_records_of_the_files_it_does_not_give_again(tmp_path):
    """rejected_records.csv after `run day1; add day2` equals one run of both files."""

    def day(name: str, date: str, statuses: list[str]) -> Path:
        folder = tmp_path / "both"
        folder.mkdir(exist_ok=True)
        records = [
            Rec(
                "response",
                f"http://{name}.example/{i}",
                page(f"{name} {i}", f"{name} page {i} " * 40).encode(),
                status=status,
                date=date,
            )
            for i, status in enumerate(statuses)
        ]
        write_warc(folder / f"{name}.warc.gz", records)
        return folder / f"{name}.warc.gz"

    first = day("day1", "2024-01-01T00:00:00Z", ["200 OK", "404 Not Found", "503 Busy"])
    second = day("day2", "2024-01-02T00:00:00Z", ["200 OK", "500 Oops"])
    assert main(["run", str(first), "--output", str(tmp_path / "added"), "--quiet"]) == 0
    assert main(["add", str(second), "--output", str(tmp_path / "added"), "--quiet"]) == 0
    assert main(["run", str(tmp_path / "both"), "--output", str(tmp_path / "ran"), "--quiet"]) == 0
    listed = (tmp_path / "added" / "rejected_records.csv").read_text()
    assert listed == (tmp_path / "ran" / "rejected_records.csv").read_text()
    assert [line.split(",")[0] for line in listed.splitlines()[1:]] == ["day1.warc.gz"] * 2 + ["day2.warc.gz"]


def test_input_without_one_warc_record_is_refused_naming_the_file(tmp_path, capsys):
    """--format warc on a CSV (or a .warc that is not one) stops the command: it published an
    empty corpus before, and `add` blamed the crawl dates."""
    table = tmp_path / "pages.csv"
    table.write_text("doc_id,url,domain,crawled_at,title,body\nd1,http://a.example/,a.example,2024-01-01,T,text\n")
    out = tmp_path / "out"
    assert main(["run", str(table), "--format", "warc", "--output", str(out), "--quiet"]) == 2
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said == (
        f"webdedup: error in documents: {table}: not a WARC file (no WARC record in it); "
        "CSV, Parquet and JSON Lines input takes --format auto, csv, parquet or jsonl"
    )
    assert not out.exists()
    recs = corpus()
    write_warc(tmp_path / "a.warc.gz", [recs["original"], recs["other"]])
    assert main(["run", str(tmp_path / "a.warc.gz"), "--output", str(out), "--quiet"]) == 0
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert main(["add", str(table), "--format", "warc", "--output", str(out), "--quiet"]) == 2
    assert f"{table}: not a WARC file (no WARC record in it)" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before
