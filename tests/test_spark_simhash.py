"""`webdedup run --engine spark --fingerprint-method simhash`: the SimHash fingerprints, block keys,
Hamming distances and reasons computed on Spark are the DuckDB run's, table for table, on the
fixture and on the short-text fixture (fixtures/short).

One local[2] session serves the module (as in tests/test_spark.py, whose helpers compare the
tables); each test is one `webdedup run` per engine."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from webdedup_assets.engine import Store
from webdedup_assets.storage.store import read_params

pyspark = pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("the Spark engine needs Java 17", allow_module_level=True)

from webdedup_assets.engine.spark.session import get_session, stop_sessions  # noqa: E402

from .test_spark import DAILY, GLOBAL, LOCAL, assert_same_tables, spy_on_daily_stages  # noqa: E402

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "documents.csv"
SHORT = REPO / "fixtures" / "short" / "documents.csv"


@pytest.fixture(scope="module")
def spark():
    session = get_session(LOCAL)  # the CLI's `--spark-master local[2]` gets this session
    yield session
    stop_sessions()


def run_both(tmp_path: Path, input_path: Path, flags: list[str], capsys) -> tuple[Path, Path, int, str]:
    """The same `webdedup run` on DuckDB and on Spark local[2]: (spark output, duckdb output, the
    exit code both gave, the stderr both printed)."""
    from webdedup_assets.cli.main import main

    outcomes = []
    for engine in ("duckdb", "spark"):
        out = tmp_path / engine
        engine_flags = ["--engine", "spark", "--spark-master", "local[2]"] if engine == "spark" else []
        code = main(["run", str(input_path), "--output", str(out), "--quiet", *flags, *engine_flags])
        outcomes.append((out, code, capsys.readouterr().err))
    (duck, duck_code, duck_err), (ours, code, err) = outcomes
    assert code == duck_code and err.replace(str(ours), str(duck)) == duck_err
    return ours, duck, code, err


def sortable(data: pa.Table) -> list[str]:
    return [f.name for f in data.schema if not pa.types.is_fixed_size_list(f.type) and not pa.types.is_list(f.type)]


def sorted_table(path: Path) -> pa.Table:
    data = pq.read_table(path).replace_schema_metadata(None)
    return data.sort_by([(c, "ascending") for c in sortable(data)])


def removed_rows(out: Path) -> list[dict[str, str]]:
    """removed.csv without the Jaccard of members chained to their representative: that one comes
    from the cohesion measurement kept beside deduped_documents, which is made under the identity
    of single-file clusters and deduped_documents (invariants.measured_key) and so is not kept
    for the files Spark writes in parts, whatever the fingerprint method."""
    with open(out / "removed.csv", newline="") as source:
        rows = list(csv.DictReader(source))
    for row in rows:
        if row["reason"].startswith("chained"):
            row["jaccard_to_representative"] = ""
    return rows


def assert_same_run(ours: Path, duck: Path) -> Store:
    """Every stored table of the Spark run equals the DuckDB run's (the daily ones file for file,
    with their stored parameters), and so does every published output; the Spark stages are
    recorded as Spark's. Returns the Spark run's store."""
    spark_store, duck_store = Store(ours / "_storage"), Store(duck / "_storage")
    for asset in DAILY:
        names = sorted(f.name for f in spark_store.files(asset))
        assert names == sorted(f.name for f in duck_store.files(asset)), asset
        for name in names:
            mine, other = spark_store.asset_dir(asset) / name, duck_store.asset_dir(asset) / name
            assert sorted_table(mine).equals(sorted_table(other)), (asset, name)
            assert pq.read_schema(mine).remove_metadata() == pq.read_schema(other).remove_metadata(), (asset, name)
            assert read_params(mine) == read_params(other), (asset, name)
    assert_same_tables(spark_store, duck_store)
    published = sorted(p.name for p in ours.iterdir() if p.suffix in (".csv", ".parquet"))
    assert published == sorted(p.name for p in duck.iterdir() if p.suffix in (".csv", ".parquet"))
    for name in published:
        if name == "removed.csv":
            assert removed_rows(ours) == removed_rows(duck)
        elif name.endswith(".csv"):
            assert (ours / name).read_text() == (duck / name).read_text(), name
        else:  # deduped_documents.parquet: the same rows, in the order each engine's partitions give
            assert sorted_table(ours / name).equals(sorted_table(duck / name)), name
    manifest, duck_manifest = (json.loads((out / "manifest.json").read_text()) for out in (ours, duck))
    assert manifest["counts"] == duck_manifest["counts"]
    assert manifest["lsh"] == duck_manifest["lsh"]
    assert all(manifest["engines"][name] == f"spark {pyspark.__version__}" for name in GLOBAL)
    return spark_store


def scored(store: Store) -> pa.Table:
    return pa.concat_tables(pq.read_table(f) for f in store.files("scored_pairs"))


def reason_counts(pairs: pa.Table) -> dict[str, int]:
    counted = pairs.group_by("reason").aggregate([("reason", "count")])
    return dict(zip(counted.column("reason").to_pylist(), counted.column("reason_count").to_pylist()))


def test_fixture_with_simhash_on_spark_is_the_duckdb_run(spark, tmp_path, capsys, monkeypatch):
    """The fixture at --max-hamming 9 with keys of two of 11 blocks (55 keys), the fingerprints
    deciding (--verify hamming, at a threshold of 0.95 that the revisions' Jaccard ~0.93 misses):
    on both engines 24 x 55 block keys, 29 candidates, 18 duplicate pairs within 0..9 bits (12 of
    them below the threshold), 11 candidates beyond 9 bits, 12 representatives, the same failed
    pinned-count check (29 candidates, not MinHash's 18)."""
    called = spy_on_daily_stages(monkeypatch)
    flags = ["--fingerprint-method", "simhash", "--max-hamming", "9", "--key-blocks", "2"]
    flags += ["--verify", "hamming", "--threshold", "0.95"]
    ours, duck, code, err = run_both(tmp_path, FIXTURE, flags, capsys)
    assert code == 1 and "candidate pairs: expected 18, actual 29" in err
    assert called == ["fingerprinted", "band_memberships"]  # the daily stages ran on Spark too
    store = assert_same_run(ours, duck)
    counts = json.loads((ours / "manifest.json").read_text())["counts"]
    assert (counts["candidate_pairs"], counts["duplicate_pairs"], counts["representatives"]) == (29, 18, 12)
    bands = pa.concat_tables(pq.read_table(f) for f in store.data_files("band_memberships"))
    assert bands.num_rows == 24 * 55 and sorted(set(bands.column("band_index").to_pylist())) == list(range(55))
    pairs = scored(store)
    assert reason_counts(pairs) == {"jaccard_and_simhash": 6, "simhash_match": 12, "beyond_max_hamming": 11}
    duplicates = pairs.filter(pairs.column("is_duplicate"))
    distances = duplicates.column("hamming_distance").to_pylist()
    assert min(distances) == 0 and max(distances) == 9
    assert pairs.column("minhash_estimate").null_count == pairs.num_rows
    assert pq.read_schema(store.files("duplicate_pairs")[0]).names[-2:] == ["hamming_distance", "kind"]


def test_short_texts_with_simhash_on_spark_are_the_duckdb_run(spark, tmp_path, capsys):
    """fixtures/short (2,640 titles and snippets, two crawl months) with character 5-shingles at
    the default max_hamming 3: on both engines 4 block keys per text, 4,595 candidates, 2,807
    duplicate pairs (1,311 exact), 1,482 representatives (BENCHMARKS.md, "Short texts")."""
    flags = ["--fingerprint-method", "simhash", "--shingle-unit", "char", "--shingle-size", "5"]
    ours, duck, code, _ = run_both(tmp_path, SHORT, flags, capsys)
    assert code == 0
    store = assert_same_run(ours, duck)
    assert sorted(f.name for f in store.data_files("fingerprinted")) == ["part-2026-05.parquet", "part-2026-06.parquet"]
    counts = json.loads((ours / "manifest.json").read_text())["counts"]
    assert (counts["candidate_pairs"], counts["duplicate_pairs"], counts["exact_duplicate_pairs"]) == (4595, 2807, 1311)
    assert counts["representatives"] == 1482
    bands = sum(pq.read_metadata(f).num_rows for f in store.data_files("band_memberships"))
    assert bands == 2640 * 4
    pairs = scored(store)
    assert reason_counts(pairs) == {"jaccard_and_simhash": 1387, "jaccard_match": 1420, "below_jaccard_threshold": 1788}
    distances = pairs.column("hamming_distance").to_numpy()
    agreeing = pairs.column("reason").to_numpy(zero_copy_only=False) == "jaccard_and_simhash"
    assert ((distances <= 3) == agreeing).all()  # no candidate within 3 bits falls below the threshold here
