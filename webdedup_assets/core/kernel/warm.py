"""Compile and cache every numba kernel ahead of the first run: `python -m webdedup_assets.core.kernel.warm`.

The kernels are cached on disk (cache=True), so only the very first run of a fresh install
pays the compilation. `make install` runs this module so that the first
`webdedup run` does not; `is_cold()` lets the CLI say why a first run is slow when it was not.
The warm-up calls the same entry points the engine calls (so the same argument types are
compiled), on a few tiny documents: plain ASCII, text that needs the exact normalizer
(combining marks), CJK, and an empty one.
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pyarrow as pa

SAMPLE = [
    "The quick brown fox jumps over the lazy dog, again and again and again.",
    "Cafe\u0301 menu: cre\u0300me bru\u0302le\u0301e, \u00e9clair \u2014 prices in EUR.",
    "\u4eca\u65e5\u306f\u826f\u3044\u5929\u6c17\u3067\u3059 \ud55c\uad6d\uc5b4 \u4e2d\u6587\u6587\u672c",
    "",
]


def _dispatchers() -> list:
    """The kernels every run compiles (the exact normalizer's and evaluate's run only for some inputs)."""
    from .. import components, sets
    from . import minhash, tokenize

    return [
        minhash.fingerprint_batch,
        minhash.minhash_sets,
        minhash.shingle_sets_batch,
        minhash.shingle_sets_into,
        tokenize.token_hashes,
        sets.jaccard_blocks,
        components._components,
    ]


def is_cold() -> bool:
    """True when a kernel the engine runs has no valid on-disk cache entry (the next call compiles).

    Reads numba's small cache index files only (no compilation); False when that cannot be told."""
    try:
        for dispatcher in _dispatchers():
            cache = getattr(dispatcher, "_cache", None)
            cache_file = getattr(cache, "_cache_file", None)
            if cache_file is None:
                continue
            if not cache_file._load_index():  # missing, or stale against its source file
                return True
        return False
    except Exception:  # a private numba interface changed: never block a run over a message
        return False


def warm(evaluation: bool = True) -> float:
    """Compile (or load) every kernel through the engine's entry points; returns the seconds taken.
    `evaluation`: also the kernel only evaluate and tune run (the exact similarity join)."""
    from ..components import component_labels
    from ..exact import similarity_join
    from ..fingerprint import fingerprint_texts, normalize_exact, shingle_sets, shingle_sets_into
    from ..minhash import MinHashParams
    from ..sets import jaccard_blocks
    from . import minhash_sets

    started = time.perf_counter()
    texts = pa.array(SAMPLE, pa.large_string())
    coeff_a, coeff_b = MinHashParams(64, 1).coefficients()
    fingerprint_texts(texts, 3, coeff_a, coeff_b)  # string_buffers gives read-only views: one specialization
    normalize_exact(SAMPLE)
    flat, offsets = shingle_sets(texts, 3)
    shingle_sets_into(texts, 3, "word", np.empty(len(flat) + 64, np.uint64))  # scoring's variant
    starts, ends = offsets[:-1].astype(np.int64), offsets[1:].astype(np.int64)
    pairs = np.array([0, 1, 2], dtype=np.int64)
    jaccard_blocks(flat, starts, ends, flat, starts, ends, pairs, pairs[::-1].copy(), np.zeros(3, np.float64))
    minhash_sets(flat, starts, ends, pairs, coeff_a, coeff_b)  # the signatures of an add's verified pairs
    component_labels(4, np.array([0, 1], np.int64), np.array([1, 2], np.int64))
    if evaluation:
        similarity_join(flat, np.asarray(offsets, dtype=np.int64), 0.5)
    return time.perf_counter() - started


def load_in_background() -> None:
    """Start loading the kernels a run uses from numba's on-disk cache on a daemon thread, so that
    the load overlaps reading the input (DuckDB, which releases the GIL) instead of following it.
    A stage that needs a kernel first waits for it on numba's compiler lock; a failure here is
    left to that stage, which loads the kernel itself."""

    def work() -> None:
        try:
            warm(evaluation=False)
        except Exception:  # noqa: BLE001 - the stage that runs the kernel reports any error
            pass

    threading.Thread(target=work, name="webdedup-kernels", daemon=True).start()


def main() -> int:
    cold = is_cold()
    seconds = warm()
    state = "compiled and cached" if cold else "already cached; loaded"
    print(f"webdedup: kernels {state} in {seconds:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
