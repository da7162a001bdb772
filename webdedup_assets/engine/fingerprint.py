"""The fingerprinted and band_memberships stages: streamed record batches through core."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..core.fingerprint import fingerprint_texts
from ..core.hashing import FINGERPRINT_VERSION
from ..core.minhash import MinHashParams, band_keys
from ..params import BandingParams, FingerprintParams
from ..progress import Task
from .errors import WebdedupError
from .parallel import ordered_map, prefetch, thread_count
from .stage import DUCKDB, StageOutput, StageResult, StageRun
from .storage import PartitionWriter, Store

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


def _pieces(
    store: Store, asset: str, partitions: list[str | None], columns: list[str] | None = None, rows: int = BATCH_ROWS
):
    """(partition, batch) of every stored file of `partitions`, in order, coalesced into lists
    of about BATCH_ROWS rows: many small crawl days make one kernel batch, so the cost follows
    documents, not days."""
    group: list[tuple[str | None, pa.RecordBatch]] = []
    size = 0
    for partition in partitions:
        for path in _source_files(store, asset, partition):
            # use_threads=False: decoding on this one reader thread is 2x cheaper here than
            # pyarrow's pool fanning out per column chunk, and leaves the cores to the kernel.
            for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS, columns=columns, use_threads=False):
                group.append((partition, batch))
                size += batch.num_rows
                if size >= rows:
                    yield group
                    group, size = [], 0
    if group:
        yield group


def _rows_of(store: Store, asset: str, partitions: list[str | None]) -> int:
    return sum(pq.read_metadata(p).num_rows for part in partitions for p in _source_files(store, asset, part))


def _split(out: pa.RecordBatch, group: list[tuple[str | None, pa.RecordBatch]]):
    """The rows of `out` (one per input row) cut back into the group's partitions."""
    offset = 0
    for partition, batch in group:
        n = batch.num_rows
        yield partition, out.slice(offset, n)
        offset += n


def stage_fingerprinted(
    store: Store, params: FingerprintParams, days: list[str] | None = None, threads: int | None = None
) -> StageResult:
    """Signatures of the documents of `days` (None: the unpartitioned asset), through the contract."""
    return DUCKDB.run("fingerprinted", store, params, days, threads=threads)


def stage_band_memberships(store: Store, params: BandingParams, days: list[str] | None = None) -> StageResult:
    """Band keys of the fingerprints of `days` (None: the unpartitioned asset), through the contract."""
    return DUCKDB.run("band_memberships", store, params, days)


@DUCKDB.implements("fingerprinted")
def fingerprint_partitions(run: StageRun) -> StageOutput:
    """Signatures for every document of the run's partitions in one streamed pass (bounded
    memory, all cores, see engine.parallel), written as one file per partition.

    threads (option): kernel worker threads (default $WEBDEDUP_THREADS or the CPU count); the
    output does not depend on it."""
    store, params = run.store, run.params
    num_perm = params.num_perm
    try:
        coeff_a, coeff_b = MinHashParams(num_perm, params.seed).coefficients()
    except ValueError as err:
        raise WebdedupError(str(err)) from None
    run.derive(version=FINGERPRINT_VERSION)
    schema = fingerprint_schema(num_perm)
    workers = thread_count(run.options.get("threads"))

    def compute(group):
        bodies = pa.chunked_array([b.column("body") for _, b in group], type=group[0][1].schema.field("body").type)
        doc_ids = pa.chunked_array([b.column("doc_id") for _, b in group])
        tokens, shingles, signatures = fingerprint_texts(
            bodies.combine_chunks(), params.shingle_size, coeff_a, coeff_b, params.shingle_unit
        )
        flat = pa.array(signatures.reshape(-1), type=pa.uint32())
        out = pa.record_batch(
            [
                doc_ids.combine_chunks().cast(pa.string()),
                pa.array(tokens.astype(np.int32)),
                pa.array(shingles.astype(np.int32)),
                pa.FixedSizeListArray.from_arrays(flat, num_perm),
            ],
            schema=schema,
        )
        figures = []
        offset = 0
        for _, batch in group:
            n = batch.num_rows
            figures.append((int(tokens[offset : offset + n].sum()), int((shingles[offset : offset + n] == 0).sum())))
            offset += n
        return out, group, figures

    # No dictionary encoding (doc_ids are unique, signatures random: 3x less write CPU), and
    # signatures uncompressed: zstd saves 12 % of them and costs every reader a decompression.
    writer = PartitionWriter(
        store, "fingerprinted", schema, run.partition_parameters, use_dictionary=False, uncompressed=["signature"]
    )
    totals: dict[str | None, dict[str, int]] = {}
    shown = Task("fingerprinted", lambda: _rows_of(store, "documents", run.partitions), "docs")
    try:
        # A reader thread decodes the next batches while `workers` threads run the kernel
        # (nogil); results come back in input order, so the files are the same for any count.
        groups = prefetch(_pieces(store, "documents", run.partitions, ["doc_id", "body"]), depth=workers + 1)
        for out, group, figures in ordered_map(compute, groups, workers):
            for (partition, piece), (n_tokens, n_empty) in zip(_split(out, group), figures):
                writer.write(partition, piece)
                day = totals.setdefault(partition, {"documents": 0, "tokens": 0, "empty_documents": 0})
                day["documents"] += piece.num_rows
                day["tokens"] += n_tokens
                day["empty_documents"] += n_empty
            shown.advance(out.num_rows)
        rows = writer.close()
    except BaseException:
        writer.abort()
        raise
    finally:
        shown.close()
    figures = {k: sum(t[k] for t in totals.values()) for k in ("documents", "tokens", "empty_documents")}
    return StageOutput(sum(rows.values()), {**figures, "threads": workers}, rows, totals, schema)


