"""Sample-input helpers for the op records (deterministic given the generator)."""

from __future__ import annotations

import numpy as np


def normal(rng: np.random.Generator, dtype, *shape: int) -> np.ndarray:
    """Standard normal values of ``dtype`` (complex: independent real and imaginary parts)."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def uniform(rng: np.random.Generator, dtype, low: float, high: float, *shape: int) -> np.ndarray:
    """Uniform values in ``[low, high)``."""
    return rng.uniform(low, high, shape).astype(dtype)


def away_from_zero(rng: np.random.Generator, dtype, *shape: int, margin: float = 0.3) -> np.ndarray:
    """Normal values with magnitude at least ``margin`` (no sample sits on a kink at 0)."""
    x = normal(rng, dtype, *shape)
    mag = np.abs(x)
    return (x / np.where(mag == 0, 1, mag) * (margin + mag)).astype(dtype)


def distinct(rng: np.random.Generator, dtype, *shape: int, gap: float = 0.2) -> np.ndarray:
    """Real values whose sorted order has gaps of at least ``gap`` (no ties)."""
    n = int(np.prod(shape))
    steps = gap + rng.uniform(0, 1, n)
    values = np.cumsum(steps) - steps.sum() / 2
    return rng.permutation(values).reshape(shape).astype(dtype)


def f64(*values) -> np.ndarray:
    """A float64 array from literal values."""
    return np.array(values, dtype=np.float64)
