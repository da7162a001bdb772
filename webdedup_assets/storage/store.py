"""Parquet-per-asset storage with parameters stored beside the data.

Layout under the storage root:  <asset>/data.parquet  (unpartitioned)  or
<asset>/part-<key>.parquet per partition (a crawl month), or for documents several segments
<asset>/part-<key>.<segment>.parquet (named by their first day, see engine.stages.documents).
Readers glob <asset>/*.parquet.
Every file is written to a temporary name and moved into place with os.replace, so a
crash never leaves a half-written asset. The stage's parameters and statistics travel in
the Parquet key-value metadata under the key "webdedup".
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import WebdedupError
from . import objects
from .fileio import atomic_path, write_text
from .serial import decode, encode

METADATA_KEY = b"webdedup"
DUCKDB_MEMORY_LIMIT = "2GB"


@dataclass(frozen=True)
class Store:
    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root).expanduser().resolve())

    def asset_dir(self, asset: str) -> Path:
        return self.root / asset

    def path(self, asset: str, partition: str | None = None) -> Path:
        name = "data.parquet" if partition is None else f"part-{partition}.parquet"
        return self.asset_dir(asset) / name

    def schema_path(self, asset: str) -> Path:
        """A zero-row file holding a partitioned asset's schema, so that an asset whose
        partitions are all empty still reads as an empty table."""
        return self.asset_dir(asset) / "_schema.parquet"

    def segment_path(self, asset: str, partition: str, segment: str) -> Path:
        return self.asset_dir(asset) / f"part-{partition}.{segment}.parquet"

    def files(self, asset: str) -> list[Path]:
        return sorted(self.asset_dir(asset).glob("*.parquet"))

    def data_files(self, asset: str) -> list[Path]:
        """The files holding rows (every file but the schema file of a partitioned asset)."""
        return [f for f in self.files(asset) if f != self.schema_path(asset)]

    def published_files(self, asset: str) -> list[Path]:
        """The files one published output of the asset puts together, in stored order: its data
        files, or its schema file alone when no partition holds rows."""
        files = self.require(asset)
        return [f for f in files if f != self.schema_path(asset)] or files

    def partition_files(self, asset: str, partition: str) -> list[Path]:
        """Every file of one partition, in stored order: its segments, then its main file."""
        main = self.path(asset, partition)
        segments = sorted(self.asset_dir(asset).glob(f"part-{partition}.*.parquet"))
        return segments + ([main] if main.exists() else [])

    def partitions(self, asset: str) -> list[str]:
        """Partition keys that hold data (keys hold no '.'; a segment's name adds one)."""
        names = (p.name[len("part-") : -len(".parquet")] for p in self.asset_dir(asset).glob("part-*.parquet"))
        return sorted({name.split(".", 1)[0] for name in names})

    def require(self, asset: str) -> list[Path]:
        files = self.files(asset)
        if not files:
            raise WebdedupError(
                f"upstream asset {asset!r} has not been materialized under {self.root}; materialize it first"
            )
        return files

    def scan_sql(self, asset: str) -> str:
        """A DuckDB table expression over every file of an asset."""
        files = self.require(asset)
        listing = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
        return f"read_parquet([{listing}], union_by_name = true, hive_partitioning = false)"

    def params(self, asset: str) -> dict[str, Any]:
        """Stored parameters of an asset: of its schema file (the latest partitioned run) or its
        only file (a global stage compares them with every day's: engine.stage.check_uniform)."""
        files = self.require(asset)
        schema_file = self.schema_path(asset)
        return read_params(schema_file if schema_file.exists() else files[0])

    def stats_path(self, asset: str, partition: str | None = None) -> Path:
        name = "stats.json" if partition is None else f"stats-{partition}.json"
        return self.asset_dir(asset) / name

    def write_stats(self, asset: str, partition: str | None, stats: dict[str, Any]) -> None:
        """Figures known only after the data is written (row counts, timings)."""
        write_text(self.stats_path(asset, partition), json.dumps(stats, indent=2, default=str))

    def stats(self, asset: str) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in sorted(self.asset_dir(asset).glob("stats*.json"))]

    def remove(self, asset: str, partition: str | None = None) -> None:
        """The partition's files (segments included), their sidecars and its stats."""
        paths = [self.path(asset)] if partition is None else self.partition_files(asset, partition)
        for path in paths:
            path.unlink(missing_ok=True)
            params_sidecar(path).unlink(missing_ok=True)
        self.stats_path(asset, partition).unlink(missing_ok=True)

    def remove_segments(self, asset: str, partition: str, keep: Iterable[Path] = ()) -> None:
        """Segments of a partition not in `keep` (left by an earlier build of the partition)."""
        kept = {Path(p).name for p in keep}
        for path in self.asset_dir(asset).glob(f"part-{partition}.*.parquet"):
            if path.name not in kept:
                path.unlink(missing_ok=True)
                params_sidecar(path).unlink(missing_ok=True)

    def remove_other_files(self, asset: str) -> None:
        """Remove the files of an unpartitioned asset other than data.parquet (the parts another
        engine wrote, e.g. Spark's data-00000.parquet, ...), before data.parquet replaces them."""
        for path in self.files(asset):
            if path != self.path(asset):
                path.unlink(missing_ok=True)
                params_sidecar(path).unlink(missing_ok=True)

    def place(self, asset: str, partition: str | None, written: Path) -> None:
        """Move a file this stage wrote (parameters in its own metadata) into place."""
        target = self.path(asset, partition)
        params_sidecar(target).unlink(missing_ok=True)
        os.replace(written, target)

    def place_segment(self, asset: str, partition: str, segment: str, written: Path) -> Path:
        """Move a file this stage wrote into place as a segment of a partition."""
        target = self.segment_path(asset, partition, segment)
        params_sidecar(target).unlink(missing_ok=True)
        os.replace(written, target)
        return target

    def rename_to_segment(self, asset: str, partition: str, segment: str) -> Path:
        """The partition's file becomes one of its segments (with its parameters' sidecar, if any)."""
        main, target = self.path(asset, partition), self.segment_path(asset, partition, segment)
        if params_sidecar(main).exists():
            os.replace(params_sidecar(main), params_sidecar(target))
        os.replace(main, target)
        return target

    def adopt(
        self,
        asset: str,
        partition: str | None,
        source: Path,
        params: dict[str, Any],
        segment: str | None = None,
        sha256: str | None = None,
    ) -> Path:
        """Store a byte copy of an input file that already is exactly this asset's data (see
        engine.stages.documents), as the partition's file or one of its segments; its footer is the
        input's own, so the parameters go beside it, with the input's sha256. A copy whose
        recorded sha256 and size match is left as it is, so the files derived from it
        (fingerprinted, band_memberships) see the same file and are not computed again."""
        target = self.path(asset, partition) if segment is None else self.segment_path(asset, partition, segment)
        if not self.holds_copy_of(asset, partition, segment, source, sha256):
            with atomic_path(target) as temp:
                shutil.copyfile(source, temp)  # copy_file_range/sendfile: in-kernel, no re-encoding
        write_text(params_sidecar(target), encode({**params, "adopted_sha256": sha256}))
        return target

    def holds_copy_of(
        self, asset: str, partition: str | None, segment: str | None, source: Path, sha256: str | None
    ) -> bool:
        """Whether the partition's file (or segment) is an adopted byte copy of `source` as it is
        now: same size and the same recorded sha256."""
        target = self.path(asset, partition) if segment is None else self.segment_path(asset, partition, segment)
        sidecar = params_sidecar(target)
        try:
            return (
                sha256 is not None
                and target.stat().st_size == source.stat().st_size
                and decode(sidecar.read_text()).get("adopted_sha256") == sha256
            )
        except (OSError, ValueError):  # no copy or no sidecar (yet): not held
            return False


