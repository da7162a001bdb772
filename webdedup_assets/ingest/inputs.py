"""Input files: resolve a path, folder or glob to files, tell each file's format, read its declared day."""

from __future__ import annotations

import glob as globlib
import re
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import WebdedupError
from ..storage.fileio import file_sha256, file_sha256s
from ..storage.objects import ObjectPath, is_uri, list_objects

FORMATS = ("auto", "csv", "parquet", "jsonl", "warc", "commoncrawl")
WARC_FORMATS = ("warc", "commoncrawl")  # converted to a staged Parquet before the documents stage reads them
SUFFIX_FORMATS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".jsonl.gz": "jsonl",
    ".jsonl.zst": "jsonl",
    ".json.gz": "jsonl",  # Dolma's shards: one object per line, compressed
    ".json.zst": "jsonl",
    ".warc": "warc",
    ".warc.gz": "warc",
}
COMPOUND_SUFFIXES = tuple(s for s in SUFFIX_FORMATS if s.count(".") > 1)
DAY_IN_NAME = re.compile(r"(\d{4}-\d{2}-\d{2})")


def format_suffix(path: Path | ObjectPath) -> str:
    """The format-bearing suffix: `.warc.gz` or `.jsonl.zst` counts as one."""
    name = path.name.lower()
    return next((s for s in COMPOUND_SUFFIXES if name.endswith(s)), path.suffix.lower())


@dataclass(frozen=True)
class InputFile:
    path: Path | ObjectPath  # a local file (resolved), or an object in object storage
    format: str
    sha256: str
    bytes: int
    stored: bool = False  # already in the stored form (staged WARC, held days): read without the column mapping

    def describe(self) -> dict[str, Any]:
        return {"path": str(self.path), "format": self.format, "sha256": self.sha256, "bytes": self.bytes}


_hashing: dict[tuple[str, str], threading.Thread] = {}  # hash_in_background's threads, by input
_hashing_lock = threading.Lock()


def hash_in_background(input_path: str, input_format: str = "auto") -> None:
    """Start hashing the input's files on a background thread, so that the first resolve_input of
    this input (which every run begins with, after importing the engine, which holds the GIL
    while hashing does not need it) finds their checksums remembered (fileio.file_sha256)
    instead of reading every input file then. resolve_input waits for it; any error is
    left to resolve_input, which raises it."""
    key = (input_path, input_format)

    def work() -> None:
        try:
            resolve_input(input_path, input_format)
        except Exception:  # noqa: BLE001 - resolve_input reports it to the caller
            pass

    thread = threading.Thread(target=work, name="webdedup-checksums", daemon=True)
    with _hashing_lock:
        _hashing[key] = thread
    thread.start()


def _wait_for_hashing(key: tuple[str, str]) -> None:
    with _hashing_lock:
        thread = _hashing.get(key)
    if thread is not None and thread is not threading.current_thread():
        thread.join()
        with _hashing_lock:
            _hashing.pop(key, None)


def resolve_input(input_path: str, input_format: str = "auto") -> list[InputFile]:
    """A file, a folder (its CSV, Parquet, JSON Lines and WARC files, recursively) or a glob -> sorted files."""
    _wait_for_hashing((input_path, input_format))
    if input_format not in FORMATS:
        raise WebdedupError(f"input_format must be one of {', '.join(FORMATS)}, got {input_format!r}")
    if is_uri(input_path):
        return _resolve_objects(input_path, input_format)
    path = Path(input_path).expanduser()
    if any(ch in input_path for ch in "*?["):
        candidates = [Path(p) for p in globlib.glob(str(path), recursive=True)]
        candidates = [p for p in candidates if p.is_file()]
        if not candidates:
            raise WebdedupError(f"input glob {input_path!r} matches no file")
    elif path.is_dir():
        candidates = [
            p
            for p in path.rglob("*")
            if p.is_file() and format_suffix(p) in SUFFIX_FORMATS and not p.name.startswith(".")
        ]
        readable = len(candidates)
        if input_format != "auto":
            candidates = [p for p in candidates if SUFFIX_FORMATS[format_suffix(p)] == input_format]
        if not candidates and readable:
            raise WebdedupError(
                f"input folder {input_path!r} holds no file of --format {input_format} ({readable} file(s) of "
                "other formats: --format auto reads each by its suffix)"
            )
        if not candidates:
            raise WebdedupError(
                f"input folder {input_path!r} holds no .csv, .parquet, .jsonl (.gz, .zst), .json.gz, .json.zst, "
                ".warc or .warc.gz file"
            )
    elif path.is_file():
        candidates = [path]
    else:
        raise WebdedupError(f"input {input_path!r} does not exist")
    candidates = sorted(candidates)
    formats = [_format_of(candidate, input_format) for candidate in candidates]
    return [
        InputFile(candidate.resolve(), fmt, sha256, candidate.stat().st_size)
        for candidate, fmt, sha256 in zip(candidates, formats, file_sha256s(candidates))
    ]


