"""Time the fingerprint stage alone: documents Parquet in -> signatures + band keys persisted.

  python -m benchmarks.bench_fingerprint benchmarks/data/c100k [--threads 2] [--repeat 3] [--profile]

The documents asset is materialized once (untimed) into benchmarks/data/store-<name>; the
timed part is stage_fingerprinted + stage_band_memberships, what the issue calls the
fingerprint stage. JIT compilation is loaded from the numba cache before timing (a first
call on a tiny input); its cost is printed separately. CPU seconds (all threads) are printed
beside the wall time: on a shared machine they show the work done, independent of waiting.
--profile adds the CPU seconds of each piece run alone on one thread (best of --repeat): Parquet
decode, the tokenizer alone, the whole kernel, the fingerprinted writer and the band stage.
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
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    if args.threads is not None:
        os.environ["WEBDEDUP_THREADS"] = str(args.threads)

    started = time.perf_counter()
    import pyarrow as pa

    from webdedup_assets.core.fingerprint import fingerprint_texts
    from webdedup_assets.core.minhash import MinHashParams
    from webdedup_assets.engine import Store, stage_band_memberships, stage_documents, stage_fingerprinted
    from webdedup_assets.params import BandingParams, FingerprintParams

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
        fp = stage_fingerprinted(
            store, FingerprintParams(shingle_size=args.shingle_size, num_perm=args.num_perm, seed=1)
        )
        t1 = time.perf_counter()
        bm = stage_band_memberships(store, BandingParams(bands=args.bands, rows=args.rows))
        t2 = time.perf_counter()
        figures.append((t2 - t0, t1 - t0, t2 - t1, time.process_time() - c0))
    best = min(figures)
    docs = fp.rows
    pieces = profile(store, args) if args.profile else None
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
                "band_rows": bm.rows,
                **({"one_thread_cpu_s": pieces} if pieces else {}),
                "peak_rss_mib": round(peak_rss_mib()),
                "machine": machine(),
            }
        )
    )


def profile(store, args) -> dict[str, float]:
    """CPU seconds per piece of the fingerprint stage, each alone on this thread, best of repeat."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from numba import njit

    from webdedup_assets.core import kernel, unicode_tables
    from webdedup_assets.core.fingerprint import fingerprint_texts, string_buffers
    from webdedup_assets.core.minhash import MinHashParams, band_keys
    from webdedup_assets.engine.stages.fingerprint import BATCH_ROWS, fingerprint_schema

    @njit(nogil=True)
    def tokenize_only(data, offsets, tables):
        longest = 0
        for i in range(offsets.shape[0] - 1):
            longest = max(longest, offsets[i + 1] - offsets[i])
        out = np.empty(longest + 1, dtype=np.uint64)
        total = 0
        for i in range(offsets.shape[0] - 1):
            total += kernel.token_hashes(data, offsets[i], offsets[i + 1], False, tables, out)
        return total

    coeff_a, coeff_b = MinHashParams(args.num_perm, 1).coefficients()
    tables = unicode_tables.token_tables()
    schema = fingerprint_schema(args.num_perm)
    best: dict[str, float] = {}

    def timed(name, fn, *args):
        started = time.process_time()
        result = fn(*args)
        best[name] = min(best.get(name, float("inf")), time.process_time() - started)
        return result

    def read():
        return [
            b
            for f in store.files("documents")
            for b in pq.ParquetFile(f).iter_batches(
                batch_size=BATCH_ROWS, columns=["doc_id", "body"], use_threads=False
            )
        ]

    def kernel_all(batches):
        outs = []
        for batch in batches:
            tokens, shingles, signatures = fingerprint_texts(batch.column("body"), args.shingle_size, coeff_a, coeff_b)
            flat = pa.array(signatures.reshape(-1), type=pa.uint32())
            columns = [batch.column("doc_id"), pa.array(tokens.astype(np.int32)), pa.array(shingles.astype(np.int32))]
            outs.append(
                pa.record_batch([*columns, pa.FixedSizeListArray.from_arrays(flat, args.num_perm)], schema=schema)
            )
        return outs

    def write(outs, target):
        with pq.ParquetWriter(target, outs[0].schema, compression="zstd", use_dictionary=False) as writer:
            for out in outs:
                writer.write_batch(out)

    def bands(target):
        for batch in pq.ParquetFile(target).iter_batches(batch_size=BATCH_ROWS):
            band_keys(batch.column("signature").flatten().to_numpy().reshape(batch.num_rows, -1), args.bands, args.rows)

    target = store.root / "profile-fingerprinted.parquet"
    for _ in range(max(1, args.repeat)):
        batches = timed("parquet_read", read)
        texts = [string_buffers(b.column("body").cast(pa.large_string())) for b in batches]
        tokenize_only(*texts[0], tables)
        timed("tokenize", lambda pairs: [tokenize_only(d, o, tables) for d, o in pairs], texts)
        outs = timed("kernel_and_output_arrays", kernel_all, batches)
        timed("write_fingerprinted", write, outs, target)
        timed("band_read_and_keys", bands, target)
    target.unlink()
    return {name: round(value, 3) for name, value in best.items()}


if __name__ == "__main__":
    main()
