"""A command that fails changes nothing: the storage and the outputs stay exactly as they were
(storage.transaction, engine.pipeline), and what a killed command left is undone by the next one."""

from __future__ import annotations

import csv
import hashlib
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from webdedup_assets.cli.main import main
from webdedup_assets.engine import DUCKDB
from webdedup_assets.engine.publish import JOURNAL
from webdedup_assets.storage.state import HOLDERS_DIR, LOCK_FILE
from webdedup_assets.storage.transaction import ROLLBACK_DIR, StorageTransaction, restore

from .conftest import FIXTURE

NOT_HELD = {LOCK_FILE, HOLDERS_DIR, ".corpus_state.lock"}


def held(folder: Path) -> dict[str, str]:
    """Every file a user holds under `folder` (locks aside): relative path -> sha256."""
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not NOT_HELD & set(path.relative_to(folder).parts):
            files[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files


def write_day(path: Path, day: str, ids: list[str], body: str = "a page about {} with words") -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["doc_id", "source", "domain", "crawled_at", "title", "body"])
        for doc_id in ids:
            writer.writerow([doc_id, "s", "site.example", day, doc_id, body.format(doc_id) * 3])
    return path


def published_ids(out: Path) -> set[str]:
    with open(out / "clusters.csv", newline="") as handle:
        return {row["doc_id"] for row in csv.DictReader(handle)}


@pytest.fixture
def corpus(tmp_path) -> Path:
    out = tmp_path / "out"
    assert main(["run", str(FIXTURE), "--output", str(out), "--quiet"]) == 0
    return out


