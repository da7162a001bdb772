"""Trustworthy runs: the corpus state, one writer at a time, outputs as one set, deterministic outputs."""

from __future__ import annotations

import csv
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from webdedup_assets.cli.main import main
from webdedup_assets.engine import publish as publish_module
from webdedup_assets.errors import WebdedupError
from webdedup_assets.storage.state import (
    HOLDERS_DIR,
    LockBusy,
    check_consistent,
    load_state,
    remove_leftovers,
    update_state,
    writer_lock,
)
from webdedup_assets.storage.store import Store

from .conftest import FIXTURE

REPO = Path(__file__).resolve().parents[1]


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["run", *args, "--quiet"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _summary_count(out: str, key: str) -> str:
    return next(line.split()[-1] for line in out.splitlines() if line.strip().startswith(key + " "))


def test_a_second_corpus_in_the_same_output_replaces_the_first(tmp_path, capsys):
    out = tmp_path / "out"
    code, stdout, _ = _run(capsys, str(FIXTURE), "--output", str(out))
    assert code == 0 and _summary_count(stdout, "documents") == "24"
    fixture = _rows(FIXTURE)
    gone = [r for r in fixture if r["crawled_at"].startswith("2026-03-22")]
    assert len(gone) == 1
    fewer = _write(tmp_path / "fewer.csv", [r for r in fixture if r not in gone])
    code, stdout, stderr = _run(capsys, str(fewer), "--output", str(out))
    assert code == 0
    assert _summary_count(stdout, "documents") == "23"
    assert "cleared 1 crawl day(s)" in stderr and "2026-03-22" in stderr
    clustered = {r["doc_id"] for r in _rows(out / "clusters.csv")}
    assert gone[0]["doc_id"] not in clustered and len(clustered) == 23
    state = load_state(Store(out / "_storage"))
    assert "2026-03-22" not in state["days"] and len(state["days"]) == 21
    assert state["input"]["path"] == str(fewer.resolve())


def test_a_page_moved_to_another_day_is_a_clean_rerun(tmp_path, capsys):
    out = tmp_path / "out"
    assert _run(capsys, str(FIXTURE), "--output", str(out))[0] == 0
    rows = _rows(FIXTURE)
    moved = rows[0]["doc_id"]
    rows[0] = {**rows[0], "crawled_at": "2026-02-27"}
    code, stdout, stderr = _run(capsys, str(_write(tmp_path / "moved.csv", rows)), "--output", str(out))
    assert code == 0, stderr
    assert _summary_count(stdout, "documents") == "24"
    state = load_state(Store(out / "_storage"))
    assert "2026-02-27" in state["days"]
    assert moved in {r["doc_id"] for r in _rows(out / "clusters.csv")}


def test_the_state_records_days_inputs_and_parameters(fixture_run):
    _, store, _ = fixture_run
    state = load_state(store)
    assert len(state["days"]) == 22
    day = state["days"]["2026-03-12"]["documents"]
    assert day["rows"] == 2
    assert (
        day["input_files"][0]["sha256"]
        == json.loads((FIXTURE.with_suffix(".expected.json")).read_text())["input_sha256"]
    )
    # files and rows per crawl month: the fixture's 22 days are one month
    assert state["months"] == {"2026-03": {"documents": 24, "fingerprinted": 24, "band_memberships": 24 * 26}}
    assert state["parameters"]["band_memberships"]["banding"] == {"bands": 26, "rows": 5}


def test_global_stages_refuse_storage_that_is_not_one_corpus(tmp_path, capsys):
    out = tmp_path / "out"
    assert _run(capsys, str(FIXTURE), "--output", str(out))[0] == 0
    store = Store(out / "_storage")
    check_consistent(store)
    saved = store.path("band_memberships", "2026-03").read_bytes()
    store.remove("band_memberships", "2026-03")
    with pytest.raises(WebdedupError, match=r"band_memberships lacks 1 month\(s\) of the corpus \(first: 2026-03\)"):
        check_consistent(store)
    store.path("band_memberships", "2026-03").write_bytes(saved)
    (store.asset_dir("fingerprinted") / "part-2019-01.parquet").write_bytes(
        store.path("fingerprinted", "2026-03").read_bytes()
    )
    with pytest.raises(WebdedupError, match=r"fingerprinted holds 1 month\(s\) that are not part of the corpus"):
        check_consistent(store)
    store.remove("fingerprinted", "2019-01")
    check_consistent(store)

    def documents_rebuilt(state):  # what record_documents leaves: the month's other assets are not built yet
        state["months"]["2026-03"] = {"documents": 24}

    update_state(store, documents_rebuilt)
    with pytest.raises(
        WebdedupError, match=r"fingerprinted was built before the documents it should describe for 1 month\(s\)"
    ):
        check_consistent(store)


# ---------------------------------------------------------------- the writer lock

HOLD = """
import sys, time
from webdedup_assets.storage.state import writer_lock
with writer_lock(sys.argv[1], exclusive=sys.argv[2] == "x", purpose="test holder"):
    print("held", flush=True)
    time.sleep(60)
"""


def _holder(folder: Path, mode: str = "x") -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder), mode], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_exits_2_naming_the_holder(tmp_path, capsys):
    out = tmp_path / "out"
    holder = _holder(out / "_storage")
    try:
        code, _, stderr = _run(capsys, str(FIXTURE), "--output", str(out))
    finally:
        holder.kill()
        holder.wait()
    assert code == 2
    assert (
        f"pid {holder.pid}" in stderr and "test holder" in stderr and "is in use by another webdedup writer" in stderr
    )
    assert not (out / "manifest.json").exists()
    # once the holder is gone (killed: the OS released its lock) the run proceeds and says so
    code, _, stderr = _run(capsys, str(FIXTURE), "--output", str(out))
    assert code == 0
    assert f"left by pid {holder.pid}" in stderr and "no longer running" in stderr
    assert not list((out / "_storage" / HOLDERS_DIR).iterdir())


