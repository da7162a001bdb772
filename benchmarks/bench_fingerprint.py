"""Time the fingerprint stage alone: documents Parquet in -> signatures + band keys persisted.

  python -m benchmarks.bench_fingerprint benchmarks/data/c100k [--threads 2] [--repeat 3]

The documents asset is materialized once (untimed) into benchmarks/data/store-<name>; the
timed part is stage_fingerprinted + stage_band_memberships, what the issue calls the
fingerprint stage. JIT compilation is loaded from the numba cache before timing (a first
call on a tiny input); its cost is printed separately. CPU seconds (all threads) are printed
beside the wall time: on a shared machine they show the work done, independent of waiting.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from benchmarks.common import machine, peak_rss_mib


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shingle-size", type=int, default=5)
    parser.add_argument("--num-perm", type=int, default=64)
    parser.add_argument("--bands", type=int, default=8)
    parser.add_argument("--rows", type=int, default=8)
    args = parser.parse_args(argv)
    if args.threads is not None:
        os.environ["WEBDEDUP_THREADS"] = str(args.threads)

    started = time.perf_counter()
    import pyarrow as pa

    from webdedup_assets.core.fingerprint import fingerprint_texts
    from webdedup_assets.core.minhash import MinHashParams
    from webdedup_assets.engine import Store, stage_band_memberships, stage_documents, stage_fingerprinted

    a, b = MinHashParams(args.num_perm, 1).coefficients()
    fingerprint_texts(pa.array(["warm up the jit", "é"]), args.shingle_size, a, b)
    warmup = time.perf_counter() - started

    corpus = Path(args.corpus)
    store = Store(corpus.parent / f"store-{corpus.name}")
    if not store.files("documents"):
        stage_documents(store, str(corpus / "documents"))
    figures = []
    for _ in range(args.repeat):
        c0 = time.process_time()
        t0 = time.perf_counter()
        fp = stage_fingerprinted(store, args.shingle_size, args.num_perm, 1)
        t1 = time.perf_counter()
        bm = stage_band_memberships(store, args.bands, args.rows)
        t2 = time.perf_counter()
        figures.append((t2 - t0, t1 - t0, t2 - t1, time.process_time() - c0))
    best = min(figures)
    docs = fp["rows"]
    print(
        json.dumps(
            {
                "corpus": str(corpus),
                "docs": docs,
                "threads": args.threads,
                "import_and_jit_load_s": round(warmup, 2),
                "runs_s": [round(f[0], 3) for f in figures],
                "best_s": round(best[0], 3),
                "fingerprinted_s": round(best[1], 3),
                "band_memberships_s": round(best[2], 3),
                "docs_per_s": round(docs / best[0]),
                "cpu_s_of_best": round(best[3], 3),
                "docs_per_cpu_s": round(docs / best[3]),
                "band_rows": bm["rows"],
                "peak_rss_mib": round(peak_rss_mib()),
                "machine": machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
