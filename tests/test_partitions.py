"""Crawl-month partitions: backfills, new days and months, re-runs, parallel runs, the schedule, dates outside."""

import csv
import json
import os
import subprocess
import sys
from collections import defaultdict
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from webdedup_assets.cli.main import main
from webdedup_assets.defs import CRAWL_MONTHS, DAILY_JOB, GLOBAL_JOB, build_defs, register_months
from webdedup_assets.engine.invariants import compare_counts
from webdedup_assets.engine.reading import combined_sha256, input_days
from webdedup_assets.engine.stages.manifest import load_manifest
from webdedup_assets.ingest.inputs import resolve_input
from webdedup_assets.params import BandingParams, CandidateParams
from webdedup_assets.storage.store import Store

from .conftest import FIXTURE, check_results, failure_messages
from .dagster_runs import RANGE_END_TAG, RANGE_START_TAG

FIRST, LAST = "2026-01", "2026-03"  # the crawl months of the split fixture
MONTHS = ["2026-01", "2026-02", "2026-03"]


def spread(day: str) -> str:
    """The fixture's 22 March days spread over three months, in the same order: 01-07 in January,
    08-14 in February, 15-22 in March."""
    number = int(day[-2:])
    return f"2026-{1 + min(2, (number - 1) // 7):02d}-{number:02d}"


def split_fixture_by_day(folder: Path) -> dict[str, list[dict]]:
    """The fixture as one CSV per crawl day over three months: the folder layout a daily crawl produces."""
    with open(FIXTURE, newline="") as handle:
        rows = list(csv.DictReader(handle))
    by_day = defaultdict(list)
    for row in rows:
        row["crawled_at"] = spread(row["crawled_at"])
        by_day[row["crawled_at"]].append(row)
    folder.mkdir(parents=True, exist_ok=True)
    for day, day_rows in by_day.items():
        write_day(folder, day, day_rows)
    return by_day


def write_day(folder: Path, day: str, rows: list[dict]) -> Path:
    path = folder / f"{day}.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["doc_id", "source", "domain", "crawled_at", "title", "body"])
        writer.writeheader()
        writer.writerows(rows)
    return path


class Env:
    def __init__(self, tmp_path: Path, input_path: Path):
        self.storage = tmp_path / "storage"
        self.output = tmp_path / "output"
        self.input = input_path
        self.defs = build_defs()
        self.instance = dg.DagsterInstance.ephemeral()

    def config(self, ops=()):
        return {
            "ops": {"documents": {"config": {"input_path": str(self.input)}}} if "documents" in ops else {},
            "resources": {"storage": {"config": {"storage_root": str(self.storage), "output_dir": str(self.output)}}},
            "loggers": {"console": {"config": {"log_level": "CRITICAL"}}},
        }

    def daily(self, first: str, last: str | None = None):
        register_months(self.instance, input_days(str(self.input)))  # what discover_crawl_months does
        result = self.defs.resolve_job_def(DAILY_JOB).execute_in_process(
            run_config=self.config(ops=["documents"]),
            instance=self.instance,
            raise_on_error=False,
            tags={RANGE_START_TAG: first, RANGE_END_TAG: last or first},
        )
        assert result.success, failure_messages(result)
        return result

    def global_stages(self):
        result = self.defs.resolve_job_def(GLOBAL_JOB).execute_in_process(
            run_config=self.config(), instance=self.instance, raise_on_error=False
        )
        assert result.success, failure_messages(result)
        self.last_global = result
        return load_manifest(Store(self.storage))

    def store(self) -> Store:
        return Store(self.storage)


def materialized_partitions(result, asset: str) -> set[str]:
    return {e.partition for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == asset}


def representatives(store: Store) -> dict[str, str]:
    return dict(duckdb.sql(f"SELECT cluster_id, doc_id FROM {store.scan_sql('deduped_documents')}").fetchall())


@pytest.fixture
def stack():
    with ExitStack() as contexts:
        yield contexts


