"""Fingerprints for Arrow string columns: the compiled kernel, and the exact normalizer for the
rare documents it flags."""

from __future__ import annotations

import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import kernel, unicode_tables


def _large(data: np.ndarray, offsets: np.ndarray) -> pa.LargeStringArray:
    return pa.LargeStringArray.from_buffers(len(offsets) - 1, pa.py_buffer(offsets), pa.py_buffer(data))


def normalize_exact(texts: list[str]) -> pa.LargeStringArray:
    """normalize_text for a list, step by step: NFD, drop Mn, NFC, lower in C (unicodedata and
    str), and the two per-character translate steps in the compiled kernel."""
    marks = unicode_tables.nonspacing_marks()
    separator = unicode_tables.tables()[3]
    decomposed = pa.array([unicodedata.normalize("NFD", t) for t in texts], pa.large_string())
    data, offsets = string_buffers(decomposed)
    stripped = _large(*kernel.filter_codepoints(data, offsets, marks)).to_pylist()
    lowered = pa.array([unicodedata.normalize("NFC", t).lower() for t in stripped], pa.large_string())
    data, offsets = string_buffers(lowered)
    return _large(*kernel.collapse_separators(data, offsets, separator))


def string_buffers(texts: pa.LargeStringArray) -> tuple[np.ndarray, np.ndarray]:
    """Zero-copy read-only (data bytes, int64 offsets) views of a large_string array."""
    buffers = texts.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64)[texts.offset : texts.offset + len(texts) + 1]
    data = buffers[2]
    data_view = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(1, np.uint8)
    # Read-only whatever the buffers' origin (Arrow buffers of files and DuckDB are immutable, fresh
    # ones are not): numba then compiles one specialization per kernel, not one per combination.
    data_view.flags.writeable = False
    offsets.flags.writeable = False
    return data_view, offsets


def _as_large(texts: pa.Array | pa.ChunkedArray) -> pa.LargeStringArray:
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks() if texts.num_chunks else pa.array([], pa.large_string())
    return texts.cast(pa.large_string()).fill_null("")


SHINGLE_UNITS = ("word", "char")


def _char_unit(unit: str) -> bool:
    if unit not in SHINGLE_UNITS:
        raise ValueError(f"shingle_unit must be one of {', '.join(SHINGLE_UNITS)}, got {unit!r}")
    return unit == "char"


