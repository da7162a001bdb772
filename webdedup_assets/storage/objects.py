"""Input in object storage (`s3://bucket/prefix`, or any URI pyarrow's file systems accept, such as
`gs://`): listed and read in place, streamed, never copied whole to the local disk.

Credentials, region and endpoint come from the standard variables and profiles of each store
(for S3: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL, ~/.aws). A file
in a bucket is an ObjectPath: it names itself as its URI in every message and in the manifest,
and has a path's name, suffix and parents. DuckDB reads it through the same file system
(`register`, on every connection); Python readers open it with `open_input`, `open_stream` or
`open_buffer` (the WARC framing: a buffer read by ranges)."""

from __future__ import annotations

import fnmatch
import io
import mmap
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, BinaryIO

from ..errors import WebdedupError

if TYPE_CHECKING:  # pyarrow.fs is imported when object storage is first used
    import pyarrow.fs as pafs

URI = re.compile(r"^([a-z][a-z0-9+.-]*)://", re.IGNORECASE)

_systems: dict[str, pafs.FileSystem] = {}  # scheme -> its file system
_lock = threading.Lock()


def is_uri(location: str) -> bool:
    """Whether a location names object storage (a URI other than file://)."""
    found = URI.match(location)
    return found is not None and found.group(1).lower() != "file"


class ObjectPath(PurePosixPath):
    """An object's location: the scheme as the first part (`s3:`), then the bucket and the key."""

    @classmethod
    def of(cls, uri: str) -> ObjectPath:
        scheme, rest = uri.split("://", 1)
        return cls(f"{scheme.lower()}:", *[part for part in rest.split("/") if part])

    def __str__(self) -> str:
        scheme, *rest = self.parts
        return f"{scheme}//{'/'.join(rest)}"

    def __fspath__(self) -> str:
        return str(self)

    @property
    def key(self) -> str:
        """bucket/key, as the file system names it."""
        return "/".join(self.parts[1:])


def file_system(location: ObjectPath) -> pafs.FileSystem:
    """The file system of a scheme (one for every bucket), made once per process."""
    import pyarrow.fs as pafs

    scheme = location.parts[0].rstrip(":")
    with _lock:
        if scheme not in _systems:
            try:
                _systems[scheme] = pafs.FileSystem.from_uri(str(location))[0]
            except (OSError, ValueError) as err:
                raise WebdedupError(f"{location}: {message(err)}") from None
        return _systems[scheme]


def size_and_mtime(path: ObjectPath) -> tuple[int, int]:
    """An object's size and modification time (ns)."""
    import pyarrow.fs as pafs

    try:
        info = file_system(path).get_file_info(path.key)
    except OSError as err:
        raise WebdedupError(f"{path}: {message(err)}") from None
    if info.type != pafs.FileType.File:
        raise WebdedupError(f"{path}: no such object")
    return info.size, info.mtime_ns or 0


def require_bucket(location: ObjectPath, what: str) -> None:
    """Refuse a location whose bucket does not exist, naming it (before anything is written there)."""
    import pyarrow.fs as pafs

    try:
        found = file_system(location).get_file_info(location.parts[1]).type
    except OSError as err:
        raise WebdedupError(f"{what} {location}: {message(err)}") from None
    if found == pafs.FileType.NotFound:
        raise WebdedupError(
            f"{what} {location}: bucket {location.parts[1]} does not exist (or is not visible with these credentials)"
        )


# The service's answers to credentials it does not accept (unknown key, wrong secret, expired token,
# or a key without the permission), as pyarrow's S3 errors name them.
DENIED = re.compile(
    r"AWS Error (ACCESS_DENIED|INVALID_ACCESS_KEY_ID|SIGNATURE_DOES_NOT_MATCH|EXPIRED_TOKEN|INVALID_CLIENT_TOKEN_ID"
    r"|UNRECOGNIZED_CLIENT|UNKNOWN \(HTTP status 403\)) during (\w+) operation"
)


def message(err: Exception) -> str:
    """A storage error in one line, without the service's request ids; refused credentials say so
    and name the variables that hold them, since the service's own text does not."""
    text = " ".join(str(err).split())
    denied = DENIED.search(text)
    if denied:
        return (
            f"access denied ({denied.group(1)} on {denied.group(2)}): check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
            "(or AWS_PROFILE, AWS_SESSION_TOKEN) and the bucket's permissions"
        )
    return re.sub(r"\s*\(Request ID: [^)]*\)", "", text)


def list_objects(uri: str) -> list[tuple[ObjectPath, int]]:
    """The objects of a URI (one object, everything under a prefix, or a glob's matches), sorted,
    with their sizes."""
    import pyarrow.fs as pafs

    pattern = ObjectPath.of(uri)
    magic = next((i for i, part in enumerate(pattern.parts) if any(ch in part for ch in "*?[")), None)
    base = pattern if magic is None else ObjectPath(*pattern.parts[:magic])
    fs = file_system(base)
    try:
        info = fs.get_file_info(base.key)
        if magic is None and info.type == pafs.FileType.File:
            return [(base, info.size)]
        found = fs.get_file_info(pafs.FileSelector(base.key, recursive=True, allow_not_found=True))
        if not found:
            require_bucket(pattern, "input")
    except OSError as err:
        raise WebdedupError(f"input {uri}: {message(err)}") from None
    scheme = pattern.parts[0]
    objects = [(ObjectPath(scheme, *f.path.split("/")), f.size) for f in found if f.type == pafs.FileType.File]
    if magic is not None:
        glob = str(pattern)
        objects = [(p, size) for p, size in objects if fnmatch.fnmatchcase(str(p), glob)]
    return sorted(objects, key=lambda item: str(item[0]))


