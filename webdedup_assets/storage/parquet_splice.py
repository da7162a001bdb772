"""A Parquet file rewritten without some of its rows, copying the pages of its wide column that
keep all their rows.

An incremental update replaces a few thousand representatives of deduped_documents (the text of
every representative of the corpus), spread over every row group. Re-encoding the file spends most
of its time compressing text that did not change. Here the narrow columns of each row group are
re-encoded (they are small) and the wide column (the body) is rebuilt page by page: a page whose
rows are all kept is copied as it is, a page that lost rows is decoded and encoded again with
the rows it keeps, a page that lost all of them is left out. That is proportional to the pages
touched when the wide column is written in small pages, in PLAIN encoding, without dictionary or
statistics (`layout`: about a dozen pages of web text per Parquet page, slightly more CPU and size
when written).

Only PLAIN pages of a flat BYTE_ARRAY column (Data Page V1, zstd or uncompressed) are spliced;
any other row group (a file written with another layout, e.g. before this one) is re-encoded
whole, so the output is always the rows asked for. Page headers and footers are read and written
with the Thrift compact codec of storage.parquet_concat.
"""

from __future__ import annotations

import io
import os
import struct
import threading
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..threads import ordered_map, thread_count
from .parquet_concat import (
    CC_FILE_OFFSET,
    CC_META,
    FMD_NUM_ROWS,
    FMD_ROW_GROUPS,
    I16,
    I32,
    I64,
    LIST,
    MAGIC,
    RG_COLUMNS,
    STRUCT,
    ThriftError,
    copy_range,
    footer_of,
    moved_chunk,
    read_footer,
    read_struct,
    read_varint,
    thrift_field,
    with_thrift_field,
    write_all,
    write_struct,
    write_varint,
)
from .store import writer_options

PAGE_BYTES = 32 << 10  # the wide column's pages: a few documents each
WRITE_BATCH_ROWS = 8  # pyarrow closes a page only between batches of this many rows
UNCOMPRESSED, ZSTD = 0, 6  # CompressionCodec
DATA_PAGE, PLAIN, RLE, BYTE_ARRAY = 0, 0, 3, 6
# ColumnMetaData field ids (parquet.thrift; the others are in storage.parquet_concat)
CMD_TYPE, CMD_CODEC, CMD_NUM_VALUES, CMD_UNCOMPRESSED, CMD_COMPRESSED = 1, 4, 5, 6, 7
CMD_DATA_PAGE, CMD_DICT_PAGE = 9, 11
CMD_KEPT = (1, 2, 3, 4, 8)  # type, encodings, path, codec, key-value metadata: carried over


def layout(schema: pa.Schema, wide: str, distinct: Iterable[str] = ()) -> dict[str, Any]:
    """pyarrow writer options of a file whose `wide` column can be spliced (see the module
    docstring). `distinct`: narrow columns whose values are nearly all different (ids, titles),
    written without a dictionary: pyarrow would build one per chunk and fall back to PLAIN
    anyway, so the dictionary only costs time and space."""
    narrow = [name for name in schema.names if name != wide]
    plain = set(distinct)
    return {
        **writer_options(schema, use_dictionary=[name for name in narrow if name not in plain]),
        "write_statistics": narrow,
        "data_page_size": PAGE_BYTES,
        "write_batch_size": WRITE_BATCH_ROWS,
    }


@dataclass
class Keep:
    """Old row group `group`, only its rows `rows` (row numbers within the group, ascending)."""

    group: int
    rows: np.ndarray


@dataclass
class Encode:
    """A row group of new rows (written by pyarrow)."""

    table: pa.Table


@dataclass
class SpliceFigures:
    """What a rewrite copied and encoded again (pages of the wide column, row groups)."""

    pages_copied: int = 0
    pages_encoded: int = 0
    groups_spliced: int = 0
    groups_encoded: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with exactly `schema`'s columns and types (a column it lacks: nulls)."""
    return pa.Table.from_arrays([_conformed(table, f) for f in schema], schema=schema)


def _conformed(table: pa.Table, field: pa.Field) -> pa.ChunkedArray:
    if field.name not in table.column_names:
        return pa.chunked_array([pa.nulls(table.num_rows, field.type)])
    column = table.column(field.name)
    if column.type == field.type:
        return column
    # cast whole: pyarrow casts a slice of a struct with a null-typed child (a field always null,
    # as JSON Lines often have) into an invalid array, its child losing the slice's offset
    return column.combine_chunks().cast(field.type)


