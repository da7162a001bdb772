"""The same corpus in the layouts users have (daily files, monthly files, one file over many
days) gives the same results, with default parameters."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from webdedup_assets.cli.main import main
from webdedup_assets.storage.state import load_state
from webdedup_assets.storage.store import Store

REPO = Path(__file__).resolve().parents[1]


def _generate(out: Path, layout: str) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.gen_corpus",
            "--docs",
            "3000",
            "--days",
            "75",
            "--layout",
            layout,
            "--out",
            str(out),
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    return out / "documents"


def _results(out: Path) -> dict:
    def rows(name):
        with open(out / name, newline="") as handle:
            return sorted(tuple(r.values()) for r in csv.DictReader(handle))

    return {
        "clusters": rows("clusters.csv"),
        "duplicate_pairs": rows("duplicate_pairs.csv"),
        "kept": sorted(pq.read_table(out / "deduped_documents.parquet", columns=["doc_id"]).column(0).to_pylist()),
    }


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("layouts")
    results = {}
    for layout in ("daily", "monthly", "single"):
        source = _generate(tmp / layout, layout)
        out = tmp / f"out-{layout}"
        assert main(["run", str(source), "--output", str(out), "--quiet"]) == 0
        results[layout] = (source, out)
    return results


def test_the_layouts_are_what_they_say(layouts):
    assert len(list(layouts["daily"][0].glob("*.parquet"))) == 75
    assert len(list(layouts["monthly"][0].glob("*.parquet"))) == 3  # March, April, May 2026
    assert len(list(layouts["single"][0].glob("*.parquet"))) == 1


def test_monthly_and_single_file_inputs_give_the_daily_files_results(layouts):
    daily = _results(layouts["daily"][1])
    assert len(daily["clusters"]) == 3000 and len(daily["duplicate_pairs"]) > 500
    for layout in ("monthly", "single"):
        assert _results(layouts[layout][1]) == daily, layout
    stores = {layout: Store(out / "_storage") for layout, (_, out) in layouts.items()}
    months = ["2026-03", "2026-04", "2026-05"]
    for store in stores.values():  # one partition per crawl month, whatever the input's files
        for asset in ("documents", "fingerprinted", "band_memberships"):
            assert store.partitions(asset) == months
        assert len(load_state(store)["days"]) == 75


def test_each_layout_is_stored_without_re_encoding_what_needs_none(layouts):
    """Daily and monthly files in the stored form are adopted as segments of their month (byte
    copies); one file over many months is split by month in one pass."""
    stores = {layout: Store(out / "_storage") for layout, (_, out) in layouts.items()}
    daily = [p.name for p in stores["daily"].files("documents") if p.name.startswith("part-")]
    assert len(daily) == 75 and all(name.count(".") == 2 for name in daily)  # part-<month>.<day>.parquet
    monthly = [p.name for p in stores["monthly"].files("documents") if p.name.startswith("part-")]
    assert len(monthly) == 3
    for name, source in zip(monthly, sorted(layouts["monthly"][0].glob("*.parquet"))):
        assert (stores["monthly"].asset_dir("documents") / name).read_bytes() == source.read_bytes()
    single = [p.name for p in stores["single"].files("documents") if p.name.startswith("part-")]
    assert single == ["part-2026-03.parquet", "part-2026-04.parquet", "part-2026-05.parquet"]
    # re-encoded: the body with LZ4 (read again by three stages), every other column with zstd
    import pyarrow.parquet as pq

    written = pq.ParquetFile(stores["single"].asset_dir("documents") / single[0]).metadata.row_group(0)
    codecs = {written.column(i).path_in_schema: written.column(i).compression for i in range(written.num_columns)}
    assert codecs.pop("body") == "LZ4" and set(codecs.values()) == {"ZSTD"}, codecs  # pyarrow's name of LZ4_RAW


@pytest.mark.parametrize("form", ["parquet", "jsonl", "csv"])
def test_folders_named_key_value_are_folders_not_fields(tmp_path, form):
    """Exports often sit in folders such as domain=x/crawled_at=2020-01-01/ and outputs under
    run=3/: DuckDB's hive partitioning took those for fields, replacing the records' own domain
    and crawl date and adding columns to every published file."""
    import json

    import pyarrow as pa

    rows = [
        {
            "doc_id": f"d{i}",
            "domain": f"own{i % 2}.example",
            "crawled_at": f"2024-05-0{1 + i % 3}",
            "body": f"page {i} " + "shared words about the same thing " * (3 + i),
            "lang": "en",
        }
        for i in range(6)
    ]
    folder = tmp_path / "in" / "domain=folder.example" / "crawled_at=2020-01-01" / "lang=xx"
    folder.mkdir(parents=True)
    if form == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), folder / "part.parquet")
    elif form == "jsonl":
        (folder / "part.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        with open(folder / "part.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    out = tmp_path / "run=3" / "out"
    assert main(["run", str(tmp_path / "in"), "--output", str(out), "--quiet"]) == 0
    kept = pq.read_table(out / "deduped_documents.parquet")
    assert kept.column_names == [
        *["doc_id", "source", "domain", "crawled_at", "title", "body", "lang"],
        *["cluster_id", "cluster_size", "token_count"],
    ]
    assert set(kept.column("lang").to_pylist()) == {"en"}
    assert set(kept.column("domain").to_pylist()) <= {"own0.example", "own1.example"}
    assert {str(d)[:10] for d in kept.column("crawled_at").to_pylist()} <= {"2024-05-01", "2024-05-02", "2024-05-03"}
    assert pq.read_schema(out / "fingerprinted.parquet").names[0] == "doc_id"
    assert "run" not in pq.read_schema(out / "fingerprinted.parquet").names