@pytest.fixture
def split(tmp_path):
    folder = tmp_path / "crawl"
    by_day = split_fixture_by_day(folder)
    return Env(tmp_path, folder), by_day


def test_backfilling_every_day_then_the_global_stages_gives_the_fixture_counts(split):
    env, by_day = split
    assert len(by_day) >= 4
    # pin the fixture's counts for the folder layout, matched by the checksum of all its files
    pinned = json.loads((FIXTURE.parent / "documents.expected.json").read_text())
    pinned["input_sha256"] = combined_sha256(resolve_input(str(env.input)))
    (env.input / "webdedup.expected.json").write_text(json.dumps(pinned))
    result = env.daily(FIRST, LAST)
    assert materialized_partitions(result, "fingerprinted") == set(MONTHS)  # one run, every crawl month
    assert env.instance.get_dynamic_partitions(CRAWL_MONTHS) == MONTHS  # the partitions are the data's months
    assert env.store().partitions("documents") == MONTHS
    assert len(env.store().files("fingerprinted")) == 1 + len(MONTHS)  # a file per month (and the schema file)
    manifest = env.global_stages()
    counts = manifest["counts"]
    assert counts["documents"] == 24 and counts["candidate_pairs"] == 18
    assert counts["duplicate_pairs"] == 18 and counts["representatives"] == 12
    assert len(manifest["input"]["files"]) == len(by_day)
    assert manifest["input"]["sha256"] == pinned["input_sha256"]
    assert check_results(result)["documents_match_expected_counts"].description is None  # compared, equal
    checks = check_results(env.last_global)
    assert checks["candidate_pairs_match_expected_counts"].passed
    assert checks["deduped_documents_match_expected_counts"].passed


def test_pinned_counts_of_the_whole_input_wait_for_its_months_to_be_built(split):
    """Counts pinned for a whole input are not compared while some of its crawl months are not built
    (a Dagster user materializing them one by one): the check said ERROR on valid data."""
    env, _ = split
    pinned = json.loads((FIXTURE.parent / "documents.expected.json").read_text())
    pinned["input_sha256"] = combined_sha256(resolve_input(str(env.input)))
    (env.input / "webdedup.expected.json").write_text(json.dumps(pinned))
    env.daily(FIRST, LAST)
    store = env.store()
    assert compare_counts(store, ["documents"])[0] is True
    store.remove("documents", LAST)  # as the input's files give it, but its last month not built
    passed, details = compare_counts(store, ["documents"])
    assert passed is None
    assert details["skipped"] == (
        f"counts pinned by {env.input / 'webdedup.expected.json'} for the whole input, whose crawl month(s) "
        f"{LAST} are not built yet"
    )


def test_a_new_month_is_fingerprinted_alone_and_joins_the_old_cluster(split):
    env, _ = split
    env.daily(FIRST, LAST)
    env.global_stages()
    before = {p: p.stat().st_mtime_ns for p in env.store().files("fingerprinted") if p.name.startswith("part-")}
    with open(FIXTURE, newline="") as handle:
        canonical = next(r for r in csv.DictReader(handle) if r["doc_id"] == "billing-canonical")
    new_day = "2026-04-02"
    write_day(
        env.input,
        new_day,
        [{**canonical, "doc_id": "billing-late-mirror", "domain": "late.example", "crawled_at": new_day}],
    )
    result = env.daily("2026-04")
    assert materialized_partitions(result, "fingerprinted") == {"2026-04"}
    after = {p: p.stat().st_mtime_ns for p in env.store().files("fingerprinted") if p.name.startswith("part-")}
    assert {p: t for p, t in after.items() if p in before} == before  # old months untouched
    assert env.store().partitions("fingerprinted")[-1] == "2026-04"
    counts = env.global_stages()["counts"]
    assert counts["documents"] == 25 and counts["duplicate_clusters"] == 6
    clusters = dict(duckdb.sql(f"SELECT doc_id, cluster_id FROM {env.store().scan_sql('clusters')}").fetchall())
    assert clusters["billing-late-mirror"] == "cluster-billing-canonical"
    assert representatives(env.store())["cluster-billing-canonical"] == "billing-late-mirror"  # newest wins


