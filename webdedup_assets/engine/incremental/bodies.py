"""Random access to the bodies of stored documents: what an update and `check` verify with.

Verifying a candidate pair needs the exact shingle sets of both documents, so an update or a
check reads the bodies of the history documents its new documents matched: a few thousand pages
spread over every documents file. Parquet cannot read some rows of a column chunk without
decompressing the pages that hold them, and daily exports hold hundreds of documents per page,
so a DuckDB scan filtered by doc_id decompresses all the text of the corpus, however few documents
are wanted.

The body index keeps, for every documents file, its bodies again as LZ4 blocks of ~16 KB of
consecutive documents (a document is never split) and a Parquet index doc_id -> (block, place in
the block), under `incremental/bodies/`. Reading N documents then decompresses at most N blocks.
LZ4 because the index is written once per file and read a little at a time: it writes and,
above all, reads much faster than zstd, which compresses smaller.

A file's index is named after the documents file and its identity (inode, size, mtime): stored
files are only ever replaced, never changed in place, so an index whose name matches a current
file is that file's, and any other is stale. `sync` (under the writer lock: `update`) indexes
the files that lack one and removes the stale ones; readers (`bodies_of`, also `check`, which
never writes) use the index of each file that has a current one and scan the others.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...storage.rows import fetch_rows, listing
from ...storage.store import Store, file_identity
from ...threads import thread_count
from .layout import incremental_dir

LOG = logging.getLogger("webdedup")
CODEC = "lz4_raw"
BLOCK_BYTES = 16_384  # a block closes once it holds this much text (the last document whole)
BATCH_ROWS = 8_192
INDEX_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("block_offset", pa.int64()),  # where the block starts in the .blocks file
        ("block_bytes", pa.int32()),  # its compressed size
        ("block_raw", pa.int32()),  # its decompressed size
        ("start", pa.int32()),  # where the body starts in the decompressed block
        ("length", pa.int32()),  # its length in bytes; -1: a NULL body
    ]
)


def bodies_dir(store: Store) -> Path:
    return incremental_dir(store) / "bodies"


def index_stem(documents_file: Path) -> str:
    identity = file_identity(documents_file)
    return f"{documents_file.stem}.{identity['inode']}-{identity['bytes']}-{identity['mtime_ns']}"


def _index_path(directory: Path, stem: str) -> Path:
    return directory / f"{stem}.index.parquet"


def _blocks_path(directory: Path, stem: str) -> Path:
    return directory / f"{stem}.blocks"


def index_files(store: Store) -> list[tuple[Path, Path]]:
    """(index, blocks) of every body index held, current or stale."""
    directory = bodies_dir(store)
    return [
        (index, _blocks_path(directory, index.name.removesuffix(".index.parquet")))
        for index in sorted(directory.glob("*.index.parquet"))
    ]


def index_problem(index: Path, blocks: Path) -> str | None:
    """What is wrong with a body index (None when it is whole): its blocks file must hold every
    block its index points to."""
    if not blocks.exists():
        return "missing: its index lists blocks"
    try:
        ends = pq.read_table(index, columns=["block_offset", "block_bytes"])
    except (OSError, pa.ArrowException) as err:
        return f"its index {index.name} is not readable ({str(err).splitlines()[0]})"
    end = max((o + b for o, b in zip(ends["block_offset"].to_pylist(), ends["block_bytes"].to_pylist())), default=0)
    size = blocks.stat().st_size
    return f"holds {size:,} bytes, its index points to {end:,}: cut short" if size < end else None


def sync(store: Store, rebuild_damaged: bool = False) -> int:
    """Index every documents file that has no current index; remove the stale indexes (and, with
    rebuild_damaged, those index_problem finds damaged). Returns the number of files indexed."""
    directory = bodies_dir(store)
    directory.mkdir(parents=True, exist_ok=True)
    wanted = {index_stem(f): f for f in store.data_files("documents")}
    if rebuild_damaged:
        for index, blocks in index_files(store):
            if index_problem(index, blocks):
                index.unlink()
    for path in directory.iterdir():
        stem = path.name.removesuffix(".index.parquet").removesuffix(".blocks")
        if stem not in wanted or path.name.startswith("."):
            path.unlink(missing_ok=True)
    todo = [(stem, f) for stem, f in wanted.items() if not _index_path(directory, stem).exists()]
    # pyarrow decodes and LZ4 compresses without the GIL: the files share the cores
    with ThreadPoolExecutor(max_workers=thread_count()) as pool:
        list(pool.map(lambda item: _build(directory, *item), todo))
    return len(todo)


def _build(directory: Path, stem: str, documents_file: Path) -> None:
    blocks, index = _blocks_path(directory, stem), _index_path(directory, stem)
    temp_blocks = blocks.with_name(f".{blocks.name}.{os.getpid()}.tmp")
    temp_index = index.with_name(f".{index.name}.{os.getpid()}.tmp")
    parts: list[pa.Table] = []
    written = 0
    with open(temp_blocks, "wb") as out:
        source = pq.ParquetFile(documents_file)
        for batch in source.iter_batches(batch_size=BATCH_ROWS, columns=["doc_id", "body"], use_threads=False):
            table, size = _compress(batch, written, out)
            parts.append(table)
            written += size
    pq.write_table(pa.concat_tables(parts) if parts else INDEX_SCHEMA.empty_table(), temp_index, compression="zstd")
    os.replace(temp_blocks, blocks)
    os.replace(temp_index, index)  # last: an index exists only with its blocks


def _compress(batch: pa.RecordBatch, base: int, out) -> tuple[pa.Table, int]:
    """One batch's bodies as blocks appended to `out` at `base`; its index rows and the bytes written."""
    bodies = batch.column("body").cast(pa.large_string())
    n = len(bodies)
    buffers = bodies.buffers()
    offsets = np.frombuffer(buffers[1], np.int64, count=n + 1, offset=bodies.offset * 8)
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    first = int(offsets[0])
    starts, ends = offsets[:-1] - first, offsets[1:] - first
    # a document belongs to the block its first byte falls in; a block ends with its last document
    block_of = (starts // BLOCK_BYTES).astype(np.int64)
    firsts = np.flatnonzero(np.r_[True, block_of[1:] != block_of[:-1]]) if n else np.zeros(0, np.int64)
    lasts = np.r_[firsts[1:], n] - 1 if n else np.zeros(0, np.int64)
    block_offset = np.zeros(n, np.int64)
    block_bytes = np.zeros(n, np.int32)
    block_raw = np.zeros(n, np.int32)
    block_start = np.zeros(n, np.int64)
    position = base
    for lo, hi in zip(firsts.tolist(), lasts.tolist()):
        begin, end = int(starts[lo]), int(ends[hi])
        packed = pa.compress(data[first + begin : first + end], codec=CODEC, asbytes=True)
        out.write(packed)
        block_offset[lo : hi + 1] = position
        block_bytes[lo : hi + 1] = len(packed)
        block_raw[lo : hi + 1] = end - begin
        block_start[lo : hi + 1] = begin
        position += len(packed)
    lengths = (ends - starts).astype(np.int32)
    if bodies.null_count:
        lengths[bodies.is_null().to_numpy(zero_copy_only=False)] = -1
    table = pa.table(
        [
            batch.column("doc_id").cast(pa.string()),
            pa.array(block_offset),
            pa.array(block_bytes),
            pa.array(block_raw),
            pa.array((starts - block_start).astype(np.int32)),
            pa.array(lengths),
        ],
        schema=INDEX_SCHEMA,
    )
    return table, position - base


def bodies_of(con, store: Store, ids: str) -> pa.Table | None:
    """(doc_id, body) of the stored documents whose doc_id is in the table `ids` of `con`, in no
    particular order; None when none matches. Files with a current index are read through it,
    the others scanned (storage.rows.fetch_rows)."""
    files = store.data_files("documents")
    directory = bodies_dir(store)
    indexed: dict[str, Path] = {}
    others: list[Path] = []
    for f in files:
        stem = index_stem(f)
        if _index_path(directory, stem).exists() and _blocks_path(directory, stem).exists():
            indexed[stem] = f
        else:
            others.append(f)
    parts = []
    if indexed:
        try:
            found = _read_indexed(con, directory, list(indexed), ids)
        except (OSError, pa.ArrowException, duckdb.Error) as error:
            # a damaged index (a file cut short or changed by hand): the documents files hold the same text
            LOG.warning(
                "webdedup: warning: the body index in %s could not be read (%s); the documents files are "
                "scanned instead (the same result, slower). Remove that folder: the next `webdedup add` "
                "builds it again.",
                directory,
                str(error).splitlines()[0] if str(error) else type(error).__name__,
            )
            found, others = None, files
        if found is not None:
            parts.append(found)
    if others:
        scanned = fetch_rows(con, others, ids, ["doc_id", "body"])
        if scanned is not None:
            doc_ids, body = scanned.column("doc_id").cast(pa.string()), scanned.column("body").cast(pa.large_string())
            parts.append(pa.table({"doc_id": doc_ids, "body": body}))
    if not parts:
        return None
    return pa.concat_tables(parts) if len(parts) > 1 else parts[0]


def _read_indexed(con, directory: Path, stems: list[str], ids: str) -> pa.Table | None:
    indexes = [_index_path(directory, stem) for stem in stems]
    rows = con.sql(f"""
        SELECT i.doc_id, i.block_offset, i.block_bytes, i.block_raw, i.start, i.length, i.filename
          FROM read_parquet({listing(indexes)}, filename = true, hive_partitioning = false) i
         WHERE i.doc_id IN (SELECT doc_id FROM {ids})
         ORDER BY i.filename, i.block_offset""").to_arrow_table()
    if not rows.num_rows:
        return None
    names = rows.column("filename").to_pylist()
    offsets, sizes, raws, starts, lengths = (
        rows.column(c).to_pylist() for c in ("block_offset", "block_bytes", "block_raw", "start", "length")
    )
    bodies: list[bytes] = []
    handles: dict[str, int] = {}
    try:
        block, key = b"", None
        for name, offset, size, raw, start, length in zip(names, offsets, sizes, raws, starts, lengths):
            if (name, offset) != key:
                key = (name, offset)
                if name not in handles:
                    stem = Path(name).name.removesuffix(".index.parquet")
                    handles[name] = os.open(_blocks_path(directory, stem), os.O_RDONLY)
                block = pa.decompress(os.pread(handles[name], size, offset), raw, codec=CODEC, asbytes=True)
            bodies.append(block[start : start + max(length, 0)])
    finally:
        for handle in handles.values():
            os.close(handle)
    # the text was valid UTF-8 when stored: assembled from buffers, not converted item by item
    # (pa.array over many bodies costs much more)
    ends = np.cumsum(np.fromiter(map(len, bodies), np.int64, len(bodies)))
    valid = pa.array(np.asarray(lengths) >= 0).buffers()[1] if min(lengths) < 0 else None
    body = pa.LargeStringArray.from_buffers(
        len(bodies), pa.py_buffer(np.r_[0, ends].astype(np.int64)), pa.py_buffer(b"".join(bodies)), valid
    )
    return pa.table({"doc_id": rows.column("doc_id").cast(pa.string()), "body": body})
