"""fingerprinted and band_memberships on Spark: the same files as the DuckDB engine
(engine/stages/fingerprint.py), computed in the executors by the same compiled kernel.

The plan is the DuckDB engine's (`plan_pieces`): one derived file per upstream file, with the
same name; files whose source and parameters are unchanged are kept, files whose source is gone
are removed. Each piece to compute is one row of a small `spark.range`; a `mapInArrow` task
reads its piece's Parquet file in record batches, runs the DuckDB engine's `fingerprint_batch`
(or `document_band_keys`: MinHash bands or SimHash blocks) on each batch, and writes the target
file with pyarrow (same schema, writer options and stored parameters) into a staging folder.
The driver receives only (piece, file, rows, figures) per piece and moves the files into place
once every task has succeeded: a failed job replaces nothing.

Parallelism is per range of row groups: each upstream file's row groups are cut into ranges of at
least CHUNK_ROWS rows, one task each, so that a month held as one large file (a crawl snapshot)
spreads over every executor; the driver puts a file's parts together by copying their column
chunks (storage.parquet_concat), in order.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...core.fingerprint import signature_width
from ...core.hashing import FINGERPRINT_VERSION
from ...core.minhash import MinHashParams
from ...errors import WebdedupError
from ...storage import parquet_concat
from ...storage.fileio import atomic_path
from ...storage.store import params_sidecar, with_params, writer_options
from ..spark.engine import SPARK, session_of
from ..stage import StageOutput, StageRun
from .fingerprint import (
    BAND_SCHEMA,
    BATCH_ROWS,
    Piece,
    Plan,
    document_band_keys,
    fingerprint_batch,
    fingerprint_schema,
    keys_per_document,
    month_rows,
    plan_pieces,
    refuse_other_widths,
)

MAX_TASKS = 4096  # chunks are spread over at most this many tasks (one task per chunk below it)
CHUNK_ROWS = 65_536  # a task's rows at least (but for a file's last chunk): a task costs ~0.1 s
RESULT_SCHEMA = "chunk long, file string, rows long, first long, second long"


def _batches(source: str, groups: range, columns: list[str], batch_size: int):
    if groups:  # an empty list of row groups would read every one
        yield from pq.ParquetFile(source).iter_batches(
            batch_size=batch_size, row_groups=list(groups), columns=columns, use_threads=False
        )


def _fingerprint_file(source: str, groups: range, writer, schema: pa.Schema, args: dict[str, Any]):
    """Row groups of one documents file through the kernel, batch by batch, as
    engine.stages.fingerprint does: (rows, tokens, documents without shingles)."""
    rows = tokens_total = empty = 0
    for batch in _batches(source, groups, ["doc_id", "body"], BATCH_ROWS):
        if not batch.num_rows:
            continue
        out, tokens, shingles = fingerprint_batch(
            batch.column("doc_id"), batch.column("body"), args["fingerprint"], args["coefficients"], schema
        )
        writer.write_batch(out)
        rows += out.num_rows
        tokens_total += int(tokens.sum())
        empty += int((shingles == 0).sum())
    return rows, tokens_total, empty


def _band_file(source: str, groups: range, writer, schema: pa.Schema, args: dict[str, Any]):
    """Row groups of one fingerprinted file's band keys, batch by batch, as
    engine.stages.fingerprint does: (rows, documents banded, documents without shingles)."""
    fingerprint, banding = args["fingerprint"], args["banding"]
    bands = keys_per_document(fingerprint, banding)
    band_numbers = np.arange(bands, dtype=np.int16)
    rows = banded = without = 0
    for batch in _batches(source, groups, ["doc_id", "shingle_count", "signature"], 4 * BATCH_ROWS):
        n = batch.num_rows
        if not n:
            continue
        mask = np.asarray(batch.column("shingle_count")) > 0
        kept = int(mask.sum())
        banded += kept
        without += n - kept
        if not kept:
            continue
        chosen = batch.filter(pa.array(mask))
        signatures = chosen.column("signature").flatten().to_numpy().reshape(kept, -1)
        keys = document_band_keys(signatures, fingerprint, banding)
        out = pa.record_batch(
            [
                chosen.column("doc_id").take(pa.array(np.repeat(np.arange(kept), bands))),
                pa.array(np.tile(band_numbers, kept)),
                pa.array(keys.reshape(-1)),
            ],
            schema=schema,
        )
        writer.write_batch(out)
        rows += out.num_rows
    return rows, banded, without


KINDS = {"fingerprinted": _fingerprint_file, "band_memberships": _band_file}


def _task(
    kind: str, jobs: list[tuple[str, int, int, int]], schemas: list[bytes], options: dict[str, Any], staging: str, args
):
    """The executor side: every chunk of the task's id range read, computed and written as
    <staging>/<chunk>.parquet (temporary name first: a retried attempt writes the same rows)."""

    def run(batches):
        import pyarrow as pa
        import pyarrow.parquet as pq

        compute = KINDS[kind]
        for batch in batches:
            for chunk in batch.column(0).to_pylist():
                source, first_group, end_group, schema_index = jobs[chunk]
                schema = pa.ipc.read_schema(pa.py_buffer(schemas[schema_index]))
                target = os.path.join(staging, f"{chunk:07d}.parquet")
                temp = f"{target}.{uuid.uuid4().hex}.tmp"
                try:
                    with pq.ParquetWriter(temp, schema, **options) as writer:
                        rows, first, second = compute(source, range(first_group, end_group), writer, schema, args)
                    os.replace(temp, target)
                finally:
                    if os.path.exists(temp):
                        os.unlink(temp)
                yield pa.record_batch(
                    [
                        pa.array([chunk], pa.int64()),
                        pa.array([target]),
                        pa.array([rows], pa.int64()),
                        pa.array([first], pa.int64()),
                        pa.array([second], pa.int64()),
                    ],
                    names=["chunk", "file", "rows", "first", "second"],
                )

    return run


def _chunks(source: Path) -> list[range]:
    """The file's row groups in consecutive ranges of at least CHUNK_ROWS rows (the last may
    hold fewer); one empty range for a file without a row group."""
    metadata = pq.read_metadata(source)
    chunks, start, rows = [], 0, 0
    for group in range(metadata.num_row_groups):
        rows += metadata.row_group(group).num_rows
        if rows >= CHUNK_ROWS:
            chunks.append(range(start, group + 1))
            start, rows = group + 1, 0
    if start < metadata.num_row_groups or not chunks:
        chunks.append(range(start, metadata.num_row_groups))
    return chunks


def _put_together(parts: list[str], target: Path, schema: pa.Schema) -> None:
    """A piece's parts (in order) as its file: the only part moved, more copied chunk by chunk."""
    if len(parts) == 1:
        os.replace(parts[0], target)
        return
    concat = parquet_concat.plan([Path(p) for p in parts])
    if concat is None:  # the parts are one writer's files of one schema: never expected
        raise WebdedupError(f"{target.name}: the parts Spark wrote cannot be put together")
    with atomic_path(target) as temp:
        parquet_concat.write(concat, temp, schema)


