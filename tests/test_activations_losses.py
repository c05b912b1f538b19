"""Activations and losses beyond the registry harness: second derivatives against torch's double
backward (including torch's conventions at kinks), dropout's semantics, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jaxrules.nn as rnn

POINTS = np.array([-800.0, -3.0, -0.5, 0.0, 0.7, 3.0, 20.0])

CASES = {
    "silu": (rnn.silu, F.silu),
    "gelu_tanh": (rnn.gelu, lambda x: F.gelu(x, approximate="tanh")),
    "gelu_exact": (lambda x: rnn.gelu(x, approximate=False), F.gelu),
    "elu": (lambda x: rnn.elu(x, 1.5), lambda x: F.elu(x, 1.5)),
    "selu": (rnn.selu, F.selu),
    "hardswish": (rnn.hardswish, F.hardswish),
    "hardtanh": (lambda x: rnn.hardtanh(x, -3.0, 3.0), lambda x: F.hardtanh(x, -3.0, 3.0)),
    "leaky_relu": (lambda x: rnn.leaky_relu(x, 0.2), lambda x: F.leaky_relu(x, 0.2)),
    "celu": (lambda x: rnn.celu(x, 2.0), lambda x: F.celu(x, 2.0)),
    "softplus_threshold": (lambda x: rnn.softplus(x, 2, 6), lambda x: F.softplus(x, 2, 6)),
    "log_sigmoid": (rnn.log_sigmoid, F.logsigmoid),
}


def _torch_second(fn, x):
    t = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad(fn(t).sum(), t, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), t)
    return g.detach().numpy(), h.numpy()


@pytest.mark.parametrize("name", sorted(CASES))
def test_first_and_second_derivatives_match_torch(name):
    ours, theirs = CASES[name]
    x = np.concatenate([POINTS, [3.0]])  # 3.0 = the softplus threshold/beta point
    grad = jax.grad(lambda v: jnp.sum(ours(v)))
    second = jax.grad(lambda v: jnp.sum(grad(v)))(jnp.asarray(x))
    t_grad, t_second = _torch_second(theirs, x)
    np.testing.assert_allclose(grad(jnp.asarray(x)), t_grad, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(second, t_second, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("approximate", ["none", "tanh", True, False, np.bool_(False)])
def test_gelu_takes_torchs_spellings(approximate):
    # torch's "none" is the exact GELU: a non-empty string must not mean jax.nn's approximate=True.
    spelling = approximate if isinstance(approximate, str) else ("tanh" if approximate else "none")
    x = np.linspace(-4.0, 4.0, 9)
    t = torch.tensor(x, requires_grad=True)
    y = F.gelu(t, approximate=spelling)
    (g,) = torch.autograd.grad(y.sum(), t)
    value, grad = jax.value_and_grad(lambda v: jnp.sum(rnn.gelu(v, approximate=approximate) ** 2))(jnp.asarray(x))
    np.testing.assert_allclose(rnn.gelu(jnp.asarray(x), approximate=approximate), y.detach().numpy(), rtol=1e-12,
                               atol=1e-14)
    np.testing.assert_allclose(grad, 2 * y.detach().numpy() * g.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(value, float((y.detach() ** 2).sum()), rtol=1e-12)
    if spelling == "none":  # not the tanh form: the two differ by ~1e-4 near |x| = 2
        assert abs(float(rnn.gelu(jnp.asarray(2.0), approximate=approximate) - jax.nn.gelu(2.0))) > 1e-5


@pytest.mark.parametrize("approximate", ["None", "exact", "", 1, None])
def test_gelu_refuses_other_approximate_values(approximate):
    with pytest.raises(ValueError, match="gelu: approximate"):
        rnn.gelu(jnp.ones(3), approximate=approximate)


def test_mish_second_derivative_is_finite_where_torch_is_not():
    x = np.array([800.0, -800.0])
    second = jax.grad(lambda v: jnp.sum(jax.grad(lambda u: jnp.sum(rnn.mish(u)))(v)))(jnp.asarray(x))
    assert np.all(np.isfinite(second))
    assert np.isnan(_torch_second(F.mish, x)[1][0])


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "glu"])
def test_double_backward_matches_torch(name):
    ours = {"softmax": rnn.softmax, "log_softmax": rnn.log_softmax, "glu": rnn.glu}[name]
    theirs = {"softmax": lambda x: F.softmax(x, -1), "log_softmax": lambda x: F.log_softmax(x, -1),
              "glu": lambda x: F.glu(x, -1)}[name]
    rng = np.random.default_rng(5)
    x, w, v = rng.standard_normal((3, 4)), rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    w = w[:, :2] if name == "glu" else w
    grad = jax.grad(lambda a: jnp.sum(ours(a) * w))
    hvp = jax.grad(lambda a: jnp.vdot(grad(a), v))(jnp.asarray(x))
    t = torch.tensor(x, requires_grad=True)
    (g,) = torch.autograd.grad((theirs(t) * torch.tensor(w)).sum(), t, create_graph=True)
    (t_hvp,) = torch.autograd.grad((g * torch.tensor(v)).sum(), t)
    np.testing.assert_allclose(hvp, t_hvp.numpy(), rtol=1e-10, atol=1e-12)


def test_dropout_semantics():
    x = jnp.arange(1.0, 1001.0)
    key = jax.random.key(0)
    y = rnn.dropout(x, 0.25, key=key)
    kept = y != 0
    np.testing.assert_allclose(y[kept], x[kept] / 0.75)
    assert 0.65 < float(kept.mean()) < 0.85
    np.testing.assert_array_equal(rnn.dropout(x, 0.25, training=False), x)
    np.testing.assert_array_equal(rnn.dropout(x, 1.0, key=key), jnp.zeros_like(x))
    g = jax.grad(lambda v: jnp.sum(rnn.dropout(v, 0.25, key=key)))(x)
    np.testing.assert_allclose(g, kept / 0.75)
    # The same key gives the same mask under jit and vmap over another argument.
    np.testing.assert_array_equal(jax.jit(lambda v: rnn.dropout(v, 0.25, key=key))(x), y)


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: rnn.dropout(jnp.ones(3), 0.5), ValueError, ["dropout", "key"]),
        (lambda: rnn.dropout(jnp.ones(3), 1.5, key=jax.random.key(0)), ValueError, ["dropout", "p"]),
        (lambda: rnn.softplus(jnp.ones(3), beta=0), ValueError, ["softplus", "beta"]),
        (lambda: rnn.celu(jnp.ones(3), alpha=-1), ValueError, ["celu", "alpha"]),
        (lambda: rnn.glu(jnp.ones((2, 3))), ValueError, ["glu", "even"]),
        (lambda: rnn.softmax(jnp.ones((2, 3)), axis=(0, 1)), TypeError, ["softmax", "axis"]),
        (lambda: rnn.silu(jnp.ones(3) * 1j), TypeError, ["silu", "real"]),
        (lambda: rnn.mse_loss(jnp.ones(3), jnp.ones(4)), ValueError, ["mse_loss", "input", "target"]),
        (lambda: rnn.mse_loss(jnp.ones(3), jnp.ones(3), reduction="avg"), ValueError, ["mse_loss", "reduction"]),
        (lambda: rnn.huber_loss(jnp.ones(3), jnp.ones(3), delta=0), ValueError, ["huber_loss", "delta"]),
        (lambda: rnn.smooth_l1_loss(jnp.ones(3), jnp.ones(3), beta=-1), ValueError, ["smooth_l1_loss", "beta"]),
        (lambda: rnn.binary_cross_entropy(jnp.ones(3) / 2, jnp.ones(3), weight=jnp.ones(2)), ValueError,
         ["binary_cross_entropy", "weight"]),
    ],
)
def test_bad_input(call, error, words):
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value)


def test_jax_named_activations_carry_torchs_derivative_at_their_kinks():
    """``jaxrules.nn``'s jax.nn names (hard_tanh, relu6, leaky_relu, hard_sigmoid, hard_swish) are
    the torch-convention ops: the derivative at each kink is torch's, where JAX's differs."""
    at = jnp.array([-1.0, 1.0, 0.0, 6.0, -3.0, 3.0])
    cases = [(rnn.hard_tanh, jax.nn.hard_tanh, [0, 0, 1, 0, 0, 0]),
             (rnn.relu6, jax.nn.relu6, [0, 1, 0, 0, 0, 1]),
             (rnn.leaky_relu, jax.nn.leaky_relu, [0.01, 1, 0.01, 1, 0.01, 1]),
             (rnn.hard_swish, jax.nn.hard_swish, [-1 / 3 + 0.5, 1 / 3 + 0.5, 0.5, 1, 0, 1])]
    for ours, theirs, expected in cases:
        np.testing.assert_allclose(ours(at), theirs(at), rtol=1e-12)  # same values
        np.testing.assert_allclose(jax.vmap(jax.grad(ours))(at), expected, rtol=1e-12, err_msg=ours.__name__)
    assert rnn.hard_sigmoid is rnn.hardsigmoid and rnn.hard_swish is rnn.hardswish


def test_hardsigmoid_slope_is_exactly_one_sixth():
    """torch's CPU kernel uses the float32 constant 1.0f/6.0f; the slope is 1/6."""
    assert float(jax.grad(lambda x: rnn.hardsigmoid(x))(jnp.float64(0.5))) == 1 / 6


