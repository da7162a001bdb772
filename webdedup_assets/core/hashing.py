"""Stable 64-bit hashes: the pure-Python reference definitions.

Every value is identical on every machine and process (unlike Python's salted hash()).
The compiled kernel in core.kernel implements exactly these functions; tests compare
them bit for bit.

token_hash: the token's UTF-8 bytes are read as little-endian 64-bit words (the last one
zero-padded), each folded in with a multiply and a rotation, then the byte length is mixed
in and the murmur3 finalizer spreads the bits.

shingle_hash: the token hashes of one window are folded in order (order matters), then the
window length is mixed in and finalized.
"""

from __future__ import annotations

from collections.abc import Sequence

MASK64 = (1 << 64) - 1
PRIME_1 = 0x9E3779B97F4A7C15
PRIME_2 = 0xC2B2AE3D27D4EB4F
TOKEN_SEED = 0x27D4EB2F165667C5
SHINGLE_SEED = 0x165667B19E3779F9
BAND_SEED = 0x85EBCA77C2B2AE63
FMIX_1 = 0xFF51AFD7ED558CCD
FMIX_2 = 0xC4CEB9FE1A85EC53

# Version of the fingerprint definition; stored with every artifact so an upstream built by
# a different definition is refused instead of silently compared.
FINGERPRINT_VERSION = "wd64-v1"


def fmix64(value: int) -> int:
    value &= MASK64
    value ^= value >> 33
    value = (value * FMIX_1) & MASK64
    value ^= value >> 33
    value = (value * FMIX_2) & MASK64
    value ^= value >> 33
    return value


def rotl64(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (64 - bits))) & MASK64


def token_hash(token: str | bytes) -> int:
    data = token.encode("utf-8") if isinstance(token, str) else token
    state = TOKEN_SEED
    for start in range(0, len(data), 8):
        word = int.from_bytes(data[start : start + 8].ljust(8, b"\0"), "little")
        state = rotl64(((state ^ word) * PRIME_2) & MASK64, 31)
    return fmix64(state ^ len(data))


def shingle_hash(window: Sequence[int]) -> int:
    state = SHINGLE_SEED
    for value in window:
        state = rotl64(((state ^ value) * PRIME_1) & MASK64, 27)
    return fmix64(state ^ len(window))


def band_hash(band_index: int, values: Sequence[int]) -> int:
    """Key of one LSH band; the band index is part of the key."""
    state = fmix64(BAND_SEED ^ band_index)
    for value in values:
        state = rotl64(((state ^ value) * PRIME_2) & MASK64, 31)
    return fmix64(state)


def to_int64(value: int) -> int:
    """Reinterpret an unsigned 64-bit value as signed (how Parquet and DuckDB store it)."""
    return value - (1 << 64) if value >= 1 << 63 else value
