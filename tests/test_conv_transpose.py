"""conv_transpose1d/2d/3d, unfold and fold beyond the registry harness: values and gradients
against torch 2.13 (float64) over a grid of strides, paddings, output paddings, dilations and
groups; forward mode against torch's; double backward; unbatched and empty-batch input; the
linear ops' derivatives (JVP the op, VJP the other op); inf/NaN; bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from jaxrules.ops.conv import conv_transpose, conv_transpose1d, conv_transpose2d, conv_transpose3d, fold, unfold

CPU_CONVOLUTION = pytest.mark.skipif(
    jax.default_backend() != "cpu",
    reason=("a GPU's convolution is cuDNN's, which multiplies the padding's zeros by a NaN or infinite entry:"
            " the gradient is NaN there, as torch's (docs/compatibility.md)"))

RNG = np.random.default_rng(17)
RANKED = {1: conv_transpose1d, 2: conv_transpose2d, 3: conv_transpose3d}


def _torch_grads(fn, args, g):
    """torch's output and the gradients of ``<g, fn(*args)>`` with respect to every array."""
    targs = [torch.tensor(a, requires_grad=True) if isinstance(a, np.ndarray) else a for a in args]
    out = fn(*targs)
    tensors = [t for t in targs if isinstance(t, torch.Tensor)]
    grads = torch.autograd.grad((out * torch.tensor(g)).sum(), tensors)
    return out.detach().numpy(), [d.numpy() for d in grads]


def _assert_parity(ours_fn, torch_fn, args, cotangent_shape=None):
    """Our values and gradients (through ``jax.vjp``) equal torch's in float64."""
    arrays = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]

    def f(*diff):
        full = list(args)
        for i, a in zip(arrays, diff):
            full[i] = a
        return ours_fn(*full)

    out, pullback = jax.vjp(f, *[args[i] for i in arrays])
    g = RNG.standard_normal(out.shape)
    expected, expected_grads = _torch_grads(torch_fn, args, g)
    np.testing.assert_allclose(out, expected, atol=1e-12)
    for ours, theirs in zip(pullback(g), expected_grads):
        np.testing.assert_allclose(ours, theirs, atol=1e-12)


# (dims, input spatial, kernel, stride, padding, output_padding, dilation, groups, c_in, c_out / groups)
GRID = [
    (1, (5,), (3,), 1, 0, 0, 1, 1, 2, 3),
    (1, (4,), (3,), 2, 1, 1, 1, 1, 3, 2),
    (1, (4,), (2,), 3, 2, 2, 1, 3, 3, 1),  # output_padding 2 < stride 3; depthwise
    (1, (4,), (3,), 1, 0, 1, 2, 2, 4, 2),  # output_padding 1 < dilation 2 at stride 1
    (1, (3,), (4,), 2, 3, 0, 1, 1, 2, 2),  # padding past the kernel's reach on one side
    (2, (3, 4), (2, 3), (2, 1), (1, 0), (1, 0), (1, 2), 2, 4, 1),
    (2, (2, 3), (3, 2), 2, 1, (0, 1), 1, 1, 2, 3),
    (2, (3, 3), (2, 2), (1, 3), (0, 1), (1, 2), (2, 1), 1, 1, 2),
    (3, (2, 2, 3), (2, 1, 2), (1, 2, 1), (0, 0, 1), (0, 1, 0), 1, 2, 2, 1),
    (3, (2, 3, 2), (2, 2, 2), 2, 1, 1, (1, 2, 1), 1, 1, 2),
]


@pytest.mark.parametrize("dims, spatial, kernel, stride, padding, output_padding, dilation, groups, c_in, c_out", GRID)
def test_conv_transpose_values_and_gradients_match_torch(dims, spatial, kernel, stride, padding, output_padding,
                                                         dilation, groups, c_in, c_out):
    x = RNG.standard_normal((2, c_in, *spatial))
    w = RNG.standard_normal((c_in, c_out, *kernel))
    b = RNG.standard_normal(c_out * groups)
    kw = {"stride": stride, "padding": padding, "output_padding": output_padding, "groups": groups,
          "dilation": dilation}
    torch_fn = getattr(F, f"conv_transpose{dims}d")
    _assert_parity(lambda *a: RANKED[dims](*a, **kw), lambda *a: torch_fn(*a, **kw), (x, w, b))
    # the generic entry (rank from the weight) is the same op
    np.testing.assert_array_equal(conv_transpose(x, w, b, **kw), RANKED[dims](x, w, b, **kw))