def require_unchanged(files: list[InputFile]) -> None:
    """Each local input file is still the one whose checksum the corpus records (a file replaced
    while a stage read it was stored with the new rows under the old file's sha256). A stat per
    file: the checksum is remembered while the file's size and modification time stay the same."""
    for f in files:
        if isinstance(f.path, Path) and file_sha256(f.path) != f.sha256:
            raise WebdedupError(f"{f.path}: changed while it was read; run the command again once it is written")


def unread_files(input_path: str) -> list[Path]:
    """The files of a local input folder that no format reads (by their suffix: .json, .ndjson,
    .csv.gz, ...): a run reads the others and says which it left. Hidden files, markers such as
    Spark's _SUCCESS and the pinned counts beside an input (*.expected.json) are not input."""
    path = Path(input_path).expanduser()
    if is_uri(input_path) or not path.is_dir():
        return []
    return sorted(
        p
        for p in path.rglob("*")
        if p.is_file()
        and not p.name.startswith((".", "_"))
        and not p.name.endswith(".expected.json")
        and format_suffix(p) not in SUFFIX_FORMATS
    )


def _format_of(candidate: Path | ObjectPath, input_format: str) -> str:
    if input_format != "auto":
        return input_format
    fmt = SUFFIX_FORMATS.get(format_suffix(candidate), "")
    if not fmt:
        raise WebdedupError(
            f"cannot tell the format of {candidate} from its name; set input_format to csv, parquet, jsonl or warc"
        )
    return fmt


def _resolve_objects(uri: str, input_format: str) -> list[InputFile]:
    """The objects of an input URI: one object, a prefix (its input files, recursively) or a glob."""
    found = list_objects(uri)
    if not any(ch in uri for ch in "*?[") and not (len(found) == 1 and str(found[0][0]) == uri.rstrip("/")):
        found = [
            (p, size)
            for p, size in found
            if format_suffix(p) in SUFFIX_FORMATS
            and not p.name.startswith(".")
            and (input_format == "auto" or SUFFIX_FORMATS[format_suffix(p)] == input_format)
        ]
    if not found and not any(ch in uri for ch in "*?[") and format_suffix(ObjectPath.of(uri)) in SUFFIX_FORMATS:
        raise WebdedupError(f"input {uri} does not exist (no such object)")
    if not found:
        raise WebdedupError(
            f"input {uri} holds no .csv, .parquet, .jsonl (.gz, .zst), .json.gz, .json.zst, .warc or .warc.gz object"
        )
    files = [InputFile(p, _format_of(p, input_format), "", size) for p, size in found]
    return [replace(f, sha256=sha256) for f, sha256 in zip(files, file_sha256s([f.path for f in files]))]


def day_of_file(path: Path) -> str | None:
    """The crawl day a file name declares (e.g. 2026-03-01.csv, day=2026-03-01/part.parquet)."""
    for part in reversed(path.parts[-2:]):
        match = DAY_IN_NAME.search(part)
        if match:
            return match.group(1)
    return None
