"""Atomic writes and file checksums: the file primitives every layer uses (no DuckDB, no Dagster)."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from ..errors import WebdedupError
from ..threads import thread_count
from .objects import ObjectPath, open_input, size_and_mtime


def make_folder(path: Path) -> Path:
    """Create a folder (and its parents) unless it exists; a WebdedupError says why it cannot be
    (a file of that name, or above it; no permission), never a traceback."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), path)
        what = "it is" if blocker == path else f"{blocker} is"
        raise WebdedupError(f"{path}: cannot be used as a folder: {what} an existing file") from None
    except OSError as err:
        raise WebdedupError(f"{path}: cannot create this folder ({err.strerror or err})") from None
    return path


@contextmanager
def atomic_path(target: Path):
    """Yield a temporary sibling path; move it onto target only if the block succeeds."""
    make_folder(target.parent)
    temp = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        yield temp
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)


def write_text(target: Path, text: str) -> None:
    with atomic_path(target) as temp:
        temp.write_text(text, encoding="utf-8")


def file_sha256(path: Path | ObjectPath) -> str:
    """sha256 of a file's bytes; remembered for the process while the file's identity, size and
    modification time stay the same (a `webdedup run` reads its input files twice)."""
    if isinstance(path, ObjectPath):
        return _sha256_of(path, 0, 0, *size_and_mtime(path))
    info = os.stat(path)
    return _sha256_of(Path(path).resolve(), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def file_sha256s(paths: Sequence[Path | ObjectPath]) -> list[str]:
    """file_sha256 of each path, several files at a time (hashlib and file reads release the
    GIL): the inputs of a run, gigabytes for a large corpus, are hashed before anything else."""
    workers = min(len(paths), thread_count())
    if workers <= 1:
        return [file_sha256(p) for p in paths]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="webdedup-sha256") as pool:
        return list(pool.map(file_sha256, paths))


@lru_cache(maxsize=4096)
def _sha256_of(path: Path | ObjectPath, device: int, inode: int, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open_input(path) as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
