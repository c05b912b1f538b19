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


# ----------------------------------------------------------------------------------------------
# embedding / embedding_bag: an empty (0, d) table (was IndexError from jnp.take)


def test_embedding_empty_table():
    w = np.zeros((0, 3))
    with pytest.raises(RuntimeError):  # torch: "index_select(): self indexing axis dim should be positive"
        torch.nn.functional.embedding(torch.tensor([[0, 1]]), torch.tensor(w))
    with pytest.raises(ValueError, match="embedding: weight has no rows"):
        nn.embedding(jnp.array([[0, 1]]), jnp.asarray(w))
    # no index: an empty lookup, as torch
    none = np.zeros((2, 0), np.int64)
    expected = torch.nn.functional.embedding(torch.tensor(none), torch.tensor(w))
    out, grad = jax.value_and_grad(lambda w: nn.embedding(jnp.asarray(none), w).sum())(jnp.asarray(w))
    assert nn.embedding(jnp.asarray(none), jnp.asarray(w)).shape == tuple(expected.shape) == (2, 0, 3)
    assert grad.shape == (0, 3)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_empty_table(mode):
    w = np.zeros((0, 2))
    with pytest.raises(RuntimeError):  # torch: "Expected idx >= 0 && idx < num_embeddings"
        torch.nn.functional.embedding_bag(torch.tensor([[0, 1]]), torch.tensor(w), mode=mode)
    with pytest.raises(ValueError, match="embedding_bag: weight has no rows"):
        jax.jit(lambda w: nn.embedding_bag(jnp.array([[0, 1]]), w, mode=mode))(jnp.asarray(w))
    # no index: every bag empty, zeros, as torch
    none, offsets = np.zeros(0, np.int64), np.array([0, 0])
    expected = torch.nn.functional.embedding_bag(torch.tensor(none), torch.tensor(w), torch.tensor(offsets), mode=mode)
    out = nn.embedding_bag(jnp.asarray(none), jnp.asarray(w), jnp.asarray(offsets), mode=mode)
    np.testing.assert_array_equal(np.asarray(out), expected.numpy())
    grad = jax.grad(lambda w: nn.embedding_bag(jnp.asarray(none), w, jnp.asarray(offsets), mode=mode).sum())
    assert grad(jnp.asarray(w)).shape == (0, 2)