@pytest.mark.parametrize("call, error, words", [
    (lambda: rnn.hardtanh(jnp.ones(3), 1.0, -1.0), ValueError, ["hardtanh", "min_val"]),
    (lambda: rnn.leaky_relu(jnp.ones(3), "0.1"), TypeError, ["leaky_relu", "negative_slope"]),
    (lambda: rnn.prelu(jnp.ones((2, 3)), jnp.ones(2)), ValueError, ["prelu", "weight"]),
    (lambda: rnn.prelu(jnp.ones(3), jnp.ones((3, 1))), ValueError, ["prelu", "weight"]),
])
def test_porter_activations_bad_input(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert all(w in str(info.value) for w in words)


def test_cross_entropy_with_every_target_ignored_is_nan_as_torch():
    x, t = np.ones((3, 4)), np.full(3, -100)
    expected = F.cross_entropy(torch.tensor(x), torch.tensor(t))
    assert np.isnan(float(rnn.cross_entropy(jnp.asarray(x), jnp.asarray(t)))) and torch.isnan(expected)
    assert float(rnn.cross_entropy(jnp.asarray(x), jnp.asarray(t), reduction="sum")) == 0.0


@pytest.mark.parametrize("call, error, words", [
    (lambda: rnn.cross_entropy(jnp.ones((2, 3)), jnp.zeros(3, jnp.int32)), ValueError, ["cross_entropy", "target"]),
    (lambda: rnn.cross_entropy(jnp.ones((2, 3)), jnp.ones((2, 4))), ValueError, ["cross_entropy", "target"]),
    (lambda: rnn.cross_entropy(jnp.ones((2, 3)), jnp.zeros(2, jnp.int32), label_smoothing=1.5), ValueError,
     ["cross_entropy", "label_smoothing"]),
    (lambda: rnn.nll_loss(jnp.ones((2, 3)), jnp.zeros(2, jnp.int32), jnp.ones(2)), ValueError, ["nll_loss", "weight"]),
    (lambda: rnn.nll_loss(jnp.ones((2, 3)), jnp.zeros(2, jnp.int32), reduction="avg"), ValueError,
     ["nll_loss", "reduction"]),
])
def test_class_losses_bad_input(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert all(w in str(info.value) for w in words)
