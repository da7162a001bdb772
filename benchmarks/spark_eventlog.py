"""Per webdedup stage, what a Spark run cost, read from Spark's event log: jobs, tasks, summed task
seconds, input bytes read, shuffle bytes written and read, and wall seconds from the first job's
submission to the last job's end. The engine puts every job of a stage in the job group
`webdedup-<stage>`; the figures are what a projection to a cluster needs.

  PYSPARK_SUBMIT_ARGS="--conf spark.eventLog.enabled=true --conf spark.eventLog.dir=file:///tmp/ev pyspark-shell" \\
      webdedup run CORPUS --output OUT --storage ST --engine spark --quiet
  python -m benchmarks.spark_eventlog /tmp/ev            # the newest application's log
"""

from __future__ import annotations

import argparse
import io
import json
from collections import defaultdict
from pathlib import Path

import zstandard


def events(log: Path):
    """The JSON events of one application's log (a folder of rolled files, or one file; zstd or plain)."""
    files = sorted(log.glob("events_*")) if log.is_dir() else [log]
    for file in files:
        raw = file.read_bytes()
        if file.suffix == ".zstd":
            raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)).read()
        for line in raw.decode().splitlines():
            yield json.loads(line)


def per_stage(log: Path) -> dict[str, dict[str, float]]:
    stage_of_spark_stage: dict[int, str] = {}
    figures: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for event in events(log):
        kind = event["Event"]
        if kind == "SparkListenerJobStart":
            group = event.get("Properties", {}).get("spark.jobGroup.id") or "(no stage)"
            name = group.removeprefix("webdedup-")
            f = figures[name]
            f["jobs"] += 1
            f["first_ms"] = min(f.get("first_ms", float("inf")), event["Submission Time"])
            for stage_id in event["Stage IDs"]:
                stage_of_spark_stage[stage_id] = name
        elif kind == "SparkListenerTaskEnd":
            name = stage_of_spark_stage.get(event["Stage ID"], "(no stage)")
            f = figures[name]
            info, metrics = event["Task Info"], event.get("Task Metrics") or {}
            f["tasks"] += 1
            f["task_seconds"] += (info["Finish Time"] - info["Launch Time"]) / 1000
            f["last_ms"] = max(f.get("last_ms", 0), info["Finish Time"])
            f["input_bytes"] += (metrics.get("Input Metrics") or {}).get("Bytes Read", 0)
            f["shuffle_write_bytes"] += (metrics.get("Shuffle Write Metrics") or {}).get("Shuffle Bytes Written", 0)
            read = metrics.get("Shuffle Read Metrics") or {}
            f["shuffle_read_bytes"] += read.get("Remote Bytes Read", 0) + read.get("Local Bytes Read", 0)
    report = {}
    for name, f in figures.items():
        wall = (f.get("last_ms", 0) - f.get("first_ms", 0)) / 1000 if "last_ms" in f else 0.0
        report[name] = {
            "jobs": int(f["jobs"]),
            "tasks": int(f["tasks"]),
            "task_seconds": round(f["task_seconds"], 1),
            "wall_seconds_of_jobs": round(wall, 1),
            "input_mb": round(f["input_bytes"] / 1e6, 1),
            "shuffle_write_mb": round(f["shuffle_write_bytes"] / 1e6, 1),
            "shuffle_read_mb": round(f["shuffle_read_bytes"] / 1e6, 1),
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", type=Path, help="an event log folder (spark.eventLog.dir) or one application's log")
    args = parser.parse_args()
    log = args.log
    if log.is_dir() and not any(log.glob("events_*")):  # the eventLog.dir: its newest application
        log = max(
            (p for p in log.iterdir() if p.name.startswith(("eventlog_", "app-", "local-"))),
            key=lambda p: p.stat().st_mtime,
        )
    print(json.dumps(per_stage(log), indent=1))


if __name__ == "__main__":
    main()