def _compute(
    run: StageRun, plan: Plan, schema: pa.Schema, options: dict[str, Any], args: dict[str, Any]
) -> dict[Piece, tuple[int, int, int]]:
    """The plan's pieces computed by the executors, chunk by chunk, and put into place: per piece
    (rows, first figure, second figure)."""
    pieces = plan.compute
    if not pieces:
        return {}
    store, asset = run.store, run.stage.name
    months = sorted({piece.month for piece in pieces}, key=lambda m: m or "")
    full = [with_params(schema, run.partition_parameters(m)) for m in months]
    schemas = [s.serialize().to_pybytes() for s in full]
    owners, jobs = [], []  # per chunk: its piece's index, and (source, row groups, schema)
    for index, piece in enumerate(pieces):
        for groups in _chunks(piece.source):
            owners.append(index)
            jobs.append((str(piece.source), groups.start, groups.stop, months.index(piece.month)))
    folder = store.asset_dir(asset)
    folder.mkdir(parents=True, exist_ok=True)
    staging = folder / f".staging-spark-{uuid.uuid4().hex}"  # storage.state.remove_leftovers clears a dead run's
    staging.mkdir()
    try:
        spark = session_of(run)
        tasks = min(len(jobs), MAX_TASKS)
        results = (
            spark.range(0, len(jobs), 1, tasks)
            .mapInArrow(_task(asset, jobs, schemas, options, str(staging), args), RESULT_SCHEMA)
            .collect()  # one small row per chunk
        )
        if len(results) != len(jobs):
            raise WebdedupError(f"{asset}: Spark returned {len(results)} of {len(jobs)} parts")
        by_piece: dict[int, list] = {}
        for row in sorted(results, key=lambda r: r["chunk"]):
            by_piece.setdefault(owners[row["chunk"]], []).append(row)
        done: dict[Piece, tuple[int, int, int]] = {}
        for index, rows in by_piece.items():
            piece = pieces[index]
            params_sidecar(piece.target).unlink(missing_ok=True)
            _put_together([r["file"] for r in rows], piece.target, full[months.index(piece.month)])
            done[piece] = tuple(sum(r[k] for r in rows) for k in ("rows", "first", "second"))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return done


