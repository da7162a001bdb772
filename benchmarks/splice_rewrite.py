"""The deduped_documents rewrite of an incremental update, alone: a stored deduped_documents file
written again without DROP random rows and with NEW rows appended (parquet_splice.rewrite over
the update's row-group parts), timed in this process (wall, CPU, peak RSS).

  python -m benchmarks.splice_rewrite                        # the 1M incremental benchmark's file
  python -m benchmarks.splice_rewrite --code /tmp/wt_old     # another checkout's code, for A/B

The defaults are what an `add` of 10k pages to 1M removes and adds (BENCHMARKS.md, "The hand-written Parquet codecs").
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent / "data" / "inc-1000000-run-history" / "_storage" / "deduped_documents"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deduped", default=str(DEFAULT), help="deduped_documents folder or file")
    parser.add_argument("--drop", type=int, default=5_264)
    parser.add_argument("--new", type=int, default=9_866)
    parser.add_argument("--code", default=None, help="import webdedup_assets from this checkout")
    parser.add_argument("--keep", default=None, help="write here and keep the file (to compare outputs)")
    args = parser.parse_args(argv)
    if args.code:
        sys.path.insert(0, args.code)
    import numpy as np
    import pyarrow.parquet as pq

    from webdedup_assets.engine.incremental.representatives import splice_parts
    from webdedup_assets.storage import parquet_splice
    from webdedup_assets.threads import prefetch

    try:  # the stage's options; a checkout from before deduped_layout used the plain layout
        from webdedup_assets.engine.stages.clustering import deduped_layout
    except ImportError:

        def deduped_layout(schema):
            return parquet_splice.layout(schema, "body")

    source = Path(args.deduped)
    if source.is_dir():
        source = next(f for f in sorted(source.glob("*.parquet")) if not f.name.startswith("_"))
    old = pq.ParquetFile(source)
    rows = old.metadata.num_rows
    kept = np.setdiff1d(np.arange(rows), np.random.default_rng(7).choice(rows, args.drop, replace=False))
    new = old.read_row_group(0).slice(0, args.new)  # rows of the same schema, placed after every old row
    target = Path(args.keep) if args.keep else source.with_name(f".splice-bench.{os.getpid()}.parquet")
    parts = splice_parts(old, old.schema_arrow, kept, kept, new, np.full(new.num_rows, 1 << 62))
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        written, figures = parquet_splice.rewrite(
            source,
            target,
            old.schema_arrow,
            "body",
            prefetch(parts, depth=1),
            deduped_layout(old.schema_arrow),
        )
    finally:
        if not args.keep:
            target.unlink(missing_ok=True)
    print(
        f"code {parquet_splice.__file__}: {time.perf_counter() - wall:.3f} s wall, "
        f"{time.process_time() - cpu:.3f} s CPU, {written:,} rows, {figures.as_dict()}, "
        f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB"
    )


if __name__ == "__main__":
    main()
