"""One stage run again over a stored run, timed: wall seconds, CPU seconds and the process's peak
RSS (the stage rewrites its own asset in that storage; its inputs are left as they are).

  python -m benchmarks.e2e benchmarks/data/c1m          # leaves benchmarks/data/e2e-c1m
  python -m benchmarks.stage_time benchmarks/data/e2e-c1m/_storage deduped_documents --repeat 2

Compare two commits by alternating them on the same storage (`git stash`, or two checkouts with
PYTHONPATH): on this VM wall times of one commit move by ±20 % with its memory state.

The documents stage reads an input instead of a stored run: it is written into a scratch storage
folder (emptied first), every crawl month of the input at once as `webdedup run` does:

  python -m benchmarks.stage_time /tmp/documents-scratch documents --input benchmarks/data/c1m-730-single/documents
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

SCRATCH_MARK = ".stage_time-scratch"  # a documents scratch folder this script may empty again
GLOBAL_STAGES = ("candidate_pairs", "scored_pairs", "duplicate_pairs", "clusters", "deduped_documents")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("storage", help="a run's storage root, e.g. OUTPUT/_storage")
    parser.add_argument("stage", choices=("documents", *GLOBAL_STAGES))
    parser.add_argument("--input", help="documents only: the input file or folder")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args(argv)
    if (args.stage == "documents") != (args.input is not None):
        parser.error("--input goes with the documents stage, and only with it")

    import webdedup_assets.engine as engine
    from webdedup_assets.storage.store import Store

    store = Store(Path(args.storage))
    if args.stage == "documents":
        if store.root.exists() and any(store.root.iterdir()) and not (store.root / SCRATCH_MARK).exists():
            parser.error(f"{store.root} is not empty and not a scratch folder of this script: give a new folder")
        run = _documents_run(store, args.input)
    elif not store.files(args.stage):
        parser.error(f"{args.storage} holds no {args.stage}: give the _storage folder of a finished run")
    else:
        run = getattr(engine, f"stage_{args.stage}")
    for _ in range(args.repeat):
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        run(store)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        print(f"{args.stage}: {wall:.2f} s wall, {cpu:.2f} CPU s, peak RSS {after.ru_maxrss / 1024:.0f} MiB")


def _documents_run(store, source: str):
    """The documents stage over every crawl month of `source`, into an emptied scratch storage."""
    import shutil

    from webdedup_assets.engine.reading import input_days
    from webdedup_assets.engine.stages.documents import stage_documents
    from webdedup_assets.storage.state import months_of

    def run(_store) -> None:
        shutil.rmtree(store.root, ignore_errors=True)
        store.root.mkdir(parents=True)
        (store.root / SCRATCH_MARK).touch()
        stage_documents(store, source, months=months_of(input_days(source, store=store)))

    return run


if __name__ == "__main__":
    main()