def test_shared_holders_coexist_and_exclude_an_exclusive_one(tmp_path):
    folder = tmp_path / "store"
    holder = _holder(folder, "s")
    try:
        with writer_lock(folder, exclusive=False):  # another daily run of another day
            pass
        with pytest.raises(LockBusy, match=rf"pid {holder.pid} .* since .*test holder"):
            with writer_lock(folder, exclusive=True, timeout=0.3):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with writer_lock(folder, exclusive=True) as report:
        assert [s["pid"] for s in report.stale] == [holder.pid]
        with writer_lock(folder, exclusive=False):  # re-entrant inside the same process
            pass


# ---------------------------------------------------------------- outputs as one set


def test_leftovers_of_dead_runs_are_removed_by_the_next_run(tmp_path, capsys):
    out = tmp_path / "out"
    assert _run(capsys, str(FIXTURE), "--output", str(out))[0] == 0
    storage = out / "_storage"
    junk = [
        storage / "documents" / ".part-2026-03-01.parquet.4242.0123abcd.tmp",
        storage / "clusters" / ".data.parquet.4242.feed.tmp",
        out / ".clusters.csv.4242.beef.tmp",
    ]
    for path in junk:
        path.write_bytes(b"x" * 1000)
    (storage / "documents" / ".staging-4242-abc").mkdir()
    (out / ".publish-4242-abc").mkdir()
    code, _, stderr = _run(capsys, str(FIXTURE), "--output", str(out))
    assert code == 0
    assert "removed 5 temporary file(s)" in stderr
    assert not any(p.exists() for p in junk)
    assert not list(out.glob(".publish-*")) and not list((storage / "documents").glob(".staging-*"))
    assert remove_leftovers(storage) == []


def test_a_crash_before_the_swap_leaves_the_previous_set(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert _run(capsys, str(FIXTURE), "--output", str(out))[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.name.startswith(".")}

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(publish_module, "_copy_csv", crash)
    rows = _rows(FIXTURE)
    code, _, stderr = _run(capsys, str(_write(tmp_path / "other.csv", rows[:10])), "--output", str(out))
    assert code == 2
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.name.startswith(".")}
    assert after == before  # the old set, whole: no new clusters.csv beside the old manifest
    assert not list(out.glob(".publish-*"))


class Killed(BaseException):
    """Stands for the process dying between two renames."""


def _published(out: Path) -> set[str]:
    return {p.name for p in out.iterdir() if p.is_file() and not p.name.startswith(".")}


def _is_one_set(out: Path) -> bool:
    manifest = json.loads((out / "manifest.json").read_text())
    return _published(out) == set(manifest["outputs"]) and all(
        (out / k).stat().st_size == v for k, v in manifest["outputs"].items() if v is not None
    )


