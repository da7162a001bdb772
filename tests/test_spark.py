"""The Spark engine: the same tables as the DuckDB engine, on local[2], on a standalone cluster
and through a Spark Connect server, both started here on 127.0.0.1 (pyspark's own spark-class and
spark-submit; needs Java 17).

Kept cheap for CI: one local[2] session serves the whole module (the standalone cluster and
Spark Connect tests run last, stop it and start their own); every JVM here runs with TEST_JVM_OPTIONS (the C1
compiler only and the serial collector: on tiny tables Spark's time is planning, code generation
and JIT warm-up, which C1 halves; tables and results do not depend on it); `webdedup run --engine
spark` on the fixture is the fixture test's Spark run (its storage is compared with DuckDB's),
not a second one."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from webdedup_assets.engine import DUCKDB, Store, WebdedupError, invariants, stage_documents
from webdedup_assets.params import (
    BandingParams,
    CandidateParams,
    FingerprintParams,
    RepresentativeParams,
    ScoringParams,
)
from webdedup_assets.storage.store import read_params, write_table

pyspark = pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("the Spark engine needs Java 17", allow_module_level=True)

from webdedup_assets.engine.spark.engine import SPARK  # noqa: E402
from webdedup_assets.engine.spark.session import SparkSettings, get_session, stop_sessions  # noqa: E402
from webdedup_assets.engine.stages import candidates_spark as spark_candidates  # noqa: E402
from webdedup_assets.engine.stages import scoring_spark as spark_scoring  # noqa: E402
from webdedup_assets.engine.stages.clustering_spark import round_limit  # noqa: E402

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "documents.csv"
# JVM options of the tests' JVMs (driver, executors, standalone master and workers): see above.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
LOCAL = SparkSettings(
    master="local[2]", shuffle_partitions=4, conf=(("spark.driver.extraJavaOptions", TEST_JVM_OPTIONS),)
)
GLOBAL = ["candidate_pairs", "scored_pairs", "duplicate_pairs", "clusters", "deduped_documents"]
FINGERPRINT = FingerprintParams(shingle_size=5, num_perm=64, seed=1)
BANDING = BandingParams(bands=8, rows=8)


def stage_params(policy: str = "fail", hot: int = 1000, **candidates) -> dict:
    return {
        "candidate_pairs": CandidateParams(bucket_policy=policy, hot_bucket_size=hot, **candidates),
        "scored_pairs": ScoringParams(threshold=0.7),
        "duplicate_pairs": None,
        "clusters": None,
        "deduped_documents": RepresentativeParams(),
    }


def spread_fixture(path: Path) -> Path:
    """The fixture with its days spread over three crawl months (tests.test_partitions.spread)."""
    import csv

    from .test_partitions import spread

    with open(FIXTURE, newline="") as source, open(path, "w", newline="") as target:
        rows = list(csv.DictReader(source))
        writer = csv.DictWriter(target, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({**row, "crawled_at": spread(row["crawled_at"])} for row in rows)
    return path


def daily_store(root: Path, input_path: Path, by_month: bool) -> Store:
    """documents, fingerprinted and band_memberships by the DuckDB engine (per crawl month when
    by_month: then Spark reads one file per month through Store.files)."""
    store = Store(root)
    months = None
    if by_month:
        months = [
            m
            for (m,) in duckdb.sql(
                f"SELECT DISTINCT strftime(CAST(crawled_at AS DATE), '%Y-%m') FROM read_csv_auto('{input_path}') "
                "ORDER BY 1"
            ).fetchall()
        ]
    stage_documents(store, str(input_path), months=months)
    DUCKDB.run("fingerprinted", store, FINGERPRINT, months)
    DUCKDB.run("band_memberships", store, BANDING, months)
    return store


def run_global(engine, store: Store, params: dict, **options) -> dict:
    return {name: engine.run(name, store, params[name], **options) for name in GLOBAL}


def table(store: Store, asset: str) -> pa.Table:
    """Every stored file of the asset, rows sorted by every column."""
    files = [f for f in store.files(asset) if f.name != "_schema.parquet"]
    data = pa.concat_tables(pq.read_table(f).replace_schema_metadata(None) for f in files)
    return data.sort_by([(c, "ascending") for c in data.column_names])


def assert_same_tables(spark_store: Store, duck_store: Store) -> None:
    for asset in GLOBAL:
        ours, theirs = table(spark_store, asset), table(duck_store, asset)
        assert ours.schema == theirs.schema, asset
        assert ours.num_rows == theirs.num_rows, asset
        assert ours.equals(theirs), asset
        assert read_params(spark_store.files(asset)[0]) == read_params(duck_store.files(asset)[0]), asset


def two_copies(root: Path, make) -> tuple[Store, Store]:
    base = make(root / "spark")
    shutil.copytree(base.root, root / "duck")
    return base, Store(root / "duck")


@pytest.fixture(scope="module")
def spark():
    session = get_session(LOCAL)
    yield session
    stop_sessions()


# ---- the fixture ---------------------------------------------------------------------------


def spy_on_daily_stages(monkeypatch) -> list[str]:
    """The names of the Spark engine's fingerprinted / band_memberships runs, in order (the
    manifest's `engines` names the global stages only)."""
    called: list[str] = []
    for stage in DAILY:
        implementation = SPARK.stages[stage]

        def spy(run, implementation=implementation):
            called.append(run.stage.name)
            return implementation(run)

        monkeypatch.setitem(SPARK.stages, stage, spy)
    return called


