"""MinHash permutation parameters, LSH banding and candidate probability (numpy, vectorized)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .hashing import BAND_SEED, FMIX_1, FMIX_2, PRIME_2


@dataclass(frozen=True)
class MinHashParams:
    num_perm: int
    seed: int

    def __post_init__(self) -> None:
        if self.num_perm < 1:
            raise ValueError(f"num_perm must be >= 1, got {self.num_perm}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")

    def coefficients(self) -> tuple[np.ndarray, np.ndarray]:
        """Full-range 64-bit multipliers (odd) and offsets, deterministic for the seed."""
        rng = np.random.default_rng(self.seed)
        coeff_a = rng.integers(0, 2**64, size=self.num_perm, dtype=np.uint64) | np.uint64(1)
        coeff_b = rng.integers(0, 2**64, size=self.num_perm, dtype=np.uint64)
        return coeff_a, coeff_b


def validate_banding(num_perm: int, bands: int, rows: int) -> None:
    if bands < 1 or rows < 1:
        raise ValueError(f"bands and rows must be >= 1, got bands={bands}, rows={rows}")
    if bands * rows != num_perm:
        raise ValueError(
            f"bands x rows must equal num_perm: bands={bands} x rows={rows} = {bands * rows}, "
            f"but the signatures have num_perm={num_perm} values"
        )


def candidate_probability(jaccard: float, bands: int, rows: int) -> float:
    """P(a pair with this Jaccard shares at least one band) = 1 - (1 - J^rows)^bands."""
    return 1.0 - (1.0 - jaccard**rows) ** bands


def _fmix64(values: np.ndarray) -> np.ndarray:
    values = values ^ (values >> np.uint64(33))
    values = values * np.uint64(FMIX_1)
    values = values ^ (values >> np.uint64(33))
    values = values * np.uint64(FMIX_2)
    return values ^ (values >> np.uint64(33))


def band_keys(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(n, num_perm) uint32 signatures -> (n, bands) int64 band keys (core.hashing.band_hash)."""
    count, num_perm = signatures.shape
    validate_banding(num_perm, bands, rows)
    shaped = signatures.reshape(count, bands, rows).astype(np.uint64)
    with np.errstate(over="ignore"):
        state = _fmix64(np.uint64(BAND_SEED) ^ np.arange(bands, dtype=np.uint64))
        state = np.broadcast_to(state, (count, bands)).copy()
        for row in range(rows):
            mixed = (state ^ shaped[:, :, row]) * np.uint64(PRIME_2)
            state = (mixed << np.uint64(31)) | (mixed >> np.uint64(33))
        return _fmix64(state).view(np.int64)


def estimate_jaccard(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Row-wise share of equal MinHash values for two (n, num_perm) arrays."""
    if left.shape[0] == 0:
        return np.zeros(0, dtype=np.float64)
    return (left == right).mean(axis=1)