def test_conv_transpose_positional_order_is_torchs():
    x, w, b = RNG.standard_normal((1, 2, 3, 3)), RNG.standard_normal((2, 2, 2, 2)), RNG.standard_normal(4)
    # (input, weight, bias, stride, padding, output_padding, groups, dilation)
    ours = conv_transpose2d(x, w, b, 2, 1, 1, 2, 1)
    theirs = F.conv_transpose2d(*map(torch.tensor, (x, w, b)), 2, 1, 1, 2, 1)
    np.testing.assert_allclose(ours, theirs.numpy(), atol=1e-12)


def test_conv_transpose_jvp_matches_torch_forward_mode():
    x, w, b = RNG.standard_normal((2, 4, 3)), RNG.standard_normal((4, 1, 3)), RNG.standard_normal(2)
    tx, tw, tb = (RNG.standard_normal(a.shape) for a in (x, w, b))
    kw = {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2, "dilation": 2}
    _, ours = jax.jvp(lambda *a: conv_transpose1d(*a, **kw), (x, w, b), (tx, tw, tb))
    _, theirs = torch.func.jvp(lambda *a: F.conv_transpose1d(*a, **kw), tuple(map(torch.tensor, (x, w, b))),
                               tuple(map(torch.tensor, (tx, tw, tb))))
    np.testing.assert_allclose(ours, theirs.numpy(), atol=1e-12)


def test_conv_transpose_double_backward_matches_torch():
    x, w, b = RNG.standard_normal((2, 4, 3, 2)), RNG.standard_normal((4, 3, 2, 3)), RNG.standard_normal(6)
    kw = {"stride": (2, 1), "padding": (1, 1), "output_padding": (1, 0), "groups": 2, "dilation": (1, 2)}
    g = RNG.standard_normal(F.conv_transpose2d(*map(torch.tensor, (x, w, b)), **kw).shape)

    def first(x, w, b):  # the squared norm of the gradient of <g, out>: second order in (x, w)
        grads = jax.grad(lambda *a: jnp.sum(g * conv_transpose2d(*a, **kw)), argnums=(0, 1, 2))(x, w, b)
        return sum(jnp.sum(d**2) for d in grads)

    ours = jax.grad(first, argnums=(0, 1))(x, w, b)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    grads = torch.autograd.grad((torch.tensor(g) * F.conv_transpose2d(tx, tw, tb, **kw)).sum(), (tx, tw, tb),
                                create_graph=True)
    theirs = torch.autograd.grad(sum((d**2).sum() for d in grads), (tx, tw))
    for a, t in zip(ours, theirs):
        np.testing.assert_allclose(a, t.numpy(), atol=1e-10)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_conv_transpose_unbatched_matches_torch(dims):
    x = RNG.standard_normal((2,) + (3,) * dims)
    w, b = RNG.standard_normal((2, 3) + (2,) * dims), RNG.standard_normal(3)
    kw = {"stride": 2, "output_padding": 1}
    torch_fn = getattr(F, f"conv_transpose{dims}d")
    _assert_parity(lambda *a: RANKED[dims](*a, **kw), lambda *a: torch_fn(*a, **kw), (x, w, b))
    assert conv_transpose(x, w, b, **kw).shape == RANKED[dims](x, w, b, **kw).shape == (3,) + (7,) * dims


def test_conv_transpose_empty_batch_matches_torch():
    x, w, b = np.zeros((0, 2, 3)), RNG.standard_normal((2, 2, 2)), RNG.standard_normal(2)
    out, pullback = jax.vjp(lambda *a: conv_transpose1d(*a, stride=2), x, w, b)
    assert out.shape == F.conv_transpose1d(*map(torch.tensor, (x, w, b)), stride=2).shape == (0, 2, 6)
    gx, gw, gb = pullback(np.zeros(out.shape))
    assert gx.shape == x.shape
    np.testing.assert_array_equal(gw, np.zeros(w.shape))  # torch: zeros too (an empty sum)
    np.testing.assert_array_equal(gb, np.zeros(b.shape))


