"""The same corpus in the layouts users have (daily files, monthly files, one file over many
days) gives the same results, with default parameters."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from webdedup_assets.cli import main

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
    stored = {
        layout: sorted(p.name for p in (out / "_storage" / "documents").glob("part-*.parquet"))
        for layout, (_, out) in layouts.items()
    }
    assert stored["daily"] == stored["monthly"] == stored["single"] and len(stored["daily"]) == 75