def test_rerunning_a_month_replaces_exactly_its_changed_days_rows(split):
    env, by_day = split
    env.daily(FIRST, LAST)
    store = env.store()
    other_months = {
        p: p.stat().st_mtime_ns
        for p in store.files("documents")
        if p.name.startswith("part-") and "2026-01" not in p.name
    }
    month_before = dict(
        duckdb.sql(f"SELECT doc_id, body FROM read_parquet('{store.path('documents', '2026-01')}')").fetchall()
    )
    rows = by_day["2026-01-05"]
    changed = [{**rows[0], "doc_id": "incident-canonical-v2", "body": rows[0]["body"] + " Updated."}]
    write_day(env.input, "2026-01-05", changed)
    env.daily("2026-01")
    month = dict(
        duckdb.sql(f"SELECT doc_id, body FROM read_parquet('{store.path('documents', '2026-01')}')").fetchall()
    )
    assert month.pop("incident-canonical-v2") == changed[0]["body"]
    assert month == {k: v for k, v in month_before.items() if k != rows[0]["doc_id"]}  # the other days: as they were
    assert {
        p: p.stat().st_mtime_ns
        for p in store.files("documents")
        if p.name.startswith("part-") and "2026-01" not in p.name
    } == other_months
    ids = {d for (d,) in duckdb.sql(f"SELECT doc_id FROM {store.scan_sql('fingerprinted')}").fetchall()}
    assert "incident-canonical-v2" in ids and "incident-canonical" not in ids and len(ids) == 24


def test_deleting_a_days_input_and_rerunning_it_removes_its_documents(split):
    env, by_day = split
    env.daily(FIRST, LAST)
    assert env.global_stages()["counts"]["documents"] == 24
    (env.input / "2026-01-03.csv").unlink()  # held billing-mirror
    result = env.daily("2026-01")
    assert materialized_partitions(result, "documents") == {"2026-01"}
    counts = env.global_stages()["counts"]
    assert counts["documents"] == 23 and counts["candidate_pairs"] == 16  # billing lost 2 of its 3 pairs
    assert representatives(env.store())["cluster-billing-canonical"] == "billing-revision"


def dagster_cli(tmp_path: Path) -> tuple[dict[str, str], str]:
    """Environment and executable for `dagster` CLI runs over the fixture split by day."""
    folder = tmp_path / "crawl"
    split_fixture_by_day(folder)
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((Path(__file__).parents[1] / "dagster.yaml").read_text())
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "WEBDEDUP_INPUT": str(folder),
        "WEBDEDUP_STORAGE_ROOT": str(tmp_path / "storage"),
        "WEBDEDUP_OUTPUT_DIR": str(tmp_path / "output"),
    }
    # the crawl_months partitions of that instance: what the discover_crawl_months sensor adds under `dagster dev`
    register = (
        "import sys, dagster as dg; from webdedup_assets.defs import register_months; "
        "from webdedup_assets.engine.reading import input_days; "
        "register_months(dg.DagsterInstance.get(), input_days(sys.argv[1]))"
    )
    subprocess.run([sys.executable, "-c", register, str(folder)], env=env, cwd=tmp_path, check=True)
    return env, str(Path(sys.executable).with_name("dagster"))