def assert_fixture_result_on_spark(out: Path) -> Store:
    """The fixture's published counts (18 candidates, 18 duplicates, 12 representatives), every
    global stage recorded as Spark's in the manifest and its stats, and every invariant holding;
    returns the run's store."""
    manifest = json.loads((out / "manifest.json").read_text())
    counts = manifest["counts"]
    assert (counts["candidate_pairs"], counts["duplicate_pairs"], counts["representatives"]) == (18, 18, 12)
    ours = Store(out / "_storage")
    for name in GLOBAL:
        assert manifest["engines"][name] == f"spark {pyspark.__version__}", name
        assert json.loads(ours.stats_path(name).read_text())["engine"] == f"spark {pyspark.__version__}", name
    for check in (
        invariants.doc_ids_unique,
        invariants.candidates_well_formed,
        invariants.duplicates_meet_threshold,
        invariants.every_document_in_one_cluster,
        invariants.one_representative_per_cluster,
    ):
        passed, details = check(ours)
        assert passed, (check.__name__, details)
    return ours


def test_fixture_on_local_2_is_the_duckdb_result_and_every_check_is_green(spark, tmp_path, monkeypatch):
    """`webdedup run --engine spark --spark-master local[2]` on the fixture spread over three crawl
    months (one documents file per month, read through Store.files): fingerprinted and
    band_memberships on Spark, 18 candidates, 18 duplicates, 12 representatives, every check
    green; then DuckDB's global stages over a copy of that storage give the same tables and
    reports, and each engine reads the other's files."""
    from webdedup_assets.cli.main import main

    called = spy_on_daily_stages(monkeypatch)
    spread = spread_fixture(tmp_path / "spread.csv")
    out = tmp_path / "out"
    argv = ["run", str(spread), "--output", str(out), "--quiet", "--engine", "spark", "--spark-master", "local[2]"]
    code = main(argv)
    assert code == 0
    assert sorted(set(called)) == sorted(DAILY) and called[0] == "fingerprinted"
    ours = assert_fixture_result_on_spark(out)
    assert len(ours.files("documents")) > 3  # one file per crawl month, read through Store.files
    theirs = Store(shutil.copytree(ours.root, tmp_path / "duck"))
    run_global(DUCKDB, theirs, stage_params())
    assert_same_tables(ours, theirs)
    for report in (
        "candidate_pairs/candidate_summary.csv",
        "candidate_pairs/collision_buckets.csv",
        "deduped_documents/cluster_inspection.csv",
    ):
        assert (ours.root / report).read_text() == (theirs.root / report).read_text(), report
    # and the other way round: DuckDB's global stages over Spark's files, Spark's over DuckDB's
    DUCKDB.run("clusters", ours)
    assert [f.name for f in ours.files("clusters")] == ["data.parquet"]
    SPARK.run("deduped_documents", theirs, RepresentativeParams(), spark=LOCAL)
    assert table(theirs, "deduped_documents").num_rows == 12
    # each stage's jobs in its own group, as the Spark UI and the event log show them
    tracker = get_session(LOCAL).sparkContext.statusTracker()
    for stage in ("fingerprinted", "candidate_pairs", "scored_pairs", "deduped_documents"):
        jobs = tracker.getJobIdsForGroup(f"webdedup-{stage}")
        assert jobs and all(tracker.getJobInfo(j).status == "SUCCEEDED" for j in jobs), stage


# ---- fingerprinted and band_memberships on Spark ------------------------------------------

DAILY = {"fingerprinted": ["doc_id"], "band_memberships": ["doc_id", "band_index"]}
SPREAD_MONTHS = ["2026-01", "2026-02", "2026-03"]


def daily_exports(folder: Path, changed: str | None = None) -> dict[str, Path]:
    """The spread fixture as one contract Parquet file per crawl day (stored by the documents
    stage as segments of their month: several documents files per month); `changed`: the
    doc_id whose body gets a few more words."""
    from .test_documents_adopt import contract_table, fixture_rows
    from .test_partitions import spread

    folder.mkdir(parents=True, exist_ok=True)
    by_day: dict[str, list[dict]] = {}
    for row in fixture_rows():
        row = {**row, "crawled_at": spread(row["crawled_at"])}
        if row["doc_id"] == changed:
            row["body"] += " and a few words more"
        by_day.setdefault(row["crawled_at"], []).append(row)
    paths = {}
    for day, rows in by_day.items():
        paths[day] = folder / f"{day}.parquet"
        pq.write_table(contract_table(rows), paths[day])
    return paths


def run_daily(engine, store: Store, **options) -> dict:
    return {
        "fingerprinted": engine.run("fingerprinted", store, FINGERPRINT, SPREAD_MONTHS, **options),
        "band_memberships": engine.run("band_memberships", store, BANDING, SPREAD_MONTHS, **options),
    }


def month_stats(store: Store, asset: str) -> dict:

    return {
        month: {
            k: v
            for k, v in json.loads(store.stats_path(asset, month).read_text()).items()
            if k not in ("seconds", "sources")
        }
        for month in SPREAD_MONTHS
    }


def assert_same_daily_files(ours: Store, theirs: Store) -> None:
    """File for file: the same names, the same rows (sorted by doc_id), the same stored parameters
    and per-month figures."""
    for asset, order in DAILY.items():
        names = sorted(f.name for f in ours.files(asset))
        assert names == sorted(f.name for f in theirs.files(asset)), asset
        assert len(names) > len(SPREAD_MONTHS) + 1  # several files per month (segments) and the schema file
        for name in names:
            mine, other = ours.asset_dir(asset) / name, theirs.asset_dir(asset) / name
            a = pq.read_table(mine).replace_schema_metadata(None).sort_by([(c, "ascending") for c in order])
            b = pq.read_table(other).replace_schema_metadata(None).sort_by([(c, "ascending") for c in order])
            assert a.schema == b.schema, (asset, name)
            assert a.equals(b), (asset, name)
            assert read_params(mine) == read_params(other), (asset, name)
        assert month_stats(ours, asset) == month_stats(theirs, asset), asset


