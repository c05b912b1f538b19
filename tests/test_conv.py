"""conv and max_pool beyond the registry harness: double backward against torch's, max_pool's
indices (ties, NaN, padding, ceil_mode) against torch's, and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jaxrules.nn as nn

RNG = np.random.default_rng(21)


def test_conv_double_backward_matches_torch():
    x, w, b = RNG.standard_normal((2, 4, 6, 5)), RNG.standard_normal((6, 2, 3, 2)), RNG.standard_normal(6)
    g = RNG.standard_normal((2, 6, 3, 5))
    kw = {"stride": (2, 1), "padding": (1, 1), "dilation": (1, 2), "groups": 2}

    def first(x, w, b):  # <g, conv> -> its gradient's squared norm: second order in (x, w)
        grads = jax.grad(lambda *a: jnp.sum(g * nn.conv(*a, **kw)), argnums=(0, 1, 2))(x, w, b)
        return sum(jnp.sum(d**2) for d in grads)

    ours = jax.grad(first, argnums=(0, 1))(x, w, b)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    out = torch.nn.functional.conv2d(tx, tw, tb, (2, 1), (1, 1), (1, 2), 2)
    grads = torch.autograd.grad((torch.tensor(g) * out).sum(), (tx, tw, tb), create_graph=True)
    theirs = torch.autograd.grad(sum((d**2).sum() for d in grads), (tx, tw))
    for a, t in zip(ours, theirs):
        np.testing.assert_allclose(a, t.numpy(), atol=1e-10)


@pytest.mark.parametrize(
    "x, kwargs",
    [
        (np.array([[[1.0, 3.0, 3.0, 2.0, 3.0, 0.0, 5.0]]]), {"kernel_size": 3, "stride": 2, "padding": 1}),
        (np.array([[[1.0, np.nan, 3.0, 2.0, np.nan, 0.0]]]), {"kernel_size": 2}),
        (RNG.integers(0, 3, (2, 3, 5, 7)).astype(float), {"kernel_size": (2, 3), "stride": 2, "ceil_mode": True}),
        (RNG.integers(0, 2, (1, 2, 4, 5, 3)).astype(float), {"kernel_size": 2, "dilation": (1, 2, 1), "padding": 1}),
    ],
)
def test_max_pool_values_indices_and_gradient_match_torch(x, kwargs):
    dims = x.ndim - 2
    values, indices = nn.max_pool(x, return_indices=True, **kwargs)
    tx = torch.tensor(x, requires_grad=True)
    fn = getattr(torch.nn.functional, f"max_pool{dims}d")
    tv, ti = fn(tx, return_indices=True, **kwargs)
    np.testing.assert_array_equal(values, tv.detach().numpy())
    np.testing.assert_array_equal(indices, ti.numpy())
    if not np.isnan(x).any():
        g = RNG.standard_normal(tv.shape)
        (tv * torch.tensor(g)).sum().backward()
        ours = jax.grad(lambda a: jnp.sum(g * nn.max_pool(a, **kwargs)))(x)
        np.testing.assert_array_equal(ours, tx.grad.numpy())


def test_max_pool_double_backward_is_a_gather_at_the_argmax():
    x = RNG.standard_normal((1, 2, 6, 6))
    h = RNG.standard_normal(x.shape)  # direction for the cotangent's derivative
    g = RNG.standard_normal((1, 2, 3, 3))

    def grad_x(g):
        return jax.vjp(lambda a: nn.max_pool(a, 2), x)[1](g)[0]

    _, indices = nn.max_pool(x, 2, return_indices=True)
    # d/dg <h, grad_x(g)> = h read at the argmax (seed max_pool_double_backward)
    ours = jax.grad(lambda g: jnp.sum(h * grad_x(g)))(g)
    expected = np.take_along_axis(h.reshape(1, 2, -1), np.asarray(indices).reshape(1, 2, -1), 2).reshape(g.shape)
    np.testing.assert_allclose(ours, expected)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: nn.conv(np.ones((1, 3, 5)), np.ones((2, 2, 3))), ValueError, "in_channels"),
        (lambda: nn.conv(np.ones((1, 4, 5)), np.ones((3, 2, 3)), groups=2), ValueError, "divisible by groups"),
        (lambda: nn.conv(np.ones((1, 2, 5)), np.ones((2, 2, 3)), stride=0), ValueError, "stride"),
        (lambda: nn.conv(np.ones((1, 2, 5)), np.ones((2, 2, 3)), stride=2, padding="same"), ValueError, "stride 1"),
        (lambda: nn.conv(np.ones((1, 2, 2)), np.ones((2, 2, 3))), ValueError, "smaller than the dilated kernel"),
        (lambda: nn.conv(np.ones((1, 2, 5)), np.ones((2, 2, 3)), np.ones(3)), ValueError, "bias"),
        (lambda: nn.conv2d(np.ones((1, 2, 5)), np.ones((2, 2, 3))), ValueError, "rank 4"),
        (lambda: nn.conv(np.ones((1, 2, 5)) + 1j, np.ones((2, 2, 3))), TypeError, "real"),
        (lambda: nn.max_pool(np.ones((1, 2, 5)), 2, padding=2), ValueError, "half the kernel"),
        (lambda: nn.max_pool(np.ones((2, 5)), 2), ValueError, r"\(N, C, \*spatial\)"),
        (lambda: nn.max_pool(np.ones((1, 1, 5)), (2, 2)), ValueError, "kernel_size"),
        (lambda: nn.max_pool2d(np.ones((1, 1, 5)), 2), ValueError, "rank 4"),
    ],
)
def test_conv_and_pool_reject_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()