def test_conv_transpose_without_bias_and_dtype_promotion():
    x, w = RNG.standard_normal((1, 2, 3)).astype(np.float32), RNG.standard_normal((2, 1, 2))
    out = conv_transpose1d(x, w)
    assert out.dtype == jnp.result_type(x, w)
    np.testing.assert_allclose(out, F.conv_transpose1d(torch.tensor(x, dtype=torch.float64), torch.tensor(w)).numpy(),
                               atol=1e-6)
    ints = conv_transpose1d(np.arange(6).reshape(1, 2, 3), np.ones((2, 1, 2)))  # integer input promoted
    np.testing.assert_allclose(ints, F.conv_transpose1d(torch.arange(6.0).reshape(1, 2, 3), torch.ones(2, 1, 2)))


def test_conv_transpose_inf_and_nan_as_torch():
    x = RNG.standard_normal((1, 1, 4))
    x[0, 0, 1], x[0, 0, 3] = np.inf, np.nan
    w = np.abs(RNG.standard_normal((1, 2, 2))) + 0.1
    ours = np.asarray(conv_transpose1d(x, w, stride=2))
    theirs = F.conv_transpose1d(torch.tensor(x), torch.tensor(w), stride=2).numpy()
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
    np.testing.assert_array_equal(np.isposinf(ours), np.isposinf(theirs))
    finite = np.isfinite(theirs)
    np.testing.assert_allclose(ours[finite], theirs[finite], atol=1e-12)


@CPU_CONVOLUTION
@pytest.mark.parametrize("poison", [np.inf, np.nan])
def test_conv_transpose_gradient_leaves_out_products_cut_by_padding(poison):
    # stride 2, padding 1: tap 0 of input entry 0 lands on full position 0, cut off; the exact
    # derivatives there do not involve the product (torch's multiply its padding zeros: NaN)
    x, w = RNG.standard_normal((1, 2, 3)), RNG.standard_normal((2, 2, 3))
    g = RNG.standard_normal((1, 2, 6))
    kw = {"stride": 2, "padding": 1, "output_padding": 1}
    _, (clean_gx, clean_gw) = _torch_grads(lambda *a: F.conv_transpose1d(*a, **kw), (x, w), g)
    loss = lambda x, w: jnp.sum(g * conv_transpose1d(x, w, **kw))  # noqa: E731
    bad_x = x.copy()
    bad_x[0, 1, 0] = poison
    gw = np.asarray(jax.grad(loss, argnums=1)(bad_x, w))
    np.testing.assert_allclose(gw[1, :, 0], clean_gw[1, :, 0], atol=1e-12)  # free of x[0, 1, 0]
    _, (_, torch_gw) = _torch_grads(lambda *a: F.conv_transpose1d(*a, **kw), (bad_x, w), g)
    assert np.isnan(torch_gw[1, :, 0]).all()
    bad_w = w.copy()
    bad_w[1, 0, 0] = poison
    gx = np.asarray(jax.grad(loss)(x, bad_w))
    np.testing.assert_allclose(gx[0, 1, 0], clean_gx[0, 1, 0], atol=1e-12)  # free of w[1, 0, 0]
    _, (torch_gx, _) = _torch_grads(lambda *a: F.conv_transpose1d(*a, **kw), (x, bad_w), g)
    assert np.isnan(torch_gx[0, 1, 0])


