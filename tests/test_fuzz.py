"""Property-based fuzzing of a representative set of ops:
elementwise, reductions with an axis, activations and losses, on small shapes (0-d, size 1, size
0, two axes with an empty one) and values with NaN and +-inf, in float64 and float32.

For each drawn case:

* the op either returns, or raises the library's own ``ValueError``/``TypeError`` naming the op,
  and only where the semantic reference (jax.numpy for a jax.numpy name, jax.nn for the
  softmaxes, torch 2.13 for the torch names) refuses the input too — never an internal JAX/XLA
  error, a Python crash, or a refusal of what the reference accepts; it may accept what the
  reference refuses only where torch accepts it (axis 0 or -1 of a 0-d array, ``_validate.axes``),
  and then matches torch;
* the value has the reference's shape and dtype, and equals it where both are finite, with the
  same NaN positions;
* the gradient of ``sum(out)`` equals torch's autograd (torch's derivative conventions: every op
  here is a pointwise function or a reduction torch has) where both are finite.

The shapes come from a few buckets so that XLA's compiled programs are reused; ``derandomize``
makes the examples the same on every run (CI reproducibility), ``max_examples`` (5 per op) keeps
the file within about 15 s on 2 cores; ``JAXRULES_FUZZ_EXAMPLES=N`` runs N per op."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import jaxrules.nn as rnn
import jaxrules.numpy as rnp

SHAPES = [(), (1,), (0,), (4,), (2, 3), (0, 3), (3, 0)]
DTYPES = [np.float64, np.float32]
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0]
RTOL = {np.dtype(np.float64): 1e-9, np.dtype(np.float32): 1e-5}
# JAXRULES_FUZZ_EXAMPLES=200 runs many more (a search, not CI).
FUZZ = settings(max_examples=int(os.environ.get("JAXRULES_FUZZ_EXAMPLES", "5")), deadline=None, derandomize=True,
                database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _elements(dtype):
    width = 64 if dtype == np.float64 else 32
    finite = st.floats(-4.0, 4.0, width=width, allow_subnormal=False)  # (XLA on CPU flushes subnormals to 0)
    return st.one_of(finite, finite, finite, st.sampled_from(SPECIAL))


@st.composite
def arrays(draw, shapes=SHAPES, dtype=None):
    """A float array of one of ``shapes``, with NaN, +-inf and signed zeros likely."""
    dtype = draw(st.sampled_from(DTYPES)) if dtype is None else dtype
    return draw(hnp.arrays(dtype, draw(st.sampled_from(shapes)), elements=_elements(dtype)))


@dataclasses.dataclass(frozen=True)
class Op:
    """``ours(*arrays, **kw)`` against ``ref`` (the semantics: values, shape, dtype, whether the
    input is refused; None: torch's) and ``torch_fn`` (the gradient), the keywords drawn by
    ``draw_kw(draw, x)``."""

    name: str
    ours: Callable
    ref: Callable
    torch_fn: Callable
    n_arrays: int = 1
    draw_kw: Callable = lambda draw, x: {}
    no_grad: tuple[int, ...] = ()  # arrays torch does not differentiate
    documented: Callable | None = None  # xs -> the entries of a documented deviation (not compared)
    shapes: tuple[tuple[int, ...], ...] = tuple(SHAPES)


def _axis(draw, x, none=True):
    """An axis of ``x`` (negative ones too), one out of range, or None."""
    options = list(range(-x.ndim - 1, x.ndim + 1))
    return draw(st.sampled_from(options + [None] if none else options))


def _reduction_kw(draw, x):
    return {"axis": _axis(draw, x), "keepdims": draw(st.booleans())}


def _torch_reduce(fn, *, all_fn=None):
    """torch's reduction over ``axis`` (None: every axis, through a flattened view)."""
    def run(t, axis=None, keepdims=False):
        if axis is None:
            out = (all_fn or fn)(t.reshape(-1), 0)
            return out.reshape((1,) * t.ndim) if keepdims else out
        return fn(t, axis, keepdim=keepdims)
    return run


def _moment_kw(draw, x):
    return {**_reduction_kw(draw, x), "ddof": draw(st.integers(0, 3))}


def _torch_moment(fn, ddof):
    return lambda t, axis, keepdim=False: fn(t, axis, correction=ddof, keepdim=keepdim)


def _scan_kw(draw, x):
    return {"axis": _axis(draw, x, none=False)}


def _loss_kw(draw, x):
    return {"reduction": draw(st.sampled_from(["none", "mean", "sum"]))}


OPS = [
    # jax.numpy names: jax.numpy's semantics, torch's derivatives.
    Op("abs", rnp.abs, jnp.abs, torch.abs),
    Op("log1p", rnp.log1p, jnp.log1p, torch.log1p),
    Op("sum", rnp.sum, jnp.sum, _torch_reduce(torch.sum), draw_kw=_reduction_kw),
    Op("mean", rnp.mean, jnp.mean, _torch_reduce(torch.mean), draw_kw=_reduction_kw),
    Op("max", rnp.max, jnp.max, _torch_reduce(torch.amax), draw_kw=_reduction_kw),
    Op("prod", rnp.prod, jnp.prod, _torch_reduce(torch.prod), draw_kw=_reduction_kw),
    Op("logsumexp", rnn.logsumexp, jax.nn.logsumexp, _torch_reduce(torch.logsumexp), draw_kw=_reduction_kw),
    Op("min", rnp.min, jnp.min, _torch_reduce(torch.amin), draw_kw=_reduction_kw),
    Op("var", rnp.var, jnp.var, lambda t, ddof=0, **kw: _torch_reduce(_torch_moment(torch.var, ddof))(t, **kw),
       draw_kw=_moment_kw),
    Op("std", rnp.std, jnp.std, lambda t, ddof=0, **kw: _torch_reduce(_torch_moment(torch.std, ddof))(t, **kw),
       draw_kw=_moment_kw),
    Op("cumsum", rnp.cumsum, jnp.cumsum, lambda t, axis: torch.cumsum(t, axis), draw_kw=_scan_kw),
    Op("cumprod", rnp.cumprod, jnp.cumprod, lambda t, axis: torch.cumprod(t, axis), draw_kw=_scan_kw),
    # (open, ops/reductions.py: logcumsumexp refuses a 0-d input, torch accepts it with dim 0 or -1)
    Op("logcumsumexp", rnp.logcumsumexp, None, lambda t, axis: torch.logcumsumexp(t, axis), draw_kw=_scan_kw,
       shapes=tuple(shape for shape in SHAPES if shape)),
    # jax.nn names with torch's extras: jax.nn's semantics for the softmaxes, torch's otherwise.
    Op("softmax", rnn.softmax, jax.nn.softmax, lambda t, axis: torch.softmax(t, axis), draw_kw=_scan_kw),
    Op("log_softmax", rnn.log_softmax, jax.nn.log_softmax, lambda t, axis: torch.log_softmax(t, axis),
       draw_kw=_scan_kw),
    Op("relu", rnn.relu, None, F.relu),
    Op("silu", rnn.silu, None, F.silu),
    # (gelu: torch's float32 exact kernel gives NaN at +inf, where x Phi(x) is +inf, as in float64)
    Op("gelu", lambda x: rnn.gelu(x, approximate=False), None, F.gelu,
       documented=lambda xs: (xs[0] == np.inf) & (xs[0].dtype == np.float32)),
    Op("elu", rnn.elu, None, F.elu),
    Op("softplus", rnn.softplus, None, F.softplus),
    Op("hardtanh", rnn.hardtanh, None, F.hardtanh),
    Op("leaky_relu", rnn.leaky_relu, None, F.leaky_relu),
    Op("log_sigmoid", rnn.log_sigmoid, None, F.logsigmoid),
    # torch names: torch's semantics.
    Op("mse_loss", rnn.mse_loss, None, F.mse_loss, 2, _loss_kw),
    Op("l1_loss", rnn.l1_loss, None, F.l1_loss, 2, _loss_kw),
    Op("huber_loss", rnn.huber_loss, None, F.huber_loss, 2, _loss_kw),
    Op("smooth_l1_loss", rnn.smooth_l1_loss, None, F.smooth_l1_loss, 2, _loss_kw),
    Op("soft_margin_loss", rnn.soft_margin_loss, None, F.soft_margin_loss, 2, _loss_kw, no_grad=(1,)),
    # (bce_with_logits at x = -inf, and at x = +inf with y = 1: the limit, where torch's (1 - y) x - logsigmoid(x)
    # is -inf + inf or 0 inf; see its docstring and TORCH_WRONG in tests/test_nonfinite.py)
    Op("binary_cross_entropy_with_logits", rnn.binary_cross_entropy_with_logits, None,
       F.binary_cross_entropy_with_logits, 2, _loss_kw,
       documented=lambda xs: (xs[0] == -np.inf) | ((xs[0] == np.inf) & (xs[1] == 1))),
    # (kl_div: 0 at target 0 and an infinite input, where torch's 0 inf is NaN, see its docstring; +inf at target
    # +inf, where torch's xlogy(t, t) - t x is inf - inf for x >= 0, TORCH_WRONG in tests/test_nonfinite.py)
    Op("kl_div", rnn.kl_div, None, F.kl_div, 2, _loss_kw,
       documented=lambda xs: ((xs[1] == 0) & np.isinf(xs[0])) | (xs[1] == np.inf)),
]


def _torch_run(op, xs, kw, grad=True):
    """torch's value and (``grad``) the gradient of ``sum(out)`` for each array (None where torch
    gives none)."""
    ts = [torch.tensor(x, requires_grad=grad and i not in op.no_grad) for i, x in enumerate(xs)]
    out = op.torch_fn(*ts, **kw)
    if not grad:
        return out.numpy(), None
    wrt = [t for t in ts if t.requires_grad]
    found = iter(torch.autograd.grad(out.sum(), wrt, allow_unused=True))
    grads = [next(found) if t.requires_grad else None for t in ts]
    return out.detach().numpy(), [None if g is None else g.numpy() for g in grads]


def _reference(op, xs, kw):
    """The semantic reference's value, or the exception it raises."""
    try:
        if op.ref is not None:
            return np.asarray(op.ref(*xs, **kw))
        return _torch_run(op, xs, kw, grad=False)[0]
    except (ValueError, TypeError, IndexError, RuntimeError) as err:  # jnp: ValueError; torch: IndexError/...
        return err


def _assert_close(what, ours, expected, dtype, skip=False):
    """Shapes equal; entries equal within the dtype's tolerance where both are finite and not
    ``skip``ped."""
    ours, expected = np.asarray(ours, np.float64), np.asarray(expected, np.float64)
    assert ours.shape == expected.shape, f"{what}: shape {ours.shape}, expected {expected.shape}"
    compared = np.isfinite(ours) & np.isfinite(expected) & ~np.broadcast_to(skip, ours.shape)
    with np.errstate(invalid="ignore"):
        err = np.where(compared, np.abs(ours - expected) / np.maximum(1.0, np.abs(expected)), 0.0)
    assert not (err > RTOL[np.dtype(dtype)]).any(), f"{what}: {ours} vs {expected}"


@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
@FUZZ
@given(data=st.data())
def test_fuzz(op, data):
    x = data.draw(arrays(op.shapes), "x")
    xs = [x] + [data.draw(arrays([x.shape], x.dtype), f"arg{i}") for i in range(1, op.n_arrays)]
    kw = op.draw_kw(data.draw, x)
    expected = _reference(op, xs, kw)
    try:
        ours = op.ours(*xs, **kw)
    except (ValueError, TypeError) as err:
        assert op.name in str(err), f"{op.name} raised without naming itself: {err!r}"
        assert isinstance(expected, Exception), f"{op.name} refused what the reference accepts: {err}"
        return
    if isinstance(expected, Exception):  # accepted only as torch does (its dims 0 and -1 of a 0-d array)
        try:
            expected = _torch_run(op, xs, kw, grad=False)[0]
        except (RuntimeError, IndexError, ValueError, TypeError):
            raise AssertionError(f"{op.name} accepted what the reference and torch refuse: {expected!r}") from None
    assert ours.shape == expected.shape and ours.dtype == expected.dtype, \
        f"{op.name}: {ours.dtype}{list(ours.shape)}, expected {expected.dtype}{list(expected.shape)}"
    skip = False
    if op.documented is not None:  # a pointwise deviation: those entries (all of a reduced loss) are not compared
        skip = op.documented(xs)
        skip = skip if skip.shape == expected.shape else skip.any()
    _assert_close(f"{op.name} value", ours, expected, x.dtype, skip)
    np.testing.assert_array_equal(np.isnan(ours) | skip, np.isnan(expected) | skip, err_msg=f"{op.name}: NaN positions")

    # Gradients on finite inputs (the non-finite conventions are tests/test_nonfinite.py's).
    if not all(np.isfinite(a).all() for a in xs):
        return
    try:
        _, t_grads = _torch_run(op, xs, kw)
    except (RuntimeError, IndexError):  # torch refuses what jax.numpy accepts (e.g. amax over an empty axis)
        return
    grads = jax.grad(lambda *a: jnp.sum(op.ours(*a, **kw)), argnums=tuple(range(len(xs))))(*xs)
    for i, (g, tg) in enumerate(zip(grads, t_grads)):
        if tg is not None:
            _assert_close(f"{op.name} gradient of arg{i}", g, tg, x.dtype)
