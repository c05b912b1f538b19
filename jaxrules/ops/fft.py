"""Discrete Fourier transforms (``jaxrules.numpy.fft``, the ``jax.numpy.fft`` signatures): one
op per transform kind, the formulas ``fft_jvp`` / ``fft_vjp`` beside them (seed
``fft_r2c_backward``, ``fft_c2r_backward``; c2c is its own transpose)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from jaxrules import _validate as V
from jaxrules import partials as P
from jaxrules._namespace import exported_as
from jaxrules.mechanism import define_op

# ----------------------------------------------------------------------------------------------
# Ops

_KINDS = ("fft", "ifft", "rfft", "irfft")
_NORMS = (None, "backward", "ortho", "forward")


def fft_jvp(_, t, *, kind, sizes, axes, norm, shape):
    """The transform of the tangent (seed: fft_r2c / fft_c2r / fft_c2c are linear)."""
    return P.fft_apply(kind, t, sizes, axes, norm)


# The DFT matrix is symmetric, so in JAX's convention (transpose, no conjugate) the VJP of a
# transform is the same transform of the cotangent, resized to the input.
def _with_length(shape, axis, n):
    shape = list(shape)
    shape[axis] = n
    return tuple(shape)


_FORWARD = {"fft": "fft", "fftn": "fft", "rfft": "fft", "rfftn": "fft", "ifft": "ifft", "ifftn": "ifft",
            "irfft": "ifft", "irfftn": "ifft"}


def fft_vjp(_, ct, *, kind, sizes, axes, norm, shape):
    """c2c (fft, ifft, fftn, ifftn): the same transform of ``ct``. r2c (rfft, rfftn; seed
    ``fft_r2c_backward``): ``Re fft(zero-pad(ct))``. c2r (irfft, irfftn; seed
    ``fft_c2r_backward``): ``w o ifft(ct)`` on the stored half, ``w_j`` = 1 for the DC and
    Nyquist terms and 2 for the others. The result is cut or zero-padded back to the input."""
    last = axes[-1]
    if kind.startswith("r"):  # pad the half spectrum back to the full signal length
        ct = P.resize(ct, _with_length(ct.shape, last, sizes[-1]), (last,))
    out = P.fft_apply(_FORWARD[kind], ct, sizes, axes, norm)
    if kind.startswith("r"):
        out = out.real
    if kind.startswith("ir"):
        m = sizes[-1] // 2 + 1
        weights = P.hermitian_weights(sizes[-1], m, out.real.dtype)
        weights = jnp.expand_dims(weights, tuple(range(1, out.ndim - last % out.ndim))).astype(out.dtype)
        out = P.resize(out, _with_length(out.shape, last, m), (last,)) * P.with_rank(weights, out.ndim)
    return (P.resize(out, shape, axes),)


fft_op = define_op(
    "fft",
    lambda x, *, kind, sizes, axes, norm, shape: P.fft_apply(kind, x, sizes, axes, norm),
    fft_jvp,
    fft_vjp,
    lambda out, x, **_: (),
)


# ----------------------------------------------------------------------------------------------
# Public functions

class RepeatedAxesError(ValueError, TypeError):
    """Repeated FFT axes. jax.numpy raises ``ValueError`` for an axis given twice alike and
    ``TypeError`` (from its transpose) for one given as ``1`` and ``-1``; this is both, so the
    ``except`` a port from jax.numpy has catches it either way."""


def _transform(kind, a, sizes, axes, norm, name, axes_arg="axes"):
    """Validate and call the op; ``sizes`` per axis (None: the input's length, or for the last
    axis of a c2r transform ``2 (m - 1)``); ``axes_arg``: the caller's name for ``axes``."""
    if norm not in _NORMS:
        raise ValueError(f"{name}: norm must be None, 'backward', 'ortho' or 'forward', got {norm!r}")
    x = V.array(name, "a", a)
    if kind in ("irfft",) and not np.issubdtype(x.dtype, np.complexfloating):
        x = x.astype(np.result_type(x.dtype, np.complex64))
    if x.ndim == 0:
        raise ValueError(f"{name}: a must have rank >= 1")
    axes = tuple(V.single_axis(name, x.ndim, ax, axes_arg) for ax in axes)
    if len(set(axes)) != len(axes):
        raise RepeatedAxesError(f"{name}: axes {axes} repeat an axis")
    empty_last_r2c = kind == "rfft" and x.shape[axes[-1]] == 0  # jax.numpy: an XLA verifier error
    if any(x.shape[ax] == 0 and n is None for ax, n in zip(axes, sizes)) and not empty_last_r2c:
        # an empty transformed axis at its own length: the empty array of jax.numpy.fft's shape
        # and dtype, a constant (JAX's own c2r derivative there divides by the length 0)
        jax_fn = getattr(jnp.fft, name)
        if axes_arg == "axis":
            out = jax.eval_shape(lambda v: jax_fn(v, axis=axes[0], norm=norm), x)
        else:
            out = jax.eval_shape(lambda v: jax_fn(v, s=None if None in sizes else sizes, axes=axes, norm=norm), x)
        return jnp.zeros(out.shape, out.dtype)
    resolved = []
    for k, (ax, n) in enumerate(zip(axes, sizes)):
        if n is None:
            n = 2 * (x.shape[ax] - 1) if kind == "irfft" and k == len(axes) - 1 else x.shape[ax]
        if not isinstance(n, int | np.integer) or isinstance(n, bool) or n < 1:
            raise ValueError(f"{name}: signal lengths must be positive ints, got {n!r}")
        resolved.append(int(n))
    return fft_op(x, kind=kind, sizes=tuple(resolved), axes=axes, norm=norm, shape=x.shape)