def save_table(con: duckdb.DuckDBPyConnection, table: str, target: Path) -> None:
    """A DuckDB table as a Parquet file, replaced in one step."""
    with atomic_path(target) as temp:
        con.execute(f"COPY {table} TO {sql_string(str(temp))} (FORMAT parquet, COMPRESSION zstd)")


def file_identity(path: Path) -> dict[str, Any]:
    """What a derived file records of the stored file it was computed from: a file is only ever
    replaced, never changed in place, so a new name, size, inode or mtime means new content."""
    stat = path.stat()
    return {"file": path.name, "bytes": stat.st_size, "inode": stat.st_ino, "mtime_ns": stat.st_mtime_ns}


def sum_figures(parts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Numeric figures of several stats (e.g. one per crawl day) added up; rates are left out."""
    totals: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "docs_per_second":
                totals[key] = totals.get(key, 0) + value
    return totals


def params_sidecar(path: Path) -> Path:
    """Where the parameters of an adopted file (Store.adopt) are kept: <file>.params.json."""
    return path.with_name(path.name + ".params.json")


def read_params(path: Path) -> dict[str, Any]:
    sidecar = params_sidecar(path)
    if sidecar.exists():  # an adopted file: its own footer may carry anything
        return decode(sidecar.read_text())
    metadata = pq.read_schema(path).metadata or {}
    return decode(metadata.get(METADATA_KEY))


def with_params(schema: pa.Schema, params: dict[str, Any]) -> pa.Schema:
    metadata = dict(schema.metadata or {})
    metadata[METADATA_KEY] = encode(params).encode()
    return schema.with_metadata(metadata)


def writer_options(
    schema: pa.Schema,
    use_dictionary: bool | list[str] = True,
    uncompressed: Iterable[str] = (),
    lz4: Iterable[str] = (),
) -> dict[str, Any]:
    """pyarrow ParquetWriter options of every stored file: zstd, except the `uncompressed`
    columns and the `lz4` ones (text that later stages read several times: LZ4 decompresses
    and compresses faster than zstd, for somewhat larger files)."""
    codecs = {**{name: "none" for name in uncompressed}, **{name: "lz4" for name in lz4}}
    compression = {name: codecs.get(name, "zstd") for name in schema.names} if codecs else "zstd"
    return {"compression": compression, "use_dictionary": use_dictionary}


ROW_GROUP_ROWS = 65_536
ROW_GROUP_BYTES = 64 << 20  # of decoded rows: with long pages, rows alone would not bound a row group


def row_groups(parts: Iterable[pa.Table | pa.RecordBatch]) -> Iterator[pa.Table]:
    """Consecutive rows regrouped into tables of about ROW_GROUP_ROWS rows or ROW_GROUP_BYTES of
    decoded data, whichever comes first, in order and zero-copy (small parts are put together as
    chunks, large ones sliced), so that whoever writes, reads or rewrites the file holds a bounded
    amount of text per row group whatever the pages' length. write_batches writes each table as
    one row group."""
    pending: list[pa.Table] = []
    rows = size = 0
    for part in parts:
        table = part if isinstance(part, pa.Table) else pa.Table.from_batches([part])
        offset = 0
        while offset < table.num_rows:
            left = table.slice(offset)
            row_bytes = max(1, left.nbytes // left.num_rows)
            room = max(1, min(ROW_GROUP_ROWS - rows, (ROW_GROUP_BYTES - size) // row_bytes))
            piece = left.slice(0, room)
            pending.append(piece)
            rows, size, offset = rows + piece.num_rows, size + piece.nbytes, offset + piece.num_rows
            if rows >= ROW_GROUP_ROWS or size >= ROW_GROUP_BYTES:
                yield pa.concat_tables(pending)
                pending, rows, size = [], 0, 0
        part = table = left = piece = None  # not held while the next part is decoded
    if pending:
        yield pa.concat_tables(pending)


def write_batches(
    target: Path,
    schema: pa.Schema,
    batches: Iterable[pa.RecordBatch | pa.Table],
    params: dict[str, Any],
    use_dictionary: bool | list[str] = True,
    uncompressed: Iterable[str] = (),
) -> int:
    """Stream record batches (or tables: one row group each, e.g. zero-copy slices put
    together) into one Parquet file atomically; returns the row count.

    use_dictionary: False or the columns worth dictionary-encoding (pyarrow tries every column
    by default, which costs CPU and size on unique or random values such as signatures).
    uncompressed: columns stored without zstd (random values such as signatures do not
    compress; trying costs a second per million documents)."""
    schema = with_params(schema, params)
    rows = 0
    options = writer_options(schema, use_dictionary, uncompressed)
    with atomic_path(target) as temp:
        with pq.ParquetWriter(temp, schema, **options) as writer:
            for batch in batches:
                if batch.num_rows:
                    batch = batch.cast(schema) if batch.schema != schema else batch
                    if isinstance(batch, pa.Table):
                        writer.write_table(batch)
                    else:
                        writer.write_batch(batch)
                    rows += batch.num_rows
                batch = None  # written: freed before the next one is produced, not after
    return rows


def write_table(target: Path, table: pa.Table, params: dict[str, Any]) -> int:
    return write_batches(target, table.schema, table.to_batches(), params)


def write_relation(target: Path, relation: duckdb.DuckDBPyRelation, params: dict[str, Any]) -> int:
    """Stream a DuckDB query result into Parquet without materializing it in Python."""
    reader = relation.arrow(batch_size=65_536)  # duckdb 2.x: a RecordBatchReader
    return write_batches(target, reader.schema, reader, params)


def write_schema(
    store: Store, asset: str, relation: duckdb.DuckDBPyRelation | pa.Schema, params: dict[str, Any]
) -> None:
    schema = relation if isinstance(relation, pa.Schema) else relation.arrow().schema
    write_batches(store.schema_path(asset), schema, [], params)


def copy_query(con: duckdb.DuckDBPyConnection, query: str, target: Path, params: dict[str, Any]) -> None:
    """DuckDB's parallel Parquet writer (COPY), rows in the query's order, with the stage
    parameters in the key-value metadata like write_batches."""
    metadata = sql_string(encode(params))
    key = METADATA_KEY.decode()
    options = f"FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 32768, KV_METADATA {{{key}: {metadata}}}"
    con.execute("SET SESSION preserve_insertion_order = true")
    con.execute(f"COPY ({query}) TO {sql_string(str(target))} ({options})")


def write_csv(target: Path, relation: duckdb.DuckDBPyRelation) -> None:
    with atomic_path(target) as temp:
        relation.write_csv(str(temp), header=True)


def link_or_copy(source: Path, target: Path) -> None:
    """A hard link when the output folder is on the same file system (instant; stored files are
    only ever replaced, never modified in place, so the output keeps its content), else a byte copy."""
    with atomic_path(target) as temp:
        try:
            os.link(source, temp)
        except OSError:
            shutil.copyfile(source, temp)


CONCATENATED_MIN_GROUP_ROWS = 1_000  # fewer rows per row group on average: regrouped instead


def publish_concatenated(store: Store, asset: str, target: Path, uncompressed: Iterable[str] = ()) -> int:
    """Publish every file of an asset (e.g. one per crawl day) as one Parquet output, rows in
    stored order: a link of the only file; else their column chunks copied into one file
    (storage.parquet_concat: no page decoded or encoded); else, when they cannot be put together
    that way (their Parquet schemas differ, e.g. in nullability, or their row groups are tiny),
    the files' batches streamed into one."""
    from . import parquet_concat

    files = store.published_files(asset)
    if len(files) == 1:
        link_or_copy(files[0], target)
        return pq.ParquetFile(target).metadata.num_rows
    params = store.params(asset)
    schema = pq.read_schema(files[0]).remove_metadata()
    concat = parquet_concat.plan(files, CONCATENATED_MIN_GROUP_ROWS)
    if concat is not None:
        with atomic_path(target) as temp:
            return parquet_concat.write(concat, temp, with_params(schema, params))

    def batches():
        for path in files:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=8_192):
                # one schema before they are put together (a part may differ in nullability)
                yield batch if batch.schema.equals(schema) else batch.cast(schema)

    # regrouped like the stages' own files (Spark's parts of deduped_documents hold page text)
    return write_batches(target, schema, row_groups(batches()), params, use_dictionary=False, uncompressed=uncompressed)


