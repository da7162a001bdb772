"""Parquet files of one schema put together as one file without decoding a page.

A Parquet file is its column chunks, then a footer (FileMetaData, Thrift compact protocol) that
locates them by absolute byte offsets. Concatenating files is therefore a byte copy of each file's
column chunks plus one footer listing every row group, each with its offsets moved by where its
file's bytes landed. Publishing a day-partitioned asset as one file (fingerprinted.parquet: every
page's signature) then costs a copy instead of decoding and encoding every row.

Only what this needs of the format is interpreted; every other footer field is carried over as
read (the codec below round-trips a footer byte for byte). Files this cannot concatenate safely
(different Parquet schemas, page indexes or bloom filters, whose locations would need rewriting
too, encryption, column chunks in other files) are refused with None: the caller re-encodes.
"""

from __future__ import annotations

import errno
import io
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

MAGIC = b"PAR1"

# compact protocol types
STOP, TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(13)

# field ids (parquet.thrift)
FMD_SCHEMA, FMD_NUM_ROWS, FMD_ROW_GROUPS, FMD_KEY_VALUE, FMD_COLUMN_ORDERS = 2, 3, 4, 5, 7
FMD_ENCRYPTION = (8, 9)
RG_COLUMNS, RG_FILE_OFFSET, RG_ORDINAL = 1, 5, 7
CC_FILE_PATH, CC_FILE_OFFSET, CC_META = 1, 2, 3
CC_PAGE_INDEX = (4, 5, 6, 7)  # offset index and column index: absolute offsets of their own
CC_ENCRYPTION = (8, 9)
CMD_PAGE_OFFSETS = (9, 10, 11)  # data, index and dictionary page offsets
CMD_BLOOM = (14, 15)


class ThriftError(ValueError):
    """A footer this codec cannot read."""


# ---- Thrift compact protocol: a struct is a list of (field id, type, value) ----------------------


def read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise ThriftError("footer ends inside a number")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ThriftError("footer holds a number longer than 64 bits")


def _unzigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def _read_value(buf: memoryview, pos: int, ctype: int, depth: int):
    if depth > 32:
        raise ThriftError("footer nests deeper than any Parquet footer")
    if ctype in (TRUE, FALSE):  # a boolean inside a list: one byte
        return buf[pos] == TRUE, pos + 1
    if ctype == BYTE:
        return struct.unpack_from("b", buf, pos)[0], pos + 1
    if ctype in (I16, I32, I64):
        raw, pos = read_varint(buf, pos)
        return _unzigzag(raw), pos
    if ctype == DOUBLE:
        return struct.unpack_from("<d", buf, pos)[0], pos + 8
    if ctype == BINARY:
        size, pos = read_varint(buf, pos)
        if pos + size > len(buf):
            raise ThriftError("footer ends inside a string")
        return bytes(buf[pos : pos + size]), pos + size
    if ctype in (LIST, SET):
        header = buf[pos]
        pos += 1
        size, element = header >> 4, header & 0x0F
        if size == 15:
            size, pos = read_varint(buf, pos)
        items = []
        for _ in range(size):
            item, pos = _read_value(buf, pos, element, depth + 1)
            items.append(item)
        return (element, items), pos
    if ctype == MAP:
        size, pos = read_varint(buf, pos)
        if not size:
            return (0, 0, []), pos
        types = buf[pos]
        pos += 1
        key_type, value_type = types >> 4, types & 0x0F
        pairs = []
        for _ in range(size):
            key, pos = _read_value(buf, pos, key_type, depth + 1)
            value, pos = _read_value(buf, pos, value_type, depth + 1)
            pairs.append((key, value))
        return (key_type, value_type, pairs), pos
    if ctype == STRUCT:
        return read_struct(buf, pos, depth + 1)
    raise ThriftError(f"footer holds an unknown Thrift type {ctype}")


def read_struct(buf: memoryview, pos: int, depth: int = 0) -> tuple[list, int]:
    fields = []
    last = 0
    while True:
        if pos >= len(buf):
            raise ThriftError("footer ends inside a structure")
        header = buf[pos]
        pos += 1
        if header == STOP:
            return fields, pos
        ctype, delta = header & 0x0F, header >> 4
        if delta:
            field = last + delta
        else:
            raw, pos = read_varint(buf, pos)
            field = _unzigzag(raw)
        if ctype in (TRUE, FALSE):
            value = ctype == TRUE
        else:
            value, pos = _read_value(buf, pos, ctype, depth)
        fields.append((field, ctype, value))
        last = field


def write_varint(out: bytearray, value: int) -> None:
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return