def rewrite(
    source: Path | None,
    target: Path,
    schema: pa.Schema,
    wide: str,
    parts: Iterable[Keep | Encode],
    options: dict,
    threads: int | None = None,
) -> tuple[int, SpliceFigures]:
    """Write `target` (the caller makes it atomic): one row group per part, in order, with
    `schema` (its metadata becomes the file's) and writer `options` (`layout`). Keep parts of a
    file of another schema or layout are re-encoded. Row groups are prepared (pages planned and
    encoded) on `threads` threads and written in order. Returns the rows written and what was
    copied. Without a source (Encode parts only) this writes a new file with its row groups
    encoded on all cores, where one pyarrow writer encodes them one after the other."""
    plain = schema.remove_metadata()
    same_schema = source is not None and pq.ParquetFile(source).schema_arrow.remove_metadata().equals(plain)
    old_groups = thrift_field(read_footer(source)[0], FMD_ROW_GROUPS)[1] if same_schema else None
    wide_index = schema.names.index(wide)
    narrow_schema = pa.schema([f for f in plain if f.name != wide])
    # the narrow columns as pyarrow writes them by default: small pages are for the wide one only
    narrow_options = {k: v for k, v in options.items() if k not in ("data_page_size", "write_batch_size")}
    local = threading.local()  # a reader per thread: pyarrow's ParquetFile is not shared across threads
    figures = SpliceFigures()

    def reader() -> pq.ParquetFile:
        if not hasattr(local, "file"):
            local.file = pq.ParquetFile(source)
        return local.file

    def prepare(part: Keep | Encode) -> _Prepared | None:
        if isinstance(part, Keep) and not len(part.rows):
            return None
        if isinstance(part, Keep) and old_groups is not None:
            spliced = _prepare_splice(reader(), fd, old_groups, part, wide_index, narrow_schema, narrow_options)
            if spliced is not None:
                return spliced
        table = part.table if isinstance(part, Encode) else reader().read_row_group(part.group).take(part.rows)
        return _Prepared(*_in_memory(conform(table, plain), options), table.num_rows)

    footer = _empty_footer(schema, options)
    groups, rows = [], 0
    fd = os.open(source, os.O_RDONLY) if source is not None else -1
    try:
        with open(target, "wb", buffering=0) as out:  # unbuffered: copy_range writes to its descriptor
            write_all(out, MAGIC)
            for prepared in ordered_map(prepare, parts, thread_count(threads)):
                if prepared is None:
                    continue
                groups.append(_row_group(prepared.write(out, fd, wide_index, figures), prepared.rows, len(groups)))
                rows += prepared.rows
            footer = with_thrift_field(footer, FMD_NUM_ROWS, I64, rows)
            footer = with_thrift_field(footer, FMD_ROW_GROUPS, LIST, (STRUCT, groups))
            encoded_footer = bytearray()
            write_struct(encoded_footer, footer)
            write_all(out, encoded_footer)
            write_all(out, struct.pack("<I", len(encoded_footer)))
            write_all(out, MAGIC)
    finally:
        if fd >= 0:
            os.close(fd)
    if pq.ParquetFile(target).metadata.num_rows != rows:  # read back through pyarrow's own parser
        raise OSError(f"{target}: the rewritten file does not read back as {rows} rows")
    return rows, figures


@dataclass
class _Prepared:
    """A row group ready to be written: column chunks encoded in memory (all of them, or the narrow
    ones with the wide column's page plan over the old file)."""

    data: bytes
    chunks: list
    rows: int
    plan: list | None = None
    wide_meta: list | None = None

    def write(self, out, source_fd: int, wide_index: int, figures: SpliceFigures) -> list:
        moved = _copy_chunks(self.data, self.chunks, out)
        if self.plan is None:
            figures.groups_encoded += 1
            return moved
        figures.groups_spliced += 1
        start, uncompressed = out.tell(), 0
        pending = bytearray()  # encoded pages in a row, written at once (a system call each costs more than the copy)
        for piece in self.plan:
            if isinstance(piece, _Run):
                write_all(out, pending)
                pending.clear()
                copy_range(out, source_fd, piece.start, piece.end - piece.start)
                uncompressed += piece.uncompressed
                figures.pages_copied += piece.pages
            else:
                pending += piece.header
                pending += piece.payload
                uncompressed += len(piece.header) + piece.raw_size
                figures.pages_encoded += 1
        write_all(out, pending)
        meta = [(f, t, v) for f, t, v in self.wide_meta if f in CMD_KEPT]
        meta += [(CMD_NUM_VALUES, I64, self.rows), (CMD_UNCOMPRESSED, I64, uncompressed)]
        meta += [(CMD_COMPRESSED, I64, out.tell() - start), (CMD_DATA_PAGE, I64, start)]
        moved.insert(wide_index, [(CC_FILE_OFFSET, I64, start), (CC_META, STRUCT, sorted(meta))])
        return moved


