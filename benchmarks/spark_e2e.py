"""The global stages on DuckDB vs Spark over the same stored corpus, per stage.

documents, fingerprinted and band_memberships are built once by DuckDB (both engines start from
the same files); the store is copied, then each engine runs candidate_pairs .. deduped_documents.
Prints one JSON line: seconds per stage per engine, the rows (equal for both), the connected
components' rounds and the Spark session start.

  python -m benchmarks.gen_corpus --docs 100000 --layout single --out benchmarks/data/c100k-single
  python -m benchmarks.spark_e2e benchmarks/data/c100k-single --master 'local[2]'
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from webdedup_assets.engine import DUCKDB, Store, stage_documents
from webdedup_assets.params import (
    BandingParams,
    CandidateParams,
    FingerprintParams,
    RepresentativeParams,
    ScoringParams,
)

GLOBAL = {
    "candidate_pairs": CandidateParams(),
    "scored_pairs": ScoringParams(),
    "duplicate_pairs": None,
    "clusters": None,
    "deduped_documents": RepresentativeParams(),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", help="a gen_corpus output folder (its documents/ is the input)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    parser.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    args = parser.parse_args(argv)

    from webdedup_assets.engine.spark import SPARK
    from webdedup_assets.engine.spark.session import SparkSettings, get_session, stop_sessions

    work = Path(args.work or tempfile.mkdtemp(prefix="spark-e2e-"))
    base = Store(work / "base")
    started = time.perf_counter()
    stage_documents(base, str(Path(args.corpus) / "documents"))
    DUCKDB.run("fingerprinted", base, FingerprintParams())
    DUCKDB.run("band_memberships", base, BandingParams())
    prepared = round(time.perf_counter() - started, 2)
    report: dict = {"corpus": args.corpus, "master": args.master, "daily_stages_duckdb_seconds": prepared}
    for name in ("duckdb", "spark"):
        store = Store(shutil.copytree(base.root, work / name))
        options = {}
        if name == "spark":
            settings = SparkSettings(master=args.master, shuffle_partitions=args.shuffle_partitions)
            began = time.perf_counter()
            get_session(settings)
            report["spark_session_start_seconds"] = round(time.perf_counter() - began, 2)
            options["spark"] = settings
        engine = SPARK if name == "spark" else DUCKDB
        stages = {}
        for stage, params in GLOBAL.items():
            result = engine.run(stage, store, params, **options)
            stages[stage] = {"seconds": result.seconds, "rows": result.rows}
            if stage == "clusters" and "rounds" in result.figures:
                stages[stage]["rounds"] = result.figures["rounds"]
        report[name] = stages
        print(json.dumps({name: stages}), flush=True)
    stop_sessions()
    print(json.dumps(report))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
