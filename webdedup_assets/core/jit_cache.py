"""Cache keys of the compiled kernels: every kernel source, not only the function's own file.

numba (0.68) keys a cached function by the content hash of the one file that defines it. The
per-batch kernels inline functions of other modules (minhash.fingerprint_batch calls
tokenize.token_hashes and char_hashes, simd's vector steps, mix's hashes, sets.sort_unique,
normalize.CJK_RANGES as constants), so an edit to one of those would leave a stale compiled
fingerprint_batch in the cache, used without a word. Here the stamp of every webdedup kernel is
the hash of all those sources together: any edit to any of them recompiles every kernel on its
next call (`python -m webdedup_assets.core.kernel.warm` pays it ahead).

Registered by core/__init__.py before any kernel is defined (numba picks a function's cache
locator when it is decorated). Only functions defined under webdedup_assets/core are concerned;
NUMBA_CACHE_DIR is honoured as numba itself does.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from functools import lru_cache
from pathlib import Path

from numba.core import caching

CORE = Path(__file__).resolve().parent
# Every module a kernel is defined in or inlines from (kernel/* and the core modules with njit code).
SOURCES = (
    *sorted((CORE / "kernel").glob("*.py")),
    *(CORE / n for n in ("sets.py", "components.py", "exact.py", "normalize.py")),
)


@lru_cache(maxsize=8)
def _digest(stamps: tuple[tuple[str, int, int], ...]) -> bytes:
    combined = hashlib.sha256()
    for path, _, _ in stamps:
        combined.update(path.encode())
        combined.update(hashlib.sha256(Path(path).read_bytes()).digest())
    return combined.digest()


def sources_stamp() -> bytes:
    """sha256 over the content of every kernel source (re-read when a file's mtime or size changes)."""
    stamps = []
    for path in SOURCES:
        st = os.stat(path)
        stamps.append((str(path), st.st_mtime_ns, st.st_size))
    return _digest(tuple(stamps))


def _ours(py_file: str) -> bool:
    try:
        return Path(py_file).resolve().is_relative_to(CORE)
    except OSError:
        return False


class _AllSourcesStamp:
    def get_source_stamp(self):
        return sources_stamp()

    @classmethod
    def from_function(cls, py_func, py_file):
        if not _ours(py_file):
            return None
        return super().from_function(py_func, py_file)


class UserDirKernelLocator(_AllSourcesStamp, caching.UserProvidedCacheLocator):
    """NUMBA_CACHE_DIR set: numba's own folder for it, the stamp of all kernel sources."""


class InTreeKernelLocator(_AllSourcesStamp, caching.InTreeCacheLocator):
    """The package's __pycache__, the stamp of all kernel sources."""


def register() -> None:
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    classes = getattr(impl, "_locator_classes", None)
    if not isinstance(classes, list):  # another numba: its own per-file stamps (see the docstring)
        warnings.warn(
            "webdedup: numba's cache locators are not where expected; kernel cache keys are per file", stacklevel=2
        )
        return
    for cls in (InTreeKernelLocator, UserDirKernelLocator):  # user dir first, as numba orders its own
        if cls not in classes:
            classes.insert(0, cls)