# What the docstrings say of each kind: (what it computes, its rule, the input, the output, the
# length argument's meaning and its default).
_KIND_DOCS = {
    "fft": ("the discrete Fourier transform", "complex to complex: linear, the VJP the transform itself (the DFT matrix is symmetric)",
            "the signal, real or complex (integer and boolean input is promoted to float)",
            "the complex spectrum, of ``a``'s shape with the transformed lengths",
            "the signal length: the input is cut or zero-padded to it", "the input's length"),
    "ifft": ("the inverse discrete Fourier transform", "complex to complex: linear, the VJP the transform itself (the DFT matrix is symmetric)",
             "the spectrum, real or complex (integer and boolean input is promoted to float)",
             "the complex signal, of ``a``'s shape with the transformed lengths",
             "the signal length: the input is cut or zero-padded to it", "the input's length"),
    "rfft": ("the discrete Fourier transform of a real signal (the non-negative frequencies)",
             "real to complex: seed ``fft_r2c_backward``",
             "the real signal (integer and boolean input is promoted to float; complex input raises "
             "``ValueError``)",
             "the complex half spectrum: ``n//2+1`` terms along the last transformed axis",
             "the signal length: the input is cut or zero-padded to it", "the input's length"),
    "irfft": ("the inverse of ``rfft``: a real signal from its non-negative-frequency terms",
              "complex to real: seed ``fft_c2r_backward``",
              "the half spectrum (real input is cast to complex)",
              "the real signal, of the output lengths along the transformed axes",
              "the output length ``n`` (the input is cut or zero-padded to ``n//2+1`` terms along the "
              "last transformed axis)", "the input's length, ``2 (m - 1)`` along the last transformed axis "
              "for its length ``m``"),
}

_NORM_DOC = ('``None`` or ``"backward"`` (the forward transform unscaled, the inverse scaled by ``1/n``), '
             '``"ortho"`` (``1/sqrt(n)`` both ways) or ``"forward"`` (the forward scaled by ``1/n``); '
             "``ValueError`` otherwise")


def _doc(name, kind, length_args):
    what, rule, x, out, length, default = _KIND_DOCS[kind]
    doc = (f"``jax.numpy.fft.{name}`` with hand-written rules (``vjp_rules.fft_vjp``): {what}; {rule}.\n"
           f"Mirrors ``torch.fft.{name}``.\n\nArgs:\n    a: {x}.\n{length_args.format(length=length, default=default)}"
           f"    norm: {_NORM_DOC}.\n\nReturns:\n    {out[0].upper() + out[1:]}.\n")
    lines = []
    for line in doc.splitlines():
        indent = line[: len(line) - len(line.lstrip())]
        lines.append(textwrap.fill(line, 96, subsequent_indent=indent + ("    " if indent else "")) if line else "")
    return "\n".join(lines) + "\n"


def _one_axis(kind):
    def transform(a: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = None) -> Array:
        if isinstance(axis, tuple | list):  # jax.numpy's error type for several axes
            raise ValueError(f"{kind}: axis must be a single int, got {axis!r} (several axes: use {kind}n)")
        return _transform(kind, a, (n,), (axis,), norm, kind, axes_arg="axis")

    transform.__name__ = transform.__qualname__ = kind
    transform.__doc__ = _doc(kind, kind, "    n: {length} (a positive int); None: {default} (a length 0: "
                                         "jax.numpy.fft's empty result).\n"
                                         "    axis: the axis to transform (an int; a list or tuple: ``ValueError``, "
                                         "as jax.numpy).\n")
    return transform


def _n_axes(kind):
    name = kind + "n"

    def transform(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
                  norm: str | None = None) -> Array:
        ndim = np.ndim(a)
        if axes is None:
            axes = tuple(range(ndim)) if s is None else tuple(range(ndim - len(s), ndim))
        axes = tuple(axes)
        sizes = (None,) * len(axes) if s is None else tuple(s)
        if len(sizes) != len(axes):
            raise ValueError(f"{name}: s and axes must have the same length, got {s!r} and {axes!r}")
        return _transform(kind, a, sizes, axes, norm, name)

    transform.__name__ = transform.__qualname__ = name
    transform.__doc__ = _doc(name, kind, "    s: per transformed axis, {length} (positive ints); None: {default}.\n"
                                         "    axes: the axes to transform (distinct ints); None: all axes, or the\n"
                                         "        last ``len(s)`` axes when ``s`` is given.\n")
    return transform


fft = exported_as("jaxrules.numpy.fft.fft")(_one_axis("fft"))
ifft = exported_as("jaxrules.numpy.fft.ifft")(_one_axis("ifft"))
rfft = exported_as("jaxrules.numpy.fft.rfft")(_one_axis("rfft"))
irfft = exported_as("jaxrules.numpy.fft.irfft")(_one_axis("irfft"))
fftn = exported_as("jaxrules.numpy.fft.fftn")(_n_axes("fft"))
ifftn = exported_as("jaxrules.numpy.fft.ifftn")(_n_axes("ifft"))
rfftn = exported_as("jaxrules.numpy.fft.rfftn")(_n_axes("rfft"))
irfftn = exported_as("jaxrules.numpy.fft.irfftn")(_n_axes("irfft"))