def test_a_run_with_a_mistyped_input_changes_nothing_and_the_next_add_keeps_the_corpus(corpus, tmp_path, capsys):
    before = held(corpus)
    typo = str(FIXTURE).replace("documents.csv", "documnets.csv")
    assert main(["run", typo, "--output", str(corpus), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "documnets.csv" in err and "cleared" not in err
    assert held(corpus) == before
    new_day = write_day(tmp_path / "new.csv", "2026-04-01", ["fresh-01"])
    assert main(["add", str(new_day), "--output", str(corpus)]) == 0
    assert published_ids(corpus) == _fixture_ids() | {"fresh-01"}


def test_an_input_without_documents_neither_empties_a_held_corpus_nor_is_added(corpus, tmp_path, capsys):
    """A header-only export given by mistake: `run` would clear every held day, so it is refused;
    `add` and `check` say that the input holds no documents (not that its dates are wrong)."""
    before = held(corpus)
    empty = tmp_path / "empty.csv"
    empty.write_text("doc_id,source,domain,crawled_at,title,body\n")
    assert main(["run", str(empty), "--output", str(corpus), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{empty} holds no documents: the corpus in {corpus / '_storage'} (22 crawl day(s)) is left as it is" in err
    assert "cleared" not in err
    assert held(corpus) == before
    for command in (["add", str(empty), "--output", str(corpus)], ["check", str(empty), "--against", str(corpus)]):
        assert main(command) == 2
        assert f"error: {empty}: the input holds no documents\n" in capsys.readouterr().err
    assert held(corpus) == before
    undated = write_day(tmp_path / "undated.csv", "someday", ["u-1"])
    assert main(["add", str(undated), "--output", str(corpus)]) == 2
    assert "no crawl day found in the input (is crawled_at a date?" in capsys.readouterr().err


def _fixture_ids() -> set[str]:
    with open(FIXTURE, newline="") as handle:
        return {row["doc_id"] for row in csv.DictReader(handle)}


def test_a_run_that_fails_in_a_stage_restores_the_corpus_it_had_cleared(corpus, tmp_path, capsys, monkeypatch):
    """The other input's days are cleared and its documents written before scoring fails: all undone."""
    before = held(corpus)

    def failing(run):
        raise MemoryError("out of memory while scoring")

    monkeypatch.setitem(DUCKDB.stages, "scored_pairs", failing)
    other = write_day(tmp_path / "other.csv", "2025-01-05", ["other-01", "other-02"])
    assert main(["run", str(other), "--output", str(corpus), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "webdedup: error in scored_pairs: MemoryError: out of memory while scoring" in err
    assert f"nothing was changed: {corpus / '_storage'} and {corpus} are as they were" in err
    assert "cleared" not in err  # said only of a command whose result stands
    assert held(corpus) == before


def test_a_command_stopped_after_publishing_says_that_its_results_stand(corpus, tmp_path, capsys, monkeypatch):
    """A Ctrl-C once the outputs are published (its commit point) said only "interrupted", as if
    nothing had changed."""
    publish = DUCKDB.stages["manifest"]

    def interrupted_after(run):
        publish(run)
        raise KeyboardInterrupt

    monkeypatch.setitem(DUCKDB.stages, "manifest", interrupted_after)
    later = write_day(tmp_path / "later.csv", "2026-04-02", ["later-01", "later-02"])
    with pytest.raises(KeyboardInterrupt):
        main(["add", str(later), "--output", str(corpus)])
    err = capsys.readouterr().err
    assert f"{corpus} holds this command's results: it stopped after publishing them" in err
    assert "nothing was changed" not in err
    assert json.loads((corpus / "manifest.json").read_text())["counts"]["documents"] == 26


@pytest.mark.parametrize(
    "error",
    [
        OSError(28, "No space left on device"),
        RuntimeError('IO Error: Could not write file "x.tmp": No space left on device'),  # DuckDB's
    ],
    ids=["os", "duckdb"],
)
def test_a_full_disk_is_named_with_the_folders_to_free(corpus, tmp_path, capsys, monkeypatch, error):
    before = held(corpus)

    def failing(run):
        raise error

    monkeypatch.setitem(DUCKDB.stages, "band_memberships", failing)
    day = write_day(tmp_path / "day.csv", "2026-05-01", ["full-01"])
    assert main(["add", str(day), "--output", str(corpus)]) == 2
    err = capsys.readouterr().err
    assert (
        f"webdedup: error: the disk is full (no space left on device) under {corpus / '_storage'} "
        "(with its spill folder .duckdb_tmp) or the output folder: free space there, or give --storage a larger disk\n"
    ) in err
    assert held(corpus) == before


def test_a_refused_add_stores_nothing_and_later_adds_work(corpus, tmp_path, capsys):
    before = held(corpus)
    # notice-01 is held on another day of the corpus: refused
    clash = write_day(tmp_path / "clash.csv", "2026-05-02", ["notice-01", "late-01"])
    assert main(["add", str(clash), "--output", str(corpus)]) == 2
    err = capsys.readouterr().err
    assert "doc_id must be unique" in err and "'notice-01'" in err
    assert held(corpus) == before
    good = write_day(tmp_path / "good.csv", "2026-05-03", ["late-02"])
    assert main(["add", str(good), "--output", str(corpus), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["documents_added"] == 1 and report["input_days"] == ["2026-05-03"]
    assert published_ids(corpus) == _fixture_ids() | {"late-02"}  # late-01 of the refused add is not there


def test_a_failed_blocking_check_publishes_nothing_and_restores_the_storage(corpus, capsys, monkeypatch):
    from .test_cli import _drop_from_clusters

    before = held(corpus)
    _drop_from_clusters(monkeypatch, ["notice-02"])
    assert main(["run", str(FIXTURE), "--output", str(corpus), "--quiet", "--threshold", "0.8"]) == 1
    assert "check failed: clusters:every_document_in_one_cluster" in capsys.readouterr().err
    assert held(corpus) == before


def test_run_then_add_is_an_incremental_update(corpus, tmp_path, capsys):
    new_day = write_day(tmp_path / "new.csv", "2026-04-01", ["fresh-01", "fresh-02"])
    assert main(["add", str(new_day), "--output", str(corpus), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["mode"] == "incremental" and report["documents_added"] == 2


def test_what_a_killed_command_changed_is_restored(tmp_path):
    root = tmp_path / "storage"
    (root / "documents").mkdir(parents=True)
    (root / "documents" / "part-2026-03.parquet").write_bytes(b"march")
    (root / "corpus_state.json").write_text("{}")
    before = held(root)
    transaction = StorageTransaction(root)
    transaction.begin()
    # what a command does: replace a file, add one in a new folder, remove one; then it is killed
    temporary = root / "documents" / ".x.tmp"
    temporary.write_bytes(b"march, rewritten")
    os.replace(temporary, root / "documents" / "part-2026-03.parquet")
    (root / "clusters").mkdir()
    (root / "clusters" / "data.parquet").write_bytes(b"new")
    (root / "corpus_state.json").unlink()
    assert restore(root)  # what the next command does first
    assert held(root) == before
    assert not (root / "clusters").exists() and not (root / ROLLBACK_DIR).exists()
    assert not restore(root)


def test_links_of_a_command_killed_while_taking_them_are_dropped(tmp_path):
    root = tmp_path / "storage"
    root.mkdir()
    (root / "corpus_state.json").write_text("{}")
    (root / ROLLBACK_DIR / "documents").mkdir(parents=True)  # no COMPLETE marker: nothing was changed yet
    assert not restore(root)
    assert held(root) == {"corpus_state.json": hashlib.sha256(b"{}").hexdigest()}


def test_a_command_killed_after_its_publish_began_is_completed_not_undone(corpus, tmp_path):
    """The publish journal is the commit point: the next command completes the outputs and keeps
    the storage that produced them."""
    storage = corpus / "_storage"
    transaction = StorageTransaction(storage)
    transaction.begin()  # a command that had reached its publish...
    marker = storage / "documents" / "marker.txt"
    marker.write_text("written by the killed command")
    staging = corpus / ".publish-dead"
    staging.mkdir()
    (staging / "clusters.csv").write_text("doc_id,cluster_id\n")
    (corpus / JOURNAL).write_text(json.dumps({"staging": staging.name, "move": ["clusters.csv"], "remove": []}))
    other = write_day(tmp_path / "next.csv", "2026-04-02", ["next-01"])
    assert main(["add", str(other), "--output", str(corpus)]) == 0
    assert marker.exists()  # the storage of the killed command stood
    assert not (storage / ROLLBACK_DIR).exists()
    assert pq.read_metadata(corpus / "deduped_documents.parquet").num_rows > 0


def test_output_naming_a_file_is_refused_in_one_line(tmp_path, capsys):
    target = tmp_path / "out.txt"
    target.write_text("mine")
    assert main(["run", str(FIXTURE), "--output", str(target), "--quiet"]) == 2
    assert f"webdedup: error: {target}: cannot be used as a folder: it is an existing file" in capsys.readouterr().err
    assert target.read_text() == "mine"


# ---- any sequence of commands, failing ones among them -----------------------------------

FIXTURE_ROWS = list(csv.DictReader(open(FIXTURE, newline="")))
CHUNKS = 3  # the fixture's pages split by crawl day into this many files


def _chunk_files(folder: Path) -> list[Path]:
    rows = sorted(FIXTURE_ROWS, key=lambda row: (row["crawled_at"], row["doc_id"]))
    days = sorted({row["crawled_at"] for row in rows})
    files = []
    for i in range(CHUNKS):
        held_days = set(days[i::CHUNKS])
        path = folder / f"chunk-{i}.csv"
        with open(path, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(row for row in rows if row["crawled_at"] in held_days)
        files.append(path)
    return files


def _bad_files(folder: Path) -> dict[str, Path]:
    malformed = folder / "malformed.csv"
    malformed.write_text("doc_id,source,domain,crawled_at,title\nx-1,s,d.example,2026-03-01,no body column\n")
    clash = write_day(folder / "clash.csv", "2026-07-01", [FIXTURE_ROWS[0]["doc_id"], "clash-new"])
    return {"missing": folder / "no-such-file.csv", "malformed": malformed, "clash": clash}


class _Failing:
    """A stage that fails (as a full disk or a bug would) while the command runs."""

    def __init__(self, stage: str) -> None:
        self.stage = stage

    def __enter__(self):
        self.real = DUCKDB.stages[self.stage]

        def failing(run):
            raise OSError(f"injected failure in {self.stage}")

        DUCKDB.stages[self.stage] = failing

    def __exit__(self, *exc):
        DUCKDB.stages[self.stage] = self.real


def _command(op: tuple, files: list[Path], bad: dict[str, Path], out: Path) -> list[str]:
    kind, target = op[0], op[1]
    path = files[target] if isinstance(target, int) else bad[target]
    return [kind, str(path), "--output", str(out), *(["--quiet"] if kind == "run" else [])]


def _published(out: Path) -> dict:
    if not (out / "clusters.csv").exists():
        return {}
    return {
        "clusters": (out / "clusters.csv").read_bytes(),
        "duplicate_pairs": (out / "duplicate_pairs.csv").read_bytes(),
        "deduped": pq.read_table(out / "deduped_documents.parquet").to_pylist(),
    }


OPS = st.tuples(st.sampled_from(["run", "add"]), st.integers(0, CHUNKS - 1)) | st.tuples(
    st.sampled_from(["run", "add"]),
    st.sampled_from(["missing", "malformed", "clash"]) | st.integers(0, CHUNKS - 1),
    st.sampled_from(["documents", "fingerprinted", "candidate_pairs", "scored_pairs", "deduped_documents", "manifest"]),
)


# Each example runs up to ten commands: few examples, and no shrinking (minutes); a failure prints its sequence.
@settings(
    max_examples=6,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=st.lists(OPS, min_size=2, max_size=5))
def test_failing_commands_in_any_sequence_never_change_the_corpus(tmp_path_factory, ops):
    """Each failing command leaves every stored and published file as it was; in the end the
    outputs equal those of the same sequence without the failing commands."""
    folder = tmp_path_factory.mktemp("sequence")
    files, bad = _chunk_files(folder), _bad_files(folder)
    out, succeeded = folder / "out", []
    for op in ops:
        before = held(out) if out.exists() else {}
        command = _command(op, files, bad, out)
        if len(op) == 3 and isinstance(op[1], int):  # (fails unless the stage has nothing to do)
            with _Failing(op[2]):
                status = main(command)
        else:
            status = main(command)
        if status == 0:
            succeeded.append(op)
        else:
            assert (held(out) if out.exists() else {}) == before, (op, status)
    again = folder / "again"
    for op in succeeded:
        assert main(_command(op, files, bad, again)) == 0
    assert _published(out) == _published(again)


def test_add_with_one_flag_of_a_group_keeps_the_held_values_of_the_others(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(FIXTURE), "--output", str(out), "--quiet", "--bucket-policy", "star"]) == 0
    new_day = write_day(tmp_path / "new.csv", "2026-04-01", ["fresh-01"])
    assert main(["add", str(new_day), "--output", str(out), "--hot-bucket-size", "500"]) == 0
    held_candidates = json.loads((out / "manifest.json").read_text())["parameters"]["candidate_pairs"]
    assert held_candidates["bucket_policy"] == "star" and held_candidates["hot_bucket_size"] == 500


def test_add_refuses_a_new_fingerprint_parameter_even_with_full_rebuild(corpus, tmp_path, capsys):
    before = held(corpus)
    new_day = write_day(tmp_path / "new.csv", "2026-04-01", ["fresh-01"])
    assert main(["add", str(new_day), "--output", str(corpus), "--full-rebuild", "--shingle-size", "3"]) == 2
    err = capsys.readouterr().err
    assert "--shingle-size=5 (held) vs 3 (given)" in err and "run `webdedup run` on the whole input" in err
    assert held(corpus) == before


def test_reading_commands_warn_about_an_interrupted_command(corpus, capsys):
    (corpus / "_storage" / ROLLBACK_DIR).mkdir()  # what a killed add leaves before the next writer undoes it
    (corpus / JOURNAL).write_text(json.dumps({"staging": ".publish-x", "move": [], "remove": []}))
    assert main(["inspect", "billing-canonical", "--output", str(corpus)]) == 0
    err = capsys.readouterr().err
    assert f"webdedup: warning: {corpus / '_storage'} is being changed by a webdedup command, or one was" in err
    assert f"webdedup: warning: {corpus} holds a publish that was interrupted" in err
    assert main(["check", str(FIXTURE), "--against", str(corpus), "--report", str(corpus.parent / "c.pq")]) == 0
    err = capsys.readouterr().err
    assert f"webdedup: warning: {corpus / '_storage'} is being changed by a webdedup command, or one was" in err


def test_a_run_killed_in_a_stage_is_undone_by_the_next_command(corpus, tmp_path):
    """kill -9 while scoring (the days of the corpus cleared, the other input's documents written):
    the next command restores the corpus first."""
    import signal
    import subprocess
    import sys

    before = held(corpus)
    other = write_day(tmp_path / "other.csv", "2025-01-05", ["other-01", "other-02"])
    script = (
        "import sys, time\n"
        "from webdedup_assets.engine import DUCKDB\n"
        "DUCKDB.stages['scored_pairs'] = lambda run: time.sleep(600)\n"
        "from webdedup_assets.cli.main import main\n"
        f"sys.exit(main(['run', {str(other)!r}, '--output', {str(corpus)!r}]))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:
            if "scored_pairs       running" in line:
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert held(corpus) != before  # the killed run had changed the storage
    assert restore(corpus / "_storage")  # what the next writer does first
    assert held(corpus) == before


def test_check_takes_the_output_folder_and_writes_its_report_there(corpus, tmp_path, capsys):
    new_day = write_day(tmp_path / "new.csv", "2026-04-01", ["fresh-01"])
    assert main(["check", str(new_day), "--against", str(corpus)]) == 0
    assert f"-> {corpus / 'check.parquet'}" in capsys.readouterr().out
    assert pq.read_table(corpus / "check.parquet").column("doc_id").to_pylist() == ["fresh-01"]


def test_add_shows_its_stages_and_says_when_it_starts_a_corpus(tmp_path, capsys):
    new_day = write_day(tmp_path / "new.csv", "2026-04-01", ["fresh-01", "fresh-02"])
    assert main(["add", str(new_day), "--output", str(tmp_path / "typo")]) == 0
    err = capsys.readouterr().err
    assert f"webdedup: {tmp_path / 'typo' / '_storage'} held no corpus: a new one is started with {new_day}" in err
    assert "fingerprinted      done: 2 rows" in err
    assert main(["add", str(new_day), "--output", str(tmp_path / "typo"), "--quiet"]) == 0
    assert "fingerprinted" not in capsys.readouterr().err


def test_an_output_inside_the_input_folder_is_refused_before_anything_is_written(tmp_path, capsys):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "documents.csv").write_bytes(FIXTURE.read_bytes())
    assert main(["run", str(folder), "--output", str(folder), "--quiet"]) == 2
    assert capsys.readouterr().err == (
        f"webdedup: error: --output {folder} is inside the input folder {folder}: the next command would read its "
        "files back as input; give an --output folder outside the input\n"
    )
    assert sorted(p.name for p in folder.iterdir()) == ["documents.csv"]


def test_an_output_folder_holding_files_of_the_users_under_output_names_is_refused(tmp_path, capsys):
    """Publishing replaces manifest.json, removed.csv, shards/ ...: in a folder webdedup did not
    write, those are the user's files, and the run is refused before anything is written."""
    folder = tmp_path / "mine"
    (folder / "shards").mkdir(parents=True)
    (folder / "shards" / "notes.txt").write_text("my notes")
    (folder / "manifest.json").write_text('{"mine": true}')
    (folder / "removed.csv").write_text("my,own,csv\n")
    (folder / "other.txt").write_text("keep")
    before = held(folder)
    assert main(["run", str(FIXTURE), "--output", str(folder), "--quiet"]) == 2
    assert capsys.readouterr().err == (
        f"webdedup: error: --output {folder} holds removed.csv, shards, manifest.json but is not a folder webdedup "
        "wrote (no manifest.json of webdedup): publishing would replace them; give a new or empty folder, or move "
        "those files\n"
    )
    assert held(folder) == before and sorted(p.name for p in folder.iterdir()) == sorted(
        ["shards", "manifest.json", "removed.csv", "other.txt"]
    )


def test_an_input_inside_what_the_output_replaces_is_refused(corpus, capsys):
    """`run OUT/shards --output OUT` would replace its own input when it publishes."""
    shards = corpus / "shards"
    shards.mkdir()
    (shards / "documents.csv").write_bytes(FIXTURE.read_bytes())
    before = held(corpus)
    assert main(["run", str(shards), "--output", str(corpus), "--quiet"]) == 2
    assert capsys.readouterr().err == (
        f"webdedup: error: the input {shards} is inside {shards}, which --output replaces when the command writes; "
        "move the input out of it\n"
    )
    assert held(corpus) == before


def test_a_failed_run_into_a_new_folder_leaves_no_folder_behind(tmp_path, capsys):
    twice = write_day(tmp_path / "twice.csv", "2026-03-01", ["a1", "a1"])
    new = tmp_path / "new"
    assert main(["run", str(twice), "--output", str(new / "out"), "--quiet"]) == 2
    assert "doc_id must be unique" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["twice.csv"]


def test_ctrl_c_puts_everything_back_and_ends_in_one_line_with_status_130(corpus, tmp_path):
    """SIGINT while `add` works (after its first progress line): the storage and the outputs are as
    they were, stderr says so in lines of webdedup's own, no traceback, exit status 130."""
    import signal
    import subprocess
    import sys

    other = write_day(tmp_path / "next.csv", "2026-04-02", [f"next-{i:02d}" for i in range(40)])
    before = held(corpus)
    command = [sys.executable, "-m", "webdedup_assets.cli.main", "add", str(other), "--output", str(corpus)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first = proc.stderr.readline()  # the command has started: its handlers are in place
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 130, first + rest
    assert "Traceback" not in rest and rest.rstrip().splitlines()[-1] == "webdedup: interrupted"
    assert held(corpus) == before


def test_the_manifest_counts_empty_documents_of_days_an_add_kept(tmp_path):
    """empty_documents is of the whole corpus: an add fingerprints only its own day."""
    days = tmp_path / "days"
    days.mkdir()
    write_day(days / "2026-03-01.csv", "2026-03-01", ["e1", "e2"], body="")
    write_day(days / "2026-03-02.csv", "2026-03-02", ["e3"], body="")
    assert main(["run", str(days / "2026-03-01.csv"), "--output", str(tmp_path / "a"), "--quiet"]) == 0
    assert main(["add", str(days / "2026-03-02.csv"), "--output", str(tmp_path / "a"), "--quiet"]) == 0
    assert main(["run", str(days), "--output", str(tmp_path / "b"), "--quiet"]) == 0
    for out in ("a", "b"):
        assert json.loads((tmp_path / out / "manifest.json").read_text())["counts"]["empty_documents"] == 3, out


def test_ctrl_c_inside_a_duckdb_query_is_an_interruption_not_an_error(corpus, tmp_path, monkeypatch):
    """DuckDB answers SIGINT during a query with RuntimeError('Query interrupted')."""
    from webdedup_assets.engine import pipeline

    def interrupted(*args, **kwargs):
        raise RuntimeError("Query interrupted")

    monkeypatch.setattr(pipeline, "stage_documents", interrupted)
    before = held(corpus)
    with pytest.raises(KeyboardInterrupt):
        main(["add", str(write_day(tmp_path / "d.csv", "2026-04-02", ["d1"])), "--output", str(corpus), "--quiet"])
    assert held(corpus) == before


def test_check_dates_undated_pages_with_default_date_and_names_the_flag(corpus, tmp_path, capsys):
    undated = write_day(tmp_path / "undated.csv", "", ["fresh-01"])
    before = held(corpus)
    assert main(["check", str(undated), "--against", str(corpus)]) == 2
    assert capsys.readouterr().err == (
        f"webdedup: error: {undated}: no crawl day found in the input (is crawled_at a date? pages without one take "
        "--default-date)\n"
    )
    assert main(["check", str(undated), "--against", str(corpus), "--default-date", "2026-13-01"]) == 2
    assert capsys.readouterr().err == "webdedup: error: --default-date '2026-13-01': not a calendar date\n"
    assert main(["check", str(undated), "--against", str(corpus), "--default-date", "2026-04-01"]) == 0
    assert pq.read_table(corpus / "check.parquet").column("doc_id").to_pylist() == ["fresh-01"]
    assert {k: v for k, v in held(corpus).items() if k != "check.parquet"} == before


def test_a_read_only_folder_is_read_without_a_lock_and_refused_in_one_line_for_writing(tmp_path, capsys, monkeypatch):
    """A corpus on a read-only share (a lock file cannot be made there): the reading commands
    answer, a writing command is refused in one line (each ended in an OSError traceback)."""
    import errno

    from webdedup_assets.storage import state

    out = tmp_path / "out"
    assert main(["run", str(FIXTURE), "--output", str(out), "--quiet"]) == 0
    for lock in out.rglob(LOCK_FILE):
        lock.unlink()
    real_open = os.open

    def read_only(path, flags, *args):
        if Path(path).name == LOCK_FILE and Path(path).is_relative_to(out):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(state.os, "open", read_only)
    capsys.readouterr()
    assert main(["inspect", "billing-mirror", "--output", str(out)]) == 0
    assert "billing-canonical" in capsys.readouterr().out
    assert main(["explain", "billing-mirror", "billing-canonical", "--output", str(out)]) == 0
    assert main(["add", str(FIXTURE), "--output", str(out), "--quiet"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"webdedup: error: {out}: cannot write in it (Read-only file system); give a folder webdedup may write in"
    )


def test_verify_names_an_interrupted_command_and_outputs_of_another_corpus(tmp_path, capsys):
    """verify said 0 problem(s) of a storage holding a killed command's uncommitted changes, and of
    an output left by an interrupted publish with another corpus' files (1594 against 3254 pages)."""
    out, other = tmp_path / "out", tmp_path / "other"
    rows = list(csv.DictReader(open(FIXTURE, newline="", encoding="utf-8")))
    ten = tmp_path / "ten.csv"
    with open(ten, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows[:10])
    assert main(["run", str(FIXTURE), "--output", str(out), "--quiet"]) == 0
    assert main(["run", str(ten), "--output", str(other), "--quiet"]) == 0
    assert main(["verify", "--output", str(out), "--quiet"]) == 0
    published = json.loads((other / "manifest.json").read_text())  # the other corpus' set, as from out's storage
    for name in published["outputs"]:
        if (other / name).is_file():
            (out / name).unlink(missing_ok=True)  # a Parquet output is a hard link to a stored file
            (out / name).write_bytes((other / name).read_bytes())
    (out / "manifest.json").write_text(json.dumps({**published, "storage_root": str(out / "_storage")}))
    (out / "_storage" / ROLLBACK_DIR).mkdir()
    capsys.readouterr()
    assert main(["verify", "--output", str(out), "--quiet"]) == 2
    said = capsys.readouterr().out.splitlines()
    assert said == [
        f"{out / '_storage'}: a webdedup command is changing it, or one was interrupted there ({ROLLBACK_DIR}): "
        "the next `webdedup run` or `add` undoes that command",
        f"{out / 'manifest.json'}: the outputs are of another corpus than {out / '_storage'} holds (documents 10 "
        "against 24, candidate_pairs 9 against 18, candidate_reduction_ratio 0.8 against 0.9348); publish again "
        "(`webdedup run`, or `webdedup add`)",
    ]


def test_an_input_replaced_while_it_is_read_is_refused_and_nothing_changes(tmp_path, capsys, monkeypatch):
    """cp over an input while run read it: the rows of the new file were stored under the old
    file's sha256, exit 0, no word of it."""
    from webdedup_assets.engine.stages import documents

    source = tmp_path / "pages.csv"
    source.write_bytes(FIXTURE.read_bytes())
    out = tmp_path / "out"
    real = documents._write_months

    def written_then_replaced(*args, **kwargs):
        result = real(*args, **kwargs)
        source.write_bytes(FIXTURE.read_bytes().replace(b"Billing", b"Invoicing"))
        return result

    monkeypatch.setattr(documents, "_write_months", written_then_replaced)
    assert main(["run", str(source), "--output", str(out), "--quiet"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"webdedup: error in documents: {source}: changed while it was read; run the command again once it is written"
    )
    assert not out.exists()


def test_sigterm_puts_everything_back_and_ends_in_one_line_with_status_143(corpus, tmp_path):
    """`timeout`, systemd and schedulers stop a command with SIGTERM: it ended at once with status
    143 and no word, its changes left for the next command to undo."""
    import signal
    import subprocess
    import sys

    other = write_day(tmp_path / "next.csv", "2026-04-02", [f"next-{i:02d}" for i in range(40)])
    before = held(corpus)
    command = [sys.executable, "-m", "webdedup_assets.cli.main", "add", str(other), "--output", str(corpus)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first = proc.stderr.readline()  # the command has started: its handlers are in place
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 143, first + rest
    assert "Traceback" not in rest and rest.rstrip().splitlines()[-1] == "webdedup: terminated"
    assert f"nothing was changed: {corpus / '_storage'} and {corpus} are as they were" in rest
    assert not (corpus / "_storage" / ROLLBACK_DIR).exists()
    assert held(corpus) == before


def test_a_ctrl_c_a_duckdb_query_swallowed_stops_the_command_before_its_next_stage(corpus, tmp_path, monkeypatch):
    """The KeyboardInterrupt of Ctrl-C can be lost inside a DuckDB query that ends anyway: the add
    went on and published (exit 0). The handler's flag stops the command before its next stage."""
    from webdedup_assets.engine.stages import documents
    from webdedup_assets.errors import INTERRUPTED

    other = write_day(tmp_path / "next.csv", "2026-04-02", ["next-01", "next-02"])
    before = held(corpus)
    real = documents._write_months

    def swallowed(*args, **kwargs):
        INTERRUPTED.set()  # as the handler does; its KeyboardInterrupt lost
        return real(*args, **kwargs)

    monkeypatch.setattr(documents, "_write_months", swallowed)
    try:
        with pytest.raises(KeyboardInterrupt):
            main(["add", str(other), "--output", str(corpus), "--quiet"])
    finally:
        INTERRUPTED.clear()
    assert held(corpus) == before


def test_an_add_with_a_mistyped_storage_does_not_publish_a_new_corpus_over_the_output(corpus, tmp_path, capsys):
    """`add --storage OUT/_storge`: a new corpus of the input was published over the output's 24
    pages, whose manifest then named the mistyped folder. Refused before anything is written; the
    right storage, or a storage holding another corpus, is taken."""
    other = write_day(tmp_path / "next.csv", "2026-04-02", ["next-01", "next-02"])
    before = held(corpus)
    typo = corpus / "_storge"
    assert main(["add", str(other), "--output", str(corpus), "--storage", str(typo), "--quiet"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"webdedup: error: --storage {typo} holds no corpus, and --output {corpus} publishes the corpus held in "
        f"{corpus / '_storage'}: an add would publish a new corpus over it; give --storage {corpus / '_storage'} "
        "(or no --storage), or another --output"
    )
    assert held(corpus) == before and not typo.exists()
    assert main(["add", str(other), "--output", str(corpus), "--storage", str(corpus / "_storage"), "--quiet"]) == 0
    assert published_ids(corpus) == _fixture_ids() | {"next-01", "next-02"}


def test_a_check_report_goes_over_an_earlier_report_only(corpus, tmp_path, capsys):
    """`check --report PATH` wrote over whatever was at PATH: the input checked, a published output."""
    day = write_day(tmp_path / "day.csv", "2026-04-02", ["next-01"])
    before, given = held(corpus), day.read_bytes()
    for path in (day, corpus / "deduped_documents.parquet"):
        assert main(["check", str(day), "--against", str(corpus), "--report", str(path), "--quiet"]) == 2
        assert capsys.readouterr().err.splitlines()[-1] == (
            f"webdedup: error: --report {path} exists and is not a check report: give another path"
        )
    assert held(corpus) == before and day.read_bytes() == given
    report = tmp_path / "report.parquet"
    for _ in range(2):  # a report again over the earlier one
        assert main(["check", str(day), "--against", str(corpus), "--report", str(report), "--quiet"]) == 0
    assert pq.read_table(report).column("doc_id").to_pylist() == ["next-01"]


def test_a_second_ctrl_c_lets_the_undo_of_the_first_run_to_its_end(monkeypatch):
    """Two Ctrl-C close together (a double press, `timeout` signalling the process group): the
    second handler waited forever on the lock of the first one's Event.set (SIGTERM no longer
    ended the command), or raised inside the undo. The first raises; the next ones only record."""
    import signal

    from webdedup_assets import cli
    from webdedup_assets.errors import INTERRUPTED

    monkeypatch.setattr(cli, "_RECEIVED", [])
    try:
        with pytest.raises(KeyboardInterrupt):
            cli._interrupt(signal.SIGINT, None)
        cli._interrupt(signal.SIGINT, None)
        cli._interrupt(signal.SIGTERM, None)
        assert INTERRUPTED.is_set() and cli._RECEIVED == [signal.SIGINT, signal.SIGINT, signal.SIGTERM]
    finally:
        INTERRUPTED.clear()


def test_a_ctrl_c_inside_the_import_machinery_comes_again_outside_it(monkeypatch):
    """A Ctrl-C while modules load could land in a module lock's weakref callback, where the
    KeyboardInterrupt was printed as an ignored exception's traceback: the signal is sent again."""
    import signal
    import time
    from types import SimpleNamespace

    from webdedup_assets import cli
    from webdedup_assets.errors import INTERRUPTED

    sent = []
    monkeypatch.setattr(cli.os, "kill", lambda pid, signum: sent.append((pid, signum)))
    monkeypatch.setattr(cli, "_RECEIVED", [])
    importing = SimpleNamespace(f_code=SimpleNamespace(co_filename="<frozen importlib._bootstrap>"))
    cli._interrupt(signal.SIGINT, importing)  # no KeyboardInterrupt here
    deadline = time.monotonic() + 5
    while not sent and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sent == [(os.getpid(), signal.SIGINT)] and not INTERRUPTED.is_set() and cli._RECEIVED == []


def test_an_add_that_would_drop_held_documents_of_a_day_it_gives_again_is_refused(tmp_path, capsys):
    """A day's crawl in two files added one by one: the second add replaced the day and dropped the
    first file's pages without a word (documents added 2, removed 2). Refused, naming the day, the
    count and the first ids, with everything held unchanged; a file that gives the day's pages again
    and more needs no flag; --replace-days drops them."""
    first = write_day(tmp_path / "a.csv", "2026-03-01", ["a1", "a2"])
    second = write_day(tmp_path / "b.csv", "2026-03-01", ["b1", "b2"])
    out = tmp_path / "out"
    assert main(["run", str(first), "--output", str(out), "--quiet"]) == 0
    before = held(out)
    capsys.readouterr()
    assert main(["add", str(second), "--output", str(out), "--quiet"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "webdedup: error: the input gives again 1 crawl day(s) the corpus holds (2026-03-01) without 2 of their "
        "held documents (first: a1, a2): an add replaces each day it gives; give all of a day's files in one add, "
        "or add --replace-days to drop those documents"
    )
    assert held(out) == before
    both = write_day(tmp_path / "both.csv", "2026-03-01", ["a1", "a2", "b1", "b2"])
    assert main(["add", str(both), "--output", str(out), "--quiet"]) == 0
    assert published_ids(out) == {"a1", "a2", "b1", "b2"}
    assert main(["add", str(second), "--output", str(out), "--quiet", "--replace-days"]) == 0
    assert published_ids(out) == {"b1", "b2"}


def test_pages_without_a_word_are_named_in_a_warning(tmp_path, capsys):
    """A text column mapped to a field most records lack kept them as empty pages without a word
    (only the manifest counted them): run and add say how many."""
    pages = write_day(tmp_path / "a.csv", "2026-03-01", ["a1", "a2"])
    empty = write_day(tmp_path / "b.csv", "2026-03-02", ["b1", "b2", "b3"], body="")
    out = tmp_path / "out"
    assert main(["run", str(pages), "--output", str(out), "--quiet"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["add", str(empty), "--output", str(out), "--quiet"]) == 0
    assert capsys.readouterr().err.splitlines()[-1] == (
        "webdedup: warning: 3 of 5 document(s) hold no word (an empty or missing text; is --text-column right?): "
        "each is a cluster of its own"
    )


def test_a_check_of_pages_whose_doc_ids_the_corpus_holds_says_so(corpus, tmp_path, capsys):
    """A page whose doc_id the corpus holds was answered for without a word (an add of it on another
    day is refused): the check warns, naming how many and the first ones, and changes nothing."""
    held_id = sorted(_fixture_ids())[0]
    day = write_day(tmp_path / "day.csv", "2026-04-02", [held_id, "fresh-01"])
    before = held(corpus)
    report = tmp_path / "report.parquet"
    assert main(["check", str(day), "--against", str(corpus), "--report", str(report), "--quiet"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"webdedup: warning: 1 page(s) of {day} carry doc_ids the corpus holds already (first: {held_id}): each is "
        "compared with the held page of its doc_id too"
    ]
    assert held(corpus) == before
    assert sorted(pq.read_table(report).column("doc_id").to_pylist()) == sorted([held_id, "fresh-01"])
