"""The fingerprinted and band_memberships stages: streamed record batches through core."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...core.fingerprint import fingerprint_method, signature_width, signatures_of
from ...core.hashing import FINGERPRINT_VERSION
from ...core.minhash import MinHashParams, band_keys
from ...core.simhash import block_keys, from_words, key_combinations
from ...errors import WebdedupError
from ...params import BandingParams, FingerprintParams
from ...progress import Task
from ...storage.partitioned import PartitionWriter
from ...storage.store import Store, file_identity, read_params
from ...threads import ordered_map, prefetch, thread_count
from ..stage import DUCKDB, StageOutput, StageResult, StageRun

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


def fingerprint_batch(
    doc_ids: pa.Array, bodies: pa.Array, fingerprint: dict[str, Any], coefficients, schema: pa.Schema
) -> tuple[pa.RecordBatch, np.ndarray, np.ndarray]:
    """One batch of documents as fingerprinted rows in `schema` (fingerprint_schema of the
    signature width), with their token and shingle counts for the stage's figures. Both engines
    call it, so their files hold the same rows."""
    tokens, shingles, signatures = signatures_of(bodies, fingerprint, coefficients)
    flat = pa.array(signatures.reshape(-1), type=pa.uint32())
    out = pa.record_batch(
        [
            doc_ids.cast(pa.string()),
            pa.array(tokens.astype(np.int32)),
            pa.array(shingles.astype(np.int32)),
            pa.FixedSizeListArray.from_arrays(flat, schema.field("signature").type.list_size),
        ],
        schema=schema,
    )
    return out, tokens, shingles


def keys_per_document(fingerprint: dict[str, Any], banding: BandingParams) -> int:
    """Band keys of one document with shingles: its bands, or of SimHash one per combination of
    key_blocks of its max_hamming + key_blocks blocks."""
    if fingerprint_method(fingerprint) == "simhash":
        return len(key_combinations(banding.max_hamming, banding.key_blocks))
    return banding.bands


def document_band_keys(signatures: np.ndarray, fingerprint: dict[str, Any], banding: BandingParams) -> np.ndarray:
    """(n, keys_per_document) int64 band keys of (n, signature_width) signatures: MinHash bands
    (core.minhash.band_keys) or SimHash blocks (core.simhash.block_keys); band_index is the
    column's number. Both engines call it, so their band keys are the same."""
    if fingerprint_method(fingerprint) == "simhash":
        return block_keys(from_words(signatures), banding.max_hamming, banding.key_blocks)
    return band_keys(signatures, banding.bands, banding.rows)


@dataclass(frozen=True)
class Piece:
    """One stored file of the upstream asset and the file of this asset computed from it: a
    derived file mirrors its source (same name), so a month whose documents are several files
    (segments of adopted exports) recomputes only the files that changed."""

    month: str | None
    source: Path
    target: Path


@dataclass
class Plan:
    compute: list[Piece]
    reused_rows: dict[str | None, int]  # per month: rows of derived files kept as they are
    reused_files: dict[str | None, int]
    sources: dict[str | None, dict[str, Any]]  # per month: derived file name -> its source's identity


def plan_pieces(run: StageRun, upstream: str) -> Plan:
    """The upstream files of the run's months to compute; derived files whose source and
    parameters are unchanged are kept, derived files whose source is gone are removed."""
    store, asset = run.store, run.stage.name
    plan = Plan([], {}, {}, {})
    for month in run.partitions:
        if month is None:
            sources = [p for p in store.require(upstream) if p != store.schema_path(upstream)]
        else:
            sources = store.partition_files(upstream, month)
            if not sources:
                raise WebdedupError(f"upstream {upstream!r} partition {month} has not been materialized")
            for stale in set(store.partition_files(asset, month)) - {store.asset_dir(asset) / s.name for s in sources}:
                stale.unlink(missing_ok=True)
        plan.reused_rows.setdefault(month, 0)
        plan.reused_files.setdefault(month, 0)
        recorded = _recorded_sources(store, asset, month)
        plan.sources[month] = {}
        for source in sources:
            target = store.asset_dir(asset) / source.name
            identity = file_identity(source)
            plan.sources[month][target.name] = identity
            if month is not None and recorded.get(target.name) == identity and _built_with(target, run):
                plan.reused_rows[month] += pq.read_metadata(target).num_rows
                plan.reused_files[month] += 1
            else:
                plan.compute.append(Piece(month, source, target))
    return plan


def refuse_other_widths(plan: Plan, fingerprint: dict[str, Any]) -> None:
    """Every fingerprinted file to band holds signatures of the width the stored parameters give
    (a footer read: the schema, not the data)."""
    width = signature_width(fingerprint)
    for piece in plan.compute:
        if pq.read_schema(piece.source).field("signature").type.list_size != width:
            raise WebdedupError(f"{piece.source} holds signatures of another num_perm; re-materialize fingerprinted")


