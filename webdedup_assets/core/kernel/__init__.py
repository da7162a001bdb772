"""Compiled fingerprint kernels (numba) over the UTF-8 bytes of a batch of documents.

Input is an Arrow-style string column: `data` (uint8 bytes) and `offsets` (int64, n+1) of raw
documents. Three concerns, one module each:

  simd.py      vector intrinsics (llvmlite): unaligned loads, 64-byte classification masks, the
               MinHash vector step; the only module that writes LLVM IR
  tokenize.py  the tokenizer: normalize_text and tokenize fused into token hashes
               (token_hashes), and the exact normalizer's per-character steps
  minhash.py   shingle hashes, MinHash signatures, and the per-batch kernels
               (fingerprint_batch, shingle_sets_batch, shingle_sets_into, minhash_sets)
  simhash.py   the 64-bit SimHash of the same shingle hashes (simhash_batch)

mix.py holds the hash primitives both share. tests/test_kernel_reference.py,
tests/test_core_fingerprint.py and tests/test_kernel_normalize.py check the kernels bit for bit
against core.reference. All kernels release the GIL (nogil) so the engine can run batches on
several threads, and are cached on disk so a CLI run does not pay the JIT compilation every
time. numba checks a cached kernel against its own source file only, not the modules it
inlines: after editing simd.py, mix.py, core/sets.py or core.normalize.CJK_RANGES, clear
core/kernel/__pycache__ (or set a fresh NUMBA_CACHE_DIR) before testing or measuring.
"""

from __future__ import annotations

from ..sets import jaccard_blocks
from .minhash import (
    fingerprint_batch,
    minhash_row,
    minhash_sets,
    shingle_hashes,
    shingle_sets_batch,
    shingle_sets_into,
    split_coefficients,
)
from .simhash import simhash_batch
from .tokenize import collapse_separators, filter_codepoints, token_hashes

__all__ = [
    "collapse_separators",
    "filter_codepoints",
    "fingerprint_batch",
    "jaccard_blocks",
    "minhash_row",
    "minhash_sets",
    "shingle_hashes",
    "shingle_sets_batch",
    "shingle_sets_into",
    "simhash_batch",
    "split_coefficients",
    "token_hashes",
]