def test_fingerprinted_and_band_memberships_on_spark_are_duckdbs_files(spark, tmp_path):
    """Signatures and band keys by the same kernel in the executors: every file equals DuckDB's;
    a second run after one documents file changed computes that file alone."""
    from webdedup_assets.engine.stages.documents import stage_documents as documents_stage

    exports = tmp_path / "input"
    daily_exports(exports)
    base = Store(tmp_path / "spark")
    documents_stage(base, str(exports), months=SPREAD_MONTHS)
    shutil.copytree(base.root, tmp_path / "duck")
    ours, theirs = base, Store(tmp_path / "duck")
    results = run_daily(SPARK, ours, spark=LOCAL)
    run_daily(DUCKDB, theirs)
    files = len(ours.files("documents")) - 1  # without the schema file
    assert results["fingerprinted"].rows == 24 and results["fingerprinted"].figures["files_computed"] == files
    without = results["band_memberships"].figures["documents_without_shingles"]
    assert results["band_memberships"].rows == (24 - without) * BANDING.bands
    assert results["fingerprinted"].partition_rows == DUCKDB_PARTITION_ROWS(theirs)
    assert_same_daily_files(ours, theirs)
    assert not list(ours.asset_dir("fingerprinted").glob(".staging-*"))
    # DuckDB's candidate stage reads Spark's band keys: the same 18 candidates
    assert DUCKDB.run("candidate_pairs", ours, CandidateParams()).rows == 18

    # one daily export changes and one of another month is gone: Spark computes the changed file
    # alone, removes the gone one's, keeps the others untouched
    changed = "billing-mirror"
    exports_after = daily_exports(tmp_path / "input", changed=changed)
    day = next(d for d, p in exports_after.items() if changed in pq.read_table(p).column("doc_id").to_pylist())
    gone = next(d for d in sorted(exports_after) if d[:7] != day[:7])
    exports_after.pop(gone).unlink()
    for store in (ours, theirs):
        documents_stage(store, str(exports), months=SPREAD_MONTHS)
    before = {
        asset: {f.name: f.stat().st_mtime_ns for f in ours.files(asset) if f.name != "_schema.parquet"}
        for asset in DAILY
    }
    results = run_daily(SPARK, ours, spark=LOCAL)
    run_daily(DUCKDB, theirs)
    recomputed, removed = f"part-{day[:7]}.{day}.parquet", f"part-{gone[:7]}.{gone}.parquet"
    for asset in DAILY:
        after = {f.name: f.stat().st_mtime_ns for f in ours.files(asset) if f.name != "_schema.parquet"}
        assert set(after) == set(before[asset]) - {removed}, asset
        assert [n for n in after if after[n] != before[asset][n]] == [recomputed], asset
        assert results[asset].figures["files_computed"] == 1, asset
        assert results[asset].figures["files_reused"] == files - 2, asset
    assert results["fingerprinted"].figures["documents"] == pq.read_metadata(exports_after[day]).num_rows
    assert_same_daily_files(ours, theirs)


def test_a_documents_file_is_fingerprinted_in_chunks_of_row_groups_put_together_in_order(spark, tmp_path, monkeypatch):
    """A month held as one file of many row groups spreads over several tasks: the file's parts
    are put together in row order, equal to DuckDB's file row for row."""
    from webdedup_assets.engine.stages import fingerprint_spark
    from webdedup_assets.engine.stages.documents import stage_documents as documents_stage

    base = Store(tmp_path / "spark")
    documents_stage(base, str(FIXTURE), months=["2026-03"])  # the fixture: one month, one file
    [path] = [p for p in base.files("documents") if p != base.schema_path("documents")]
    pq.write_table(pq.read_table(path), path, row_group_size=2)  # 12 row groups
    shutil.copytree(base.root, tmp_path / "duck")
    ours, theirs = base, Store(tmp_path / "duck")
    monkeypatch.setattr(fingerprint_spark, "CHUNK_ROWS", 3)
    chunks, cut = [], fingerprint_spark._chunks

    def recorded(source):
        chunks.append(cut(source))
        return chunks[-1]

    monkeypatch.setattr(fingerprint_spark, "_chunks", recorded)
    for asset, params in (("fingerprinted", FINGERPRINT), ("band_memberships", BANDING)):
        result = SPARK.run(asset, ours, params, ["2026-03"], spark=LOCAL)
        DUCKDB.run(asset, theirs, params, ["2026-03"])
        mine = ours.asset_dir(asset) / path.name
        assert pq.read_table(mine).equals(pq.read_table(theirs.asset_dir(asset) / path.name))  # order, metadata
        assert result.figures["files_computed"] == 1
    assert chunks[0] == [range(g, g + 2) for g in range(0, 12, 2)]  # 4 rows a task
    assert len(chunks[1]) > 1
    assert result.rows == len(pq.read_table(mine)) > 0
    assert not list(ours.asset_dir("fingerprinted").glob(".staging-*"))


def DUCKDB_PARTITION_ROWS(store: Store) -> dict:

    return {m: json.loads(store.stats_path("fingerprinted", m).read_text())["rows"] for m in SPREAD_MONTHS}


# ---- a generated corpus with near-duplicates and hot buckets -------------------------------

WORDS = [f"w{i}" for i in range(3000)]


