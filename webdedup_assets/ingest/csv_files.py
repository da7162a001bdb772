"""CSV input files read as text: UTF-8 checked, the header read and checked, and the line of a
malformed record found (what DuckDB's reader reports without a line or a file)."""

from __future__ import annotations

import codecs
import csv
from pathlib import Path

from ..errors import WebdedupError
from ..storage.objects import file_size, open_input, open_text
from .contract import REQUIRED_COLUMNS
from .inputs import format_suffix

MAX_LINE_BYTES = 1 << 30  # a single CSV record may hold a very large page


def check_utf8(path: Path) -> None:
    """Fail on the first invalid UTF-8 byte, naming the file, byte offset and line."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    offset = 0
    lines = 1
    with open_input(path) as handle:
        while chunk := handle.read(1 << 22):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as err:
                if offset == 0 and chunk[:4] == b"PAR1":  # a Parquet file given as CSV (--format csv)
                    raise WebdedupError(f"{path} is a Parquet file, not CSV: give --format parquet") from None
                bad = offset + err.start
                line = lines + chunk[: err.start].count(b"\n")
                raise WebdedupError(
                    f"{path}: invalid UTF-8 at byte offset {bad} (line {line}): "
                    f"byte 0x{chunk[err.start]:02x}; convert the file to UTF-8 (for example "
                    f"`iconv -f latin1 -t utf-8`)"
                ) from None
            offset += len(chunk)
            lines += chunk.count(b"\n")
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise WebdedupError(f"{path}: invalid UTF-8: the file ends inside a multi-byte character") from None


CSV_DELIMITERS = {".tsv": "\t"}  # every other CSV input is comma-separated


def delimiter(path: Path) -> str:
    return CSV_DELIMITERS.get(format_suffix(path), ",")


def _csv_reader(handle, path: Path):
    csv.field_size_limit(max(csv.field_size_limit(), MAX_LINE_BYTES))
    return csv.reader(handle, delimiter=delimiter(path), quotechar='"', doublequote=True, strict=True)


def csv_header(path: Path) -> list[str]:
    """The column names of a CSV file, checked: the file is not empty, and no name is empty or
    repeated. Reads the first record only."""
    if file_size(path) == 0:
        raise WebdedupError(
            f"{path}: the file is empty (0 bytes); a CSV input needs at least its header line "
            f"({','.join(REQUIRED_COLUMNS)})"
        )
    with open_text(path) as handle:
        reader = _csv_reader(handle, path)
        try:
            header = next(reader, [])
        except csv.Error as err:
            raise WebdedupError(f"{path}: line 1: cannot read the header: {csv_problem(err)}") from None
        except UnicodeDecodeError:  # in the first block read: named with its offset and line
            check_utf8(path)
            raise
    if not any(name.strip() for name in header):
        raise WebdedupError(f"{path}: line 1: the header line is empty; the first line must name the columns")
    if len(header) == 1:
        other = next((d for d in (";", "\t", "|", ",") if d in header[0] and d != delimiter(path)), None)
        if other is not None:
            shown = {"\t": "tabs", ";": "semicolons", "|": "'|'", ",": "commas"}[other]
            wanted = "tab-separated (.tsv)" if delimiter(path) == "\t" else "comma-separated (tab for .tsv)"
            raise WebdedupError(
                f"{path}: line 1: the header is one column {header[0][:80]!r}, separated by {shown}; "
                f"webdedup reads {wanted} files"
            )
    empty = [str(i + 1) for i, name in enumerate(header) if not name.strip()]
    if empty:
        raise WebdedupError(f"{path}: line 1: column(s) {', '.join(empty)} of the header have no name")
    dupes = sorted({name for name in header if header.count(name) > 1})
    if dupes:
        where = "; ".join(
            f"{d!r} in columns {', '.join(str(i + 1) for i, n in enumerate(header) if n == d)}" for d in dupes
        )
        raise WebdedupError(f"{path}: line 1: duplicate column name(s) in the header: {where}")
    return header


def csv_problem(err: csv.Error) -> str:
    text = str(err)
    if "unexpected end of data" in text:
        return "unterminated quoted field: the quote opened in this record is never closed"
    if "expected after" in text:
        return f'text after a closing quote ({text}); a quote inside a quoted field is written twice ("")'
    return text


def locate_csv_error(path: Path) -> str | None:
    """The first structural problem of a CSV file, with its physical line: a record whose
    number of fields differs from the header's, or bad quoting. None if there is none.

    Python's csv module, streaming: only used to explain a failed read, never on the fast path."""
    with open_text(path) as handle:
        reader = _csv_reader(handle, path)
        width, start = None, 1
        try:
            for row in reader:
                if width is None:
                    width = len(row)
                elif row and len(row) != width:  # blank lines are skipped, as DuckDB does
                    return f"line {start}: {len(row)} field(s), but the header has {width}"
                start = reader.line_num + 1
        except csv.Error as err:
            return f"line {start}: {csv_problem(err)}"
    return None
