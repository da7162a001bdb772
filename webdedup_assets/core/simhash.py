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
from math import comb

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


def block_bounds(max_hamming: int, key_blocks: int = 1) -> list[tuple[int, int]]:
    """(first bit, width) of each of the max_hamming + key_blocks blocks covering the 64 bits, as
    equal as can be."""
    blocks = max_hamming + key_blocks
    if not 1 <= blocks <= SIMHASH_BITS:
        raise ValueError(f"max_hamming + key_blocks must be 1..{SIMHASH_BITS}, got {blocks}")
    cuts = [b * SIMHASH_BITS // blocks for b in range(blocks + 1)]
    return [(cuts[b], cuts[b + 1] - cuts[b]) for b in range(blocks)]


def block_values(hashes: np.ndarray, max_hamming: int, key_blocks: int = 1) -> np.ndarray:
    """(n, max_hamming + key_blocks) uint64: the bits of each block, shifted down."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    bounds = block_bounds(max_hamming, key_blocks)
    out = np.empty((len(hashes), len(bounds)), dtype=np.uint64)
    for b, (start, width) in enumerate(bounds):
        mask = np.uint64((1 << width) - 1)
        out[:, b] = (hashes >> np.uint64(start)) & mask
    return out


def key_combinations(max_hamming: int, key_blocks: int = 1) -> list[tuple[int, ...]]:
    """The blocks of each key, in key (band_index) order: every key_blocks of the blocks."""
    return list(itertools.combinations(range(max_hamming + key_blocks), key_blocks))


def block_keys(hashes: np.ndarray, max_hamming: int, key_blocks: int = 1) -> np.ndarray:
    """(n, keys) int64 band keys: band_hash(key index, [the values of its blocks]), one key per
    combination of key_blocks blocks (with one block a key, band_hash(block index, [value]))."""
    values = block_values(hashes, max_hamming, key_blocks)
    combinations = key_combinations(max_hamming, key_blocks)
    columns = [block for combination in combinations for block in combination]
    return band_keys(values[:, columns], len(combinations), key_blocks)


def candidate_probability_at_distance(distance: int, max_hamming: int, key_blocks: int = 1) -> float:
    """P(two fingerprints `distance` bits apart share a key), the differing bits at random places:
    the share of placements that leave at least key_blocks blocks untouched; 1 within
    max_hamming (the pigeonhole guarantee). Counted block by block: ways[bits][untouched] of
    placing `bits` of the differing bits in the blocks so far."""
    if distance <= max_hamming:
        return 1.0
    ways = {(0, 0): 1}
    for _, width in block_bounds(max_hamming, key_blocks):
        grown: dict[tuple[int, int], int] = {}
        for (bits, untouched), count in ways.items():
            for inside in range(min(width, distance - bits) + 1):
                key = (bits + inside, untouched + (inside == 0))
                grown[key] = grown.get(key, 0) + count * comb(width, inside)
        ways = grown
    hit = sum(count for (bits, untouched), count in ways.items() if bits == distance and untouched >= key_blocks)
    return hit / comb(SIMHASH_BITS, distance)