def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def _write_value(out: bytearray, ctype: int, value) -> None:
    if ctype in (TRUE, FALSE):
        out.append(TRUE if value else FALSE)
    elif ctype == BYTE:
        out += struct.pack("b", value)
    elif ctype in (I16, I32, I64):
        write_varint(out, _zigzag(value) & 0xFFFFFFFFFFFFFFFF)
    elif ctype == DOUBLE:
        out += struct.pack("<d", value)
    elif ctype == BINARY:
        write_varint(out, len(value))
        out += value
    elif ctype in (LIST, SET):
        element, items = value
        if len(items) < 15:
            out.append(len(items) << 4 | element)
        else:
            out.append(0xF0 | element)
            write_varint(out, len(items))
        for item in items:
            _write_value(out, element, item)
    elif ctype == MAP:
        key_type, value_type, pairs = value
        write_varint(out, len(pairs))
        if pairs:
            out.append(key_type << 4 | value_type)
            for key, item in pairs:
                _write_value(out, key_type, key)
                _write_value(out, value_type, item)
    elif ctype == STRUCT:
        write_struct(out, value)
    else:
        raise ThriftError(f"unknown Thrift type {ctype}")


def write_struct(out: bytearray, fields: list) -> None:
    last = 0
    for field, ctype, value in fields:
        wire_type = (TRUE if value else FALSE) if ctype in (TRUE, FALSE) else ctype
        delta = field - last
        if 0 < delta <= 15:
            out.append(delta << 4 | wire_type)
        else:
            out.append(wire_type)
            write_varint(out, _zigzag(field) & 0xFFFF)
        if ctype not in (TRUE, FALSE):
            _write_value(out, ctype, value)
        last = field
    out.append(STOP)


def decode_footer(data: bytes) -> list:
    """FileMetaData bytes -> fields (field id, type, value), structures nested the same way."""
    try:
        fields, end = read_struct(memoryview(data), 0)
    except (IndexError, struct.error) as err:  # a length or header running past the end
        raise ThriftError(f"footer ends too early ({err})") from None
    if end != len(data):
        raise ThriftError(f"footer has {len(data) - end} bytes after its FileMetaData")
    return fields


def encode_footer(fields: list) -> bytes:
    out = bytearray()
    write_struct(out, fields)
    return bytes(out)


# ---- concatenation -------------------------------------------------------------------------------


def thrift_field(fields: list, field: int):
    for f, _, value in fields:
        if f == field:
            return value
    return None


def _has(fields: list, ids) -> bool:
    return any(f in ids for f, _, _ in fields)


def with_thrift_field(fields: list, field: int, ctype: int, value) -> list:
    """fields with `field` set to value (added in id order when absent)."""
    out = [(f, t, v) for f, t, v in fields if f != field]
    out.append((field, ctype, value))
    return sorted(out, key=lambda item: item[0])


def _shift(fields: list, ids, by: int) -> list:
    """Offsets among `ids` moved by `by`; 0 is left alone (no offset: a file's data starts at 4)."""
    return [(f, t, v + by if f in ids and t == I64 and v > 0 else v) for f, t, v in fields]


def footer_of(data: bytes) -> list:
    """FileMetaData fields of a whole Parquet file held in memory."""
    length = struct.unpack("<I", data[-8:-4])[0]
    return decode_footer(data[-8 - length : -8])


def read_footer(path: Path) -> tuple[list, int]:
    """(FileMetaData fields, byte offset where the footer starts) of a Parquet file."""
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        if size < 12 or handle.read(4) != MAGIC:
            raise ThriftError(f"{path} is not a Parquet file")
        handle.seek(size - 8)
        tail = handle.read(8)
        if tail[4:] != MAGIC:
            raise ThriftError(f"{path} is not a Parquet file (no footer magic)")
        length = struct.unpack("<I", tail[:4])[0]
        start = size - 8 - length
        if start < 4:
            raise ThriftError(f"{path}: footer length {length} does not fit the file")
        handle.seek(start)
        return decode_footer(handle.read(length)), start


def _movable_row_groups(fields: list) -> list | None:
    """The row groups of a file, or None when one of them has something this does not move."""
    if _has(fields, FMD_ENCRYPTION):
        return None
    groups = (thrift_field(fields, FMD_ROW_GROUPS) or (STRUCT, []))[1]
    for group in groups:
        for chunk in (thrift_field(group, RG_COLUMNS) or (STRUCT, []))[1]:
            if _has(chunk, CC_PAGE_INDEX) or _has(chunk, CC_ENCRYPTION) or thrift_field(chunk, CC_FILE_PATH):
                return None
            meta = thrift_field(chunk, CC_META)
            if meta is None or _has(meta, CMD_BLOOM):
                return None
    return groups


def moved_chunk(chunk: list, by: int) -> list:
    """A ColumnChunk whose bytes moved by `by` in the file: its offsets moved with them."""
    chunk = _shift(chunk, (CC_FILE_OFFSET,), by)
    return [(f, t, _shift(v, CMD_PAGE_OFFSETS, by) if f == CC_META else v) for f, t, v in chunk]


def _moved(group: list, by: int, ordinal: int | None) -> list:
    chunks = [moved_chunk(chunk, by) for chunk in thrift_field(group, RG_COLUMNS)[1]]
    moved = with_thrift_field(_shift(group, (RG_FILE_OFFSET,), by), RG_COLUMNS, LIST, (STRUCT, chunks))
    if ordinal is None:
        return [(f, t, v) for f, t, v in moved if f != RG_ORDINAL]
    return with_thrift_field(moved, RG_ORDINAL, I16, ordinal) if _has(group, (RG_ORDINAL,)) else moved


