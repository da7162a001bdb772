"""The published fingerprinted.parquet is kept in the storage per set of fingerprinted files
(engine.publish.fingerprinted_publication): linked again while those files are unchanged, built
again when a day changes, and built in the background while the global stages run."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from webdedup_assets.cli.main import main
from webdedup_assets.engine import publish as publish_module
from webdedup_assets.storage import store as storage_module
from webdedup_assets.storage.store import Store

from .conftest import FIXTURE
from .test_documents_adopt import write_daily_parquet


def _run(capsys, *args: str) -> int:
    code = main(["run", *args, "--quiet"])
    capsys.readouterr()
    return code


def _kept(storage: Path) -> list[Path]:
    return sorted((storage / publish_module.PUBLISHED_DIR).glob("fingerprinted-*.parquet"))


def _day_rows(store: Store) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in store.data_files("fingerprinted"))


def test_an_unchanged_corpus_links_the_kept_publication_and_a_changed_day_replaces_it(tmp_path, capsys):
    exports = tmp_path / "exports"
    exports.mkdir()
    days = write_daily_parquet(exports)  # daily Parquet exports: a run again keeps their derived files
    out = tmp_path / "out"
    assert _run(capsys, str(exports), "--output", str(out)) == 0
    storage = out / "_storage"
    [kept] = _kept(storage)
    published = out / "fingerprinted.parquet"
    assert os.stat(published).st_ino == os.stat(kept).st_ino  # a link, not a copy
    assert pq.ParquetFile(published).metadata.num_rows == _day_rows(Store(storage)) == 24

    assert _run(capsys, str(exports), "--output", str(out)) == 0  # the same input again
    assert _kept(storage) == [kept]
    assert os.stat(out / "fingerprinted.parquet").st_ino == os.stat(kept).st_ino

    day, path = sorted(days.items())[0]
    gone = pq.read_table(path).column("doc_id").to_pylist()
    path.unlink()  # that day's export withdrawn
    assert _run(capsys, str(exports), "--output", str(out)) == 0
    [rebuilt] = _kept(storage)  # the earlier one removed
    assert rebuilt != kept
    table = pq.read_table(out / "fingerprinted.parquet")
    assert table.num_rows == 24 - len(gone) and not set(gone) & set(table.column("doc_id").to_pylist())


def test_the_publication_is_built_while_the_global_stages_run_and_only_linked_at_the_end(tmp_path, capsys, monkeypatch):
    builders: list[str] = []
    real = storage_module.publish_concatenated

    def recording(store, asset, target, uncompressed=()):
        if asset == "fingerprinted":
            builders.append(threading.current_thread().name)
        return real(store, asset, target, uncompressed)

    monkeypatch.setattr(publish_module, "publish_concatenated", recording)
    out = tmp_path / "out"
    assert _run(capsys, str(FIXTURE), "--output", str(out)) == 0
    assert len(builders) == 1 and builders[0].startswith("webdedup-publication")
    assert pq.ParquetFile(out / "fingerprinted.parquet").metadata.num_rows == 24


def test_a_failed_background_build_is_built_again_by_the_publish(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert _run(capsys, str(FIXTURE), "--output", str(out)) == 0
    for kept in _kept(out / "_storage"):
        kept.unlink()
    (out / "fingerprinted.parquet").unlink()
    real = storage_module.publish_concatenated
    calls: list[str] = []

    def fails_in_background(store, asset, target, uncompressed=()):
        if asset == "fingerprinted":
            calls.append(threading.current_thread().name)
        if threading.current_thread().name.startswith("webdedup-publication"):
            raise OSError("No space left on device")
        return real(store, asset, target, uncompressed)

    monkeypatch.setattr(publish_module, "publish_concatenated", fails_in_background)
    assert _run(capsys, str(FIXTURE), "--output", str(out)) == 0
    assert len(calls) == 2  # the background build, then the publish's own
    assert pq.ParquetFile(out / "fingerprinted.parquet").metadata.num_rows == 24
    assert not list((out / "_storage" / publish_module.PUBLISHED_DIR).glob(".*.tmp"))


def test_a_publish_that_cannot_build_it_reports_the_error(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert _run(capsys, str(FIXTURE), "--output", str(out)) == 0
    store = Store(out / "_storage")
    for kept in _kept(store.root):
        kept.unlink()

    def full_disk(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(publish_module, "publish_concatenated", full_disk)
    with pytest.raises(OSError, match="No space left"), publish_module.publication_prepared(store, out):
        publish_module.fingerprinted_publication(store)
    assert not _kept(store.root)


def test_an_output_on_another_file_system_is_published_as_before_and_nothing_is_kept(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(publish_module, "_same_file_system", lambda a, b: False)
    out = tmp_path / "out"
    assert _run(capsys, str(FIXTURE), "--output", str(out)) == 0
    assert not _kept(out / "_storage")  # neither prepared in the background nor kept
    assert pq.ParquetFile(out / "fingerprinted.parquet").metadata.num_rows == 24


def test_same_file_system_looks_at_the_nearest_existing_folder(tmp_path):
    assert publish_module._same_file_system(tmp_path, tmp_path / "not" / "made" / "yet")


def test_check_and_evaluate_reports_go_when_another_corpus_is_published(tmp_path, capsys):
    """check.parquet and evaluation/ answer for the corpus published when they were written: a
    failed command keeps them, the next publication removes them (a reused folder kept another
    corpus' reports: evaluation/summary.json said 369 documents beside an output of 125)."""
    out = tmp_path / "out"
    assert _run(capsys, str(FIXTURE), "--output", str(out)) == 0
    assert main(["check", str(FIXTURE), "--against", str(out), "--quiet"]) == 0
    (out / "evaluation").mkdir()
    (out / "evaluation" / "summary.json").write_text('{"documents": 24}')
    assert (out / "check.parquet").is_file()
    bad = tmp_path / "bad.csv"
    bad.write_text("doc_id,source,domain,crawled_at,title,body\nx,s,d.example,not a date,t,b\n")
    assert main(["add", str(bad), "--output", str(out), "--quiet"]) == 2
    assert (out / "check.parquet").is_file() and (out / "evaluation" / "summary.json").is_file()
    assert _run(capsys, str(FIXTURE), "--output", str(out)) == 0
    assert not (out / "check.parquet").exists() and not (out / "evaluation").exists()
    assert (out / "deduped_documents.parquet").is_file()


def test_a_manifest_over_global_assets_of_other_parameters_is_refused(tmp_path, capsys):
    """scored_pairs rebuilt alone at 0.8 under duplicate_pairs, clusters and representatives at
    0.7 (a Dagster user materializing one asset from the catalog): the manifest refused nothing and
    published scored_pairs.parquet at 0.8 beside duplicate_pairs.csv at 0.7."""
    from webdedup_assets.engine.stage import DUCKDB
    from webdedup_assets.engine.stages.manifest import stage_manifest
    from webdedup_assets.errors import WebdedupError
    from webdedup_assets.params import ScoringParams

    out = tmp_path / "out"
    assert _run(capsys, str(FIXTURE), "--output", str(out)) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    store = Store(out / "_storage")
    DUCKDB.run("scored_pairs", store, ScoringParams(threshold=0.8))
    with pytest.raises(WebdedupError) as refused:
        stage_manifest(store, out)
    assert str(refused.value) == (
        "the global assets were built with other parameters, so their files would contradict each other "
        "(threshold: scored_pairs 0.8, duplicate_pairs 0.7, clusters 0.7): materialize the assets after the one "
        "rebuilt (or the whole global chain) before the manifest"
    )
    # clusters and deduped_documents materialized alone (Dagster's catalog) are refused too, naming
    # the assets they follow, before they write anything
    clusters = (store.asset_dir("clusters") / "data.parquet").read_bytes()
    with pytest.raises(
        WebdedupError, match=r"\(threshold: scored_pairs 0.8, duplicate_pairs 0.7\): .* before clusters$"
    ):
        DUCKDB.run("clusters", store)
    refused_too = r"\(threshold: scored_pairs 0.8, duplicate_pairs 0.7, clusters 0.7\): .* before deduped_documents$"
    with pytest.raises(WebdedupError, match=refused_too):
        DUCKDB.run("deduped_documents", store)
    assert (store.asset_dir("clusters") / "data.parquet").read_bytes() == clusters
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    DUCKDB.run("scored_pairs", store, ScoringParams(threshold=0.7))
    assert stage_manifest(store, out)["counts"]["documents"] == 24