def _prepare_splice(
    old: pq.ParquetFile, fd: int, old_groups: list, part: Keep, wide_index: int, narrow_schema, narrow_options
) -> _Prepared | None:
    """One old row group's kept rows: the narrow columns encoded again, the wide column's page
    plan; None when its wide chunk cannot be spliced."""
    wide_meta = thrift_field(thrift_field(old_groups[part.group], RG_COLUMNS)[1][wide_index], CC_META)
    leaf = old.schema.column(wide_index)
    codec = thrift_field(wide_meta, CMD_CODEC)
    if (
        leaf.max_repetition_level
        or leaf.max_definition_level > 1
        or thrift_field(wide_meta, CMD_TYPE) != BYTE_ARRAY
        or thrift_field(wide_meta, CMD_DICT_PAGE)
        or codec not in (ZSTD, UNCOMPRESSED)
    ):
        return None
    chunk = (thrift_field(wide_meta, CMD_DATA_PAGE), thrift_field(wide_meta, CMD_COMPRESSED))
    group_rows = old.metadata.row_group(part.group).num_rows
    plan = _page_plan(fd, chunk, part.rows, group_rows, leaf.max_definition_level, codec)
    if plan is None:
        return None
    narrow = old.read_row_group(part.group, columns=narrow_schema.names).take(part.rows)
    data, chunks = _in_memory(conform(narrow, narrow_schema), narrow_options)
    return _Prepared(data, chunks, len(part.rows), plan, wide_meta)


def _empty_footer(schema: pa.Schema, options: dict) -> list:
    """The FileMetaData pyarrow writes for `schema` with no rows: schema, key-value metadata
    (ARROW:schema and the parameters), created_by, column orders."""
    sink = io.BytesIO()
    pq.ParquetWriter(sink, schema, **options).close()
    return footer_of(sink.getvalue())


def _in_memory(table: pa.Table, options: dict) -> tuple[bytes, list]:
    """`table` as a one-row-group Parquet file in memory: its bytes and its column chunks."""
    sink = io.BytesIO()
    with pq.ParquetWriter(sink, table.schema, **options) as writer:
        writer.write_table(table, row_group_size=max(1, table.num_rows))
    data = sink.getvalue()
    (group,) = thrift_field(footer_of(data), FMD_ROW_GROUPS)[1]
    return data, thrift_field(group, RG_COLUMNS)[1]


def _copy_chunks(data: bytes, chunks: list, out) -> list:
    """Column chunks of an in-memory file appended to `out`, their offsets moved to match."""
    moved = []
    for chunk in chunks:
        meta = thrift_field(chunk, CC_META)
        first = thrift_field(meta, CMD_DICT_PAGE) or thrift_field(meta, CMD_DATA_PAGE)
        by = out.tell() - first
        write_all(out, memoryview(data)[first : first + thrift_field(meta, CMD_COMPRESSED)])
        moved.append(moved_chunk(chunk, by))
    return moved


@dataclass
class _Run:
    """Consecutive pages copied as they are."""

    start: int  # offsets in the old file
    end: int
    uncompressed: int  # headers included, as ColumnMetaData counts
    pages: int


@dataclass
class _Page:
    """A page encoded again with the rows it keeps."""

    header: bytes
    payload: bytes
    raw_size: int


def _page_plan(fd: int, chunk: tuple[int, int], rows: np.ndarray, group_rows: int, max_def: int, codec: int):
    """The wide chunk's pages (`chunk`: offset and size in the file `fd`) as they will be written:
    runs of pages copied (_Run) and pages encoded again (_Page; a page that keeps no row is left
    out); None when a page is not a PLAIN Data Page V1 or the pages do not hold the group's rows.
    Only the page headers and the touched pages are read: the runs are copied file to file."""
    plan: list = []
    pos, chunk_end = chunk[0], chunk[0] + chunk[1]
    first_row = 0
    kept = rows.tolist()  # bisect on a list: a numpy call per page costs more than the page's work
    run: _Run | None = None  # the copy run being extended
    while pos < chunk_end:
        parsed = _page_header(fd, pos, chunk_end)
        if parsed is None:
            return None
        header, body = parsed
        page_type, raw_size, size = thrift_field(header, 1), thrift_field(header, 2), thrift_field(header, 3)
        data_header = thrift_field(header, 5)
        if page_type != DATA_PAGE or data_header is None or thrift_field(data_header, 2) != PLAIN:
            return None
        if max_def and thrift_field(data_header, 3) != RLE:
            return None
        count = thrift_field(data_header, 1)
        end = body + size
        if end > chunk_end:
            return None
        lo, hi = bisect_left(kept, first_row), bisect_left(kept, first_row + count)
        if hi - lo == count:
            if run is not None and run.end == pos:
                run.end, run.uncompressed, run.pages = end, run.uncompressed + (body - pos) + raw_size, run.pages + 1
            else:
                run = _Run(pos, end, (body - pos) + raw_size, 1)
                plan.append(run)
        else:
            run = None
            if hi > lo:
                values = _decode_page(os.pread(fd, size, body), raw_size, count, max_def, codec)
                plan.append(_encode_page([values[i - first_row] for i in kept[lo:hi]], max_def, codec))
        pos, first_row = end, first_row + count
    return plan if first_row == group_rows else None


