"""interpolate, grid_sample and affine_grid beyond the registry harness: values and gradients
against torch 2.13 (CPU, float64) over a grid of configurations, the two configurations where
torch's backward is not the transpose of its forward, empty batches, NaN, grid_sample's program
size (one gather and one scatter-add for all corners), and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jaxrules.ops.resampling import affine_grid, grid_sample, interpolate

RNG = np.random.default_rng(17)
F = torch.nn.functional


def _assert_matches_torch(ours, theirs, *arrays):
    """Value and gradient (random cotangent) of ``ours`` equal those of torch's ``theirs``."""
    targs = [torch.tensor(a, requires_grad=True) for a in arrays]
    expected = theirs(*targs)
    g = RNG.standard_normal(tuple(expected.shape))
    (expected * torch.tensor(g)).sum().backward()


    @jax.jit  # one compiled program (eager dispatch of the gathers dominates otherwise)
    def value_and_grads(arrays, g):
        value, vjp = jax.vjp(ours, *arrays)
        return value, vjp(g)

    value, grads = value_and_grads(arrays, g)
    np.testing.assert_allclose(value, expected.detach().numpy(), rtol=1e-12, atol=1e-12, strict=True)
    for ours_grad, t in zip(grads, targs):
        np.testing.assert_allclose(ours_grad, t.grad.numpy(), rtol=1e-12, atol=1e-12)


_INTERPOLATE_CASES = [
    # (input shape, keywords): upsampling and downsampling, integer and non-integer scales
    ((1, 2, 4), {"size": 9}),
    ((1, 2, 7), {"scale_factor": 0.45}),
    ((1, 1, 3, 5), {"scale_factor": (2.0, 0.6)}),
    ((1, 1, 3, 4), {"scale_factor": 1.7, "recompute_scale_factor": True}),
    ((1, 1, 2, 3, 4), {"size": (3, 5, 2)}),
    ((1, 2, 5), {"scale_factor": 1.6, "mode": "nearest-exact"}),
    ((1, 1, 4, 3), {"size": (3, 7), "mode": "nearest-exact"}),
    ((1, 1, 3, 2, 4), {"scale_factor": 0.75, "mode": "nearest-exact"}),
    ((1, 2, 5), {"size": 8, "mode": "linear"}),
    ((1, 2, 5), {"size": 8, "mode": "linear", "align_corners": True}),
    ((1, 2, 6), {"scale_factor": 0.55, "mode": "linear"}),
    ((1, 2, 6), {"scale_factor": 0.55, "mode": "linear", "recompute_scale_factor": True}),
    ((1, 2, 4), {"size": 1, "mode": "linear", "align_corners": True}),
    ((1, 1, 3, 4), {"scale_factor": (2.5, 0.5), "mode": "bilinear"}),
    ((1, 1, 3, 4), {"scale_factor": (2.5, 0.5), "mode": "bilinear", "align_corners": True}),
    ((2, 1, 5, 2), {"size": (2, 5), "mode": "bilinear"}),
    ((1, 1, 3, 4), {"size": (7, 3), "mode": "bicubic"}),
    ((1, 1, 3, 4), {"size": (7, 3), "mode": "bicubic", "align_corners": True}),
    ((1, 1, 6, 5), {"scale_factor": 0.6, "mode": "bicubic"}),
    ((1, 1, 2, 3, 4), {"scale_factor": (2.0, 1.3, 0.5), "mode": "trilinear"}),
    ((1, 1, 2, 3, 4), {"size": (3, 2, 6), "mode": "trilinear", "align_corners": True}),
    ((1, 2, 7), {"size": 3, "mode": "area"}),
    ((1, 1, 5, 4), {"scale_factor": 0.5, "mode": "area"}),
    ((1, 1, 3, 4, 2), {"size": (2, 6, 1), "mode": "area"}),
    ((1, 1, 7, 5), {"size": (3, 2), "mode": "bilinear", "antialias": True}),
    ((1, 1, 7, 5), {"scale_factor": 0.45, "mode": "bilinear", "antialias": True, "align_corners": True}),
    ((1, 1, 6, 9), {"scale_factor": (0.4, 1.6), "mode": "bicubic", "antialias": True}),
    ((1, 1, 3, 4), {"size": (5, 2), "mode": "bicubic", "antialias": True, "align_corners": True}),
]


