"""conv and pooling beyond the registry harness: double backward against torch's, max_pool's and
adaptive_max_pool's indices (ties, NaN, -inf, padding, ceil_mode) against torch's, avg_pool's
window and divisor conventions, unbatched and empty-batch input, and bad input."""

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
        (np.array([[[np.nan, np.nan, 1.0, np.nan, 2.0, np.nan]]]), {"kernel_size": 3}),  # torch: the last NaN
        (np.array([[[-np.inf, -np.inf, 1.0, -np.inf]]]), {"kernel_size": 2, "padding": 1}),  # -inf beats padding
        # windows that tile the input (stride == kernel: a reshape, not slices), with ties, padding,
        # a cut trailing column, ceil_mode, NaN and -inf
        (RNG.integers(-1, 2, (2, 3, 7, 9)).astype(float), {"kernel_size": 2, "padding": 1, "ceil_mode": True}),
        (RNG.integers(-1, 2, (2, 3, 6, 7)).astype(float), {"kernel_size": (2, 3), "padding": (1, 1)}),
        (RNG.integers(0, 2, (1, 2, 4, 6, 5)).astype(float), {"kernel_size": 2, "ceil_mode": True}),
        (np.array([[[[np.nan, 1.0, -np.inf, -np.inf], [2.0, np.nan, -np.inf, -np.inf]]]]), {"kernel_size": 2}),
        # overlapping dilated windows, a trailing row and column no window reaches
        (RNG.standard_normal((2, 2, 8, 9)),
         {"kernel_size": (3, 2), "stride": (2, 3), "dilation": (2, 1), "padding": (1, 0)}),
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
        # overlapping windows add several cotangents at one input, in another order than torch's
        np.testing.assert_allclose(ours, tx.grad.numpy(), rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("batch", [0, 2])
def test_conv_without_input_channels_is_the_bias_where_torch_drops_the_output_channels(batch):
    """A convolution over no input channels sums nothing: the output is the bias, with the
    weight's O channels (torch 2.13 returns 0 channels: its shape rule takes C for O); the
    gradients are the bias's (the batch's count of each position) and empty ones."""
    x, w, b = np.zeros((batch, 0, 6)), np.zeros((3, 0, 3)), np.array([1.0, -2.0, 0.5])
    out = nn.conv1d(x, w, b, padding="same", dilation=2)
    np.testing.assert_array_equal(out, np.broadcast_to(b[:, None], (batch, 3, 6)))
    assert torch.nn.functional.conv1d(torch.zeros(batch, 0, 6), torch.zeros(3, 0, 3), padding="same",
                                      dilation=2).shape == (batch, 0, 6)  # torch's, documented in the record
    gx, gw, gb = jax.grad(lambda *a: jnp.sum(nn.conv1d(*a, padding="same", dilation=2)), argnums=(0, 1, 2))(x, w, b)
    assert gx.shape == x.shape and gw.shape == w.shape
    np.testing.assert_array_equal(gb, np.full(3, batch * 6.0))


def test_max_pool_lowers_without_gather_or_scatter():
    """max_pool's forward, JVP and VJP are strided slices, pads and elementwise selects (XLA
    fuses them; a gather/scatter pair made a CNN training step 0.79x of plain JAX on an H100);
    the adaptive windows, of unequal sizes, keep the gather."""
    x = RNG.standard_normal((2, 3, 8, 8))

    def hlo(f, *args):
        return jax.jit(f).lower(*args).as_text()

    programs = {
        "vjp": hlo(jax.grad(lambda a: jnp.sum(nn.max_pool2d(a, 3, stride=2, padding=1) ** 2)), x),
        "jvp": hlo(lambda a, t: jax.jvp(lambda b: nn.max_pool2d(b, 2), (a,), (t,)), x, x),
    }
    for name, text in programs.items():
        assert "gather" not in text and "scatter" not in text, name
    # windows that tile the input are a reshape of it: no slice per window element either
    tiled = hlo(jax.grad(lambda a: jnp.sum(nn.max_pool2d(a, 2) ** 2)), x)
    assert "gather" not in tiled and "scatter" not in tiled and "slice" not in tiled
    assert "gather" in hlo(lambda a: nn.adaptive_max_pool2d(a, 3), x)


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
        (lambda: nn.max_pool(np.ones((1, 2, 5)), 2, padding=2), ValueError, "half the kernel"),
        (lambda: nn.conv2d(np.ones((1, 3, 4, 4)), np.ones((0, 3, 2, 2))), ValueError, "at least one output channel"),
        (lambda: nn.conv2d(np.ones((1, 3, 4, 4)), np.ones((2, 3, 0, 2))), ValueError, "at least one element"),
        (lambda: nn.adaptive_avg_pool1d(np.ones((2, 3, 0)), 2), ValueError, "empty spatial axis"),
        (lambda: nn.max_pool(np.ones((2, 5)), 2), ValueError, r"\(N, C, \*spatial\)"),
        (lambda: nn.max_pool(np.ones((1, 1, 5)), (2, 2)), ValueError, "kernel_size"),
        (lambda: nn.max_pool2d(np.ones((1, 1, 5)), 2), ValueError, "rank 4"),
    ],
)
def test_conv_and_pool_reject_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def _torch_pool(name, x, *args, **kwargs):
    return getattr(torch.nn.functional, name)(torch.tensor(x), *args, **kwargs)


