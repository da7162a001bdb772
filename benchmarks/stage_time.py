"""One stage run again over a stored run, timed: wall seconds, CPU seconds and the process's peak
RSS (the stage rewrites its own asset in that storage; its inputs are left as they are).

  python -m benchmarks.e2e benchmarks/data/c1m          # leaves benchmarks/data/e2e-c1m
  python -m benchmarks.stage_time benchmarks/data/e2e-c1m/_storage deduped_documents --repeat 2

Compare two commits by alternating them on the same storage (`git stash`, or two checkouts with
PYTHONPATH): on this VM wall times of one commit move by ±20 % with its memory state.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

GLOBAL_STAGES = ("candidate_pairs", "scored_pairs", "duplicate_pairs", "clusters", "deduped_documents")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("storage", help="a run's storage root, e.g. OUTPUT/_storage")
    parser.add_argument("stage", choices=GLOBAL_STAGES)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args(argv)

    import webdedup_assets.engine as engine
    from webdedup_assets.engine.storage import Store

    store = Store(Path(args.storage))
    if not store.files(args.stage):
        parser.error(f"{args.storage} holds no {args.stage}: give the _storage folder of a finished run")
    run = getattr(engine, f"stage_{args.stage}")
    for _ in range(args.repeat):
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        run(store)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        print(f"{args.stage}: {wall:.2f} s wall, {cpu:.2f} CPU s, peak RSS {after.ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