@pytest.mark.parametrize("shape, kwargs", _INTERPOLATE_CASES)
def test_interpolate_matches_torch(shape, kwargs):
    _assert_matches_torch(lambda x: interpolate(x, **kwargs), lambda x: F.interpolate(x, **kwargs),
                          RNG.standard_normal(shape))


@pytest.mark.parametrize("mode", ["nearest", "linear", "area"])
def test_interpolate_empty_batch_matches_torch(mode):
    x = np.zeros((0, 2, 3))
    out, vjp = jax.vjp(lambda a: interpolate(a, size=5, mode=mode), x)
    assert out.shape == tuple(F.interpolate(torch.tensor(x), size=5, mode=mode).shape) == (0, 2, 5)
    assert vjp(np.zeros(out.shape))[0].shape == x.shape


@pytest.mark.parametrize("mode, kwargs", [("nearest", {}), ("bilinear", {"align_corners": False}),
                                          ("bicubic", {"align_corners": True})])
def test_interpolate_nan_propagates_as_torch(mode, kwargs):
    x = RNG.standard_normal((1, 1, 3, 4))
    x[0, 0, 1, 2] = np.nan
    ours = interpolate(x, size=(5, 6), mode=mode, **kwargs)
    theirs = F.interpolate(torch.tensor(x), size=(5, 6), mode=mode, **kwargs).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12, equal_nan=True)


def _torch_jacobian(fn, shape):
    """The Jacobian (outputs x inputs) of a linear torch function, column by column from its
    values at the basis vectors."""
    n = int(np.prod(shape))
    return np.stack([fn(torch.tensor(np.eye(n)[i].reshape(shape))).numpy().ravel() for i in range(n)], axis=1)