def _page_header(fd: int, pos: int, chunk_end: int) -> tuple[list, int] | None:
    """The page header at `pos` and where its page's data begins; None when it does not parse.
    Read in a small window first (a header without statistics takes ~20 bytes), larger if needed."""
    window = 256
    while True:
        head = os.pread(fd, min(window, chunk_end - pos), pos)
        try:
            header, length = read_struct(memoryview(head), 0)
            return header, pos + length
        except (ThriftError, IndexError, struct.error):
            if len(head) < window or window >= 1 << 24:  # the whole rest of the chunk did not parse
                return None
            window *= 16


def _decode_page(payload: memoryview, raw_size: int, count: int, max_def: int, codec: int) -> list[bytes | None]:
    raw = pa.decompress(payload, raw_size, codec="zstd", asbytes=True) if codec == ZSTD else bytes(payload)
    pos = 0
    if max_def:
        (length,) = struct.unpack_from("<I", raw, 0)
        defined = _rle_bits(raw, 4, 4 + length, count)
        pos = 4 + length
    else:
        defined = [1] * count
    values: list[bytes | None] = []
    for is_defined in defined:
        if is_defined:
            (size,) = struct.unpack_from("<I", raw, pos)
            values.append(raw[pos + 4 : pos + 4 + size])
            pos += 4 + size
        else:
            values.append(None)
    return values


def _rle_bits(raw: bytes, pos: int, end: int, count: int) -> list[int]:
    """Levels of bit width 1 in the RLE / bit-packed hybrid encoding."""
    levels: list[int] = []
    view = memoryview(raw)
    while len(levels) < count and pos < end:
        header, pos = read_varint(view, pos)
        if header & 1:  # bit-packed: groups of 8 values, one byte each
            for byte in raw[pos : pos + (header >> 1)]:
                levels.extend((byte >> bit) & 1 for bit in range(8))
            pos += header >> 1
        else:
            levels.extend([raw[pos]] * (header >> 1))
            pos += 1
    return levels[:count]


def _encode_page(values: list[bytes | None], max_def: int, codec: int) -> _Page:
    body = bytearray()
    if max_def:
        levels = bytearray()
        i = 0
        while i < len(values):  # RLE runs of the definition level
            defined = values[i] is not None
            j = i
            while j < len(values) and (values[j] is not None) == defined:
                j += 1
            write_varint(levels, (j - i) << 1)
            levels.append(1 if defined else 0)
            i = j
        body += struct.pack("<I", len(levels)) + levels
    for value in values:
        if value is not None:
            body += struct.pack("<I", len(value))
            body += value
    payload = pa.compress(body, codec="zstd", asbytes=True) if codec == ZSTD else bytes(body)
    data_header = [(1, I32, len(values)), (2, I32, PLAIN), (3, I32, RLE), (4, I32, RLE)]
    header = bytearray()
    write_struct(header, [(1, I32, DATA_PAGE), (2, I32, len(body)), (3, I32, len(payload)), (5, STRUCT, data_header)])
    return _Page(bytes(header), payload, len(body))


def _row_group(chunks: list, rows: int, ordinal: int) -> list:
    metas = [thrift_field(chunk, CC_META) for chunk in chunks]
    first = min(thrift_field(m, CMD_DICT_PAGE) or thrift_field(m, CMD_DATA_PAGE) for m in metas)
    group = [
        (1, LIST, (STRUCT, chunks)),
        (2, I64, sum(thrift_field(m, CMD_UNCOMPRESSED) for m in metas)),
        (3, I64, rows),
        (5, I64, first),
        (6, I64, sum(thrift_field(m, CMD_COMPRESSED) for m in metas)),
    ]
    return group + [(7, I16, ordinal)] if ordinal <= 32_767 else group
