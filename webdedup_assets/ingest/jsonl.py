"""JSON Lines input: one JSON object per line, plain or compressed (.gz, .zst by the file's suffix).

DuckDB's read_json reads the records (engine.reading); this module only looks at a file's lines
itself where DuckDB cannot answer: whether a shard holds any record (an empty shard is no error),
and, after a failed read, which line is malformed (DuckDB's own line numbers are not reliable).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

from ..errors import WebdedupError
from ..storage.objects import open_stream

JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of a file, decompressed as its suffix says; streamed."""
    with open_stream(path) as stream:
        yield from enumerate(io.BufferedReader(stream, buffer_size=1 << 20), start=1)


def has_records(path: Path) -> bool:
    """Whether the file holds a line that is not blank (a stream that cannot be decompressed is
    left to the read, whose error names it)."""
    try:
        return any(line.strip() for _, line in _lines(path))
    except OSError:
        return True


def require_whole_stream(path: Path) -> None:
    """A .zst file decompressed to its end once: DuckDB reads a zstd stream that is cut short (a
    truncated download or copy) as if the file ended there, and its records after the cut were lost
    without a word."""
    try:
        with open_stream(path) as stream:
            while stream.read(1 << 24):
                pass
    except OSError as err:
        raise WebdedupError(f"{path}: cannot decompress: {err}") from None  # as DuckDB names a cut .gz


class _RepeatedKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """An object's members, refusing a key given twice (DuckDB does; Python keeps the last)."""
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise _RepeatedKey(key)
        seen[key] = value
    return seen


def first_problem(path: Path) -> str | None:
    """The first line that is not one JSON object, as `line N: why`; None when every line is one.

    Blank lines are skipped, as DuckDB skips them. Streams: only used to explain a failed read."""
    try:
        for number, line in _lines(path):
            if not line.strip():
                continue
            try:
                value = json.loads(line, object_pairs_hook=_unique_keys)
            except UnicodeDecodeError as err:
                return f"line {number}: invalid UTF-8 at byte {err.start} of the line"
            except json.JSONDecodeError as err:
                return f"line {number}: malformed JSON: {err.msg.removesuffix(' at')} at column {err.colno}"
            except _RepeatedKey as err:
                return f"line {number}: the key {err.key!r} appears twice in one object"
            try:  # Python reads a lone UTF-16 surrogate (\ud800) in a string; DuckDB refuses it
                json.dumps(value, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError as err:
                return (
                    f"line {number}: a lone UTF-16 surrogate ({err.object[err.start]!r}) in a string: not valid Unicode"
                )
            if not isinstance(value, dict):
                kind = JSON_KINDS.get(type(value), "value")
                return f"line {number}: a JSON {kind}, not an object; each line must be one object"
    except OSError as err:  # a corrupt or truncated gzip or zstd stream
        return f"cannot decompress: {err}"
    return None
