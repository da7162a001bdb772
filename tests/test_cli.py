import json
import subprocess
import sys

from webdedup_assets.cli import main

from .conftest import CLASSIC, FIXTURE


def test_cli_run_prints_the_summary_and_writes_outputs(tmp_path, capsys):
    code = main(["run", str(FIXTURE), "--output", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "candidate_pairs             18" in captured.out
    assert "representatives             12" in captured.out
    assert "retained_ratio              0.5" in captured.out
    assert "fingerprinted      done: 24 rows" in captured.err
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["counts"]["duplicate_pairs"] == 18
    assert (tmp_path / "out" / "_storage" / "documents" / "part-2026-03-01.parquet").exists()


def test_cli_classic_parameters_and_json(tmp_path, capsys):
    code = main(
        [
            "run",
            str(FIXTURE),
            "--output",
            str(tmp_path / "out"),
            "--num-perm",
            str(CLASSIC["num_perm"]),
            "--bands",
            "8",
            "--threshold",
            "0.7",
            "--json",
            "--quiet",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    counts = json.loads(captured.out)
    assert counts["candidate_pairs"] == 18 and counts["representatives"] == 12
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["parameters"]["band_memberships"] == {"bands": 8, "rows": 8}


def test_cli_rejects_bands_that_do_not_divide_num_perm(tmp_path, capsys):
    assert main(["run", str(FIXTURE), "--output", str(tmp_path), "--num-perm", "64", "--bands", "5"]) == 2
    assert "--num-perm 64 is not divisible by --bands 5" in capsys.readouterr().err


def test_cli_over_budget_fails_before_the_join_with_the_message(tmp_path, capsys):
    assert main(["run", str(FIXTURE), "--output", str(tmp_path), "--max-pair-slots", "10", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "error in candidate_pairs" in err
    assert "candidate join would create 262 pair slots, over the budget of 10 (max_pair_slots)" in err


def test_cli_reports_a_failed_count_check(tmp_path, capsys):
    # a lower threshold on the fixture still gives 18 duplicates; a stricter one breaks the pinned counts
    assert main(["run", str(FIXTURE), "--output", str(tmp_path), "--threshold", "0.95", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "check failed: duplicate_pairs:duplicate_pairs_match_expected_counts" in err


def test_console_script_help():
    proc = subprocess.run(
        [sys.executable, "-m", "webdedup_assets.cli", "run", "--help"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0
    for flag in (
        "--shingle-size",
        "--num-perm",
        "--bands",
        "--threshold",
        "--max-pair-slots",
        "--bucket-policy",
        "--representative-policy",
    ):
        assert flag in proc.stdout
