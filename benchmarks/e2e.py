"""End-to-end: `webdedup run` (all nine assets and their checks) on a generated corpus,
timed per stage, with the peak RSS of the whole run.

  python -m benchmarks.gen_corpus --docs 1000000 --out benchmarks/data/c1m
  python -m benchmarks.e2e benchmarks/data/c100k benchmarks/data/c1m

The run uses the CLI defaults (every parameter, the pair-slot budget included: it scales with
the corpus). Corpora of every layout the generator writes (daily, monthly, one file over years)
are given as they are:

  python -m benchmarks.e2e benchmarks/data/c100k benchmarks/data/c100k-730-single benchmarks/data/c100k-730-monthly
Per-stage seconds come from the run's manifest.json; wall and peak RSS from wait4.

--rerun runs `webdedup run` a second time into the same output folder, as a daily job does
when nothing (or little) changed: the storage is reused, unchanged daily files are kept.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from benchmarks.common import count_rows, document_files, machine, run_child


def run(corpus: Path, extra: list[str], fresh: bool = True) -> dict:
    output = corpus.parent / f"e2e-{corpus.name}"
    if fresh:
        shutil.rmtree(output, ignore_errors=True)
    started = time.perf_counter()
    _, rss = run_child(
        ["-m", "webdedup_assets.cli.main", "run", str(corpus / "documents"), "--output", str(output), "--quiet", *extra]
    )
    wall = time.perf_counter() - started
    manifest = json.loads((output / "manifest.json").read_text())
    return {
        "corpus": str(corpus),
        "storage": "fresh" if fresh else "reused",
        "docs": count_rows(document_files(corpus)),
        "wall_s": round(wall, 2),
        "peak_rss_mib": round(rss),
        "stages_s": manifest.get("timings_seconds"),
        "counts": {k: manifest["counts"].get(k) for k in ("candidate_pairs", "duplicate_pairs", "clusters", "removed")},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpora", nargs="+")
    parser.add_argument("--extra", default="", help="more `webdedup run` arguments, space separated")
    parser.add_argument("--rerun", action="store_true", help="run each corpus again into the same output folder")
    args = parser.parse_args(argv)
    extra = args.extra.split()
    results = []
    for corpus in args.corpora:
        result = run(Path(corpus).resolve(), extra)
        results.append(result)
        print(json.dumps(result))
        if args.rerun:
            print(json.dumps(run(Path(corpus).resolve(), extra, fresh=False)))
    if len(results) > 1:
        print(
            f"time({results[-1]['docs']:,}) / time({results[0]['docs']:,}) = "
            f"{results[-1]['wall_s'] / results[0]['wall_s']:.2f}"
        )
    print(machine())


if __name__ == "__main__":
    main()
