"""Incremental equivalence at scale: a corpus added day by day equals one `webdedup run`.

Generates (once) DOCS pages over DAYS crawl days, one Parquet file per day (benchmarks.gen_corpus,
30 % near-duplicates), then:

  A  `webdedup add DAY --output A` for every day in order (the first a full build, then
     incremental updates; one more day of history each time)
  B  `webdedup run ALL_DAYS --output B` (from scratch)

and compares every published output of A and B: the CSV reports byte for byte, the Parquet outputs
row for row in stored order (DuckDB EXCEPT both ways and the row counts, then order by a row
number). Prints the seconds of each `add` (its incremental update's own seconds too) and, per
output, equal / the first difference.

  python -m benchmarks.incremental_equivalence --docs 100000 --days 10
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb

from benchmarks.common import ROOT

DATA = ROOT / "benchmarks" / "data"


def cli(*args: str) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "webdedup_assets.cli.main", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if done.returncode:
        sys.exit(f"webdedup {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return time.perf_counter() - started, done.stdout


def same_parquet(a: Path, b: Path) -> str:
    con = duckdb.connect()
    try:
        rows = [con.execute(f"SELECT count(*) FROM read_parquet('{p}')").fetchone()[0] for p in (a, b)]
        if rows[0] != rows[1]:
            return f"rows differ: {rows[0]} vs {rows[1]}"
        numbered = "SELECT row_number() OVER () AS n, * FROM read_parquet('{}')"
        for x, y in ((a, b), (b, a)):
            extra = con.execute(f"SELECT count(*) FROM ({numbered.format(x)} EXCEPT {numbered.format(y)})").fetchone()[
                0
            ]
            if extra:
                return f"{extra} rows (with their stored position) of {x.parent.name} not in {y.parent.name}"
        return "equal"
    finally:
        con.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=10)
    args = parser.parse_args(argv)
    corpus = DATA / f"equiv-{args.docs}-{args.days}"
    if not (corpus / "corpus.json").exists():
        from benchmarks.gen_corpus import main as generate

        generate(["--docs", str(args.docs), "--days", str(args.days), "--layout", "daily", "--out", str(corpus)])
    days = sorted((corpus / "documents").glob("*.parquet"))
    added, scratch = corpus.parent / f"{corpus.name}-added", corpus.parent / f"{corpus.name}-run"
    for folder in (added, scratch):
        shutil.rmtree(folder, ignore_errors=True)
    for day in days:
        seconds, out = cli("add", str(day), "--output", str(added), "--json")
        report = json.loads(out)
        print(
            f"add {day.name}: {seconds:.2f} s, mode {report['mode']}, update {report['seconds']['total']:.2f} s, "
            f"{report['clusters_touched']:,} clusters touched"
        )
    seconds, _ = cli("run", str(corpus / "documents"), "--output", str(scratch), "--quiet")
    print(f"run of all {len(days)} days: {seconds:.2f} s")
    names = sorted(p.name for p in scratch.iterdir() if p.is_file() and p.suffix in (".csv", ".parquet"))
    unequal = 0
    for name in names:
        a, b = added / name, scratch / name
        if not a.exists():
            verdict = "missing from the added corpus"
        elif name.endswith(".csv"):
            verdict = "equal" if a.read_bytes() == b.read_bytes() else "bytes differ"
        else:
            verdict = same_parquet(a, b)
        unequal += verdict != "equal"
        print(f"  {name}: {verdict}")
    print("every output equal" if not unequal else f"{unequal} output(s) differ")
    sys.exit(1 if unequal else 0)


if __name__ == "__main__":
    main()
