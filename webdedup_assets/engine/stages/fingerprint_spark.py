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

Parallelism is per upstream file (a month's documents may be several files: segments and the
month's file); one file is one task.
"""

from __future__ import annotations

import os
import shutil
import uuid
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...core.fingerprint import signature_width
from ...core.hashing import FINGERPRINT_VERSION
from ...core.minhash import MinHashParams
from ...errors import WebdedupError
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

MAX_TASKS = 4096  # pieces are spread over at most this many tasks (one task per piece below it)
RESULT_SCHEMA = "piece long, file string, rows long, first long, second long"


def _fingerprint_file(source: str, writer, schema: pa.Schema, args: dict[str, Any]) -> tuple[int, int, int]:
    """One documents file through the kernel, batch by batch, as engine.stages.fingerprint does:
    (rows, tokens, documents without shingles)."""
    rows = tokens_total = empty = 0
    for batch in pq.ParquetFile(source).iter_batches(
        batch_size=BATCH_ROWS, columns=["doc_id", "body"], use_threads=False
    ):
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


def _band_file(source: str, writer, schema: pa.Schema, args: dict[str, Any]) -> tuple[int, int, int]:
    """One fingerprinted file's band keys, batch by batch, as engine.stages.fingerprint does:
    (rows, documents banded, documents without shingles)."""
    fingerprint, banding = args["fingerprint"], args["banding"]
    bands = keys_per_document(fingerprint, banding)
    band_numbers = np.arange(bands, dtype=np.int16)
    rows = banded = without = 0
    for batch in pq.ParquetFile(source).iter_batches(
        batch_size=4 * BATCH_ROWS, columns=["doc_id", "shingle_count", "signature"], use_threads=False
    ):
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


def _task(kind: str, jobs: list[tuple[str, int]], schemas: list[bytes], options: dict[str, Any], staging: str, args):
    """The executor side: every piece of the task's id range read, computed and written as
    <staging>/<piece>.parquet (temporary name first: a retried attempt writes the same rows)."""

    def run(batches):
        import pyarrow as pa
        import pyarrow.parquet as pq

        compute = KINDS[kind]
        for batch in batches:
            for piece in batch.column(0).to_pylist():
                source, schema_index = jobs[piece]
                schema = pa.ipc.read_schema(pa.py_buffer(schemas[schema_index]))
                target = os.path.join(staging, f"{piece:07d}.parquet")
                temp = f"{target}.{uuid.uuid4().hex}.tmp"
                try:
                    with pq.ParquetWriter(temp, schema, **options) as writer:
                        rows, first, second = compute(source, writer, schema, args)
                    os.replace(temp, target)
                finally:
                    if os.path.exists(temp):
                        os.unlink(temp)
                yield pa.record_batch(
                    [
                        pa.array([piece], pa.int64()),
                        pa.array([target]),
                        pa.array([rows], pa.int64()),
                        pa.array([first], pa.int64()),
                        pa.array([second], pa.int64()),
                    ],
                    names=["piece", "file", "rows", "first", "second"],
                )

    return run


def _compute(
    run: StageRun, plan: Plan, schema: pa.Schema, options: dict[str, Any], args: dict[str, Any]
) -> dict[Piece, tuple[int, int, int]]:
    """The plan's pieces computed by the executors and moved into place: per piece (rows, first
    figure, second figure)."""
    pieces = plan.compute
    if not pieces:
        return {}
    store, asset = run.store, run.stage.name
    months = sorted({piece.month for piece in pieces}, key=lambda m: m or "")
    schemas = [with_params(schema, run.partition_parameters(m)).serialize().to_pybytes() for m in months]
    jobs = [(str(piece.source), months.index(piece.month)) for piece in pieces]
    folder = store.asset_dir(asset)
    folder.mkdir(parents=True, exist_ok=True)
    staging = folder / f".staging-spark-{uuid.uuid4().hex}"  # storage.state.remove_leftovers clears a dead run's
    staging.mkdir()
    try:
        spark = session_of(run)
        tasks = min(len(pieces), MAX_TASKS)
        results = (
            spark.range(0, len(pieces), 1, tasks)
            .mapInArrow(_task(asset, jobs, schemas, options, str(staging), args), RESULT_SCHEMA)
            .collect()  # one small row per piece
        )
        done: dict[Piece, tuple[int, int, int]] = {}
        for row in sorted(results, key=lambda r: r["piece"]):
            piece = pieces[row["piece"]]
            params_sidecar(piece.target).unlink(missing_ok=True)
            os.replace(row["file"], piece.target)
            done[piece] = (row["rows"], row["first"], row["second"])
        if len(done) != len(pieces):
            raise WebdedupError(f"{asset}: Spark returned {len(done)} of {len(pieces)} files")
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