@pytest.mark.parametrize("shape, kwargs", [
    ((1, 1, 3), {"scale_factor": 1.1, "mode": "nearest"}),  # out == n: torch's backward copies
    ((1, 1, 3), {"scale_factor": 2.3, "mode": "nearest"}),  # out == 2n: torch's backward halves
    ((1, 1, 4, 4), {"scale_factor": 1.1, "mode": "bicubic"}),  # out == n: torch's backward copies
])
def test_interpolate_vjp_is_the_transpose_of_torchs_forward_where_torchs_backward_is_not(shape, kwargs):
    x = RNG.standard_normal(shape)
    tx = torch.tensor(x, requires_grad=True)
    out = F.interpolate(tx, **kwargs)
    g = RNG.standard_normal(tuple(out.shape))
    (out * torch.tensor(g)).sum().backward()
    jac = _torch_jacobian(lambda a: F.interpolate(a, **kwargs), shape)
    expected = (jac.T @ g.ravel()).reshape(shape)
    value, vjp = jax.vjp(lambda a: interpolate(a, **kwargs), x)
    np.testing.assert_allclose(value, out.detach().numpy(), rtol=1e-12, atol=1e-12)  # torch's values
    np.testing.assert_allclose(vjp(g)[0], expected, rtol=1e-12, atol=1e-12)  # their derivative
    assert not np.allclose(tx.grad.numpy(), expected)  # torch 2.13's backward differs (documented)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_interpolate_antialias_to_width_1_is_torchs_passes_in_turn(mode):
    # torch 2.13's CPU forward repeats the first row here (documented); its two passes run one
    # after the other (height, then width) are the separable filter
    x = RNG.standard_normal((1, 1, 7, 5))
    kwargs = {"mode": mode, "antialias": True}
    tx = torch.tensor(x, requires_grad=True)
    expected = F.interpolate(F.interpolate(tx, size=(3, 5), **kwargs), size=(3, 1), **kwargs)
    g = RNG.standard_normal((1, 1, 3, 1))
    (expected * torch.tensor(g)).sum().backward()
    value, vjp = jax.vjp(lambda a: interpolate(a, size=(3, 1), **kwargs), x)
    np.testing.assert_allclose(value, expected.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(vjp(g)[0], tx.grad.numpy(), rtol=1e-12, atol=1e-12)


def _grid(batch, out_spatial, dims, reach=1.4):
    return RNG.uniform(-reach, reach, (batch, *out_spatial, dims))


@pytest.mark.parametrize("dims, mode", [(2, "bilinear"), (2, "nearest"), (2, "bicubic"), (3, "bilinear"),
                                        (3, "nearest")])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_matches_torch(dims, mode, padding_mode, align_corners):
    spatial = (3, 4) if dims == 2 else (2, 3, 4)
    x = RNG.standard_normal((2, 2, *spatial))
    grid = _grid(2, (2, 3) if dims == 2 else (2, 2, 2), dims, reach=2.6 if padding_mode == "reflection" else 1.4)
    kwargs = {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners}
    _assert_matches_torch(lambda a, g: grid_sample(a, g, **kwargs), lambda a, g: F.grid_sample(a, g, **kwargs),
                          x, grid)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_grid_sample_non_finite_positions_match_torch(mode, padding_mode):
    # torch: zero padding masks the value, not the weight (NaN); border and reflection clip NaN to 0
    x = np.arange(12.0).reshape(1, 1, 3, 4)
    grid = np.array([[[[np.nan, 0.2], [0.1, np.nan], [np.inf, 0.0], [-np.inf, 0.3], [0.5, 0.5]]]])
    kwargs = {"mode": mode, "padding_mode": padding_mode, "align_corners": False}
    expected = F.grid_sample(torch.tensor(x), torch.tensor(grid), **kwargs).numpy()
    np.testing.assert_allclose(grid_sample(x, grid, **kwargs), expected, rtol=1e-12, equal_nan=True)


def test_grid_sample_single_pixel_axis_matches_torch():
    x, grid = RNG.standard_normal((1, 2, 1, 3)), _grid(1, (2, 2), 2)
    for mode, padding_mode, align_corners in (("bilinear", "zeros", False), ("bilinear", "border", True),
                                              ("bicubic", "reflection", True)):
        kwargs = {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners}
        _assert_matches_torch(lambda a, g, kw=kwargs: grid_sample(a, g, **kw),
                              lambda a, g, kw=kwargs: F.grid_sample(a, g, **kw), x, grid)


def test_spatial_transformer_gradient_matches_torch():
    x, theta = RNG.standard_normal((2, 2, 4, 5)), RNG.standard_normal((2, 2, 3)) * 0.5

    def ours(x, theta):
        return grid_sample(x, affine_grid(theta, (2, 2, 3, 3), align_corners=False), padding_mode="border")

    def theirs(x, theta):
        return F.grid_sample(x, F.affine_grid(theta, (2, 2, 3, 3), align_corners=False), padding_mode="border",
                             align_corners=False)

    _assert_matches_torch(ours, theirs, x, theta)


@pytest.mark.parametrize("size, align_corners", [((2, 1, 3, 4), False), ((1, 2, 2, 3, 4), True)])
def test_affine_grid_matches_torch(size, align_corners):
    dims = len(size) - 2
    theta = RNG.standard_normal((size[0], dims, dims + 1))
    _assert_matches_torch(lambda t: affine_grid(t, size, align_corners),
                          lambda t: F.affine_grid(t, size, align_corners), theta)


def test_grid_sample_empty_batch_matches_torch():
    x, grid = np.zeros((0, 2, 3, 3)), np.zeros((0, 4, 2, 2))
    out = grid_sample(x, grid)
    assert out.shape == tuple(F.grid_sample(torch.tensor(x), torch.tensor(grid), align_corners=False).shape)
    gx, gg = jax.grad(lambda a, g: jnp.sum(grid_sample(a, g)), argnums=(0, 1))(x, grid)
    assert gx.shape == x.shape and gg.shape == grid.shape


def _count_primitives(jaxpr, names, counts):
    """``counts`` of the equations of ``jaxpr`` (and of the jaxprs nested in its equations) whose
    primitive is one of ``names``."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in names:
            counts[eqn.primitive.name] = counts.get(eqn.primitive.name, 0) + 1
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                sub = getattr(sub, "jaxpr", sub)
                if hasattr(sub, "eqns"):
                    _count_primitives(sub, names, counts)
    return counts


def test_grid_sample_reads_all_corners_with_one_gather_and_writes_them_with_one_scatter_add():
    # the corners are stacked on one axis: the value, JVP and VJP programs hold as many gathers
    # and scatter-adds for bicubic's 16 corners and trilinear's 8 as for bilinear's 4 (they
    # held one per corner: 48 gathers and 16 scatter-adds for bicubic)
    def counts(x_shape, grid_shape, **kwargs):
        x, grid = jnp.ones(x_shape), jnp.zeros(grid_shape)

        def program(x, grid, ct):
            f = lambda a, g: grid_sample(a, g, **kwargs)  # noqa: E731
            out, pullback = jax.vjp(f, x, grid)
            return out, pullback(ct), jax.jvp(f, (x, grid), (x, grid))

        ct = jnp.ones(x_shape[:2] + grid_shape[1:-1])
        return _count_primitives(jax.make_jaxpr(program)(x, grid, ct).jaxpr, {"gather", "scatter-add"}, {})

    bilinear = counts((1, 1, 4, 3), (1, 2, 2, 2))
    assert bilinear.get("gather", 0) >= 1 and bilinear.get("scatter-add", 0) >= 1, bilinear
    assert counts((1, 1, 4, 3), (1, 2, 2, 2), mode="bicubic") == bilinear
    assert counts((1, 1, 2, 3, 3), (1, 1, 2, 2, 3)) == bilinear


X3, X4 = np.zeros((1, 2, 3)), np.zeros((1, 2, 3, 3))


@pytest.mark.parametrize("call, exc, words", [
    (lambda: interpolate(X4, size=2, mode="linear"), ValueError, ("interpolate", "mode", "rank 3")),
    (lambda: interpolate(X3, size=2, mode="bicubic"), ValueError, ("interpolate", "mode", "rank 4")),
    (lambda: interpolate(X3, size=2, mode="trilinear"), ValueError, ("interpolate", "mode", "rank 5")),
    (lambda: interpolate(np.zeros((2, 3)), size=2), ValueError, ("interpolate", "rank 3, 4 or 5")),
    (lambda: interpolate(X3, size=2, scale_factor=2.0), ValueError, ("interpolate", "size", "scale_factor")),
    (lambda: interpolate(X3), ValueError, ("interpolate", "size", "scale_factor")),
    (lambda: interpolate(X3, size=2, mode="cubic"), ValueError, ("interpolate", "mode")),
    (lambda: interpolate(X3, size=2, align_corners=True), ValueError, ("interpolate", "align_corners")),
    (lambda: interpolate(X3, size=2, mode="area", align_corners=False), ValueError, ("interpolate", "align_corners")),
    (lambda: interpolate(X4, size=(2, 3, 4)), ValueError, ("interpolate", "size")),
    (lambda: interpolate(X4, size=0), ValueError, ("interpolate", "size")),
    (lambda: interpolate(X4, scale_factor=-1.0), ValueError, ("interpolate", "scale_factor")),
    (lambda: interpolate(X3, scale_factor=0.2), ValueError, ("interpolate", "scale_factor")),
    (lambda: interpolate(X3, size=4, recompute_scale_factor=True), ValueError,
     ("interpolate", "recompute_scale_factor")),
    (lambda: interpolate(X4, size=4, mode="nearest", antialias=True), ValueError, ("interpolate", "antialias")),
    (lambda: interpolate(np.zeros((1, 0, 3)), size=4), ValueError, ("interpolate", "x")),
    (lambda: interpolate(X3 + 0j, size=4), TypeError, ("interpolate", "x")),
    (lambda: grid_sample(X4, np.zeros((1, 2, 2, 2)), mode="linear"), ValueError, ("grid_sample", "mode")),
    (lambda: grid_sample(np.zeros((1, 1, 2, 2, 2)), np.zeros((1, 1, 2, 2, 3)), mode="bicubic"), ValueError,
     ("grid_sample", "mode", "4-d")),
    (lambda: grid_sample(X4, np.zeros((1, 2, 2, 2)), padding_mode="wrap"), ValueError,
     ("grid_sample", "padding_mode")),
    (lambda: grid_sample(X4, np.zeros((1, 2, 2, 3))), ValueError, ("grid_sample", "grid")),
    (lambda: grid_sample(X4, np.zeros((2, 2, 2, 2))), ValueError, ("grid_sample", "grid")),
    (lambda: grid_sample(X3, np.zeros((1, 2, 1))), ValueError, ("grid_sample", "x")),
    (lambda: grid_sample(np.zeros((1, 1, 0, 2)), np.zeros((1, 2, 2, 2))), ValueError, ("grid_sample", "x")),
    (lambda: affine_grid(np.zeros((1, 2, 3)), (1, 1, 2, 2, 2)), ValueError, ("affine_grid", "theta")),
    (lambda: affine_grid(np.zeros((2, 2, 3)), (1, 1, 2, 2)), ValueError, ("affine_grid", "theta")),
    (lambda: affine_grid(np.zeros((1, 2, 3)), (1, 1, 0, 2)), ValueError, ("affine_grid", "size")),
    (lambda: affine_grid(np.zeros((1, 2, 3)), 4), TypeError, ("affine_grid", "size")),
])
def test_bad_input_names_the_op_and_argument(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for word in words:
        assert word in str(info.value)