def _key_values(schema: pa.Schema) -> tuple[int, list]:
    """The key-value metadata pyarrow writes for `schema` (its own ARROW:schema included): taken
    from the footer of an empty file written with it, so the output reads back as that schema."""
    sink = io.BytesIO()
    pq.ParquetWriter(sink, schema).close()
    return thrift_field(footer_of(sink.getvalue()), FMD_KEY_VALUE) or (STRUCT, [])


@dataclass(frozen=True)
class Plan:
    """Files that can be concatenated: their footers, their row groups and their rows in all."""

    footers: list  # (path, FileMetaData fields, where its footer starts)
    row_groups: list  # per file, its row groups
    rows: int


def plan(files: list[Path], min_rows_per_group: int = 0) -> Plan | None:
    """A Plan for concatenating `files`, or None when they cannot be concatenated this way (see
    the module docstring) or their row groups hold fewer than min_rows_per_group rows on average
    (a file of many tiny row groups reads slowly: the caller regroups them instead)."""
    footers = []
    for path in files:
        try:
            footers.append((path, *read_footer(path)))
        except (OSError, ThriftError):
            return None
    if not footers:
        return None
    first = footers[0][1]
    groups_per_file = []
    for _, fields, _ in footers:
        if thrift_field(fields, FMD_SCHEMA) != thrift_field(first, FMD_SCHEMA):
            return None
        if thrift_field(fields, FMD_COLUMN_ORDERS) != thrift_field(first, FMD_COLUMN_ORDERS):
            return None
        groups = _movable_row_groups(fields)
        if groups is None:
            return None
        groups_per_file.append(groups)
    rows = sum(thrift_field(fields, FMD_NUM_ROWS) or 0 for _, fields, _ in footers)
    count = sum(len(groups) for groups in groups_per_file)
    if count and rows / count < min_rows_per_group:
        return None
    return Plan(footers, groups_per_file, rows)


def write_all(out, data) -> None:
    """All of `data` written to the unbuffered file `out` (os.write may write part of it)."""
    view = memoryview(data)
    while view:
        view = view[out.write(view) :]


def copy_range(out, source_fd: int, offset: int, count: int) -> None:
    """`count` bytes of the file `source_fd` from `offset` appended to the unbuffered file `out`,
    copied by the kernel (sendfile): no user-space buffer, whose fresh memory can cost more than the
    copy itself. Falls back to read and write where
    sendfile cannot copy between files."""
    while count:
        try:
            copied = os.sendfile(out.fileno(), source_fd, offset, min(count, 1 << 30))
        except (AttributeError, OSError) as error:
            if isinstance(error, OSError) and error.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
            copied = len(data := os.pread(source_fd, min(count, 1 << 24), offset))
            write_all(out, data)
        if not copied:
            raise OSError(f"the source of a copy ended {count} bytes early (file changed while it was read?)")
        offset, count = offset + copied, count - copied


def write(concat: Plan, target: Path, schema: pa.Schema) -> int:
    """Write the planned files (in order) as the one Parquet file `target` with `schema` (its
    metadata becomes the file's key-value metadata) by copying their column chunks; returns the
    rows written. The caller writes `target` atomically."""
    first = concat.footers[0][1]
    count = sum(len(groups) for groups in concat.row_groups)
    ordinals = count <= 32_767  # RowGroup.ordinal is an i16
    merged, position, ordinal = [], len(MAGIC), 0
    for (_, _, data_end), groups in zip(concat.footers, concat.row_groups, strict=True):
        by = position - len(MAGIC)  # this file's bytes start at `position` instead of 4
        for group in groups:
            merged.append(_moved(group, by, ordinal if ordinals else None))
            ordinal += 1
        position += data_end - len(MAGIC)
    footer = with_thrift_field(first, FMD_NUM_ROWS, I64, concat.rows)
    footer = with_thrift_field(footer, FMD_ROW_GROUPS, LIST, (STRUCT, merged))
    footer = with_thrift_field(footer, FMD_KEY_VALUE, LIST, _key_values(schema))
    encoded = encode_footer(footer)
    with open(target, "wb", buffering=0) as out:  # unbuffered: sendfile writes to the same descriptor
        write_all(out, MAGIC)
        for path, _, data_end in concat.footers:
            with open(path, "rb") as source:
                copy_range(out, source.fileno(), len(MAGIC), data_end - len(MAGIC))
        write_all(out, encoded)
        write_all(out, struct.pack("<I", len(encoded)))
        write_all(out, MAGIC)
    if pq.ParquetFile(target).metadata.num_rows != concat.rows:  # read back through pyarrow's own parser
        raise OSError(f"{target}: the concatenated file does not read back as {concat.rows} rows")
    return concat.rows
