"""Writers of one Parquet file per partition from one stream: the daily stages' output split
by crawl month (PartitionWriter, batches arriving grouped by partition) and one big input split
by a key column in any order (write_split)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..progress import Task
from .store import Store, params_sidecar, with_params, writer_options


class PartitionWriter:
    """One Parquet file per partition from a stream whose batches arrive grouped by partition
    (all of one partition's batches together, e.g. crawl days in order): one pass over many
    small days instead of one pass per day. Each file is written to a temporary name and moved
    into place when its partition is complete; `abort` drops the one in progress."""

    def __init__(
        self,
        store: Store,
        asset: str,
        schema: pa.Schema,
        params: Callable[[Any], dict[str, Any]],
        use_dictionary: bool | list[str] = True,
        uncompressed: Iterable[str] = (),
        path_of: Callable[[Any], Path] | None = None,
    ) -> None:
        self.store, self.asset, self.schema, self.params = store, asset, schema, params
        self.path_of = path_of or (lambda partition: store.path(asset, partition))
        self.options = writer_options(schema, use_dictionary, uncompressed)
        self.rows: dict[Any, int] = {}
        self._current: Any = None
        self._writer: pq.ParquetWriter | None = None
        self._temp: Path | None = None

    def write(self, partition: Any, batch: pa.RecordBatch) -> None:
        if self._writer is None or partition != self._current:
            self._finish()
            if partition in self.rows:
                raise ValueError(f"partition {partition} arrived twice: batches must be grouped by partition")
            target = self.path_of(partition)
            target.parent.mkdir(parents=True, exist_ok=True)
            self._temp = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
            self._writer = pq.ParquetWriter(
                self._temp, with_params(self.schema, self.params(partition)), **self.options
            )
            self._current = partition
            self.rows[partition] = 0
        if batch.num_rows:
            self._writer.write_batch(batch)
            self.rows[partition] += batch.num_rows

    def _finish(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        target = self.path_of(self._current)
        params_sidecar(target).unlink(missing_ok=True)
        os.replace(self._temp, target)
        self._writer = self._temp = None

    def close(self) -> dict[Any, int]:
        self._finish()
        return self.rows

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._temp.unlink(missing_ok=True)
            self._writer = self._temp = None


def write_split(
    batches: Iterable[pa.RecordBatch],
    key: str,
    path_of: Callable[[Any], Path],
    params: dict[str, Any],
    use_dictionary: bool | list[str] = True,
    row_group_rows: int = 32_768,
    buffer_bytes: int = 256 << 20,
    threads: int = 2,
    progress: Task | None = None,
    lz4: Iterable[str] = (),
) -> dict[Any, int]:
    """One Parquet file per value of the column `key` (left out of the files) from a stream
    whose keys arrive in any order, e.g. one big export spanning years split by crawl month.

    Rows keep their stream order within each file. Each key's rows are buffered and written as
    one row group when they reach `row_group_rows`, or, when all buffers together hold more than
    `buffer_bytes`, the largest buffer is written: memory stays bounded whatever the number of
    keys. Writes (encoding and zstd, which release the GIL) run on `threads` threads, one write
    at a time per file, so the cores share the compression while the caller reads on. The files
    are written at `path_of(key)` directly (give paths in a staging folder) and complete only
    when this returns; returns the rows per key. lz4: columns compressed with LZ4 instead of
    zstd (storage.writer_options)."""
    writers: dict[Any, pq.ParquetWriter] = {}
    buffered: dict[Any, list[pa.RecordBatch]] = {}
    sizes: dict[Any, int] = {}
    counts: dict[Any, int] = {}
    rows: dict[Any, int] = {}
    last_write: dict[Any, Any] = {}  # key -> its latest write (a file takes one write at a time)
    in_flight: list[Any] = []
    total = 0
    schema: pa.Schema | None = None

    def write(value: Any, parts: list[pa.RecordBatch]) -> None:
        writer = writers.get(value)
        if writer is None:
            target = path_of(value)
            target.parent.mkdir(parents=True, exist_ok=True)
            writer = writers[value] = pq.ParquetWriter(
                target, with_params(schema, params), **writer_options(schema, use_dictionary, lz4=lz4)
            )
        writer.write_table(pa.Table.from_batches(parts, schema=schema))  # one row group

    with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="webdedup-writer") as pool:

        def flush(value: Any) -> None:
            nonlocal total
            parts = buffered.pop(value)
            total -= sizes.pop(value)
            counts.pop(value)
            previous = last_write.get(value)
            if previous is not None:
                previous.result()
            while len(in_flight) > 2 * max(1, threads):  # written data is not held without bound either
                in_flight.pop(0).result()
            last_write[value] = pool.submit(write, value, parts)
            in_flight.append(last_write[value])

        try:
            for batch in batches:
                if not batch.num_rows:
                    continue
                index = batch.schema.get_field_index(key)
                encoded = batch.column(index).dictionary_encode()
                data = batch.remove_column(index)
                if schema is None:
                    schema = data.schema
                codes = encoded.indices.to_numpy(zero_copy_only=False)
                order = np.argsort(codes, kind="stable")
                ordered = codes[order]
                cuts = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
                for start, stop in zip([0, *cuts.tolist()], [*cuts.tolist(), len(ordered)]):
                    value = encoded.dictionary[int(ordered[start])].as_py()
                    part = data if stop - start == batch.num_rows else data.take(pa.array(order[start:stop]))
                    buffered.setdefault(value, []).append(part)
                    sizes[value] = sizes.get(value, 0) + part.nbytes
                    counts[value] = counts.get(value, 0) + part.num_rows
                    rows[value] = rows.get(value, 0) + part.num_rows
                    total += part.nbytes
                    if counts[value] >= row_group_rows:
                        flush(value)
                while total > buffer_bytes:
                    flush(max(sizes, key=sizes.__getitem__))
                if progress is not None:
                    progress.advance(batch.num_rows)
            for value in list(buffered):
                flush(value)
            for future in in_flight:
                future.result()
        finally:
            for future in in_flight:
                future.cancel()
            for future in in_flight:
                if not future.cancelled():
                    future.exception()  # wait: no write may touch a file after it is closed
            for writer in writers.values():
                writer.close()
    return rows
