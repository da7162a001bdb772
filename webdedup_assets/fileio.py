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

from .threads import thread_count


@contextmanager
def atomic_path(target: Path):
    """Yield a temporary sibling path; move it onto target only if the block succeeds."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        yield temp
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)


def write_text(target: Path, text: str) -> None:
    with atomic_path(target) as temp:
        temp.write_text(text, encoding="utf-8")


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes; remembered for the process while the file's identity, size and
    modification time stay the same (a `webdedup run` reads its input files twice)."""
    info = os.stat(path)
    return _sha256_of(str(Path(path).resolve()), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def file_sha256s(paths: Sequence[Path]) -> list[str]:
    """file_sha256 of each path, several files at a time (hashlib and file reads release the
    GIL): the inputs of a run, gigabytes for a large corpus, are hashed before anything else."""
    workers = min(len(paths), thread_count())
    if workers <= 1:
        return [file_sha256(p) for p in paths]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="webdedup-sha256") as pool:
        return list(pool.map(file_sha256, paths))


@lru_cache(maxsize=4096)
def _sha256_of(path: str, device: int, inode: int, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
