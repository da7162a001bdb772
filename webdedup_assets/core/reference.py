"""Plain-Python reference fingerprint: the definition the compiled kernel must match.

Slow on purpose (one Python step per token, shingle and permutation); used by the tests
and for debugging a single document, never by the engine.
"""

from __future__ import annotations

from .hashing import MASK64, shingle_hash, token_hash
from .normalize import normalize_text, text_tokens


def shingle_windows(token_hashes: list[int], shingle_size: int) -> list[list[int]]:
    """Ordered windows of shingle_size tokens; fewer tokens -> one whole-text window."""
    if not token_hashes:
        return []
    if len(token_hashes) < shingle_size:
        return [token_hashes]
    return [token_hashes[i : i + shingle_size] for i in range(len(token_hashes) - shingle_size + 1)]


def char_tokens(text: str | None) -> list[str]:
    """The shingle unit `char`: every character of the normalized text, the spaces between words
    included (normalize_text leaves one space per separator run, none at either end)."""
    return list(normalize_text(text))


def unit_tokens(text: str | None, unit: str = "word") -> list[str]:
    if unit not in ("word", "char"):
        raise ValueError(f"unknown shingle unit {unit!r}")
    return char_tokens(text) if unit == "char" else text_tokens(text)


def shingle_set(text: str | None, shingle_size: int, unit: str = "word") -> set[int]:
    hashes = [token_hash(token) for token in unit_tokens(text, unit)]
    return {shingle_hash(window) for window in shingle_windows(hashes, shingle_size)}


def minhash_signature(shingles: set[int], coeff_a: list[int], coeff_b: list[int]) -> list[int]:
    """((a*h + b) mod 2^64) >> 32, minimized over shingles; empty set -> all 0xFFFFFFFF."""
    signature = []
    for a, b in zip(coeff_a, coeff_b):
        best = 0xFFFFFFFF
        for value in shingles:
            best = min(best, (((a * value + b) & MASK64) >> 32))
        signature.append(best)
    return signature


def jaccard(left: set[int], right: set[int]) -> float:
    if not left and not right:
        return 0.0
    return len(left & right) / len(left | right)


def shingle_list(text: str | None, shingle_size: int, unit: str = "word") -> list[int]:
    """Every window's shingle hash in text order, repeats kept (what SimHash weighs)."""
    hashes = [token_hash(token) for token in unit_tokens(text, unit)]
    return [shingle_hash(window) for window in shingle_windows(hashes, shingle_size)]


def simhash(shingles: list[int]) -> int:
    """Bit b is set when more than half of the shingle hashes (repeats counted: term-frequency
    weights) have it set; no shingles -> 0."""
    value = 0
    for bit in range(64):
        ones = sum((h >> bit) & 1 for h in shingles)
        if 2 * ones > len(shingles):
            value |= 1 << bit
    return value
