"""The fingerprinted and band_memberships stages: streamed record batches through core."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..core.fingerprint import fingerprint_texts
from ..core.hashing import FINGERPRINT_VERSION
from ..core.minhash import MinHashParams, band_keys, validate_banding
from .errors import WebdedupError
from .parallel import ordered_map, prefetch, thread_count
from .storage import Store, write_batches

BATCH_ROWS = 8192


def fingerprint_schema(num_perm: int) -> pa.Schema:
    return pa.schema(
        [
            ("doc_id", pa.string()),
            ("token_count", pa.int32()),
            ("shingle_count", pa.int32()),
            ("signature", pa.list_(pa.uint32(), num_perm)),
        ]
    )


BAND_SCHEMA = pa.schema([("doc_id", pa.string()), ("band_index", pa.int16()), ("band_hash", pa.int64())])


def _source_files(store: Store, asset: str, partition: str | None):
    if partition is not None:
        path = store.path(asset, partition)
        if not path.exists():
            raise WebdedupError(f"upstream {asset!r} partition {partition} has not been materialized")
        return [path]
    return store.require(asset)


def fingerprint_params(shingle_size: int, num_perm: int, seed: int) -> dict[str, Any]:
    """What defines a fingerprint; stored with every artifact built from one."""
    return {"shingle_size": shingle_size, "num_perm": num_perm, "seed": seed, "version": FINGERPRINT_VERSION}


def stage_fingerprinted(
    store: Store,
    shingle_size: int,
    num_perm: int,
    seed: int,
    partition: str | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """Signatures for every document, streamed: bounded memory, all cores (see engine.parallel).

    threads: kernel worker threads (default $WEBDEDUP_THREADS or the CPU count); the output
    does not depend on it."""
    started = time.perf_counter()
    if shingle_size < 1:
        raise WebdedupError(f"shingle_size must be >= 1, got {shingle_size}")
    try:
        coeff_a, coeff_b = MinHashParams(num_perm, seed).coefficients()
    except ValueError as err:
        raise WebdedupError(str(err)) from None
    schema = fingerprint_schema(num_perm)
    totals = {"documents": 0, "tokens": 0, "empty_documents": 0}

    workers = thread_count(threads)

    def read():
        for path in _source_files(store, "documents", partition):
            # use_threads=False: decoding on this one reader thread is 2x cheaper here than
            # pyarrow's pool fanning out per column chunk, and leaves the cores to the kernel.
            yield from pq.ParquetFile(path).iter_batches(
                batch_size=BATCH_ROWS, columns=["doc_id", "body"], use_threads=False
            )

    def compute(batch: pa.RecordBatch):
        tokens, shingles, signatures = fingerprint_texts(batch.column("body"), shingle_size, coeff_a, coeff_b)
        flat = pa.array(signatures.reshape(-1), type=pa.uint32())
        out = pa.record_batch(
            [
                batch.column("doc_id").cast(pa.string()),
                pa.array(tokens.astype(np.int32)),
                pa.array(shingles.astype(np.int32)),
                pa.FixedSizeListArray.from_arrays(flat, num_perm),
            ],
            schema=schema,
        )
        return out, int(tokens.sum()), int((shingles == 0).sum())

    def batches():
        # A reader thread decodes the next batches while `workers` threads run the kernel
        # (nogil); results come back in input order, so the file is the same for any count.
        for out, n_tokens, n_empty in ordered_map(compute, prefetch(read(), depth=workers + 1), workers):
            totals["documents"] += out.num_rows
            totals["tokens"] += n_tokens
            totals["empty_documents"] += n_empty
            yield out

    params = {
        "stage": "fingerprinted",
        "fingerprint": fingerprint_params(shingle_size, num_perm, seed),
        "partition": partition,
    }
    # No dictionary encoding (doc_ids are unique, signatures random: 3x less write CPU), and
    # signatures uncompressed: zstd saves 12 % of them and costs every reader a decompression.
    rows = write_batches(
        store.path("fingerprinted", partition),
        schema,
        batches(),
        params,
        use_dictionary=False,
        uncompressed=["signature"],
    )
    seconds = time.perf_counter() - started
    stats = {
        "rows": rows,
        **totals,
        "seconds": round(seconds, 4),
        "threads": workers,
        "docs_per_second": round(rows / seconds, 1) if seconds > 0 else None,
    }
    store.write_stats("fingerprinted", partition, stats)
    return {**params, **stats}


def stage_band_memberships(store: Store, bands: int, rows: int, partition: str | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    upstream = store.params("fingerprinted")
    fingerprint = upstream["fingerprint"]
    try:
        validate_banding(fingerprint["num_perm"], bands, rows)
    except ValueError as err:
        raise WebdedupError(f"band_memberships: {err} (from the fingerprinted asset)") from None
    totals = {"documents_banded": 0, "documents_without_shingles": 0}

    def read():
        for path in _source_files(store, "fingerprinted", partition):
            if pq.read_schema(path).field("signature").type.list_size != fingerprint["num_perm"]:
                raise WebdedupError(f"{path} holds signatures of another num_perm; re-materialize fingerprinted")
            yield from pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS, use_threads=False)

    def keyed():
        for batch in prefetch(read(), depth=4):
            keep = pc.greater(batch.column("shingle_count"), 0)
            totals["documents_without_shingles"] += batch.num_rows - pc.sum(keep).as_py() if batch.num_rows else 0
            batch = batch.filter(keep)
            count = batch.num_rows
            if not count:
                continue
            totals["documents_banded"] += count
            signatures = batch.column("signature").flatten().to_numpy().reshape(count, -1)
            keys = band_keys(signatures, bands, rows)
            yield pa.record_batch(
                [
                    batch.column("doc_id").take(pa.array(np.repeat(np.arange(count), bands))),
                    pa.array(np.tile(np.arange(bands, dtype=np.int16), count)),
                    pa.array(keys.reshape(-1)),
                ],
                schema=BAND_SCHEMA,
            )

    def batches():
        # A reader thread decodes small batches while this one computes band keys; they are
        # written 4 at a time, so row groups stay as large as before (BATCH_ROWS * 4 documents).
        group = []
        for out in keyed():
            group.append(out)
            if len(group) == 4:
                yield pa.Table.from_batches(group).combine_chunks().to_batches()[0]
                group = []
        if group:
            yield pa.Table.from_batches(group).combine_chunks().to_batches()[0]

    banding = {"bands": bands, "rows": rows}
    params = {"stage": "band_memberships", "fingerprint": fingerprint, "banding": banding, "partition": partition}
    target = store.path("band_memberships", partition)
    written = write_batches(target, BAND_SCHEMA, batches(), params, use_dictionary=["doc_id", "band_index"])
    stats = {"rows": written, **totals, "seconds": round(time.perf_counter() - started, 4)}
    store.write_stats("band_memberships", partition, stats)
    return {**params, **stats}