def generated_corpus(path: Path, pages: int = 20_000, seed: int = 7) -> None:
    """Pages of random words: a fifth near-duplicates (and exact copies) of earlier pages, three
    hot buckets of 150 boilerplate pages, one empty page."""
    rng = np.random.default_rng(seed)
    bodies, domains = [], []
    near = pages // 5
    originals = pages - 450 - near - 1
    for _ in range(originals):
        bodies.append(" ".join(rng.choice(WORDS, size=int(rng.integers(30, 120)))))
    for _ in range(near):  # near-duplicates (and exact copies) of earlier pages
        words = bodies[int(rng.integers(0, originals))].split()
        for _ in range(int(rng.integers(0, 3))):
            words[int(rng.integers(0, len(words)))] = str(rng.choice(WORDS))
        bodies.append(" ".join(words))
    for _hot in range(3):  # boilerplate pages: hot buckets of 150
        boiler = " ".join(rng.choice(WORDS, size=60))
        for i in range(150):
            bodies.append(f"{boiler} {'tail ' * (i % 3)}")
    bodies.append("")  # no shingles, no band keys
    domains = [f"site{int(d)}.example" for d in rng.integers(0, 500, size=len(bodies))]
    order = rng.permutation(len(bodies))
    n = len(bodies)
    pq.write_table(
        pa.table(
            {
                "doc_id": [f"g{int(i):06d}" for i in order],
                "source": ["gen"] * n,
                "domain": domains,
                "crawled_at": pa.array(
                    [dt.date(2026, 3, 1 + int(d)) for d in rng.integers(0, 20, size=n)], pa.date32()
                ),
                "title": ["t"] * n,
                "body": bodies,
            }
        ),
        path,
    )


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = tmp_path_factory.mktemp("generated")
    generated_corpus(root / "input.parquet")
    return daily_store(root / "base", root / "input.parquet", by_month=False)


@pytest.mark.parametrize("policy", ["fail", "star"])
def test_generated_corpus_every_table_equals_duckdbs(spark, generated, tmp_path, policy, monkeypatch):
    monkeypatch.setattr(spark_candidates, "BLOCK", 64)  # hot buckets of 150 go through the blocked join
    ours, theirs = two_copies(tmp_path, lambda root: Store(shutil.copytree(generated.root, root)))
    params = stage_params(policy, hot=100)
    if policy == "star":  # with a domain preference too: site7 first, then sites 1-99
        preferred = ",".join(["site7.example", *(f"site{i}.example" for i in range(1, 100))])
        params["deduped_documents"] = RepresentativeParams(prefer_domains=preferred)
    results = run_global(SPARK, ours, params, spark=LOCAL)
    run_global(DUCKDB, theirs, params)
    figures = results["candidate_pairs"].figures
    assert figures["max_bucket_size"] >= 150
    assert results["duplicate_pairs"].rows > 4000
    assert_same_tables(ours, theirs)
    duck = table(theirs, "candidate_pairs")
    assert {k: v for k, v in figures.items() if k != "engine"} == {
        k: v for k, v in DUCKDB_FIGURES(theirs).items() if k in figures and k != "engine"
    }
    assert figures["engine"] == f"spark {pyspark.__version__}"
    assert duck.num_rows == results["candidate_pairs"].rows
    # removed.csv's rows: a chained member's Jaccard is the cohesion measurement's on both engines
    # (Spark's assets are several files: the measurement is kept under all of their identities)
    from webdedup_assets.engine.publish import removed_sql
    from webdedup_assets.storage.store import connect

    removed = {}
    for name, store in (("spark", ours), ("duckdb", theirs)):
        con = connect(store)
        removed[name] = con.sql(removed_sql(con, store)).fetchall()
        con.close()
    assert removed["spark"] == removed["duckdb"]
    chained = [r for r in removed["spark"] if r[5].startswith("chained")]
    assert chained and all(r[4] is not None for r in chained), len(chained)


def DUCKDB_FIGURES(store: Store) -> dict:

    return json.loads((store.asset_dir("candidate_pairs") / "stats.json").read_text())


# ---- errors ----------------------------------------------------------------------------------


def test_the_budget_guard_gives_duckdbs_error(spark, generated, tmp_path):
    ours, theirs = two_copies(tmp_path, lambda root: Store(shutil.copytree(generated.root, root)))
    params = CandidateParams(max_pair_slots=1000)
    with pytest.raises(WebdedupError) as duck_error:
        DUCKDB.run("candidate_pairs", theirs, params)
    with pytest.raises(WebdedupError) as spark_error:
        SPARK.run("candidate_pairs", ours, params, spark=LOCAL)
    assert str(spark_error.value) == str(duck_error.value)
    assert "over the budget of 1,000 (max_pair_slots)" in str(spark_error.value)


def test_documents_are_numbered_with_the_first_salt_that_sets_every_doc_id_apart(spark, monkeypatch):
    from pyspark.sql import functions as F

    session = get_session(LOCAL)
    docs = session.createDataFrame([("a",), ("b",), ("c",)], "doc_id string")
    numbered = spark_candidates.document_number
    assert spark_candidates.numbering_salt(docs) == (0, 3)

    def clashing(salt, doc_id="doc_id"):  # salts 0 and 1 give "a" and "b" one number
        clash = F.col("doc_id").isin("a", "b") if isinstance(doc_id, str) else F.lit(False)
        return F.when(clash & (F.lit(salt) < 2), F.lit(7)).otherwise(numbered(salt, doc_id))

    monkeypatch.setattr(spark_candidates, "document_number", clashing)
    assert spark_candidates.numbering_salt(docs) == (2, 3)
    monkeypatch.setattr(spark_candidates, "NUMBERING_SALTS", 2)
    with pytest.raises(WebdedupError, match="no salt of 2 numbers the documents apart"):
        spark_candidates.numbering_salt(docs)
    repeated = session.createDataFrame([("a",), ("c",), ("c",)], "doc_id string")
    with pytest.raises(WebdedupError, match=r"repeated: 'c' x2"):
        spark_candidates.numbering_salt(repeated)


