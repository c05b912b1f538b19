"""Pinned cases of the fuzz test's fixed entries (issue 16; tests/test_fuzz_records.py's
``FUZZ_OPEN`` and tests/test_nonfinite.py's ``OPEN``): each the entry's input, its value and
gradients against torch 2.13, or the library's clear error where torch refuses."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrules.nn as nn

torch = pytest.importorskip("torch")


# ----------------------------------------------------------------------------------------------
# layer_norm / rms_norm: a 0-d input (was IndexError in the kernel records' wrappers)


@pytest.mark.parametrize("impl", ["xla", "pallas_interpret"])
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_norm_empty_normalized_shape(op, impl):
    x = jnp.asarray(1.5)
    with pytest.raises(RuntimeError, match="at least 1-dimensional"):  # torch refuses too
        getattr(torch.nn.functional, op)(torch.tensor(1.5), ())
    with pytest.raises(ValueError, match=f"{op}: normalized_shape must name at least one axis"):
        getattr(nn, op)(x, x.shape[-1:], impl=impl)
    with pytest.raises(ValueError, match=f"{op}: normalized_shape"):
        getattr(nn, op)(x, 1, impl=impl)


# ----------------------------------------------------------------------------------------------
# nll_loss / cross_entropy: an empty class axis (was IndexError / TypeError inside JAX's gather)


@pytest.mark.parametrize("op", ["nll_loss", "cross_entropy"])
@pytest.mark.parametrize("shape, target", [((0,), 1), ((4, 0, 3), [[0, 1, -100]] * 4)])
def test_class_loss_no_classes(op, shape, target):
    with pytest.raises((IndexError, RuntimeError)):  # torch: "Target 1 is out of bounds" (1-d), "size mismatch"
        getattr(torch.nn.functional, op)(torch.zeros(shape, dtype=torch.float64), torch.tensor(target))
    with pytest.raises(ValueError, match=f"{op}: input has an empty class axis"):
        getattr(nn, op)(jnp.zeros(shape), jnp.asarray(target))


@pytest.mark.parametrize("op", ["nll_loss", "cross_entropy"])
def test_class_loss_no_classes_no_targets(op):
    """No target at all: nothing is out of range; the mean of nothing is NaN, as torch's."""
    x, t = np.zeros((0, 0)), np.zeros(0, np.int64)
    expected = getattr(torch.nn.functional, op)(torch.tensor(x), torch.tensor(t))
    value, grad = jax.value_and_grad(lambda x: getattr(nn, op)(x, jnp.asarray(t)))(jnp.asarray(x))
    np.testing.assert_equal(np.asarray(value), expected.numpy())
    assert grad.shape == (0, 0)