def open_input(path: Path | ObjectPath) -> BinaryIO:
    """A file opened for reading: a local one, or an object (seekable, read by ranges)."""
    if isinstance(path, ObjectPath):
        try:
            return file_system(path).open_input_file(path.key)
        except OSError as err:
            raise WebdedupError(f"{path}: {message(err)}") from None
    return open(path, "rb")


def open_stream(path: Path | ObjectPath, compression: str | None = "detect") -> Any:
    """A file read front to back, decompressed as its suffix says (.gz, .zst) by default."""
    if isinstance(path, ObjectPath):
        try:
            return file_system(path).open_input_stream(path.key, compression=compression)
        except OSError as err:
            raise WebdedupError(f"{path}: {message(err)}") from None
    import pyarrow as pa

    return pa.input_stream(str(path), compression=compression)


class RangeBuffer:
    """An object as a read-only buffer (len, slices, find), for readers that walk a file by offsets
    as they would a memory map (the WARC framing). Read by ranges through a window that follows the
    reader forward, so an object of any size is streamed: never copied whole to memory or disk."""

    def __init__(self, path: ObjectPath, handle: Any, window: int = 8 << 20) -> None:
        self.path, self.handle, self.window = path, handle, window
        self.size = handle.size()
        self.start, self.data = 0, b""

    def __len__(self) -> int:
        return self.size

    def read(self, start: int, stop: int) -> bytes:
        """Bytes start..stop (within the object): from the window, else one ranged read."""
        if self.start <= start and stop <= self.start + len(self.data):
            return self.data[start - self.start : stop - self.start]
        try:
            if stop - start >= self.window:  # a large piece is read as it is, the window kept
                return self.handle.read_at(stop - start, start)
            self.start, self.data = start, self.handle.read_at(min(self.window, self.size - start), start)
        except OSError as err:
            raise WebdedupError(f"{self.path}: {message(err)}") from None
        return self.data[: stop - start]

    def __getitem__(self, key: int | slice) -> int | bytes:
        if isinstance(key, int):
            index = key + self.size if key < 0 else key
            if not 0 <= index < self.size:
                raise IndexError(f"{self.path}: offset {key} outside its {self.size} bytes")
            return self.read(index, index + 1)[0]
        start, stop, step = key.indices(self.size)
        if step != 1:
            raise ValueError("RangeBuffer slices are contiguous")
        return self.read(start, stop) if stop > start else b""

    def find(self, sub: bytes, start: int = 0, end: int | None = None) -> int:
        """The first offset of sub within start..end, or -1 (as bytes.find), a window at a time."""
        end = self.size if end is None else min(end, self.size)
        while start < end:
            stop = min(end, start + self.window)
            hit = self.read(start, stop).find(sub)
            if hit >= 0:
                return start + hit
            if stop >= end:
                break
            start = stop - len(sub) + 1  # a match across the windows' seam is found in the next
        return -1


@contextmanager
def open_buffer(path: Path | ObjectPath) -> Iterator[Any]:
    """A file as a read-only buffer (len, slices, find): a local file mapped into memory (an empty
    one is b""), an object a RangeBuffer."""
    if isinstance(path, ObjectPath):
        with open_input(path) as handle:
            yield RangeBuffer(path, handle)
        return
    with open(path, "rb") as handle:
        if not handle.seek(0, io.SEEK_END):  # an empty file cannot be mapped
            yield b""
            return
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            yield buf


def open_text(path: Path | ObjectPath) -> io.TextIOWrapper:
    """A UTF-8 text file (a leading byte order mark skipped) for the csv module: newlines kept."""
    return io.TextIOWrapper(open_input(path), encoding="utf-8-sig", newline="")


def file_size(path: Path | ObjectPath) -> int:
    return size_and_mtime(path)[0] if isinstance(path, ObjectPath) else path.stat().st_size


def register(con: Any, registered: set[str]) -> None:
    """Let a DuckDB connection's database read the objects of every bucket this process has
    opened; `registered`: the schemes that database already reads (a file system is registered
    once per database), updated."""
    with _lock:
        systems = {scheme: fs for scheme, fs in _systems.items() if scheme not in registered}
    if not systems:
        return
    from fsspec.implementations.arrow import ArrowFSWrapper

    for scheme, fs in sorted(systems.items()):
        wrapper = type(f"{scheme.title()}Objects", (ArrowFSWrapper,), {"protocol": (scheme,)})(fs)
        con.register_filesystem(wrapper)
        registered.add(scheme)
