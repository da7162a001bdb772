"""The hash primitives of core.hashing as inlined numba functions, shared by the tokenizer
(token hashes) and MinHash (shingle hashes). core.hashing holds the plain-Python definitions;
its constants are repeated here as uint64 so that numba never mixes signed and unsigned."""

from __future__ import annotations

import numpy as np
from numba import njit

from .. import hashing

U64 = np.uint64
TOKEN_SEED = U64(hashing.TOKEN_SEED)
SHINGLE_SEED = U64(hashing.SHINGLE_SEED)
PRIME_1 = U64(hashing.PRIME_1)
PRIME_2 = U64(hashing.PRIME_2)
FMIX_1 = U64(hashing.FMIX_1)
FMIX_2 = U64(hashing.FMIX_2)
ONES = U64(0xFFFFFFFFFFFFFFFF)


@njit(inline="always")
def fmix64(value):
    value ^= value >> U64(33)
    value *= FMIX_1
    value ^= value >> U64(33)
    value *= FMIX_2
    value ^= value >> U64(33)
    return value


@njit(inline="always")
def fold(state, word, prime, bits):
    """One step of core.hashing's fold: rotl64((state ^ word) * prime, bits)."""
    mixed = (state ^ word) * prime
    return (mixed << U64(bits)) | (mixed >> U64(64 - bits))
