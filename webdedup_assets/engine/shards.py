"""`--emit-shards`: the kept documents in the input's own form, so that the result drops into a
user's pipeline in place of the input.

One output shard per input shard, under `shards/` with the shard's path below the input folder,
the same file name and compression. A kept record is written as it was read: a JSON Lines line or
a CSV record byte for byte, a Parquet row with every field in its order (the file written again
with the input's schema and codec). A record is kept unless its document was removed as a duplicate;
WARC input has no such form (its kept documents are in deduped_documents.parquet)."""

from __future__ import annotations

import csv
import glob as globlib
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import WebdedupError
from ..ingest.csv_files import delimiter
from ..ingest.inputs import InputFile
from ..params import ColumnParams
from ..storage.objects import ObjectPath, is_uri, open_input, open_stream
from ..storage.store import Store, connect
from .reading import document_ids

FOLDER = "shards"
EMITTED_FORMATS = ("csv", "parquet", "jsonl")


def require_emittable(files: list[InputFile]) -> None:
    """--emit-shards writes tabular inputs back; refused (before anything is written) for WARC."""
    other = next((f for f in files if f.format not in EMITTED_FORMATS), None)
    if other is not None:
        raise WebdedupError(
            f"--emit-shards writes CSV, Parquet and JSON Lines inputs back in their own form; {other.path} is "
            f"{other.format.upper()}: its kept documents are in deduped_documents.parquet"
        )


def removed_ids(store: Store) -> set[str]:
    """The doc_ids removed as duplicates: clustered, and not their cluster's representative."""
    con = connect(store)
    try:
        rows = con.sql(
            f"SELECT doc_id FROM {store.scan_sql('clusters')} "
            f"ANTI JOIN (SELECT doc_id FROM {store.scan_sql('deduped_documents')}) USING (doc_id)"
        ).fetchall()
    finally:
        con.close()
    return {doc_id for (doc_id,) in rows}


def emit_shards(
    store: Store, files: list[InputFile], mapping: ColumnParams, target: Path, input_path: str
) -> dict[str, Any]:
    """Every input shard's kept records into `target`, at its path below the input folder (or
    bucket prefix) `input_path`, or below the files' common folder when that is not a folder
    holding them all (a file, a glob); returns the figures (shards, records kept and removed)."""
    removed = removed_ids(store)
    given = (
        ObjectPath.of(input_path) if is_uri(input_path) else Path(os.path.abspath(Path(input_path).expanduser()))
    ).parts
    named = _as_given(input_path, files)
    if all(len(p.parts) > len(given) and p.parts[: len(given)] == given for p in named):
        common = given
    else:
        common = named[0].parent.parts
        for p in named[1:]:
            same = [a == b for a, b in zip(common, p.parent.parts)]
            common = common[: same.index(False) if False in same else len(same)]
    figures = {"shards": 0, "records_kept": 0, "records_removed": 0}
    for f, path in zip(files, named):
        out = target.joinpath(*path.parts[len(common) :])
        out.parent.mkdir(parents=True, exist_ok=True)
        write = {"jsonl": _jsonl, "csv": _csv, "parquet": _parquet}[f.format]
        ids = document_ids(f, mapping)
        kept, dropped = write(f.path, out, _kept(ids, removed))
        figures["shards"] += 1
        figures["records_kept"] += kept
        figures["records_removed"] += dropped
    return figures


def _as_given(input_path: str, files: list[InputFile]) -> list[Path | ObjectPath]:
    """Each input file's path as the input names it: a shard that is a symbolic link keeps the
    link's name and folder (the files' own paths are resolved, so a linked shard was emitted under
    its target's name, outside its folder)."""
    if is_uri(input_path):
        return [f.path for f in files]
    given = Path(input_path).expanduser()
    listed = globlib.glob(str(given), recursive=True) if any(c in input_path for c in "*?[") else [given]
    links = {}
    for entry in map(Path, listed):
        for path in entry.rglob("*") if entry.is_dir() else [entry]:
            links.setdefault(path.resolve(), Path(os.path.abspath(path)))
    return [links.get(f.path, f.path) for f in files]


def _kept(ids: pa.ChunkedArray, removed: set[str]) -> list[bool]:
    """Per record of a file, in its order, whether its document is kept."""
    return pc.invert(pc.is_in(ids, value_set=pa.array(sorted(removed), pa.string()))).to_pylist()


def _records_differ(source: Path | ObjectPath, records: int, read: int) -> WebdedupError:
    return WebdedupError(
        f"{source}: holds {records} records here but {read} when the documents were read: did it change?"
    )


def _jsonl(source: Path | ObjectPath, out: Path, kept_flags: list[bool]) -> tuple[int, int]:
    kept = records = 0
    with open_stream(source) as raw, pa.output_stream(str(out), compression="detect") as sink:
        for line in io.BufferedReader(raw, buffer_size=1 << 20):
            if not line.strip():  # DuckDB reads no record from a blank line
                continue
            if records < len(kept_flags) and kept_flags[records]:
                sink.write(line)
                kept += 1
            records += 1
    if records != len(kept_flags):
        raise _records_differ(source, records, len(kept_flags))
    return kept, records - kept


def _csv(source: Path | ObjectPath, out: Path, kept_flags: list[bool]) -> tuple[int, int]:
    kept = records = 0
    consumed: list[str] = []  # the raw lines of the record the reader is on (a quoted field may span lines)

    def lines(handle) -> Iterator[str]:
        for number, line in enumerate(handle):
            consumed.append(line)  # as read: a byte order mark stays in the shard
            yield line[1:] if number == 0 and line.startswith("\ufeff") else line

    with (
        io.TextIOWrapper(open_input(source), encoding="utf-8", newline="") as handle,
        open(out, "w", encoding="utf-8", newline="") as sink,
    ):
        reader = csv.reader(lines(handle), delimiter=delimiter(source), quotechar='"', doublequote=True)
        header = next(reader, None)
        if header is None:
            return 0, 0
        sink.write("".join(consumed))
        consumed.clear()
        for _ in reader:
            record = "".join(consumed)
            consumed.clear()
            if records < len(kept_flags) and kept_flags[records]:
                sink.write(record)
                kept += 1
            records += 1
    if records != len(kept_flags):
        raise _records_differ(source, records, len(kept_flags))
    return kept, records - kept


def _parquet(source: Path | ObjectPath, out: Path, kept_flags: list[bool]) -> tuple[int, int]:
    """The kept rows with the input's own schema (types, time zones, nullability, metadata) and
    codec, in the input's order, copied batch by batch by pyarrow."""
    keep = pa.array(kept_flags, pa.bool_())
    with open_input(source) as handle:
        reader = pq.ParquetFile(handle)
        metadata = reader.metadata
        if metadata.num_rows != len(keep):
            raise _records_differ(source, metadata.num_rows, len(keep))
        codec = metadata.row_group(0).column(0).compression.lower() if metadata.num_row_groups else "snappy"
        codec = {"uncompressed": "none", "lz4_raw": "lz4"}.get(codec, codec)
        offset = 0
        with pq.ParquetWriter(out, reader.schema_arrow, compression=codec) as writer:
            for batch in reader.iter_batches(batch_size=8192):
                writer.write_batch(batch.filter(keep.slice(offset, batch.num_rows)))
                offset += batch.num_rows
    kept = pc.sum(keep).as_py() or 0
    return kept, metadata.num_rows - kept