def _ct1(x=(1, 2, 4), w=(2, 1, 3), *args, **kwargs):
    """conv_transpose1d of ones of these shapes (a shape given as an array is passed as is)."""
    return conv_transpose1d(*(np.ones(a) if isinstance(a, tuple) else a for a in (x, w)), *args, **kwargs)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: _ct1(stride=2, output_padding=2), ValueError, "conv_transpose1d: output_padding"),
        (lambda: conv_transpose2d(np.ones((1, 2, 4, 4)), np.ones((2, 1, 3, 3)), output_padding=(0, 1)),
         ValueError, "conv_transpose2d: output_padding .* smaller than stride"),
        (lambda: _ct1((1, 3, 4), (3, 1, 3), groups=2), ValueError, "conv_transpose1d: .*divisible by groups=2"),
        (lambda: _ct1((1, 3, 4)), ValueError, "conv_transpose1d: .*in_channels"),
        (lambda: _ct1(groups=0), ValueError, "conv_transpose1d: groups"),
        (lambda: _ct1(w=(2, 1)), ValueError, "conv_transpose1d: weight .*rank 3"),
        (lambda: conv_transpose2d(np.ones((1, 2, 4, 4)), np.ones((2, 1, 3))), ValueError, "conv_transpose2d: weight"),
        (lambda: conv_transpose(np.ones((1, 2, 4)), np.ones((2, 1))), ValueError,
         "conv_transpose: weight .*rank 3 to 5"),
        (lambda: conv_transpose3d(np.ones((2, 4, 4)), np.ones((2, 1, 1, 1, 1))), ValueError,
         "conv_transpose3d: input must have shape"),
        (lambda: _ct1((1, 2, 4), (2, 1, 3), np.ones(2)), ValueError, r"conv_transpose1d: bias must have shape \(1,\)"),
        (lambda: _ct1(stride=0), ValueError, "conv_transpose1d: stride"),
        (lambda: _ct1(padding=-1), ValueError, "conv_transpose1d: padding"),
        (lambda: _ct1(padding="same"), ValueError, "conv_transpose1d: padding"),
        (lambda: _ct1(output_padding=-1), ValueError, "conv_transpose1d: output_padding"),
        (lambda: _ct1(dilation=(1, 1)), ValueError, "conv_transpose1d: dilation"),
        (lambda: _ct1((1, 2, 1), (2, 1, 2), padding=1), ValueError, "conv_transpose1d: the output size"),
        (lambda: _ct1((1, 2, 0)), ValueError, "conv_transpose1d: input .*empty"),
        (lambda: _ct1(w=(2, 0, 2)), ValueError, "conv_transpose1d: weight .*empty"),
        (lambda: _ct1("x"), TypeError, "conv_transpose1d: argument 'input'"),
    ],
)
def test_conv_transpose_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_conv_transpose_bad_input_that_torch_rejects_too():
    # each error above is torch's too (RuntimeError there): spot-check the torch side of two
    with pytest.raises(RuntimeError, match="output padding must be smaller"):
        F.conv_transpose1d(torch.ones(1, 2, 4), torch.ones(2, 1, 3), stride=2, output_padding=2)
    with pytest.raises(RuntimeError, match="Output size is too small"):
        F.conv_transpose1d(torch.ones(1, 2, 1), torch.ones(2, 1, 2), padding=1)


# ----------------------------------------------------------------------------------------------
# unfold / fold

# (input shape, kernel_size, dilation, padding, stride)
BLOCKS = [
    ((2, 3, 4, 5), 2, 1, 0, 1),
    ((1, 2, 5, 4), (2, 3), (2, 1), (1, 0), (2, 1)),
    ((2, 1, 3, 3), 3, 1, 2, 2),  # padding wider than half the kernel: windows of padding only
    ((1, 2, 6, 5), (3, 2), 1, 1, (3, 2)),  # trailing input in no block
    ((3, 4, 4), 2, 2, 1, 1),  # unbatched
]


@pytest.mark.parametrize("shape, kernel_size, dilation, padding, stride", BLOCKS)
def test_unfold_and_fold_match_torch(shape, kernel_size, dilation, padding, stride):
    kw = {"kernel_size": kernel_size, "dilation": dilation, "padding": padding, "stride": stride}
    x = RNG.standard_normal(shape)
    _assert_parity(lambda a: unfold(a, **kw), lambda a: F.unfold(a, **kw), (x,))
    cols = RNG.standard_normal(F.unfold(torch.tensor(x), **kw).shape)
    _assert_parity(lambda c: fold(c, shape[-2:], **kw), lambda c: F.fold(c, shape[-2:], **kw), (cols,))


def test_unfold_and_fold_positional_order_is_torchs():
    x = RNG.standard_normal((1, 2, 5, 5))
    ours = unfold(x, 2, 2, 1, 2)  # kernel_size, dilation, padding, stride
    np.testing.assert_array_equal(ours, F.unfold(torch.tensor(x), 2, 2, 1, 2).numpy())
    expected = F.fold(torch.tensor(np.asarray(ours)), 5, 2, 2, 1, 2).numpy()
    np.testing.assert_array_equal(fold(ours, 5, 2, 2, 1, 2), expected)


