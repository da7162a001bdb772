"""Incremental update benchmark: one crawl day of ~10k pages added to N pages of history.

Generates (once) a corpus of N + DAY pages over (N + DAY) / DAY crawl days, one Parquet file
per day (benchmarks.gen_corpus, 30 % near-duplicates spread over the days); builds the history
with `webdedup add` of every day but the last (a full build: no incremental state yet), then,
each in a fresh process timed from outside (seconds and peak RSS of that process):

  check   `webdedup check LAST_DAY --against STORAGE`  (the corpus is not changed)
  add     `webdedup add LAST_DAY --output OUT`         (daily stages of the day + incremental
          update of every global asset + publish); its report's per-step seconds are printed

  python -m benchmarks.incremental --history 100000
  python -m benchmarks.incremental --history 1000000 --day 10000 --repeat 3
  python -m benchmarks.incremental --history 1000000 --repeat 2 --cold   # as root, see --cold

--repeat N adds the day N times, each onto a fresh hard-linked copy of the history. --cold drops
the page cache before each check and add (`sync; echo 1 > /proc/sys/vm/drop_caches`, root on
Linux): what a daily add meets when the history was last read a day earlier (BENCHMARKS.md,
"The machine": on the project VM, DAMON gradually pages out file pages nobody read for a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import ROOT

DATA = ROOT / "benchmarks" / "data"


def timed(argv: list[str]) -> tuple[float, float, str]:
    """(seconds, peak RSS MiB, stdout) of a command in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.perf_counter() - started
    if done.returncode:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # ru_maxrss of children is the largest of any child so far: meaningful when this one is largest
    return seconds, max(peak, before) / 1024, done.stdout


def fresh_copy(built: Path, work: Path) -> None:
    """A hard-linked copy of the history: stored files are only ever replaced, never written in place."""
    shutil.rmtree(work, ignore_errors=True)
    subprocess.run(["cp", "-al", str(built), str(work)], check=True)


def drop_page_cache() -> None:
    """Write dirty pages out, then drop the clean ones (OSError without the right to)."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("1\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=100_000)
    parser.add_argument("--day", type=int, default=10_000)
    parser.add_argument("--work", default=None, help="scratch folder (default: benchmarks/data/inc-<history>-run)")
    parser.add_argument("--rebuild-history", action="store_true", help="build the history again even if kept")
    parser.add_argument("--repeat", type=int, default=1, help="add the day this many times (fresh copies)")
    parser.add_argument("--cold", action="store_true", help="drop the page cache before each check and add")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.cold:
        try:
            drop_page_cache()
        except OSError as err:
            parser.error(f"--cold needs to write /proc/sys/vm/drop_caches (root on Linux): {err}")
    days = (args.history + args.day) // args.day
    corpus = DATA / f"inc-{args.history}-{args.day}"
    if not (corpus / "corpus.json").exists():
        from benchmarks.gen_corpus import main as generate

        generate(
            ["--docs", str(args.history + args.day), "--days", str(days), "--layout", "daily", "--out", str(corpus)]
        )
    files = sorted((corpus / "documents").glob("*.parquet"))
    history_dir, last = corpus / "history", files[-1]
    history_dir.mkdir(exist_ok=True)
    for f in files[:-1]:
        if not (history_dir / f.name).exists():
            os.link(f, history_dir / f.name)
    work = Path(args.work) if args.work else DATA / f"inc-{args.history}-run"
    built = work.with_name(work.name + "-history")  # the history alone, kept for the next run
    python = sys.executable
    cli = [python, "-m", "webdedup_assets.cli.main"]
    if args.rebuild_history or not (built / "manifest.json").exists():
        shutil.rmtree(built, ignore_errors=True)
        seconds, rss, _ = timed([*cli, "add", str(history_dir), "--output", str(built), "--json"])
        print(
            f"history: {len(files) - 1} days ({args.history:,}-ish pages), full build: {seconds:.1f} s, "
            f"peak RSS {rss:.0f} MiB"
        )
    else:
        print(f"history: reusing {built} (--rebuild-history to build it again)")
    fresh_copy(built, work)
    if args.cold:
        drop_page_cache()
    seconds, rss, out = timed(
        [
            *cli,
            "check",
            str(last),
            "--against",
            str(work / "_storage"),
            "--report",
            str(work.parent / f"{work.name}-check.parquet"),
            "--json",
        ]
    )
    summary = json.loads(out)
    print(
        f"check: {summary['documents']:,} pages, {summary['duplicates']:,} duplicates of the corpus, "
        f"{summary['candidate_pairs']:,} candidates: {seconds:.2f} s (engine {summary['seconds']:.2f} s), "
        f"peak RSS {rss:.0f} MiB"
    )
    for attempt in range(args.repeat):
        if attempt:
            fresh_copy(built, work)
        if args.cold:
            drop_page_cache()
        seconds, rss, out = timed([*cli, "add", str(last), "--output", str(work), "--json"])
        report = json.loads(out)
        print(
            f"add: {report['documents_added']:,} pages, mode {report['mode']}, {report['pairs_scored']:,} pairs "
            f"scored, {report['clusters_touched']:,} clusters touched: {seconds:.2f} s in all (update "
            f"{report['seconds']['total']:.2f} s: {report['seconds']}), peak RSS {rss:.0f} MiB; "
            f"steps {report['step_seconds']}"
        )
    storage = work / "_storage"
    daily_assets = ("documents", "fingerprinted", "band_memberships")
    daily = {p.stat().st_ino for a in daily_assets for p in (storage / a).rglob("*")}
    size = sum(
        p.stat().st_size for p in (storage / "incremental").rglob("*") if p.is_file() and p.stat().st_ino not in daily
    )
    print(f"incremental state not shared with the daily files: {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