def test_three_months_in_parallel_runs(tmp_path):
    env, dagster = dagster_cli(tmp_path)  # creates the instance's storage; the three runs share it
    days = MONTHS
    procs = [
        subprocess.Popen(
            [
                dagster,
                "asset",
                "materialize",
                "-m",
                "webdedup_assets.defs",
                "--select",
                "documents,fingerprinted,band_memberships",
                "--partition",
                day,
            ],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for day in days
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    for proc, out in zip(procs, outputs):
        assert proc.returncode == 0, out[-3000:]
        assert "RUN_SUCCESS" in out
        assert "lock" not in out.lower() or "RUN_SUCCESS" in out
    store = Store(tmp_path / "storage")
    assert store.partitions("band_memberships") == days
    ids = {d for (d,) in duckdb.sql(f"SELECT doc_id FROM {store.scan_sql('fingerprinted')}").fetchall()}
    with open(FIXTURE, newline="") as handle:
        assert ids == {r["doc_id"] for r in csv.DictReader(handle)}


def test_the_schedule_adds_and_requests_the_month_of_the_previous_crawl_day():
    defs = build_defs()
    schedule = defs.resolve_schedule_def("webdedup_daily_schedule")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    with dg.instance_for_test() as instance:  # a schedule needs an instance with a reference
        context = dg.build_schedule_context(
            instance=instance,
            scheduled_execution_time=datetime(2026, 3, 23, 1, 0, tzinfo=UTC),
            repository_def=defs.get_repository_def(),
        )
        requests = list(schedule.evaluate_tick(context).run_requests)
        assert len(requests) == 1 and requests[0].partition_key == "2026-03"
        assert requests[0].run_key == "2026-03-22"  # one run a day: the month with its new day
        assert schedule.job_name == DAILY_JOB
        assert instance.get_dynamic_partitions(CRAWL_MONTHS) == ["2026-03"]
        # a tick (or the UI's test of one) for a day the input holds no page of registers nothing
        context = dg.build_schedule_context(
            instance=instance,
            scheduled_execution_time=datetime(2025, 6, 2, 1, 0, tzinfo=UTC),
            repository_def=defs.get_repository_def(),
        )
        skipped = schedule.evaluate_tick(context)
        assert not skipped.run_requests and skipped.skip_message.endswith("holds no page of 2025-06-01")
        assert instance.get_dynamic_partitions(CRAWL_MONTHS) == ["2026-03"]


def test_the_schedule_keeps_the_fingerprint_parameters_of_the_latest_run(split, stack):
    env, _ = split
    env.instance = stack.enter_context(dg.instance_for_test())
    config = env.config(ops=["documents"])
    config["ops"]["fingerprinted"] = {"config": {"shingle_size": 4, "num_perm": 64, "seed": 3}}
    config["ops"]["band_memberships"] = {"config": {"bands": 16, "rows": 4}}
    register_months(env.instance, input_days(str(env.input)))
    result = env.defs.resolve_job_def(DAILY_JOB).execute_in_process(
        run_config=config,
        instance=env.instance,
        raise_on_error=False,
        tags={RANGE_START_TAG: FIRST, RANGE_END_TAG: LAST},
    )
    assert result.success, failure_messages(result)
    schedule = env.defs.resolve_schedule_def("webdedup_daily_schedule")
    context = dg.build_schedule_context(
        instance=env.instance,
        scheduled_execution_time=datetime(2026, 3, 2, 1, 0, tzinfo=UTC),  # 2026-03-01: pages in the input
        repository_def=env.defs.get_repository_def(),
    )
    [request] = schedule.evaluate_tick(context).run_requests
    assert request.run_config["ops"] == {  # as stored with the assets (MinHash's: no SimHash field)
        "fingerprinted": {"config": {"shingle_size": 4, "shingle_unit": "word", "num_perm": 64, "seed": 3}},
        "band_memberships": {"config": {"bands": 16, "rows": 4}},
    }


def sensor_tick(defs, instance, cursor=None):
    sensor = defs.resolve_sensor_def("global_after_daily")
    context = dg.build_sensor_context(instance=instance, cursor=cursor, repository_def=defs.get_repository_def())
    return sensor.evaluate_tick(context)


def test_the_sensor_follows_any_materialization_of_band_memberships_once_with_the_parameters_in_force(split):
    env, by_day = split
    defs = env.defs
    sensor = defs.resolve_sensor_def("global_after_daily")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert sensor.job_name == GLOBAL_JOB
    assert not sensor_tick(defs, env.instance).run_requests  # nothing materialized yet
    # the daily assets materialized without the daily job (as a Catalog backfill does): one range run
    register_months(env.instance, input_days(str(env.input)))
    daily = [a for a in defs.assets if a.key.to_user_string() in ("documents", "fingerprinted", "band_memberships")]
    result = dg.materialize(
        daily,
        instance=env.instance,
        resources=defs.resources,
        run_config=env.config(ops=["documents"]),
        tags={RANGE_START_TAG: FIRST, RANGE_END_TAG: LAST},
    )
    assert result.success and result.dagster_run.job_name != DAILY_JOB
    assert len(materialized_partitions(result, "band_memberships")) == len(MONTHS)
    first = sensor_tick(defs, env.instance)
    assert len(first.run_requests) == 1  # one global run for the whole batch, not one per month
    assert first.run_requests[0].run_config == {}  # no global run yet: the defaults
    assert not sensor_tick(defs, env.instance, first.cursor).run_requests  # and no second one (no loop)
    # a global run with a threshold of 0.9 (the launchpad); the next automated run keeps it
    config = env.config()
    config["ops"] = {k: {"config": {"threshold": 0.9}} for k in ("scored_pairs", "duplicate_pairs")}
    config["ops"]["deduped_documents"] = {"config": {"representative_policy": "longest"}}
    run = defs.resolve_job_def(GLOBAL_JOB).execute_in_process(run_config=config, instance=env.instance)
    assert run.success
    assert not sensor_tick(defs, env.instance, first.cursor).run_requests  # the global run is no trigger
    env.daily("2026-02")  # a re-run of one month by the daily job
    [request] = sensor_tick(defs, env.instance, first.cursor).run_requests
    assert request.run_config["ops"]["scored_pairs"] == {"config": {"threshold": 0.9}}
    assert "duplicate_pairs" not in request.run_config["ops"]  # it takes scored_pairs' one threshold
    assert request.run_config["ops"]["deduped_documents"] == {
        "config": {"representative_policy": "longest", "verify_against_representative": False, "prefer_domains": ""}
    }
    candidates = request.run_config["ops"]["candidate_pairs"]["config"]
    assert candidates["max_pair_slots"] == CandidateParams().max_pair_slots  # the defaults it last ran with
    assert candidates["pair_slots_per_document"] == CandidateParams().pair_slots_per_document
    # scored_pairs alone at 0.95 (the Catalog), then a daily run: the automated run is at 0.95 throughout
    alone = env.config()
    alone["ops"] = {"scored_pairs": {"config": {"threshold": 0.95}}}
    scored = [a for a in defs.assets if a.key.to_user_string() == "scored_pairs"]
    assert dg.materialize(scored, instance=env.instance, resources=defs.resources, run_config=alone).success
    env.daily("2026-02")
    [request] = sensor_tick(defs, env.instance, first.cursor).run_requests
    assert request.run_config["ops"]["scored_pairs"] == {"config": {"threshold": 0.95}}
    automated = {**env.config(), "ops": request.run_config["ops"]}
    assert defs.resolve_job_def(GLOBAL_JOB).execute_in_process(run_config=automated, instance=env.instance).success
    assert load_manifest(env.store())["parameters"]["duplicate_pairs"]["threshold"] == 0.95
    # `webdedup run` on the same storage at 0.8: the next automated run keeps 0.8, not Dagster's last 0.95
    cli = ["run", str(env.input), "--storage", str(env.storage), "--output", str(env.output), "--quiet"]
    assert main([*cli, "--threshold", "0.8"]) in (0, 1)  # (1: the fixture's pinned counts are at 0.7)
    env.daily("2026-02")
    [request] = sensor_tick(defs, env.instance, first.cursor).run_requests
    assert request.run_config["ops"]["scored_pairs"] == {"config": {"threshold": 0.8}}
    # "Materialize all" (a backfill: the daily assets, then the global ones in a run of their own):
    # the global assets already follow band_memberships, no third run
    env.daily("2026-02")
    config["ops"] = {}
    assert defs.resolve_job_def(GLOBAL_JOB).execute_in_process(run_config=config, instance=env.instance).success
    skipped = sensor_tick(defs, env.instance, first.cursor)
    assert not skipped.run_requests and "materialized the global assets after band_memberships" in skipped.skip_message


def test_cli_range_backfill_then_global_job(tmp_path):
    env, dagster = dagster_cli(tmp_path)
    backfill = subprocess.run(
        [
            dagster,
            "asset",
            "materialize",
            "-m",
            "webdedup_assets.defs",
            "--select",
            "documents,fingerprinted,band_memberships",
            "--partition-range",
            f"{FIRST}...{LAST}",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert backfill.returncode == 0, backfill.stderr[-3000:]
    glob = subprocess.run(
        [dagster, "job", "execute", "-m", "webdedup_assets.defs", "-j", GLOBAL_JOB],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert glob.returncode == 0, glob.stderr[-3000:]
    counts = load_manifest(Store(tmp_path / "storage"))["counts"]
    assert counts["candidate_pairs"] == 18 and counts["representatives"] == 12


def test_pages_outside_the_partitions_are_reported_with_their_doc_ids(tmp_path):
    folder = tmp_path / "crawl"
    rows = [
        {
            "doc_id": "old-page",
            "source": "s",
            "domain": "a.example",
            "crawled_at": "1998-05-01",
            "title": "t",
            "body": "an old page from the previous century about gardens",
        },
        {
            "doc_id": "future-page",
            "source": "s",
            "domain": "b.example",
            "crawled_at": "2099-01-01",
            "title": "t",
            "body": "a page dated in the future by a wrong clock",
        },
        {
            "doc_id": "today-page",
            "source": "s",
            "domain": "c.example",
            "crawled_at": "2026-03-01",
            "title": "t",
            "body": "a page from a covered day",
        },
        {  # a month between two partitions: it was counted as covered and silently left out
            "doc_id": "gap-page",
            "source": "s",
            "domain": "d.example",
            "crawled_at": "2026-07-10",
            "title": "t",
            "body": "a page from a month between the partitions",
        },
    ]
    folder.mkdir()
    path = folder / "mixed.csv"  # no date in the name: read for every day and checked
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    env = Env(tmp_path, folder)
    env.instance.add_dynamic_partitions(CRAWL_MONTHS, ["2026-03", "2026-12"])  # two of the five months
    result = env.defs.resolve_job_def(DAILY_JOB).execute_in_process(
        run_config=env.config(ops=["documents"]), instance=env.instance, partition_key="2026-03"
    )
    documents = next(
        e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == "documents"
    )
    metadata = documents.materialization.metadata
    assert metadata["documents_outside_partitions"].value == 3
    assert metadata["doc_ids_outside_partitions"].value == ["future-page", "gap-page", "old-page"]
    assert metadata["months_outside_partitions"].value == ["1998-05", "2026-07", "2099-01"]
    # `webdedup run` covers them: its partitions are the months present in the input
    assert main(["run", str(path), "--output", str(tmp_path / "out"), "--quiet", "--json"]) == 0
    kept = duckdb.sql(f"SELECT doc_id FROM {Store(tmp_path / 'out' / '_storage').scan_sql('deduped_documents')}")
    assert {d for (d,) in kept.fetchall()} == {"old-page", "future-page", "today-page", "gap-page"}


def test_cli_run_over_many_days_is_one_daily_run_over_their_months(tmp_path):
    import random

    rng = random.Random(7)
    words = [f"w{i}" for i in range(500)]
    path = tmp_path / "years.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["doc_id", "source", "domain", "crawled_at", "title", "body"])
        for i in range(300):
            day = f"{2007 + i % 20}-{1 + i % 12:02d}-{1 + i % 28:02d}"
            writer.writerow(
                [f"d{i:04d}", "s", f"site{i % 7}.example", day, "t", " ".join(rng.choice(words) for _ in range(40))]
            )
    from .conftest import job_config
    from .dagster_runs import execute

    events = execute(str(path), job_config(tmp_path / "s", tmp_path / "o", path))
    starts = [e.job_name for e in events if e.event_type_value == "PIPELINE_START"]
    assert starts == [DAILY_JOB, GLOBAL_JOB]  # one daily run for every month, one global run
    months = {
        e.partition
        for e in events
        if e.event_type_value == "ASSET_MATERIALIZATION" and e.asset_key.to_user_string() == "documents"
    }
    assert months == {f"{2007 + i % 20}-{1 + i % 12:02d}" for i in range(300)}  # 60 months, not 300 days
    assert len(Store(tmp_path / "s").files("documents")) == len(months) + 1  # and a file per month
    assert load_manifest(Store(tmp_path / "s"))["counts"]["documents"] == 300


def test_each_partition_of_a_range_run_reports_its_own_rows_and_preview(split):
    env, by_day = split
    result = env.daily(FIRST, LAST)
    store = env.store()
    by_month = defaultdict(list)
    for day, rows in by_day.items():
        by_month[day[:7]].extend(rows)
    seen = 0
    for event in result.get_asset_materialization_events():
        asset, month = event.asset_key.to_user_string(), event.partition
        metadata = event.materialization.metadata
        [(rows,)] = duckdb.sql(f"SELECT count(*) FROM read_parquet('{store.path(asset, month)}')").fetchall()
        assert metadata["dagster/row_count"].value == rows, (asset, month)
        assert rows == len(by_month[month]) * (BandingParams().bands if asset == "band_memberships" else 1)
        preview = metadata["preview"].value
        ids = {r["doc_id"] for r in by_month[month]}
        shown = {doc_id for doc_id in ids if f"| {doc_id} |" in preview}
        assert shown  # that month's documents, no other month's
        others = {r["doc_id"] for m, rs in by_month.items() if m != month for r in rs}
        assert not any(f"| {doc_id} |" in preview for doc_id in others)
        assert metadata["files"].value == [store.path(asset, month).name]
        assert metadata["parameters"].value  # shared by the run's partitions: what the automation carries on
        seen += 1
    assert seen == 3 * len(MONTHS)
    february = [e for e in result.get_asset_materialization_events() if e.partition == "2026-02"]
    rows = len(by_month["2026-02"])
    assert {e.materialization.metadata["dagster/row_count"].value for e in february} == {
        rows,
        rows * BandingParams().bands,
    }


def test_discover_crawl_months_adds_the_inputs_months_and_then_only_new_ones(split, stack, monkeypatch):
    import types

    import webdedup_assets.defs as defs_module

    env, by_day = split
    config = types.SimpleNamespace(input_path=str(env.input), input_format="auto", mapping=lambda: None)
    monkeypatch.setattr(defs_module, "DocumentsConfig", lambda: config)  # as if WEBDEDUP_INPUT were the folder
    instance = stack.enter_context(dg.instance_for_test())
    sensor = env.defs.resolve_sensor_def("discover_crawl_months")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING

    def tick(cursor=None):
        context = dg.build_sensor_context(
            instance=instance, cursor=cursor, repository_def=env.defs.get_repository_def()
        )
        result = sensor.evaluate_tick(context)
        for request in result.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)
        return result

    first = tick()
    assert instance.get_dynamic_partitions(CRAWL_MONTHS) == MONTHS
    again = tick(first.cursor)
    assert not again.dynamic_partitions_requests and "unchanged" in again.skip_message
    write_day(env.input, "2026-03-30", [{**by_day["2026-01-01"][0], "doc_id": "later", "crawled_at": "2026-03-30"}])
    assert not tick(first.cursor).dynamic_partitions_requests  # a new day of a known month: no new partition
    write_day(env.input, "2026-04-02", [{**by_day["2026-01-01"][0], "doc_id": "late", "crawled_at": "2026-04-02"}])
    later = tick(first.cursor)
    [request] = later.dynamic_partitions_requests
    assert request.partition_keys == ["2026-04"]
    assert instance.get_dynamic_partitions(CRAWL_MONTHS) == [*MONTHS, "2026-04"]
