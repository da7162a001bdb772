"""Reading and writing the store's Parquet layout from Spark.

Reading: the files the Store lists for an asset (`store.require`), never a guessed name.
Writing: each task writes its partition's Arrow batches with pyarrow (inside `mapInArrow`) in
exactly the schema the DuckDB engine writes (uint32 signatures, int16 band numbers, ...) and
with the stage's parameters in the Parquet key-value metadata, so either engine reads what the
other wrote. The driver only receives (file, rows) per task, then moves the files into place:
`data.parquet` when there is one, else `data-00000.parquet`, ... in the rows' order.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa

from ...storage.store import Store, params_sidecar, with_params, write_batches


def read_asset(spark, store: Store, asset: str, columns: list[str] | None = None):
    """A DataFrame over every stored file of an asset (days with different extra columns
    merged by name, as DuckDB's union_by_name)."""
    files = [str(f) for f in store.require(asset)]
    frame = spark.read.option("mergeSchema", "true").parquet(*files)
    return frame.select(*columns) if columns else frame


def _writer(staging: str, schema_bytes: bytes):
    """The task side: one Parquet file per non-empty partition, written to a temporary name
    and renamed (a retried task attempt replaces the file with the same rows)."""

    def write(batches):
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyspark import TaskContext

        schema = pa.ipc.read_schema(pa.py_buffer(schema_bytes))
        context = TaskContext.get()
        partition = context.partitionId() if context else 0
        attempt = context.attemptNumber() if context else 0
        target = os.path.join(staging, f"part-{partition:06d}.parquet")
        temp = f"{target}.{attempt}.{uuid.uuid4().hex}.tmp"
        writer = None
        rows = 0
        try:
            for batch in batches:
                if not batch.num_rows:
                    continue
                if writer is None:
                    writer = pq.ParquetWriter(temp, schema, compression="zstd")
                table = pa.Table.from_batches([batch])
                columns = [table.column(f.name).cast(f.type) for f in schema]
                writer.write_table(pa.Table.from_arrays(columns, schema=schema))
                rows += batch.num_rows
        finally:
            if writer is not None:
                writer.close()
        if writer is not None:
            os.replace(temp, target)
            yield pa.record_batch([pa.array([target]), pa.array([rows], pa.int64())], names=["file", "rows"])

    return write


def write_asset(frame, store: Store, asset: str, schema: pa.Schema, params: dict[str, Any]) -> int:
    """Write a DataFrame as the asset's files (rows in the frame's partition order) and replace
    the asset's previous files with them; returns the row count."""
    folder = store.asset_dir(asset)
    folder.mkdir(parents=True, exist_ok=True)
    staging = folder / f".spark-{uuid.uuid4().hex}"
    staging.mkdir()
    try:
        full = with_params(schema, params)
        written = frame.select(*schema.names).mapInArrow(
            _writer(str(staging), full.serialize().to_pybytes()), "file string, rows long"
        )
        parts = sorted((row["file"], row["rows"]) for row in written.collect())  # one row per task
        rows = sum(n for _, n in parts)
        files = [Path(f) for f, _ in parts]
        if not files:  # no rows: one empty file with the schema, as the DuckDB engine writes
            empty = staging / "part-000000.parquet"
            write_batches(empty, schema, [], params)
            files = [empty]
        replace_files(store, asset, files)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return rows


def replace_files(store: Store, asset: str, files: list[Path]) -> None:
    """The asset's files become `files` (in this order): data.parquet for one, else data-NNNNN."""
    folder = store.asset_dir(asset)
    names = [store.path(asset)] if len(files) == 1 else [folder / f"data-{i:05d}.parquet" for i in range(len(files))]
    keep = set(names)
    for old in store.files(asset):
        if old not in keep:
            old.unlink(missing_ok=True)
            params_sidecar(old).unlink(missing_ok=True)
    for source, target in zip(files, names):
        params_sidecar(target).unlink(missing_ok=True)
        os.replace(source, target)


def write_report(frame, target: Path, staging_root: Path) -> None:
    """A published CSV report computed by Spark: the rows written as Parquet by the executors,
    then formatted by DuckDB exactly as the DuckDB engine formats it (header, quoting, numbers,
    timestamps). Reports are bounded (figures, the 10,000 largest buckets, multi-member clusters)."""
    from ...storage.store import connect, sql_string, write_csv

    staging = staging_root / f".spark-report-{uuid.uuid4().hex}"
    staging.mkdir(parents=True)
    try:
        schema = frame.schema
        arrow_schema = _arrow_schema(schema)
        written = frame.mapInArrow(
            _writer(str(staging), arrow_schema.serialize().to_pybytes()), "file string, rows long"
        )
        files = sorted(row["file"] for row in written.collect())
        con = connect()
        con.execute("SET SESSION preserve_insertion_order = true")
        if files:
            listing = ", ".join(sql_string(f) for f in files)
            relation = con.sql(f"SELECT * FROM read_parquet([{listing}], hive_partitioning = false)")
        else:
            empty = staging / "empty.parquet"
            write_batches(empty, arrow_schema, [], {})
            relation = con.sql(f"SELECT * FROM read_parquet({sql_string(str(empty))}, hive_partitioning = false)")
        write_csv(target, relation)
        con.close()
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _arrow_schema(spark_schema) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema)