@SPARK.implements("fingerprinted")
def fingerprint_partitions(run: StageRun) -> StageOutput:
    """Signatures (MinHash values or a SimHash as two words) of every document of the run's
    months, one file per documents file, computed in the executors by the DuckDB engine's kernel
    (bit-identical signatures)."""
    params = run.params
    stored = params.model_dump()
    try:
        coeff_a, coeff_b = MinHashParams(params.num_perm, params.seed).coefficients()
    except ValueError as err:
        raise WebdedupError(str(err)) from None
    run.derive(version=FINGERPRINT_VERSION)
    schema = fingerprint_schema(signature_width(stored))
    plan = plan_pieces(run, "documents")
    args = {"fingerprint": stored, "coefficients": (coeff_a, coeff_b)}
    options = writer_options(schema, use_dictionary=False, uncompressed=["signature"])
    done = _compute(run, plan, schema, options, args)
    totals: dict[str | None, dict[str, Any]] = {
        month: {"documents": 0, "tokens": 0, "empty_documents": 0, "files_reused": plan.reused_files[month]}
        for month in plan.reused_rows
    }
    for piece, (rows, tokens, empty) in done.items():
        month = totals[piece.month]
        month["documents"] += rows
        month["tokens"] += tokens
        month["empty_documents"] += empty
    for month, sources in plan.sources.items():
        totals[month]["sources"] = sources
    keys = ("documents", "tokens", "empty_documents", "files_reused")
    figures = {k: sum(t[k] for t in totals.values()) for k in keys}
    rows = month_rows(plan, {piece: n for piece, (n, _, _) in done.items()})
    return StageOutput(sum(rows.values()), {**figures, "files_computed": len(done)}, rows, totals, schema)


@SPARK.implements("band_memberships")
def band_partitions(run: StageRun) -> StageOutput:
    """Band keys (MinHash bands or SimHash blocks) of every document of the run's months, one file
    per fingerprinted file, computed in the executors by the DuckDB engine's document_band_keys
    (bit-identical keys)."""
    fingerprint = run.upstream["fingerprinted"]["fingerprint"]
    plan = plan_pieces(run, "fingerprinted")
    refuse_other_widths(plan, fingerprint)
    options = writer_options(BAND_SCHEMA, use_dictionary=["doc_id", "band_index"])
    done = _compute(run, plan, BAND_SCHEMA, options, {"fingerprint": fingerprint, "banding": run.params})
    totals: dict[str | None, dict[str, Any]] = {
        month: {"documents_banded": 0, "documents_without_shingles": 0, "files_reused": plan.reused_files[month]}
        for month in plan.reused_rows
    }
    for piece, (_, banded, without) in done.items():
        month = totals[piece.month]
        month["documents_banded"] += banded
        month["documents_without_shingles"] += without
    for month, sources in plan.sources.items():
        totals[month]["sources"] = sources
    keys = ("documents_banded", "documents_without_shingles", "files_reused")
    figures = {k: sum(t[k] for t in totals.values()) for k in keys}
    rows_written = month_rows(plan, {piece: n for piece, (n, _, _) in done.items()})
    return StageOutput(
        sum(rows_written.values()), {**figures, "files_computed": len(done)}, rows_written, totals, BAND_SCHEMA
    )