def test_a_crash_during_the_swap_is_completed_by_the_next_publish(tmp_path, capsys, monkeypatch):
    out, other = tmp_path / "out", tmp_path / "other"
    rows = _rows(FIXTURE)
    assert _run(capsys, str(_write(tmp_path / "ten.csv", rows[:10])), "--output", str(out))[0] == 0
    assert _run(capsys, str(FIXTURE), "--output", str(other))[0] == 0
    store = Store(other / "_storage")
    manifest = json.loads((other / "manifest.json").read_text())
    real_replace = os.replace
    moved = []

    def replace_then_die(source, target):
        if Path(target).parent == out:
            if len(moved) == 3:
                raise Killed
            moved.append(target)
        real_replace(source, target)

    monkeypatch.setattr(publish_module.os, "replace", replace_then_die)
    with pytest.raises(Killed):
        publish_module.publish(store, out, manifest)
    monkeypatch.setattr(publish_module.os, "replace", real_replace)
    assert (out / publish_module.JOURNAL).exists()
    assert json.loads((out / "manifest.json").read_text())["counts"]["documents"] == 10  # the swap did not finish
    # the next run completes the swap before anything else, then publishes its own set
    code, _, stderr = _run(capsys, str(FIXTURE), "--output", str(out))
    assert code == 0 and "completed the publishing" in stderr
    assert json.loads((out / "manifest.json").read_text())["counts"]["documents"] == 24
    assert _is_one_set(out)
    assert len(_rows(out / "clusters.csv")) == 24
    assert not (out / publish_module.JOURNAL).exists() and not list(out.glob(".publish-*"))


def test_a_swap_interrupted_in_a_command_is_completed_even_by_a_command_that_fails(tmp_path, capsys, monkeypatch):
    """A file that cannot be replaced (or Ctrl-C) between two renames of the swap, in a real
    `add`: the staged files stay with the journal, and the next command, even one refused for its
    input, completes the publication (the staging was deleted with the interruption, the next
    command said it had completed it, and the folder mixed two corpora)."""
    rows = _rows(FIXTURE)
    out = tmp_path / "out"
    assert _run(capsys, str(_write(tmp_path / "ten.csv", rows[:10])), "--output", str(out))[0] == 0
    real_replace = publish_module.os.replace
    moved = []

    def replace_then_stop(source, target):
        if Path(target).parent == out and Path(source).parent.name.startswith(".publish-"):
            if len(moved) == 3:
                raise PermissionError(1, "Operation not permitted", str(target))  # e.g. chattr +i
            moved.append(target)
        real_replace(source, target)

    monkeypatch.setattr(publish_module.os, "replace", replace_then_stop)
    assert main(["add", str(_write(tmp_path / "rest.csv", rows[10:])), "--output", str(out), "--quiet"]) == 2
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .startswith(f"webdedup: error: {out}: publishing stopped half way ([Errno 1] Operation not permitted: ")
    )
    monkeypatch.setattr(publish_module.os, "replace", real_replace)
    assert (out / publish_module.JOURNAL).exists() and len([p for p in out.glob(".publish-*") if p.is_dir()]) == 1
    assert json.loads((out / "manifest.json").read_text())["counts"]["documents"] == 10  # not moved yet
    bad = _write(tmp_path / "bad.csv", [{**rows[0], "doc_id": "x", "crawled_at": "not a date"}])
    assert main(["add", str(bad), "--output", str(out), "--quiet"]) == 2
    stderr = capsys.readouterr().err
    assert f"completed the publishing of {out} that an interrupted run had begun" in stderr
    assert json.loads((out / "manifest.json").read_text())["counts"]["documents"] == 24
    assert _is_one_set(out) and len(_rows(out / "clusters.csv")) == 24
    assert not (out / publish_module.JOURNAL).exists() and not list(out.glob(".publish-*"))


def test_recover_completes_a_swap(tmp_path, monkeypatch):
    out = tmp_path / "out"
    staging = out / ".publish-1-x"
    staging.mkdir(parents=True)
    (out / "clusters.csv").write_text("old")
    (out / "rejected_records.csv").write_text("old, not part of the new set")
    (staging / "clusters.csv").write_text("new")
    (staging / "manifest.json").write_text("{}")
    (out / publish_module.JOURNAL).write_text(
        json.dumps(
            {"staging": staging.name, "move": ["clusters.csv", "manifest.json"], "remove": ["rejected_records.csv"]}
        )
    )
    assert publish_module.recover(out) == "completed"
    assert (out / "clusters.csv").read_text() == "new" and (out / "manifest.json").exists()
    assert not (out / "rejected_records.csv").exists() and not staging.exists()
    assert publish_module.recover(out) is None


def test_kill_9_during_a_run_then_rerun(tmp_path):
    """A real kill -9 at some point of a run: the folder holds either the old set or nothing
    new, and the next run is correct and leaves no temporary file."""
    corpus = _corpus(tmp_path / "corpus.csv", 3000)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "webdedup_assets.cli.main", "run", str(corpus), "--output", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out / "_storage" / "fingerprinted").exists():
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    assert not (out / "manifest.json").exists() or _is_one_set(out)
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["documents"] == 3000 and _is_one_set(out)
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp") or p.name.startswith((".staging-", ".publish-"))]


# ---------------------------------------------------------------- deterministic outputs

WORDS = [f"w{i}" for i in range(400)]


