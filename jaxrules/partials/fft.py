"""Discrete Fourier transforms. Part of ``jaxrules.partials``."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

__all__ = [  # the helpers jaxrules.partials re-exports (formulas write P.<name>)
    "fft_apply", "hermitian_weights", "resize"
]

# Discrete Fourier transforms (``kind`` is the jax.numpy.fft function name).


def fft_apply(kind, x, sizes, axes, norm):
    """``jnp.fft.<kind>`` over ``axes`` with output sizes ``sizes`` (the logical signal lengths)."""
    fn = getattr(jnp.fft, kind + ("n" if not kind.endswith("n") else ""))
    return fn(x, s=sizes, axes=axes, norm=norm)


def resize(x, shape, axes):
    """``x`` cut or zero-padded along ``axes`` to ``shape``'s lengths there (the transpose of
    ``jnp.fft``'s own cut/pad of its input)."""
    for axis in axes:
        n, m = x.shape[axis], shape[axis]
        if n > m:
            x = lax.slice_in_dim(x, 0, m, axis=axis)
        elif n < m:
            widths = [(0, 0)] * x.ndim
            widths[axis] = (0, m - n)
            x = jnp.pad(x, widths)
    return x


def hermitian_weights(n, m, dtype):
    """``w_j`` for the ``m = n//2 + 1`` stored coefficients of a real signal of length ``n``:
    1 for the DC term (and the Nyquist term when n is even), 2 for the others (each stands for
    itself and its conjugate mirror)."""
    j = jnp.arange(m)
    return jnp.where((j == 0) | ((n % 2 == 0) & (j == n // 2)), 1, 2).astype(dtype)
