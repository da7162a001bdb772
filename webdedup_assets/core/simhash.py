"""SimHash fingerprints (computed by core.fingerprint.simhash_texts): their stored layout, their
Hamming distance, and the pigeonhole blocks that make every pair within max_hamming bits a
candidate.

A SimHash is stored in fingerprinted's `signature` column as two uint32 words, the high half
first (to_words), so the column keeps the layout the MinHash path stores and every reader of it
stays one code path. Blocking: the 64 bits are cut into max_hamming + 1 blocks of consecutive
bits (block_bounds); two fingerprints that differ in at most max_hamming bits leave at least one
block untouched, so they share that block's value, and the band join on (band_index, band_hash)
pairs them. A block key is core.hashing.band_hash(block index, [block value]), computed by
core.minhash.band_keys, so the keys live in the same int64 space as MinHash band keys.
"""

from __future__ import annotations

import itertools
from collections import Counter
from math import comb, prod

import numpy as np

from .minhash import band_keys

SIMHASH_BITS = 64
SIMHASH_WORDS = 2  # uint32 words of one fingerprint in the signature column


def to_words(hashes: np.ndarray) -> np.ndarray:
    """(n,) uint64 -> (n, 2) uint32: high half, low half (the stored signature)."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    return np.stack(
        [(hashes >> np.uint64(32)).astype(np.uint32), (hashes & np.uint64(0xFFFFFFFF)).astype(np.uint32)], 1
    )


def from_words(words: np.ndarray) -> np.ndarray:
    """(n, 2) uint32 (to_words) -> (n,) uint64."""
    words = np.asarray(words).reshape(-1, SIMHASH_WORDS).astype(np.uint64)
    return (words[:, 0] << np.uint64(32)) | words[:, 1]


def hamming(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Row-wise Hamming distance of two uint64 arrays (int32, 0..64)."""
    return np.bitwise_count(np.asarray(left, np.uint64) ^ np.asarray(right, np.uint64)).astype(np.int32)


def block_bounds(max_hamming: int) -> list[tuple[int, int]]:
    """(first bit, width) of each of the max_hamming + 1 blocks covering the 64 bits, as equal as can be."""
    blocks = max_hamming + 1
    if not 1 <= blocks <= SIMHASH_BITS:
        raise ValueError(f"max_hamming must be 0..{SIMHASH_BITS - 1}, got {max_hamming}")
    cuts = [b * SIMHASH_BITS // blocks for b in range(blocks + 1)]
    return [(cuts[b], cuts[b + 1] - cuts[b]) for b in range(blocks)]


def block_values(hashes: np.ndarray, max_hamming: int) -> np.ndarray:
    """(n, max_hamming + 1) uint64: the bits of each block, shifted down."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    out = np.empty((len(hashes), max_hamming + 1), dtype=np.uint64)
    for b, (start, width) in enumerate(block_bounds(max_hamming)):
        mask = np.uint64((1 << width) - 1)
        out[:, b] = (hashes >> np.uint64(start)) & mask
    return out


def block_keys(hashes: np.ndarray, max_hamming: int) -> np.ndarray:
    """(n, max_hamming + 1) int64 band keys: band_hash(block index, [block value])."""
    return band_keys(block_values(hashes, max_hamming), max_hamming + 1, 1)


def candidate_probability_at_distance(distance: int, max_hamming: int) -> float:
    """P(two fingerprints `distance` bits apart share a block), the differing bits at random
    places: 1 within max_hamming (the pigeonhole guarantee); beyond it, the share of placements
    that leave some block untouched, by inclusion-exclusion over the sets of untouched blocks
    (the blocks have at most two widths, so a set is counted by how many of each width it holds)."""
    if distance <= max_hamming:
        return 1.0
    widths = sorted(Counter(width for _, width in block_bounds(max_hamming)).items())
    untouched = 0
    for picked in itertools.product(*(range(count + 1) for _, count in widths)):
        blocks = sum(picked)
        if blocks:
            bits = sum(k * width for k, (width, _) in zip(picked, widths, strict=True))
            ways = prod(comb(count, k) for k, (_, count) in zip(picked, widths, strict=True))
            untouched += (-1) ** (blocks + 1) * ways * comb(SIMHASH_BITS - bits, distance)
    return untouched / comb(SIMHASH_BITS, distance)