def _recorded_sources(store: Store, asset: str, month: str | None) -> dict[str, Any]:
    """The source identities the month's last build recorded in its stats (written after its
    files: a build cut short records nothing, so its files are computed again). Kept out of
    the data files, whose bytes must not depend on inodes or times."""
    path = store.stats_path(asset, month)
    if month is None or not path.exists():
        return {}
    try:
        return json.loads(path.read_text()).get("sources") or {}
    except ValueError:
        return {}


def _built_with(target: Path, run: StageRun) -> bool:
    if not target.exists():
        return False
    stored = {k: v for k, v in read_params(target).items() if k != "partition"}
    return stored == run.parameters


def _piece_parameters(run: StageRun, piece: Piece) -> dict[str, Any]:
    return run.partition_parameters(piece.month)


def _pieces(pieces: list[Piece], columns: list[str] | None = None, rows: int = BATCH_ROWS):
    """(piece, batch) of every file to compute, in order, coalesced into lists of about
    BATCH_ROWS rows: many small files make one kernel batch, so the cost follows documents,
    not files."""
    group: list[tuple[Piece, pa.RecordBatch]] = []
    size = 0
    for piece in pieces:
        # use_threads=False: decoding on this one reader thread is cheaper than pyarrow's pool
        # fanning out per column chunk, and leaves the cores to the kernel.
        for batch in pq.ParquetFile(piece.source).iter_batches(
            batch_size=BATCH_ROWS, columns=columns, use_threads=False
        ):
            group.append((piece, batch))
            size += batch.num_rows
            if size >= rows:
                yield group
                group, size = [], 0
    if group:
        yield group


def _rows_of(pieces: list[Piece]) -> int:
    return sum(pq.read_metadata(piece.source).num_rows for piece in pieces)


def _split(out: pa.RecordBatch, group: list[tuple[Piece, pa.RecordBatch]]):
    """The rows of `out` (one per input row) cut back into the group's pieces."""
    offset = 0
    for piece, batch in group:
        n = batch.num_rows
        yield piece, out.slice(offset, n)
        offset += n


def month_rows(plan: Plan, written: dict[Piece, int]) -> dict[str | None, int]:
    rows = dict(plan.reused_rows)
    for piece, n in written.items():
        rows[piece.month] = rows.get(piece.month, 0) + n
    return rows


def _writer(run: StageRun, schema: pa.Schema, **options: Any) -> PartitionWriter:
    return PartitionWriter(
        run.store,
        run.stage.name,
        schema,
        lambda piece: _piece_parameters(run, piece),
        path_of=lambda piece: piece.target,
        **options,
    )


def stage_fingerprinted(
    store: Store, params: FingerprintParams, months: list[str] | None = None, threads: int | None = None
) -> StageResult:
    """Signatures of the documents of `months` (None: the unpartitioned asset), through the contract."""
    return DUCKDB.run("fingerprinted", store, params, months, threads=threads)


def stage_band_memberships(store: Store, params: BandingParams, months: list[str] | None = None) -> StageResult:
    """Band keys of the fingerprints of `months` (None: the unpartitioned asset), through the contract."""
    return DUCKDB.run("band_memberships", store, params, months)


