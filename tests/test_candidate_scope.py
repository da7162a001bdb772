"""candidate_scope=domain: only pages of the same domain are compared (issue 14, item 6)."""

from __future__ import annotations

import csv
import json

from webdedup_assets.cli.main import main

from .test_state import _corpus


def _pairs(out) -> set[tuple[str, str, str, str]]:
    with open(out / "duplicate_pairs.csv", newline="") as handle:
        return {
            (r["left_doc_id"], r["right_doc_id"], r["left_domain"], r["right_domain"]) for r in csv.DictReader(handle)
        }


def test_domain_scope_pairs_only_pages_of_one_domain(tmp_path, capsys):
    corpus = _corpus(tmp_path / "corpus.csv", 3000)
    runs = {}
    for scope in ("global", "domain"):
        out = tmp_path / scope
        assert main(["run", str(corpus), "--output", str(out), "--candidate-scope", scope, "--quiet"]) == 0
        runs[scope] = _pairs(out)
    capsys.readouterr()
    assert runs["domain"] and all(left == right for _, _, left, right in runs["domain"])
    # exactly the same-domain duplicates of the global run: the scope drops pairs, it finds no others
    assert runs["domain"] == {p for p in runs["global"] if p[2] == p[3]}
    assert len(runs["global"]) > len(runs["domain"])  # the corpus has cross-domain copies too
    manifest = json.loads((tmp_path / "domain" / "manifest.json").read_text())
    assert manifest["parameters"]["candidate_pairs"]["candidate_scope"] == "domain"
    assert manifest["counts"]["cross_domain_candidates"] == 0


def test_the_state_of_a_domain_scoped_run_counts_the_band_rows_own_buckets(tmp_path, capsys):
    """The candidates stage keeps its bucket figures for the state only when its buckets are the
    band rows' own: domain-scoped buckets are other ones, so the state counts them itself and
    holds the same figures as after a global run of the same corpus."""
    corpus = _corpus(tmp_path / "corpus.csv", 3000)
    figures = {}
    for scope in ("global", "domain"):
        storage = tmp_path / f"st-{scope}"
        argv = ["run", str(corpus), "--output", str(tmp_path / scope), "--storage", str(storage)]
        assert main([*argv, "--candidate-scope", scope, "--quiet"]) == 0
        assert (storage / "candidate_pairs" / "kept").is_dir() == (scope == "global")
        figures[scope] = json.loads((storage / "incremental" / "state.json").read_text())["figures"]
    capsys.readouterr()
    assert figures["domain"] == figures["global"] and figures["global"]["collision_buckets"] > 0