@DUCKDB.implements("band_memberships")
def band_partitions(run: StageRun) -> StageOutput:
    """Band keys of every document of the run's partitions in one streamed pass, one file per
    partition (the contract has checked bands x rows against the fingerprints' num_perm)."""
    store, bands, rows = run.store, run.params.bands, run.params.rows
    num_perm = run.upstream["fingerprinted"]["fingerprint"]["num_perm"]
    for partition in run.partitions:
        for path in _source_files(store, "fingerprinted", partition):
            if pq.read_schema(path).field("signature").type.list_size != num_perm:
                raise WebdedupError(f"{path} holds signatures of another num_perm; re-materialize fingerprinted")
    totals: dict[str | None, dict[str, int]] = {}

    def keyed(group):
        batch = pa.Table.from_batches([b for _, b in group]).combine_chunks().to_batches()
        batch = batch[0] if batch else None
        count = batch.num_rows if batch is not None else 0
        with_shingles = np.asarray(batch.column("shingle_count")) > 0 if count else np.zeros(0, bool)
        keys = None
        if with_shingles.any():
            kept = batch.filter(pa.array(with_shingles))
            signatures = kept.column("signature").flatten().to_numpy().reshape(kept.num_rows, -1)
            keys = band_keys(signatures, bands, rows)
        return group, with_shingles, batch, keys

    writer = PartitionWriter(
        store, "band_memberships", BAND_SCHEMA, run.partition_parameters, use_dictionary=["doc_id", "band_index"]
    )
    band_numbers = np.arange(bands, dtype=np.int16)
    try:
        # A reader thread decodes the next batches while this one computes band keys; groups of
        # 4 x BATCH_ROWS documents keep row groups as large as one write per 32k documents.
        for group, with_shingles, batch, keys in map(
            keyed, prefetch(_pieces(store, "fingerprinted", run.partitions, rows=4 * BATCH_ROWS), 2)
        ):
            offset = key_offset = 0
            for partition, piece in group:
                n = piece.num_rows
                mask = with_shingles[offset : offset + n]
                kept = int(mask.sum())
                day = totals.setdefault(partition, {"documents_banded": 0, "documents_without_shingles": 0})
                day["documents_banded"] += kept
                day["documents_without_shingles"] += n - kept
                doc_ids = batch.column("doc_id").slice(offset, n).filter(pa.array(mask))
                out = pa.record_batch(
                    [
                        doc_ids.take(pa.array(np.repeat(np.arange(kept), bands))),
                        pa.array(np.tile(band_numbers, kept)),
                        pa.array(keys[key_offset : key_offset + kept].reshape(-1) if kept else np.zeros(0, np.int64)),
                    ],
                    schema=BAND_SCHEMA,
                )
                writer.write(partition, out)
                offset += n
                key_offset += kept
        written = writer.close()
    except BaseException:
        writer.abort()
        raise
    figures = {k: sum(t[k] for t in totals.values()) for k in ("documents_banded", "documents_without_shingles")}
    return StageOutput(sum(written.values()), figures, written, totals, BAND_SCHEMA)
