"""Fingerprints for Arrow string columns: prepare the text, then run the compiled kernel."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import kernel
from .normalize import normalize_text


def prepare_texts(texts: pa.Array | pa.ChunkedArray) -> pa.LargeStringArray:
    """ASCII documents pass through raw (the kernel lowercases and splits them); every other
    document is replaced by normalize_text, which handles the full Unicode rules."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks() if texts.num_chunks else pa.array([], pa.large_string())
    texts = texts.cast(pa.large_string()).fill_null("")
    ascii_mask = pc.string_is_ascii(texts)
    if pc.all(ascii_mask).as_py() in (True, None):
        return texts
    values = texts.to_pylist()
    flags = ascii_mask.to_pylist()
    return pa.array(
        [value if flag else normalize_text(value) for value, flag in zip(values, flags)],
        type=pa.large_string(),
    )


def string_buffers(texts: pa.LargeStringArray) -> tuple[np.ndarray, np.ndarray]:
    """Zero-copy (data bytes, int64 offsets) views of a large_string array."""
    buffers = texts.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64)[texts.offset : texts.offset + len(texts) + 1]
    data = buffers[2]
    data_view = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(1, np.uint8)
    return data_view, offsets


def fingerprint_texts(
    texts: pa.Array | pa.ChunkedArray, shingle_size: int, coeff_a: np.ndarray, coeff_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(token_counts, shingle_counts, signatures[n, num_perm] uint32) for a batch of texts."""
    if shingle_size < 1:
        raise ValueError(f"shingle_size must be >= 1, got {shingle_size}")
    data, offsets = string_buffers(prepare_texts(texts))
    return kernel.fingerprint_batch(data, offsets, shingle_size, coeff_a, coeff_b)


def shingle_sets(texts: pa.Array | pa.ChunkedArray, shingle_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique shingle hashes per text, flattened, with offsets."""
    data, offsets = string_buffers(prepare_texts(texts))
    return kernel.shingle_sets_batch(data, offsets, shingle_size)