@DUCKDB.implements("fingerprinted")
def fingerprint_partitions(run: StageRun) -> StageOutput:
    """Signatures for every document of the run's months in one streamed pass (bounded memory,
    all cores, see engine.parallel), one file per documents file (see Piece).

    threads (option): kernel worker threads (default $WEBDEDUP_THREADS or the CPU count); the
    output does not depend on it."""
    params = run.params
    stored = params.model_dump()
    try:
        coefficients = MinHashParams(params.num_perm, params.seed).coefficients()
    except ValueError as err:
        raise WebdedupError(str(err)) from None
    run.derive(version=FINGERPRINT_VERSION)
    schema = fingerprint_schema(signature_width(stored))
    workers = thread_count(run.options.get("threads"))

    def compute(group):
        bodies = pa.chunked_array([b.column("body") for _, b in group], type=group[0][1].schema.field("body").type)
        doc_ids = pa.chunked_array([b.column("doc_id") for _, b in group])
        out, tokens, shingles = fingerprint_batch(
            doc_ids.combine_chunks(), bodies.combine_chunks(), stored, coefficients, schema
        )
        figures = []
        offset = 0
        for _, batch in group:
            n = batch.num_rows
            figures.append((int(tokens[offset : offset + n].sum()), int((shingles[offset : offset + n] == 0).sum())))
            offset += n
        return out, group, figures

    # No dictionary encoding (doc_ids are unique, signatures random: a dictionary only costs write
    # CPU), and signatures uncompressed: zstd saves little on random values and costs every reader
    # a decompression.
    plan = plan_pieces(run, "documents")
    writer = _writer(run, schema, use_dictionary=False, uncompressed=["signature"])
    totals: dict[str | None, dict[str, int]] = {
        month: {"documents": 0, "tokens": 0, "empty_documents": 0, "files_reused": plan.reused_files[month]}
        for month in plan.reused_rows
    }
    for month, sources in plan.sources.items():
        totals[month]["sources"] = sources
    shown = Task("fingerprinted", lambda: _rows_of(plan.compute), "docs")
    try:
        # A reader thread decodes the next batches while `workers` threads run the kernel
        # (nogil); results come back in input order, so the files are the same for any count.
        groups = prefetch(_pieces(plan.compute, ["doc_id", "body"]), depth=workers + 1)
        for out, group, figures in ordered_map(compute, groups, workers):
            for (piece, rows), (n_tokens, n_empty) in zip(_split(out, group), figures):
                writer.write(piece, rows)
                month = totals[piece.month]
                month["documents"] += rows.num_rows
                month["tokens"] += n_tokens
                month["empty_documents"] += n_empty
            shown.advance(out.num_rows)
        written = writer.close()
    except BaseException:
        writer.abort()
        raise
    finally:
        shown.close()
    # figures count the documents fingerprinted by this run; rows include the files kept as they were
    figures = {
        k: sum(t[k] for t in totals.values()) for k in ("documents", "tokens", "empty_documents", "files_reused")
    }
    rows = month_rows(plan, written)
    return StageOutput(sum(rows.values()), {**figures, "threads": workers}, rows, totals, schema)


@DUCKDB.implements("band_memberships")
def band_partitions(run: StageRun) -> StageOutput:
    """Band keys of every document of the run's months in one streamed pass, one file per
    fingerprinted file (the contract has checked bands x rows against the fingerprints' num_perm).
    Of SimHash fingerprints, the block keys (core.simhash) in the same rows:
    band_index is the block's number."""
    fingerprint = run.upstream["fingerprinted"]["fingerprint"]
    bands = keys_per_document(fingerprint, run.params)
    plan = plan_pieces(run, "fingerprinted")
    refuse_other_widths(plan, fingerprint)
    totals: dict[str | None, dict[str, int]] = {
        month: {"documents_banded": 0, "documents_without_shingles": 0, "files_reused": plan.reused_files[month]}
        for month in plan.reused_rows
    }

    def keyed(group):
        batch = pa.Table.from_batches([b for _, b in group]).combine_chunks().to_batches()
        batch = batch[0] if batch else None
        count = batch.num_rows if batch is not None else 0
        with_shingles = np.asarray(batch.column("shingle_count")) > 0 if count else np.zeros(0, bool)
        keys = None
        if with_shingles.any():
            kept = batch.filter(pa.array(with_shingles))
            signatures = kept.column("signature").flatten().to_numpy().reshape(kept.num_rows, -1)
            keys = document_band_keys(signatures, fingerprint, run.params)
        return group, with_shingles, batch, keys

    writer = _writer(run, BAND_SCHEMA, use_dictionary=["doc_id", "band_index"])
    band_numbers = np.arange(bands, dtype=np.int16)
    try:
        # A reader thread decodes the next batches while this one computes band keys; groups of
        # 4 x BATCH_ROWS documents keep row groups as large as one write per 32k documents.
        for group, with_shingles, batch, keys in map(keyed, prefetch(_pieces(plan.compute, rows=4 * BATCH_ROWS), 2)):
            offset = key_offset = 0
            for piece, part in group:
                n = part.num_rows
                mask = with_shingles[offset : offset + n]
                kept = int(mask.sum())
                month = totals[piece.month]
                month["documents_banded"] += kept
                month["documents_without_shingles"] += n - kept
                doc_ids = batch.column("doc_id").slice(offset, n).filter(pa.array(mask))
                out = pa.record_batch(
                    [
                        doc_ids.take(pa.array(np.repeat(np.arange(kept), bands))),
                        pa.array(np.tile(band_numbers, kept)),
                        pa.array(keys[key_offset : key_offset + kept].reshape(-1) if kept else np.zeros(0, np.int64)),
                    ],
                    schema=BAND_SCHEMA,
                )
                writer.write(piece, out)
                offset += n
                key_offset += kept
        written = writer.close()
    except BaseException:
        writer.abort()
        raise
    for month, sources in plan.sources.items():
        totals[month]["sources"] = sources
    keys = ("documents_banded", "documents_without_shingles", "files_reused")
    figures = {k: sum(t[k] for t in totals.values()) for k in keys}
    rows_written = month_rows(plan, written)
    return StageOutput(sum(rows_written.values()), figures, rows_written, totals, BAND_SCHEMA)