def _assert_derivatives_match_torch(ours, theirs, x, *args, **kwargs):
    """Values, the VJP of a random cotangent and the JVP of a random tangent against torch's."""
    tx = torch.tensor(x, requires_grad=True)
    tv = theirs(tx, *args, **kwargs)
    np.testing.assert_allclose(ours(x, *args, **kwargs), tv.detach().numpy(), rtol=1e-12, atol=1e-12)
    g, t = RNG.standard_normal(tv.shape), RNG.standard_normal(x.shape)
    (tv * torch.tensor(g)).sum().backward()
    grad = jax.grad(lambda a: jnp.sum(g * ours(a, *args, **kwargs)))(x)
    np.testing.assert_allclose(grad, tx.grad.numpy(), rtol=1e-12, atol=1e-12)
    tangent = jax.jvp(lambda a: ours(a, *args, **kwargs), (x,), (t,))[1]
    _, torch_tangent = torch.func.jvp(lambda a: theirs(a, *args, **kwargs), (torch.tensor(x),), (torch.tensor(t),))
    np.testing.assert_allclose(tangent, torch_tangent.numpy(), rtol=1e-12, atol=1e-12)




@pytest.mark.parametrize(
    "dims, shape, kwargs",
    [
        # ceil_mode: a 4th window would start in the right padding and is dropped
        (1, (1, 1, 5), {"kernel_size": 2, "stride": 2, "padding": 1, "ceil_mode": True}),
        (1, (1, 1, 5), {"kernel_size": 2, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False}),
        # the last window reaches past the right padding: that part never counts in the divisor
        (1, (2, 3, 4), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
        (1, (1, 2, 1), {"kernel_size": 2, "stride": 3, "ceil_mode": True}),  # torch accepts a window past the input
        (1, (2, 2, 9), {"kernel_size": 3, "stride": 4}),  # the trailing input is in no window
        (1, (3, 7), {"kernel_size": 3, "stride": 1, "padding": 1}),  # unbatched
        (1, (0, 2, 6), {"kernel_size": 2}),  # empty batch
        (2, (2, 3, 7, 6), {"kernel_size": (3, 2), "stride": (2, 3), "padding": (1, 1), "ceil_mode": True,
                           "count_include_pad": False}),
        (2, (1, 2, 5, 5), {"kernel_size": 3, "stride": 2, "padding": 1, "divisor_override": -3}),
        (2, (2, 5, 6), {"kernel_size": 2, "ceil_mode": True}),  # unbatched
        (2, (0, 1, 4, 4), {"kernel_size": 2, "padding": 1}),  # empty batch
        (3, (1, 2, 5, 4, 6), {"kernel_size": (3, 2, 3), "stride": 2, "padding": (1, 0, 1), "ceil_mode": True,
                              "count_include_pad": False}),
        (3, (2, 3, 4, 5), {"kernel_size": 2, "stride": (1, 2, 3), "divisor_override": 5}),  # unbatched
    ],
)
def test_avg_pool_matches_torch(dims, shape, kwargs):
    x = RNG.standard_normal(shape)
    name = f"avg_pool{dims}d"
    _assert_derivatives_match_torch(getattr(nn, name), getattr(torch.nn.functional, name), x, **kwargs)
    if len(shape) == dims + 2:  # the generic avg_pool takes the rank from the input
        np.testing.assert_array_equal(nn.avg_pool(x, **kwargs), getattr(nn, name)(x, **kwargs))


def test_avg_pool1d_divisor_override_is_that_of_a_2d_pool_of_height_one():
    """torch's avg_pool1d has no divisor_override; ours means what avg_pool2d's does."""
    x = RNG.standard_normal((2, 3, 8))

    def theirs(a, kernel_size, stride, padding, ceil_mode, divisor_override):
        out = torch.nn.functional.avg_pool2d(a[:, :, None], (1, kernel_size), (1, stride), (0, padding), ceil_mode,
                                             True, divisor_override)
        return out[:, :, 0]

    _assert_derivatives_match_torch(nn.avg_pool1d, theirs, x, 3, stride=3, padding=1, ceil_mode=True,
                                    divisor_override=2)


@pytest.mark.parametrize(
    "dims, shape, output_size",
    [
        (1, (2, 3, 7), 3),
        (1, (2, 3, 5), 8),  # more outputs than inputs: overlapping windows
        (1, (4, 6), (4,)),  # unbatched
        (1, (0, 2, 5), 2),  # empty batch
        (2, (2, 2, 7, 5), (3, None)),
        (2, (3, 10, 9), (4, 7)),  # unbatched
        (3, (1, 2, 5, 7, 6), (2, 9, None)),
        (3, (2, 4, 3, 5), 2),  # unbatched
    ],
)
@pytest.mark.parametrize("kind", ["avg", "max"])
def test_adaptive_pool_matches_torch(kind, dims, shape, output_size):
    x = RNG.standard_normal(shape)
    name = f"adaptive_{kind}_pool{dims}d"
    _assert_derivatives_match_torch(getattr(nn, name), getattr(torch.nn.functional, name), x, output_size)


@pytest.mark.parametrize("kind", ["avg", "max"])
def test_adaptive_pool_to_an_empty_output_matches_torch_and_has_zero_gradient(kind):
    """torch accepts output_size 0 but cannot run its backward there."""
    x = RNG.standard_normal((2, 3, 4, 5))
    ours = getattr(nn, f"adaptive_{kind}_pool2d")
    theirs = getattr(torch.nn.functional, f"adaptive_{kind}_pool2d")(torch.tensor(x), (0, 3))
    assert ours(x, (0, 3)).shape == theirs.shape == (2, 3, 0, 3)
    np.testing.assert_array_equal(jax.grad(lambda a: jnp.sum(ours(a, (0, 3))))(x), np.zeros(x.shape))


@pytest.mark.parametrize(
    "dims, x, output_size",
    [
        (1, np.array([[[1.0, 3.0, 3.0, 2.0, 3.0, 0.0, 5.0]]]), 4),  # ties: the first maximum
        (1, np.array([[[1.0, np.nan, 2.0, np.nan, 3.0]]]), 1),  # torch: the last NaN
        (1, np.array([[[-np.inf, -np.inf, -np.inf, 1.0]]]), 2),
        (2, RNG.integers(0, 3, (2, 3, 5, 7)).astype(float), (3, 4)),
        (3, RNG.integers(0, 2, (2, 4, 5, 3)).astype(float), (3, 2, 5)),  # unbatched, output > input on two axes
    ],
)
def test_adaptive_max_pool_values_indices_and_gradient_match_torch(dims, x, output_size):
    fn, torch_fn = getattr(nn, f"adaptive_max_pool{dims}d"), getattr(torch.nn.functional, f"adaptive_max_pool{dims}d")
    values, indices = fn(x, output_size, return_indices=True)
    tx = torch.tensor(x, requires_grad=True)
    tv, ti = torch_fn(tx, output_size, return_indices=True)
    np.testing.assert_array_equal(values, tv.detach().numpy())
    np.testing.assert_array_equal(indices, ti.numpy())
    g = RNG.standard_normal(tv.shape)
    (tv * torch.tensor(g)).sum().backward()
    ours = jax.grad(lambda a: jnp.sum(g * fn(a, output_size)))(x)
    np.testing.assert_array_equal(ours, tx.grad.numpy())


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: nn.avg_pool1d(np.ones((1, 2, 5)), 2, padding=2), ValueError, "avg_pool1d: padding .* half the kernel"),
        (lambda: nn.avg_pool2d(np.ones((1, 2, 5, 5)), 6), ValueError, "avg_pool2d: the .* input .* smaller"),
        (lambda: nn.avg_pool2d(np.ones((1, 2, 5, 5)), 2, stride=0), ValueError, "avg_pool2d: stride"),
        (lambda: nn.avg_pool2d(np.ones((1, 2, 5, 5)), 2, divisor_override=0), ValueError, "divisor_override"),
        (lambda: nn.avg_pool2d(np.ones((1, 2, 5, 5)), 2, divisor_override=1.5), ValueError, "divisor_override"),
        (lambda: nn.avg_pool3d(np.ones((1, 2, 5, 5)), (2, 2)), ValueError, "avg_pool3d: kernel_size"),
        (lambda: nn.avg_pool2d(np.ones((5, 5)), 2), ValueError, r"avg_pool2d: input .*\(C, \*spatial\)"),
        (lambda: nn.avg_pool1d(np.ones((1, 0, 5)), 2), ValueError, "avg_pool1d: input .* empty channel"),
        (lambda: nn.avg_pool(np.ones((5, 5)), 2), ValueError, r"avg_pool: input .*\(N, C, \*spatial\)"),
        (lambda: nn.avg_pool1d(np.ones((1, 2, 5)) + 1j, 2), TypeError, "avg_pool1d: input must be real"),
        (lambda: nn.adaptive_avg_pool2d(np.ones((1, 2, 5, 5)), (-1, 2)), ValueError, "avg_pool2d: output_size"),
        (lambda: nn.adaptive_avg_pool2d(np.ones((1, 2, 5, 5)), (1, 2, 3)), ValueError, "output_size"),
        (lambda: nn.adaptive_avg_pool1d(np.ones((1, 2, 5)), "2"), ValueError, "adaptive_avg_pool1d: output_size"),
        (lambda: nn.adaptive_avg_pool3d(np.ones((1, 2, 5)), 2), ValueError, "adaptive_avg_pool3d: input"),
        (lambda: nn.adaptive_max_pool1d(np.ones((1, 2, 0)), 2), ValueError, "adaptive_max_pool1d: input .* empty"),
        (lambda: nn.adaptive_max_pool2d(np.ones((2, 5, 5)), True), ValueError, "adaptive_max_pool2d: output_size"),
    ],
)
def test_avg_and_adaptive_pools_reject_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_adaptive_avg_pool_keeps_an_inf_in_its_own_window():
    """Each window is summed on its own, as torch: an inf (or a NaN) elsewhere on the axis does
    not reach the other windows' values or gradients (a dense averaging matrix's 0 * inf did)."""
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    x[0, 0, 0, 0] = np.inf
    tx = torch.tensor(x, requires_grad=True)
    expected = torch.nn.functional.adaptive_avg_pool2d(tx, 2)
    np.testing.assert_array_equal(np.asarray(nn.adaptive_avg_pool2d(x, 2)), expected.detach().numpy())
    ct = np.array([[[[np.inf, 1.0], [2.0, 3.0]]]])
    expected.backward(torch.tensor(ct))
    grad = jax.vjp(lambda a: nn.adaptive_avg_pool2d(a, 2), jnp.asarray(x))[1](jnp.asarray(ct))[0]
    np.testing.assert_array_equal(np.asarray(grad), tx.grad.numpy())