def test_bad_input_gives_duckdbs_errors(spark, tmp_path):
    # (a doc_id repeated within one input is refused by the documents stage, before any engine)
    spread = spread_fixture(tmp_path / "spread.csv")
    ours, theirs = two_copies(tmp_path, lambda root: daily_store(root, spread, by_month=True))
    errors = []
    # duplicate pairs naming documents that are not there
    for engine, store, options in ((DUCKDB, theirs, {}), (SPARK, ours, {"spark": LOCAL})):
        write_table(
            store.path("duplicate_pairs"),
            pa.table({"left_doc_id": ["zz-missing"], "right_doc_id": ["zz-missing-2"]}),
            {"fingerprint": {}, "duplicates": {"threshold": 0.7}},
        )
        with pytest.raises(WebdedupError) as err:
            engine.run("clusters", store, **options)
        errors.append(str(err.value))
    assert errors[0] == errors[1] and "name documents that are no longer in documents" in errors[0]
    # an upstream built with other parameters (the contract's check, the same for both engines)
    with pytest.raises(WebdedupError, match="was built with threshold=0.7 but duplicate_pairs needs threshold=0.8"):
        SPARK.run("scored_pairs", ours, ScoringParams(threshold=0.7), spark=LOCAL) if False else SPARK.run(
            "duplicate_pairs", _scored(ours), ScoringParams(threshold=0.8), spark=LOCAL
        )


def test_character_shingles_are_scored_as_character_shingles(spark, tmp_path):
    """scored_pairs on Spark hashes the stored shingle unit (it once hashed word shingles
    whatever the unit): with 9-character shingles its scores are DuckDB's."""
    char = FingerprintParams(shingle_size=9, shingle_unit="char", num_perm=64, seed=1)

    def make(root: Path) -> Store:
        store = Store(root)
        stage_documents(store, str(FIXTURE))
        DUCKDB.run("fingerprinted", store, char)
        DUCKDB.run("band_memberships", store, BANDING)
        DUCKDB.run("candidate_pairs", store, CandidateParams())
        return store

    ours, theirs = two_copies(tmp_path, make)
    SPARK.run("scored_pairs", ours, ScoringParams(), spark=LOCAL)
    DUCKDB.run("scored_pairs", theirs, ScoringParams())
    spark_scores, duck_scores = table(ours, "scored_pairs"), table(theirs, "scored_pairs")
    assert spark_scores.num_rows > 0 and spark_scores.equals(duck_scores)


# ---- real text: long pages, many candidates ------------------------------------------------

# Real text from this machine (benchmarks.debian_corpus): the Debian copyright files (licence texts,
# pages up to megabytes) and the first REAL_LIST_PAGES "... list" manual pages of one command-line
# tool (gcloud's: alike enough that each page has a hundred candidates or more).
REAL_LIST_PAGES = 600


@pytest.fixture(scope="module")
def debian(tmp_path_factory):
    """That corpus, with documents, fingerprinted and band_memberships by DuckDB at the default
    parameters."""
    from benchmarks.debian_corpus import documents

    licences = documents(10_000, keep=lambda path: path.name == "copyright")
    lists = documents(REAL_LIST_PAGES, keep=lambda path: path.name.endswith("_list.1.gz"))
    if len(licences) < 500 or len(lists) < REAL_LIST_PAGES:
        pytest.skip(f"this machine has {len(licences)} copyright files and {len(lists)} list manual pages")
    root = tmp_path_factory.mktemp("debian")
    corpus = pa.Table.from_pylist(licences + lists)
    pq.write_table(corpus.set_column(3, "crawled_at", corpus["crawled_at"].cast(pa.date32())), root / "input.parquet")
    store = Store(root / "base")
    stage_documents(store, str(root / "input.parquet"))
    DUCKDB.run("fingerprinted", store, FingerprintParams())
    DUCKDB.run("band_memberships", store, BandingParams())
    return store


def test_long_real_pages_are_scored_block_by_block_as_duckdb_scores_them(spark, debian, tmp_path, monkeypatch):
    """Real text at the default parameters: the candidates' documents split into many groups (a
    small set budget), so pairs are scored block by block, each document's body sent to its
    group's blocks; pairs, scores, clusters and representatives equal DuckDB's."""
    monkeypatch.setattr(spark_scoring, "GROUP_BYTES", 1 << 20)
    ours, theirs = two_copies(tmp_path, lambda root: Store(shutil.copytree(debian.root, root)))
    params = {
        "candidate_pairs": CandidateParams(),
        "scored_pairs": ScoringParams(),
        "duplicate_pairs": None,
        "clusters": None,
        "deduped_documents": RepresentativeParams(),
    }
    results = run_global(SPARK, ours, params, spark=LOCAL)
    run_global(DUCKDB, theirs, params)
    longest = duckdb.sql(f"SELECT max(strlen(body)) FROM {debian.scan_sql('documents')}").fetchall()[0][0]
    assert longest > 100_000
    assert results["candidate_pairs"].rows > 50_000
    assert results["scored_pairs"].figures["groups"] >= 4
    assert results["duplicate_pairs"].rows > 1000
    assert_same_tables(ours, theirs)


