"""Shingles and MinHash over token hashes, and the per-batch kernels that run the whole
fingerprint (tokenizer, shingles, signature or sorted shingle set) one document at a time."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..sets import sort_unique
from .mix import PRIME_1, SHINGLE_SEED, U64, fmix64
from .simd import minhash_8, minhash_32
from .tokenize import char_hashes, token_hashes


@njit(inline="always")
def _window_count(n_tokens, shingle_size):
    if n_tokens == 0:
        return 0
    if n_tokens < shingle_size:
        return 1
    return n_tokens - shingle_size + 1


@njit(nogil=True, cache=True)
def shingle_hashes(tokens, n_tokens, shingle_size, out):
    """Hash every window of tokens[:n_tokens] into out; returns the window count.

    Same values as core.hashing.shingle_hash per window, computed token position by token position across all
    windows at once: the loop over windows has no carried dependency, so LLVM vectorizes it.
    """
    windows = _window_count(n_tokens, shingle_size)
    if windows == 0:
        return 0
    size = min(shingle_size, n_tokens)
    for w in range(windows):
        out[w] = SHINGLE_SEED
    for k in range(size):
        for w in range(windows):
            mixed = (out[w] ^ tokens[w + k]) * PRIME_1
            out[w] = (mixed << U64(27)) | (mixed >> U64(37))
    length = U64(size)
    for w in range(windows):
        out[w] = fmix64(out[w] ^ length)
    return windows


@njit(nogil=True, cache=True)
def split_coefficients(coeff_a, coeff_b):
    """(a_lo, a_hi uint32; b_even, b_odd uint64) of the first 8*(num_perm // 8) permutations, the
    layout of simd.minhash_32 and minhash_8."""
    vector = coeff_a.shape[0] // 8 * 8
    a_lo = np.empty(vector, dtype=np.uint32)
    a_hi = np.empty(vector, dtype=np.uint32)
    for p in range(vector):
        a_lo[p] = np.uint32(coeff_a[p] & U64(0xFFFFFFFF))
        a_hi[p] = np.uint32(coeff_a[p] >> U64(32))
    b_even = coeff_b[0:vector:2].copy()
    b_odd = coeff_b[1:vector:2].copy()
    return a_lo, a_hi, b_even, b_odd


@njit(nogil=True, cache=True)
def minhash_row(shingles, windows, split, coeff_a, coeff_b, out):
    """out[p] = min over windows of ((a[p]*h + b[p]) mod 2^64) >> 32 (the reference definition);
    split = split_coefficients(coeff_a, coeff_b). Vector blocks of 32 and 8 permutations, then
    one at a time (min of the high halves equals the high half of the min)."""
    a_lo, a_hi, b_even, b_odd = split
    vector = a_lo.shape[0]
    p0 = 0
    while p0 + 32 <= vector:
        minhash_32(shingles, windows, a_lo, a_hi, b_even, b_odd, p0, out)
        p0 += 32
    while p0 < vector:
        minhash_8(shingles, windows, a_lo, a_hi, b_even, b_odd, p0, out)
        p0 += 8
    for p in range(vector, coeff_a.shape[0]):
        a = coeff_a[p]
        b = coeff_b[p]
        best = np.uint32(0xFFFFFFFF)
        for w in range(windows):
            best = min(best, np.uint32((a * shingles[w] + b) >> U64(32)))
        out[p] = best


@njit(nogil=True, cache=True)
def fingerprint_batch(data, offsets, normalized, tables, shingle_size, coeff_a, coeff_b, char_unit):
    """Token counts, shingle window counts, (n, num_perm) uint32 MinHash signatures and the
    flagged documents (see token_hashes; their row is left empty for the caller to fill).
    char_unit: the tokens are the characters of the normalized text (char_hashes), not its words."""
    n_docs = offsets.shape[0] - 1
    num_perm = coeff_a.shape[0]
    token_counts = np.zeros(n_docs, dtype=np.int64)
    shingle_counts = np.zeros(n_docs, dtype=np.int64)
    signatures = np.full((n_docs, num_perm), 0xFFFFFFFF, dtype=np.uint32)
    flagged = np.zeros(n_docs, dtype=np.bool_)
    longest = 0
    for i in range(n_docs):
        longest = max(longest, offsets[i + 1] - offsets[i])
    # tokens <= bytes: no table entry maps a character to more characters than its UTF-8 bytes
    scratch = np.empty(longest + 1, dtype=np.uint64)
    shingles = np.empty(longest + 1, dtype=np.uint64)
    split = split_coefficients(coeff_a, coeff_b)
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
            minhash_row(shingles, windows, split, coeff_a, coeff_b, signatures[i])
    return token_counts, shingle_counts, signatures, flagged


@njit(nogil=True, cache=True)
def minhash_sets(flat, starts, ends, rows, coeff_a, coeff_b):
    """(len(rows), num_perm) uint32 MinHash signatures of the shingle sets flat[starts[r]:ends[r]]
    for r in rows: the values fingerprint_batch gives their documents (the minimum over a
    document's windows is the minimum over its distinct shingles), without tokenizing again."""
    signatures = np.full((rows.shape[0], coeff_a.shape[0]), 0xFFFFFFFF, dtype=np.uint32)
    split = split_coefficients(coeff_a, coeff_b)
    for i in range(rows.shape[0]):
        start, end = starts[rows[i]], ends[rows[i]]
        if end > start:
            minhash_row(flat[start:end], end - start, split, coeff_a, coeff_b, signatures[i])
    return signatures


@njit(nogil=True, cache=True)
def shingle_sets_into(data, offsets, normalized, tables, shingle_size, char_unit, out):
    """Sorted unique shingle hashes per document written into `out`, one set after the other,
    with int64 offsets into it, the flagged documents (see token_hashes; their set is left empty
    for the caller to fill) and whether they fit: each document needs room for its shingle
    windows while they are sorted (fingerprinted's shingle_count), and a document that would not
    fit stops the batch (returns False, `out` then holds the sets before it). char_unit as in
    fingerprint_batch."""
    n_docs = offsets.shape[0] - 1
    longest = 0
    for i in range(n_docs):
        longest = max(longest, offsets[i + 1] - offsets[i])
    scratch = np.empty(longest + 1, dtype=np.uint64)  # tokens <= bytes
    set_offsets = np.zeros(n_docs + 1, dtype=np.int64)
    flagged = np.zeros(n_docs, dtype=np.bool_)
    sort_scratch = np.empty(longest + 1, dtype=np.uint64)  # windows <= bytes
    bucket_counts = np.empty(2 * longest + 4, dtype=np.int64)
    cursor = 0
    for i in range(n_docs):
        if char_unit:
            n_tokens = char_hashes(data, offsets[i], offsets[i + 1], normalized[i], tables, scratch)
        else:
            n_tokens = token_hashes(data, offsets[i], offsets[i + 1], normalized[i], tables, scratch)
        if n_tokens < 0:
            flagged[i] = True
            n_tokens = 0
        if cursor + _window_count(n_tokens, shingle_size) > out.shape[0]:
            return set_offsets, flagged, False
        windows = shingle_hashes(scratch, n_tokens, shingle_size, out[cursor:])
        cursor += sort_unique(out, cursor, cursor + windows, sort_scratch, bucket_counts)
        set_offsets[i + 1] = cursor
    return set_offsets, flagged, True


@njit(nogil=True, cache=True)
def shingle_sets_batch(data, offsets, normalized, tables, shingle_size, char_unit):
    """Sorted unique shingle hashes per document, flattened, with int64 offsets, and the flagged
    documents (see token_hashes; their set is left empty for the caller to fill); char_unit as in
    fingerprint_batch."""
    total = 0
    for i in range(offsets.shape[0] - 1):
        total += offsets[i + 1] - offsets[i]  # windows <= tokens <= bytes: an upper bound
    flat = np.empty(total + 1, dtype=np.uint64)
    set_offsets, flagged, _ = shingle_sets_into(data, offsets, normalized, tables, shingle_size, char_unit, flat)
    return flat[: set_offsets[-1]].copy(), set_offsets, flagged