# This process' in-memory DuckDB databases, one per spill folder and memory limit: opening a
# database costs tens of milliseconds and a command opens dozens of connections, while a
# connection to an open database (a cursor) costs nothing. Keyed by the process id too, so that a
# forked child never uses its parent's database.
_databases: dict[tuple[int, str, str], tuple[duckdb.DuckDBPyConnection, set[str]]] = {}
_databases_lock = threading.Lock()
_DATABASES_KEPT = 8  # the oldest beyond these is let go (freed with its last connection)


def connect(store: Store | None = None) -> duckdb.DuckDBPyConnection:
    """A private DuckDB connection: its own temporary tables, views and session settings (set
    with SET SESSION: a plain SET of a global option changes every connection of the storage
    root), in memory (never a shared database file), in UTC, rows in any order unless it asks,
    spilling joins and sorts into the storage root's .duckdb_tmp beyond the memory limit
    (WEBDEDUP_DUCKDB_MEMORY, default DUCKDB_MEMORY_LIMIT)."""
    limit = os.environ.get("WEBDEDUP_DUCKDB_MEMORY", DUCKDB_MEMORY_LIMIT)
    spill = store.root / ".duckdb_tmp" if store is not None else None
    key = (os.getpid(), str(spill or ""), limit)
    if spill is not None:
        spill.mkdir(parents=True, exist_ok=True)  # again each time: a killed command's leftovers are removed
    with _databases_lock:
        if key not in _databases:
            database = duckdb.connect(":memory:")
            database.execute("SET GLOBAL TimeZone = 'UTC'")
            # a stage that needs its rows in order says so for its own connection (SET SESSION)
            database.execute("SET GLOBAL preserve_insertion_order = false")
            database.execute(f"SET memory_limit = '{limit}'")
            if spill is not None:
                database.execute(f"SET temp_directory = '{spill}'")
            while len(_databases) >= _DATABASES_KEPT:  # not closed: that would close its connections in use
                _databases.pop(next(iter(_databases)))
            _databases[key] = (database, set())
        database, registered = _databases[key]
        con = database.cursor()
        objects.register(con, registered)  # input in object storage is read in place
    return con


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def scalar(con: duckdb.DuckDBPyConnection, sql: str) -> Any:
    """First column of the first row of a query."""
    return con.execute(sql).fetchall()[0][0]