def test_scoring_groups_bound_the_sets_and_the_pairs_of_a_block():
    from webdedup_assets.engine.stages.scoring_spark import GROUP_BYTES, PAIRS_PER_BLOCK, scoring_groups

    assert scoring_groups(0, 0) == 1
    assert scoring_groups(GROUP_BYTES, PAIRS_PER_BLOCK // 2) == 1
    assert scoring_groups(10 * GROUP_BYTES + 1, 0) == 11  # one group's sets within the budget
    groups = scoring_groups(1, 100 * PAIRS_PER_BLOCK)
    assert 2 * 100 * PAIRS_PER_BLOCK / groups**2 <= PAIRS_PER_BLOCK  # an off-diagonal block's pairs
    assert scoring_groups(1, 100 * PAIRS_PER_BLOCK) == 15


def test_local_defaults_follow_the_machine():
    from webdedup_assets.engine.spark.session import local_driver_memory, shuffle_partitions

    assert local_driver_memory(24 << 30) == "6144m"
    assert local_driver_memory(2 << 30) == "1024m"  # never below Spark's own default
    assert shuffle_partitions(2, 0) == 8
    assert shuffle_partitions(2, 10 << 30) == 320  # 32 MiB of compressed documents a partition


def test_pysparks_pandas_warning_stays_off_the_terminal(spark):
    """pyspark warns at every run that pandas >= 3 is not fully supported; the engine hands it
    Arrow batches only, so the engine's session silences that one message."""
    import warnings

    from pyspark.sql.pandas.utils import require_minimum_pandas_version

    with warnings.catch_warnings(record=True) as caught:
        assert get_session(LOCAL) is spark
        require_minimum_pandas_version()
    assert [str(w.message) for w in caught] == []


def test_a_driver_jvm_started_here_says_nothing_until_an_error():
    """Spark's default profile prints which profile and level it chose, and Hadoop warns about its
    native library, on every run; the driver's JVM starts with the package's log configuration."""
    script = (
        "from webdedup_assets.engine.spark.session import SparkSettings, get_session\n"
        "assert get_session(SparkSettings(master='local[1]')).range(3).count() == 3\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_SUBMIT_OPTS", "PYSPARK_SUBMIT_ARGS")}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "incubator modules" not in line]  # the JVM's own
    assert lines == []


# The failure, as the driver received it (shortened: the JVM's stack runs to hundreds of lines).
BYTES_TO_BYTES_MAP_FAILURE = """An error occurred while calling o662.collectToPython.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 3 in stage 41.0 failed 1 times, most recent \
failure: Lost task 3.0 in stage 41.0 (TID 212) (127.0.0.1 executor driver): java.io.IOException: \
org.apache.spark.SparkException: Could not allocate memory to grow BytesToBytesMap.
\tat org.apache.spark.util.SparkErrorUtils.tryOrIOException(SparkErrorUtils.scala:44)
\tat org.apache.spark.sql.execution.joins.UnsafeHashedRelation.readExternal(HashedRelation.scala:388)
Caused by: org.apache.spark.SparkException: Could not allocate memory to grow BytesToBytesMap.
\tat org.apache.spark.sql.errors.QueryExecutionErrors$.cannotAllocateMemoryToGrowBytesToBytesMapError(\
QueryExecutionErrors.scala:1203)
\t... 140 more
"""


def test_a_spark_failure_is_one_line_naming_the_stage_the_cause_and_the_setting():
    from webdedup_assets.engine.spark.session import describe_failure

    local = describe_failure("scored_pairs", RuntimeError(BYTES_TO_BYTES_MAP_FAILURE), SparkSettings(master="local[2]"))
    assert local.startswith(
        "Spark ran out of memory in scored_pairs (SparkException: Could not allocate memory to grow"
    )
    assert "SPARK_DRIVER_MEMORY" in local and "\n" not in local and "\tat " not in local
    cluster = describe_failure(
        "scored_pairs", RuntimeError(BYTES_TO_BYTES_MAP_FAILURE), SparkSettings(master="spark://127.0.0.1:7077")
    )
    assert "spark.executor.memory" in cluster and "SPARK_DRIVER_MEMORY" not in cluster
    # local mode: an OutOfMemoryError in a task stops the JVM; the driver sees only the stopped context
    stopped = describe_failure(
        "scored_pairs",
        RuntimeError(
            "An error occurred while calling o900.collectToPython.\n: java.lang.NullPointerException: Cannot invoke "
            '"org.apache.spark.scheduler.DAGScheduler.cleanupQueryJobs(long)" because the return value of '
            '"org.apache.spark.SparkContext.dagScheduler()" is null'
        ),
        SparkSettings(master="local[2]", conf=(("spark.driver.memory", "512m"),)),
    )
    assert stopped.startswith("Spark stopped during scored_pairs: its JVM shut down (usually out of memory")
    assert "SPARK_DRIVER_MEMORY (now 512m" in stopped and "NullPointerException" not in stopped
    other = describe_failure("clusters", RuntimeError("An error occurred\nCaused by: java.io.IOException: bad"), LOCAL)
    assert other.startswith("Spark failed in clusters: IOException: bad")
    refused = describe_failure(
        "fingerprinted",
        RuntimeError(
            "org.apache.spark.SparkIllegalArgumentException: [INVALID_DRIVER_MEMORY.SYSTEM_MEMORY] Insufficient driver "
            "memory: System memory 67108864 must be at least 471859200."
        ),
        SparkSettings(master="local[2]", conf=(("spark.driver.memory", "64m"),)),
    )
    assert refused.startswith("Spark refused its memory setting in fingerprinted (")
    assert refused.endswith("raise its memory with SPARK_DRIVER_MEMORY (now 64m)")