def fingerprint_texts(
    texts: pa.Array | pa.ChunkedArray,
    shingle_size: int,
    coeff_a: np.ndarray,
    coeff_b: np.ndarray,
    unit: str = "word",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(token_counts, shingle_counts, signatures[n, num_perm] uint32) for a batch of texts.

    unit: word (tokens of core.normalize.tokenize) or char (the characters of the normalized
    text, spaces included: token_counts are then character counts).

    The kernel normalizes while it tokenizes (kernel.token_hashes); the rare documents it flags
    (characters whose normalization depends on their neighbours) are normalized by
    normalize_exact and fingerprinted again as normalized text."""
    if shingle_size < 1:
        raise ValueError(f"shingle_size must be >= 1, got {shingle_size}")
    char_unit = _char_unit(unit)
    texts = _as_large(texts)
    data, offsets = string_buffers(texts)
    tables = unicode_tables.token_tables()
    plain = np.zeros(len(texts), dtype=np.bool_)
    tokens, shingles, signatures, flagged = kernel.fingerprint_batch(
        data, offsets, plain, tables, shingle_size, coeff_a, coeff_b, char_unit
    )
    if flagged.any():
        rows = np.flatnonzero(flagged)
        exact = normalize_exact(texts.take(pa.array(rows)).to_pylist())
        data, offsets = string_buffers(exact)
        done = np.ones(len(rows), dtype=np.bool_)
        tokens[rows], shingles[rows], signatures[rows], _ = kernel.fingerprint_batch(
            data, offsets, done, tables, shingle_size, coeff_a, coeff_b, char_unit
        )
    return tokens, shingles, signatures


def simhash_texts(
    texts: pa.Array | pa.ChunkedArray, shingle_size: int, unit: str = "word"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(token_counts, shingle_counts, uint64 SimHashes) for a batch of texts: the shingles of
    core.fingerprint.fingerprint_texts (the same kernel tokenizer and shingle hashes, the same
    exact-normalizer pass for flagged documents); a document without shingles gets 0."""
    if shingle_size < 1:
        raise ValueError(f"shingle_size must be >= 1, got {shingle_size}")
    char_unit = _char_unit(unit)
    texts = _as_large(texts)
    data, offsets = string_buffers(texts)
    tables = unicode_tables.token_tables()
    plain = np.zeros(len(texts), dtype=np.bool_)
    tokens, shingles, hashes, flagged = kernel.simhash_batch(data, offsets, plain, tables, shingle_size, char_unit)
    if flagged.any():
        rows = np.flatnonzero(flagged)
        exact = normalize_exact(texts.take(pa.array(rows)).to_pylist())
        data, offsets = string_buffers(exact)
        done = np.ones(len(rows), dtype=np.bool_)
        tokens[rows], shingles[rows], hashes[rows], _ = kernel.simhash_batch(
            data, offsets, done, tables, shingle_size, char_unit
        )
    return tokens, shingles, hashes


def _sets_with_exact_pass(texts: pa.Array | pa.ChunkedArray, unit: str, run):
    """Shingle sets of a batch by `run(data, offsets, normalized, tables, char_unit) -> (result,
    flagged)`, and again with the flagged documents normalized exactly (as fingerprint_texts
    does) when there are any; returns run's result."""
    char_unit = _char_unit(unit)
    texts = _as_large(texts)
    data, offsets = string_buffers(texts)
    tables = unicode_tables.token_tables()
    result, flagged = run(data, offsets, np.zeros(len(texts), dtype=np.bool_), tables, char_unit)
    if flagged.any():
        mask = pa.array(flagged)
        texts = pc.replace_with_mask(texts, mask, normalize_exact(texts.filter(mask).to_pylist()))
        data, offsets = string_buffers(texts)
        result, _ = run(data, offsets, flagged, tables, char_unit)
    return result


def shingle_sets(
    texts: pa.Array | pa.ChunkedArray, shingle_size: int, unit: str = "word"
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique shingle hashes per text, flattened, with offsets (flagged documents as in
    fingerprint_texts: the batch is hashed again with them normalized exactly; unit as there)."""

    def run(data, offsets, normalized, tables, char_unit):
        flat, set_offsets, flagged = kernel.shingle_sets_batch(
            data, offsets, normalized, tables, shingle_size, char_unit
        )
        return (flat, set_offsets), flagged

    return _sets_with_exact_pass(texts, unit, run)


def shingle_sets_into(
    texts: pa.Array | pa.ChunkedArray, shingle_size: int, unit: str, out: np.ndarray
) -> np.ndarray | None:
    """shingle_sets written into `out` (uint64, room for the texts' shingle windows: their
    shingle_count in fingerprinted) instead of new arrays: the offsets of the sets in `out`, or
    None when they do not fit (the texts are not those fingerprinted)."""

    def run(data, offsets, normalized, tables, char_unit):
        set_offsets, flagged, fits = kernel.shingle_sets_into(
            data, offsets, normalized, tables, shingle_size, char_unit, out
        )
        if not fits:  # no exact pass: the batch is refused
            return None, np.zeros_like(flagged)
        return set_offsets, flagged

    return _sets_with_exact_pass(texts, unit, run)


def shingling(fingerprint: dict) -> tuple[int, str]:
    """(shingle_size, shingle_unit) of stored fingerprint parameters; artifacts written before the
    unit existed are word shingles."""
    return int(fingerprint["shingle_size"]), str(fingerprint.get("shingle_unit", "word"))


def fingerprint_method(fingerprint: dict) -> str:
    """minhash or simhash of stored fingerprint parameters (stored only when not minhash)."""
    return str(fingerprint.get("fingerprint_method", "minhash"))


def signature_width(fingerprint: dict) -> int:
    """uint32 values per document in fingerprinted's signature column: num_perm, or the two
    words of a SimHash (core.simhash.to_words)."""
    return 2 if fingerprint_method(fingerprint) == "simhash" else int(fingerprint["num_perm"])


def signatures_of(
    texts: pa.Array | pa.ChunkedArray, fingerprint: dict, coefficients: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(token_counts, shingle_counts, signatures[n, signature_width] uint32) of a batch of texts
    under stored (or dumped) fingerprint parameters: MinHash values, or a SimHash as two words.
    coefficients: the MinHash ones when the caller holds them already."""
    from .minhash import MinHashParams
    from .simhash import to_words

    size, unit = shingling(fingerprint)
    if fingerprint_method(fingerprint) == "simhash":
        tokens, shingles, hashes = simhash_texts(texts, size, unit)
        return tokens, shingles, to_words(hashes)
    if coefficients is None:
        coefficients = MinHashParams(int(fingerprint["num_perm"]), int(fingerprint["seed"])).coefficients()
    return fingerprint_texts(texts, size, *coefficients, unit)
