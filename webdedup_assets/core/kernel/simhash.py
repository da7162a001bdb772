"""SimHash over the shingle hashes MinHash uses: the per-batch kernel.

A document's SimHash sets bit b when more than half of its shingle windows have bit b set in
their 64-bit shingle hash (core.hashing.shingle_hash): every window counts once, so a shingle
weighs as often as it occurs (its term frequency). A tie leaves the bit 0. No seed: the shingle
hashes are already finalized (fmix64), so their bits are independent enough to vote with.
core.reference.simhash is the plain-Python definition this matches bit for bit.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .minhash import shingle_hashes
from .mix import U64
from .tokenize import char_hashes, token_hashes


@njit(nogil=True, cache=True)
def simhash_row(shingles, windows, counts):
    """The SimHash of shingles[:windows]; counts: int64 scratch of 64 (overwritten). The loop over
    the 64 bits has no carried dependency, so LLVM vectorizes it per window."""
    counts[:] = 0
    for w in range(windows):
        value = shingles[w]
        for b in range(64):
            counts[b] += np.int64((value >> U64(b)) & U64(1))
    out = U64(0)
    for b in range(64):
        if 2 * counts[b] > windows:
            out |= U64(1) << U64(b)
    return out


@njit(nogil=True, cache=True)
def simhash_batch(data, offsets, normalized, tables, shingle_size, char_unit):
    """Token counts, shingle window counts, uint64 SimHashes (0 for a document without shingles)
    and the flagged documents (see token_hashes; their row is left empty for the caller to fill);
    char_unit as in minhash.fingerprint_batch."""
    n_docs = offsets.shape[0] - 1
    token_counts = np.zeros(n_docs, dtype=np.int64)
    shingle_counts = np.zeros(n_docs, dtype=np.int64)
    fingerprints = np.zeros(n_docs, dtype=np.uint64)
    flagged = np.zeros(n_docs, dtype=np.bool_)
    longest = 0
    for i in range(n_docs):
        longest = max(longest, offsets[i + 1] - offsets[i])
    scratch = np.empty(longest + 1, dtype=np.uint64)  # tokens <= bytes
    shingles = np.empty(longest + 1, dtype=np.uint64)
    counts = np.zeros(64, dtype=np.int64)
    for i in range(n_docs):
        if char_unit:
            n_tokens = char_hashes(data, offsets[i], offsets[i + 1], normalized[i], tables, scratch)
        else:
            n_tokens = token_hashes(data, offsets[i], offsets[i + 1], normalized[i], tables, scratch)
        if n_tokens < 0:
            flagged[i] = True
            continue
        windows = shingle_hashes(scratch, n_tokens, shingle_size, shingles)
        token_counts[i] = n_tokens
        shingle_counts[i] = windows
        if windows > 0:
            fingerprints[i] = simhash_row(shingles, windows, counts)
    return token_counts, shingle_counts, fingerprints, flagged