def test_a_failed_spark_job_is_reported_as_one_line(spark, debian, tmp_path):
    """A real failure in the executors (an unreadable candidate_pairs file): one line naming the
    stage and the cause, not Py4J's text and the Java stack."""
    store = Store(shutil.copytree(debian.root, tmp_path / "broken"))
    DUCKDB.run("candidate_pairs", store, CandidateParams())
    target = store.files("candidate_pairs")[0]
    data = bytearray(target.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little") + 8
    data[4 : len(data) - footer] = bytes(len(data) - footer - 4)  # the column chunks zeroed, the footer kept
    target.write_bytes(bytes(data))
    with pytest.raises(WebdedupError) as failure:
        SPARK.run("scored_pairs", store, ScoringParams(), spark=LOCAL)
    message = str(failure.value)
    assert message.startswith("Spark failed in scored_pairs: ")
    assert "FAILED_READ_FILE" in message and str(target) in message  # Spark's condition, naming the file
    assert "\n" not in message and "Py4J" not in message and "\tat " not in message


def _scored(store: Store) -> Store:
    write_table(
        store.path("scored_pairs"),
        pa.table({"left_doc_id": ["a"], "right_doc_id": ["b"], "exact_jaccard": [0.9]}),
        {"fingerprint": {}, "banding": {}, "scoring": {"threshold": 0.7}},
    )
    return store


# ---- a long chain ----------------------------------------------------------------------------


# The size: 200,000 documents in one chain (14 rounds; 66-107 s on local[2] of this
# 2-core machine under loads of 5-8, the largest Spark test here). The chain is written as a
# duplicate_pairs table and clustered by the clusters stage alone, not through the pipeline.
# WEBDEDUP_SPARK_CHAIN=N runs another size.
CHAIN = int(os.environ.get("WEBDEDUP_SPARK_CHAIN", "200000"))


def test_a_long_chain_is_one_component_in_bounded_rounds(spark, tmp_path):
    n = CHAIN
    store = Store(tmp_path / "chain")
    ids = np.array([f"c{i:07d}" for i in range(n)])
    path = np.random.default_rng(5).permutation(n)  # the chain visits doc_ids in random order
    low, high = np.minimum(path[:-1], path[1:]), np.maximum(path[:-1], path[1:])
    write_table(
        store.path("documents"),
        pa.table({"doc_id": ids, "domain": ["d"] * n, "body": [""] * n}),
        {"stage": "documents"},
    )
    write_table(
        store.path("duplicate_pairs"),
        pa.table(
            {
                "left_doc_id": ids[low],
                "right_doc_id": ids[high],
            }
        ),
        {"fingerprint": {}, "duplicates": {"threshold": 0.7}},
    )
    started = time.perf_counter()
    result = SPARK.run("clusters", store, spark=LOCAL)
    print(f"chain of {n:,}: {result.figures['rounds']} rounds, {time.perf_counter() - started:.1f} s")
    assert result.figures["clusters"] == 1 and result.figures["max_cluster_size"] == n
    assert result.figures["rounds"] <= round_limit(2 * n)
    clusters = table(store, "clusters")
    assert set(clusters.column("cluster_id").to_pylist()) == {"cluster-c0000000"}


# ---- processes started here: a standalone cluster and a Spark Connect server on 127.0.0.1 ----

SPARK_HOME = Path(pyspark.__file__).parent  # the wheel's bin/ (spark-class, spark-submit) and jars/


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(
    port: int, seconds: float = 60, process: subprocess.Popen | None = None, log: Path | None = None
) -> None:
    """Until something listens on 127.0.0.1:port; fails early when `process` exits first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log else ""
            raise RuntimeError(f"exited with {process.returncode} before listening on 127.0.0.1:{port}\n{tail}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


def _spark_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of the Spark processes started here: the wheel as SPARK_HOME, loopback,
    logs and work folders under tmp_path, every daemon JVM with TEST_JVM_OPTIONS."""
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_WORKER_DIR": str(tmp_path / "work"),
        "SPARK_LOG_DIR": str(tmp_path / "logs"),
        "SPARK_DAEMON_JAVA_OPTS": TEST_JVM_OPTIONS,  # standalone masters and workers
        **extra,
    }


