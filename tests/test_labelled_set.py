"""The labelled evaluation set in fixtures/labelled (benchmarks/gen_labelled.py) at the default
parameters: what the seed's rule calls duplicates, measured against what a person would."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

from webdedup_assets.cli.main import main

REPO = Path(__file__).resolve().parents[1]
LABELLED = REPO / "fixtures" / "labelled"


def test_the_labelled_set_is_what_its_generator_writes(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "benchmarks.gen_labelled", "--out", str(tmp_path)],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    for name in ("documents.csv", "pairs.csv"):
        assert (tmp_path / name).read_bytes() == (LABELLED / name).read_bytes(), name


def test_default_parameters_on_the_labelled_set(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(LABELLED / "documents.csv"), "--output", str(out), "--quiet"]) == 0
    capsys.readouterr()
    args = ["evaluate", "--output", str(out), "--labels", str(LABELLED / "pairs.csv"), "--json", "--no-plots"]
    assert main(args) == 0
    run = json.loads(capsys.readouterr().out)["labels"]["current_run"]
    # no false duplicate; the misses are the heavily edited copies (10-15 % of the words changed)
    # and some of the copies with scattered typos (up to 5 %): 5-token shingles lose 5 shingles per edit
    assert (run["true_positives"], run["false_positives"], run["false_negatives"]) == (317, 0, 133)
    clusters = {r["doc_id"]: r["cluster_id"] for r in csv.DictReader(open(out / "clusters.csv"))}
    edits = {r["doc_id"]: r["edit"] for r in csv.DictReader(open(LABELLED / "documents.csv"))}
    together = {}
    for doc_id, edit in edits.items():
        original = doc_id.rsplit("-", 1)[0] + "-0"
        if edit != "original":
            hits, total = together.get(edit, (0, 0))
            together[edit] = (hits + (clusters[doc_id] == clusters[original]), total + 1)
    for edit in ("mirror", "boilerplate", "dateline", "reorder", "appended"):
        assert together[edit][0] == together[edit][1], edit  # every such copy joins its original
    for edit in ("rewrite", "deep_rewrite", "teaser", "sibling", "heavy_edit"):
        assert together[edit][0] == 0, edit  # none does
    assert 0 < together["typos"][0] < together["typos"][1]