def _corpus(path: Path, n: int, seed: int = 7) -> Path:
    """n pages over 20 days, a third of them near copies of an earlier page on another domain."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        if i > 10 and rng.random() < 0.33:
            words = rows[rng.randrange(len(rows))]["body"].split()
            words[rng.randrange(len(words))] = rng.choice(WORDS)
        else:
            words = [rng.choice(WORDS) for _ in range(rng.randint(40, 120))]
        rows.append(
            {
                "doc_id": f"doc-{i:05d}",
                "source": "crawl",
                "domain": f"site{rng.randrange(50)}.example",
                "crawled_at": f"2026-04-{1 + i % 20:02d}T{i % 24:02d}:00:00Z",
                "title": f"page {i}",
                "body": " ".join(words),
            }
        )
    return _write(path, rows)


def test_two_runs_of_the_same_input_give_byte_identical_outputs(tmp_path, capsys):
    corpus = _corpus(tmp_path / "corpus.csv", 4000)
    files = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert _run(capsys, str(corpus), "--output", str(out))[0] == 0
        files.append({p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != "manifest.json"})
    assert set(files[0]) >= {"deduped_documents.parquet", "clusters.csv", "duplicate_pairs.csv", "scored_pairs.parquet"}
    different = [name for name in files[0] if files[0][name] != files[1].get(name)]
    assert different == []
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["counts"]["duplicate_pairs"] > 500  # the corpus really exercises the pair stages


def test_a_dagster_run_reading_another_input_is_refused(tmp_path):
    """One storage root, one corpus: a daily run whose input differs from the held months' is refused."""
    import dagster as dg

    from webdedup_assets.defs import build_defs
    from webdedup_assets.engine.reading import input_days

    from .conftest import job_config

    rows = _rows(FIXTURE)
    for row in rows[12:]:  # three crawl months: March, April, May
        row["crawled_at"] = row["crawled_at"].replace("2026-03-", "2026-04-")
    for row in rows[20:]:
        row["crawled_at"] = row["crawled_at"].replace("2026-04-", "2026-05-")
    corpus = _write(tmp_path / "corpus.csv", rows)
    days = input_days(str(corpus))
    months = ["2026-03", "2026-04", "2026-05"]
    defs = build_defs(months)
    documents = [a for a in defs.assets if a.key.to_user_string() == "documents"]

    def materialize(input_path: Path, month: str):
        config = job_config(tmp_path / "storage", tmp_path / "output", input_path)
        return dg.materialize(
            documents,
            run_config={"ops": {"documents": config["ops"]["documents"]}, "resources": config["resources"]},
            resources=defs.resources,
            partition_key=month,
            instance=dg.DagsterInstance.ephemeral(),
            raise_on_error=False,
        )

    assert materialize(corpus, "2026-03").success
    assert materialize(corpus, "2026-04").success  # the same corpus: more months
    other = _write(tmp_path / "other.csv", rows)
    refused = materialize(other, "2026-05")
    assert not refused.success
    [failure] = [e for e in refused.all_events if e.event_type_value == "STEP_FAILURE"]
    message = failure.step_failure_data.user_failure_data.description
    held = [d for d in days if d < "2026-05"]
    assert f"holds {len(held)} crawl day(s) ({held[0]} .. {held[-1]}) read from {corpus.resolve()}" in message
    assert f"this run reads {other.resolve()}" in message and "one storage root holds one corpus" in message
    assert sorted(load_state(Store(tmp_path / "storage"))["days"]) == held


def test_a_global_stage_waits_for_the_writer_then_fails_naming_it(tmp_path, capsys, monkeypatch):
    """In Dagster, a global stage needs the storage alone: while another writer holds it the stage
    waits (LOCK_TIMEOUT_SECONDS), then fails with the holder named."""
    import dagster as dg

    from webdedup_assets.defs import assets as assets_module
    from webdedup_assets.defs import build_defs

    from .conftest import job_config

    out = tmp_path / "out"
    assert _run(capsys, str(FIXTURE), "--output", str(out))[0] == 0
    defs = build_defs()
    candidate_pairs = [a for a in defs.assets if a.key.to_user_string() == "candidate_pairs"]
    config = job_config(out / "_storage", out)
    monkeypatch.setattr(assets_module, "LOCK_TIMEOUT_SECONDS", 0.5)
    holder = _holder(out / "_storage", "s")  # e.g. a daily run of another day
    try:
        result = dg.materialize(
            candidate_pairs,
            run_config={"resources": config["resources"]},
            resources=defs.resources,
            instance=dg.DagsterInstance.ephemeral(),
            raise_on_error=False,
        )
    finally:
        holder.kill()
        holder.wait()
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    message = failure.step_failure_data.user_failure_data.description
    assert "is in use by another webdedup writer after waiting 0.5 s" in message
    assert f"pid {holder.pid}" in message