@contextlib.contextmanager
def _spark_processes(log: Path):
    """`start(args, env)` starts a process in its own process group, output into `log`. On
    leaving, whatever happened (a failed assertion, an interrupt): the engine's sessions stopped,
    every group sent SIGTERM (SIGKILL after 20 s) and waited for, latest first."""
    output = open(log, "wb")
    processes: list[subprocess.Popen] = []

    def start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
        process = subprocess.Popen(args, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        processes.append(process)
        return process

    try:
        yield start
    finally:
        try:
            stop_sessions()
        finally:
            for process in reversed(processes):
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            for process in reversed(processes):
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
            output.close()


def _conf(conf: dict[str, str]) -> list[str]:
    return [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]


def test_fixture_on_a_standalone_master_with_two_workers(spark, s3_server, tmp_path, monkeypatch):
    """The global stages on the cluster; then `webdedup run --engine spark` there with the storage
    and the output in a bucket (the executors work on this machine's copy of the storage)."""
    import boto3

    from webdedup_assets.cli.main import main
    from webdedup_assets.engine.stages import clustering_spark as clustering

    monkeypatch.setattr(clustering, "CHECKPOINT_EVERY", 1)  # a reliable checkpoint in the one round
    written = []

    def recording(edges, nodes, components=clustering.components, **options):
        result = components(edges, nodes, **options)
        written.extend((tmp_path / "store").glob(".spark-checkpoints-*/*/rdd-*"))
        return result

    monkeypatch.setattr(clustering, "components", recording)
    local_checkpoints = spark.sparkContext.getCheckpointDir()  # file:/tmp/webdedup-spark-checkpoints-*/<uuid>
    stop_sessions()  # one SparkContext per process: the local one goes first
    assert local_checkpoints and not Path(local_checkpoints.removeprefix("file:")).parent.exists()
    env = _spark_env(tmp_path)
    port = _free_port()
    master = f"spark://127.0.0.1:{port}"
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    log = tmp_path / "cluster.log"
    with _spark_processes(log) as start:
        started = start(
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(_free_port()),
            ],
            env,
        )
        _wait_port(port, process=started, log=log)
        for _ in range(2):
            start(
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    master,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--webui-port",
                    str(_free_port()),
                ],
                env,
            )
        settings = SparkSettings(
            master=master,
            shuffle_partitions=4,
            conf=(
                ("spark.executor.memory", "1g"),
                ("spark.cores.max", "2"),
                ("spark.executor.extraJavaOptions", TEST_JVM_OPTIONS),
            ),
        )
        session = get_session(settings)
        deadline = time.monotonic() + 60
        while session.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < 3:  # driver + 2 executors
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.5)
        store = daily_store(tmp_path / "store", FIXTURE, by_month=False)
        results = run_global(SPARK, store, stage_params(), spark=settings)
        assert results["candidate_pairs"].rows == 18
        assert results["duplicate_pairs"].rows == 18
        assert results["deduped_documents"].rows == 12
        assert results["clusters"].figures["rounds"] >= 1
        # not a local master: the reliable checkpoints went under the storage root, then were removed
        assert written and not list(store.root.glob(".spark-checkpoints-*"))

        boto3.client("s3").create_bucket(Bucket="cluster")
        monkeypatch.setenv("WEBDEDUP_CACHE", str(tmp_path / "cache"))
        bucket = ["--storage", "s3://cluster/st", "--output", "s3://cluster/out", "--quiet"]
        assert main(["run", str(FIXTURE), "--engine", "spark", "--spark-master", master, *bucket]) == 0
    assert main(["run", str(FIXTURE), "--output", str(tmp_path / "duckdb"), "--quiet"]) == 0
    client = boto3.client("s3")
    current = json.loads(client.get_object(Bucket="cluster", Key="out/CURRENT")["Body"].read())["folder"]
    for name in ("clusters.csv", "duplicate_pairs.csv", "removed.csv"):
        published = client.get_object(Bucket="cluster", Key=f"out/{current}/{name}")["Body"].read()
        assert published == (tmp_path / "duckdb" / name).read_bytes(), name
    manifest = json.loads(client.get_object(Bucket="cluster", Key=f"out/{current}/manifest.json")["Body"].read())
    assert manifest["storage_root"] == "s3://cluster/st" and manifest["engines"]["candidate_pairs"].startswith("spark ")
    assert client.get_object(Bucket="cluster", Key="st/CURRENT")["ContentLength"] > 0


def test_webdedup_run_on_a_spark_connect_server(tmp_path, monkeypatch):
    """`webdedup run --engine spark --spark-remote sc://127.0.0.1:PORT` against a Spark Connect
    server started here from the wheel's spark-submit (SparkConnectServer, local[2] on the server,
    whose Python workers import webdedup from this checkout for the kernel): this process is a
    thin client. 18 candidates, 18 duplicates, 12 representatives, every check green, every
    Spark stage recorded as Spark's, the reliable checkpoints in the server's spark.checkpoint.dir;
    the server stopped afterwards, whatever happened."""

    from webdedup_assets.cli.main import main
    from webdedup_assets.engine.stages import clustering_spark as clustering

    monkeypatch.setattr(clustering, "CHECKPOINT_EVERY", 1)  # a reliable checkpoint in the one round
    called = spy_on_daily_stages(monkeypatch)
    stop_sessions()  # pyspark runs Connect and classic sessions in separate processes: the local one goes
    port = _free_port()
    checkpoints = tmp_path / "checkpoints"
    python_path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = _spark_env(tmp_path, PYSPARK_PYTHON=sys.executable, PYTHONPATH=python_path)
    server = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master",
        "local[2]",
        *_conf(
            {
                "spark.connect.grpc.binding.address": "127.0.0.1",
                "spark.connect.grpc.binding.port": str(port),
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": "4",
                "spark.checkpoint.dir": str(checkpoints),  # the reliable checkpoints: a client cannot set it
                "spark.driver.extraJavaOptions": TEST_JVM_OPTIONS,
            }
        ),
        "spark-internal",
    ]
    log = tmp_path / "connect.log"
    out = tmp_path / "out"
    with _spark_processes(log) as start:
        began = time.perf_counter()
        _wait_port(port, 120, process=start(server, env), log=log)
        up = time.perf_counter() - began
        argv = ["run", str(FIXTURE), "--output", str(out), "--quiet", "--engine", "spark"]
        code = main([*argv, "--spark-remote", f"sc://127.0.0.1:{port}"])
        print(f"Spark Connect: server up in {up:.1f} s, webdedup run in {time.perf_counter() - began - up:.1f} s")
        assert code == 0, log.read_text(errors="replace")[-3000:]
        assert called == ["fingerprinted", "band_memberships"]
        ours = assert_fixture_result_on_spark(out)
        clusters = json.loads(ours.stats_path("clusters").read_text())
        assert clusters["reliable_checkpoints"] and clusters["rounds"] >= 1
        assert list(checkpoints.glob("*/rdd-*"))  # written by the server into its spark.checkpoint.dir
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ  # stop_sessions undid pyspark's Connect mode


def test_a_standalone_master_that_does_not_answer_is_one_line_before_the_jvm_starts():
    """Spark itself retries for a minute, then stops its JVM as if it had run out of memory."""
    with socket.socket() as probe:  # a port where nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(WebdedupError) as refused:
        get_session(SparkSettings(master=f"spark://127.0.0.1:{port}"))
    assert str(refused.value) == (
        f"no Spark master answers at spark://127.0.0.1:{port} (a standalone master listens at spark://host:7077)"
    )