def test_unfold_and_fold_are_each_others_transpose_and_their_own_derivative():
    kw = {"kernel_size": (2, 3), "dilation": (1, 2), "padding": 1, "stride": (2, 1)}
    x = RNG.standard_normal((2, 3, 5, 6))
    y = RNG.standard_normal(np.asarray(unfold(x, **kw)).shape)
    # <unfold(x), y> = <x, fold(y)>
    np.testing.assert_allclose(np.vdot(unfold(x, **kw), y), np.vdot(x, fold(y, (5, 6), **kw)), rtol=1e-12)
    t = RNG.standard_normal(x.shape)
    out, tangent = jax.jvp(lambda a: unfold(a, **kw), (x,), (t,))
    np.testing.assert_array_equal(tangent, unfold(t, **kw))  # JVP: the op itself
    np.testing.assert_array_equal(jax.vjp(lambda a: unfold(a, **kw), x)[1](y)[0], fold(y, (5, 6), **kw))  # VJP: fold
    _, tangent = jax.jvp(lambda c: fold(c, (5, 6), **kw), (y,), (y,))
    np.testing.assert_array_equal(tangent, fold(y, (5, 6), **kw))
    np.testing.assert_array_equal(jax.vjp(lambda c: fold(c, (5, 6), **kw), y)[1](t)[0], unfold(t, **kw))


def test_unfold_and_fold_empty_batch_match_torch():
    x = np.zeros((0, 2, 3, 3))
    assert unfold(x, 2).shape == F.unfold(torch.tensor(x), 2).shape == (0, 8, 4)
    assert fold(np.zeros((0, 8, 4)), 3, 2).shape == F.fold(torch.zeros(0, 8, 4), 3, 2).shape == (0, 2, 3, 3)
    assert jax.grad(lambda a: jnp.sum(unfold(a, 2)))(x).shape == x.shape


def test_unfold_and_fold_inf_and_nan_as_torch():
    x = RNG.standard_normal((1, 1, 3, 3))
    x[0, 0, 1, 1], x[0, 0, 0, 2] = np.inf, np.nan
    np.testing.assert_array_equal(unfold(x, 2, padding=1), F.unfold(torch.tensor(x), 2, padding=1).numpy())
    cols = np.asarray(unfold(x, 2))
    np.testing.assert_array_equal(fold(cols, 3, 2), F.fold(torch.tensor(cols), 3, 2).numpy())


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: unfold(np.ones((1, 1, 2, 2, 2)), 1), ValueError, "unfold: input must have shape"),
        (lambda: unfold(np.ones((1, 0, 2, 2)), 1), ValueError, "unfold: input .*empty"),
        (lambda: unfold(np.ones((1, 1, 2, 2)), 0), ValueError, "unfold: kernel_size"),
        (lambda: unfold(np.ones((1, 1, 2, 2)), 1, padding=-1), ValueError, "unfold: padding"),
        (lambda: unfold(np.ones((1, 1, 2, 2)), 1, stride=(1, 1, 1)), ValueError, "unfold: stride"),
        (lambda: unfold(np.ones((1, 1, 2, 2)), 1, dilation=0), ValueError, "unfold: dilation"),
        (lambda: unfold(np.ones((1, 1, 2, 2)), 3), ValueError, "unfold: .*sliding blocks"),
        (lambda: fold(np.ones((1, 1, 4, 9)), 4, 2), ValueError, "fold: input must have shape"),
        (lambda: fold(np.ones((1, 0, 9)), 4, 2), ValueError, "fold: input must have shape"),
        (lambda: fold(np.ones((1, 10, 9)), 4, 2), ValueError, "fold: input's axis 1 .*divisible"),
        (lambda: fold(np.ones((1, 12, 8)), 4, 2), ValueError, "fold: input's axis 2 .*sliding blocks"),
        (lambda: fold(np.ones((1, 4, 1)), 1, 2), ValueError, "fold: input's axis 2"),
        (lambda: fold(np.ones((1, 4, 9)), 0, 2), ValueError, "fold: output_size"),
        (lambda: fold(np.ones((1, 4, 9)), 4, 2, padding=-1), ValueError, "fold: padding"),
    ],
)
def test_unfold_fold_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()
