"""The benchmark scripts' own options: what they time and what they refuse to touch."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from benchmarks import incremental, stage_time
from webdedup_assets.storage.store import Store

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "documents.csv"


def test_stage_time_runs_the_documents_stage_into_a_scratch_folder(tmp_path, capsys):
    scratch = tmp_path / "scratch"
    stage_time.main([str(scratch), "documents", "--input", str(FIXTURE), "--repeat", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.startswith("documents: ") for line in lines)
    stored = Store(scratch).data_files("documents")
    # the fixture's 24 pages once: the second run emptied the folder before writing them again
    assert sum(pq.read_metadata(f).num_rows for f in stored) == 24
    assert (scratch / stage_time.SCRATCH_MARK).exists()


def test_stage_time_does_not_empty_a_folder_it_did_not_make(tmp_path, capsys):
    storage = tmp_path / "storage"
    storage.mkdir()
    (storage / "kept.txt").write_text("a run's storage")
    with pytest.raises(SystemExit):
        stage_time.main([str(storage), "documents", "--input", str(FIXTURE)])
    assert "is not empty and not a scratch folder" in capsys.readouterr().err
    assert (storage / "kept.txt").read_text() == "a run's storage"


def test_stage_time_input_goes_with_the_documents_stage_only(tmp_path, capsys):
    with pytest.raises(SystemExit):
        stage_time.main([str(tmp_path), "clusters", "--input", str(FIXTURE)])
    with pytest.raises(SystemExit):
        stage_time.main([str(tmp_path), "documents"])
    assert "--input goes with the documents stage" in capsys.readouterr().err


def test_incremental_refuses_a_repeat_below_one(capsys):
    with pytest.raises(SystemExit):
        incremental.main(["--repeat", "0"])
    assert "--repeat must be at least 1" in capsys.readouterr().err


def test_fresh_copy_links_the_history_files(tmp_path):
    built = tmp_path / "history"
    (built / "_storage").mkdir(parents=True)
    (built / "_storage" / "data.parquet").write_bytes(b"PAR1")
    work = tmp_path / "work"
    (work / "left over").mkdir(parents=True)
    incremental.fresh_copy(built, work)
    assert not (work / "left over").exists()
    copied = work / "_storage" / "data.parquet"
    assert copied.read_bytes() == b"PAR1"
    assert copied.stat().st_ino == (built / "_storage" / "data.parquet").stat().st_ino
