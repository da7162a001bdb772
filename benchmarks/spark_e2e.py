"""The stages on DuckDB vs Spark over the same stored corpus, per stage.

documents is built once by DuckDB (both engines start from the same files; with
--daily-on-duckdb fingerprinted and band_memberships too); the store is copied, then each engine
runs fingerprinted, band_memberships (unless built once), candidate_pairs .. deduped_documents.
For Spark, each stage's shuffle read/write bytes, input bytes, tasks and summed task time are read
from the Spark UI's REST API (bound to 127.0.0.1: /api/v1/applications/<id>/stages, the stages
that appeared during the stage). Prints one JSON line per engine and a final JSON report: seconds
per stage per engine, the rows (equal for both), the connected components' rounds, the Spark
session start.

  python -m benchmarks.gen_corpus --docs 100000 --layout single --out benchmarks/data/c100k-single
  python -m benchmarks.spark_e2e benchmarks/data/c100k-single --master 'local[2]'
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
import urllib.request
from pathlib import Path

from webdedup_assets.engine import DUCKDB, Store, stage_documents
from webdedup_assets.params import (
    BandingParams,
    CandidateParams,
    FingerprintParams,
    RepresentativeParams,
    ScoringParams,
)

DAILY = {"fingerprinted": FingerprintParams(), "band_memberships": BandingParams()}
GLOBAL = {
    "candidate_pairs": CandidateParams(),
    "scored_pairs": ScoringParams(),
    "duplicate_pairs": None,
    "clusters": None,
    "deduped_documents": RepresentativeParams(),
}
METRICS = {
    "shuffle_read_bytes": "shuffleReadBytes",
    "shuffle_write_bytes": "shuffleWriteBytes",
    "input_bytes": "inputBytes",
    "output_bytes": "outputBytes",
    "spill_disk_bytes": "diskBytesSpilled",
    "tasks": "numCompleteTasks",
    "task_seconds": "executorRunTime",  # ms summed over tasks
    "task_cpu_seconds": "executorCpuTime",  # ns summed over tasks
}


class StageMetrics:
    """Spark stages of the application, read from the UI's REST API on 127.0.0.1; `since()`
    sums the metrics of the stages that appeared since the previous call."""

    def __init__(self, session):
        self.url = session.sparkContext.uiWebUrl
        self.app = session.sparkContext.applicationId
        self.seen: set[int] = set()
        self.seen = {s["stageId"] for s in self._stages()}

    def _stages(self) -> list[dict]:
        with urllib.request.urlopen(f"{self.url}/api/v1/applications/{self.app}/stages", timeout=60) as response:
            return json.load(response)

    def since(self) -> dict:
        time.sleep(2)  # the listener bus reports completed stages asynchronously
        stages = [s for s in self._stages() if s["stageId"] not in self.seen and s["status"] != "SKIPPED"]
        self.seen |= {s["stageId"] for s in stages}
        totals = {"spark_stages": len(stages)}
        for name, key in METRICS.items():
            value = sum(s.get(key, 0) for s in stages)
            if name == "task_seconds":
                value = round(value / 1e3, 1)
            elif name == "task_cpu_seconds":
                value = round(value / 1e9, 1)
            totals[name] = value
        return totals


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", help="a gen_corpus output folder (its documents/ is the input)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    parser.add_argument("--driver-memory", default="3g", help="spark.driver.memory (local[N]: the whole JVM)")
    parser.add_argument("--engines", default="duckdb,spark")
    parser.add_argument("--daily-on-duckdb", action="store_true", help="fingerprint and band once, by DuckDB")
    parser.add_argument("--work", default=None, help="scratch folder (default: a temporary one); removed afterwards")
    args = parser.parse_args(argv)

    from webdedup_assets.engine.spark.engine import SPARK
    from webdedup_assets.engine.spark.session import SparkSettings, get_session, stop_sessions

    work = Path(args.work or tempfile.mkdtemp(prefix="spark-e2e-"))
    work.mkdir(parents=True, exist_ok=True)
    base = Store(work / "base")
    started = time.perf_counter()
    stage_documents(base, str(Path(args.corpus) / "documents"))
    prepared_stages = ["documents"]
    if args.daily_on_duckdb:
        for stage, params in DAILY.items():
            DUCKDB.run(stage, base, params)
        prepared_stages += list(DAILY)
    report: dict = {
        "corpus": args.corpus,
        "master": args.master,
        "shuffle_partitions": args.shuffle_partitions,
        "prepared_by_duckdb": prepared_stages,
        "prepare_seconds": round(time.perf_counter() - started, 2),
        "load_before": os.getloadavg(),
    }
    stages_to_run = GLOBAL if args.daily_on_duckdb else {**DAILY, **GLOBAL}
    try:
        for name in args.engines.split(","):
            store = Store(shutil.copytree(base.root, work / name))
            options, metrics = {}, None
            if name == "spark":
                settings = SparkSettings(
                    master=args.master,
                    shuffle_partitions=args.shuffle_partitions,
                    conf=(
                        ("spark.ui.enabled", "true"),
                        ("spark.ui.retainedStages", "100000"),
                        ("spark.ui.retainedJobs", "100000"),
                        ("spark.driver.memory", args.driver_memory),
                    ),
                )
                began = time.perf_counter()
                session = get_session(settings)
                report["spark_session_start_seconds"] = round(time.perf_counter() - began, 2)
                options["spark"] = settings
                metrics = StageMetrics(session)
            engine = SPARK if name == "spark" else DUCKDB
            stages = {}
            for stage, params in stages_to_run.items():
                result = engine.run(stage, store, params, **options)
                stages[stage] = {"seconds": result.seconds, "rows": result.rows}
                if stage == "clusters" and "rounds" in result.figures:
                    stages[stage]["rounds"] = result.figures["rounds"]
                if metrics is not None:
                    stages[stage].update(metrics.since())
                print(json.dumps({"engine": name, "stage": stage, **stages[stage]}), flush=True)
            report[name] = stages
            shutil.rmtree(store.root, ignore_errors=True)  # the disk for the next engine
        report["load_after"] = os.getloadavg()
    finally:
        stop_sessions()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
