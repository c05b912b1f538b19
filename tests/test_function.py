"""jaxrules.Function: the examples of PyTorch's "Extending torch.func with autograd.Function"
page re-done in JAX, each against the same computation in plain JAX, and the seed's errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwAD

from jaxrules import Function

RNG = np.random.default_rng(3)
X = jnp.asarray(RNG.standard_normal((3, 5)))
XB = jnp.asarray(RNG.standard_normal((4, 3, 5)))
W = jnp.asarray(RNG.standard_normal((3, 5)))


def _close(a, b, tol=1e-12):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=tol, atol=tol)


# ----------------------------------------------------------------------------------------------
# NumpySort / NumpyTake: numpy-backed (pure_callback), custom backward and vmap staticmethods.

CALLS = {"sort_vmap": 0, "take_vmap": 0}


def _host_sort(x, dim):
    def host(x):
        ind = np.argsort(x, axis=dim)
        ind_inv = np.argsort(ind, axis=dim)
        return np.take_along_axis(x, ind, dim), ind.astype(np.int32), ind_inv.astype(np.int32)

    index = jax.ShapeDtypeStruct(x.shape, jnp.int32)
    return jax.pure_callback(host, (jax.ShapeDtypeStruct(x.shape, x.dtype), index, index), x)


def _host_take(x, ind, dim):
    return jax.pure_callback(lambda x, i: np.take_along_axis(x, i, dim), jax.ShapeDtypeStruct(x.shape, x.dtype), x, ind)


class NumpySort(Function):
    @staticmethod
    def forward(x, dim):
        return _host_sort(x, dim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, dim = inputs
        _, ind, ind_inv = output
        ctx.mark_non_differentiable(ind, ind_inv)
        ctx.save_for_backward(ind, ind_inv)
        ctx.dim = dim

    @staticmethod
    def backward(ctx, grad_output, _0, _1):
        ind, ind_inv = ctx.saved_tensors
        return NumpyTake.apply(grad_output, ind_inv, ind, ctx.dim), None

    @staticmethod
    def vmap(info, in_dims, x, dim):
        CALLS["sort_vmap"] += 1
        x = jnp.moveaxis(x, in_dims[0], 0)
        logical_dim = x.ndim - 1
        dim = dim if dim >= 0 else dim + logical_dim
        return NumpySort.apply(x, dim + 1), (0, 0, 0)


class NumpyTake(Function):
    @staticmethod
    def forward(x, ind, ind_inv, dim):
        return _host_take(x, ind, dim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, ind, ind_inv, dim = inputs
        ctx.save_for_backward(ind, ind_inv)
        ctx.dim = dim

    @staticmethod
    def backward(ctx, grad_output):
        ind, ind_inv = ctx.saved_tensors
        return NumpyTake.apply(grad_output, ind_inv, ind, ctx.dim), None, None, None

    @staticmethod
    def vmap(info, in_dims, x, ind, ind_inv, dim):
        CALLS["take_vmap"] += 1

        def front(a, d):
            return jnp.broadcast_to(a, (info.batch_size, *a.shape)) if d is None else jnp.moveaxis(a, d, 0)

        x, ind, ind_inv = front(x, in_dims[0]), front(ind, in_dims[1]), front(ind_inv, in_dims[2])
        logical_dim = x.ndim - 1
        dim = dim if dim >= 0 else dim + logical_dim
        return NumpyTake.apply(x, ind, ind_inv, dim + 1), 0


def numpy_sort_loss(x):
    return jnp.sum(NumpySort.apply(x, 1)[0] * W)


def jax_sort_loss(x):
    return jnp.sum(jnp.sort(x, axis=1) * W)


@pytest.mark.parametrize(
    "transform",
    [
        lambda f: f(X),
        lambda f: jax.grad(f)(X),
        lambda f: jax.jit(jax.grad(f))(X),
        lambda f: jax.vmap(f)(XB),
        lambda f: jax.vmap(jax.grad(f))(XB),
        lambda f: jax.grad(lambda xs: jnp.sum(jax.vmap(f)(xs)))(XB),
        lambda f: jax.jacrev(jax.grad(f))(X),
    ],
    ids=["value", "grad", "jit_grad", "vmap", "vmap_of_grad", "grad_of_vmap", "rev_over_rev"],
)
def test_numpy_sort_matches_jax(transform):
    _close(transform(numpy_sort_loss), transform(jax_sort_loss))


def test_numpy_sort_uses_its_vmap_rules():
    jax.clear_caches()  # the rules run while JAX traces (kept between calls under jax_custom_jvp3)
    CALLS.update(sort_vmap=0, take_vmap=0)
    jax.vmap(jax.grad(numpy_sort_loss))(XB)
    assert CALLS["sort_vmap"] >= 1 and CALLS["take_vmap"] >= 1


def test_numpy_sort_indices_are_integers_without_derivative():
    values, ind, ind_inv = NumpySort.apply(X, 1)
    assert ind.dtype == jnp.int32
    _close(values, jnp.sort(X, axis=1))


# ----------------------------------------------------------------------------------------------
# ScaleGradient: identity forward, scaled backward, generated vmap rule.


class ScaleGradient(Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, scale):
        return x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.scale = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None

    @staticmethod
    def jvp(ctx, x_t, scale_t):
        return x_t


def test_scale_gradient():
    g = jax.grad(lambda x: jnp.sum(jnp.sin(ScaleGradient.apply(x, 3.0))))(X)
    _close(g, 3.0 * jnp.cos(X))
    # An array scale is a residual; under vmap each example gets its own.
    scales = jnp.arange(1.0, 5.0)
    per_example = jax.vmap(jax.grad(lambda x, s: jnp.sum(ScaleGradient.apply(x, s))))(XB, scales)
    _close(per_example, jnp.broadcast_to(scales[:, None, None], XB.shape))
    _close(jax.jvp(lambda x: ScaleGradient.apply(x, 3.0), (X,), (W,))[1], W)


# ----------------------------------------------------------------------------------------------
# MyCube: two outputs, backward and jvp, generated vmap rule; second order.


class MyCube(Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x**3, 3 * x**2

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        _, dx = output
        ctx.save_for_backward(x, dx)
        ctx.save_for_forward(x, dx)

    @staticmethod
    def backward(ctx, grad_output, grad_dx):
        x, dx = ctx.saved_tensors
        return grad_output * dx + grad_dx * 6 * x

    @staticmethod
    def jvp(ctx, x_t):
        x, dx = ctx.saved_tensors
        return dx * x_t, 6 * x * x_t


def cube_loss(f):
    def loss(x):
        y, dy = f(x)
        return jnp.sum(y * W) + jnp.sum(jnp.sin(dy))

    return loss


def plain_cube(x):
    return x**3, 3 * x**2


@pytest.mark.parametrize(
    "transform",
    [
        lambda f: jax.grad(cube_loss(f))(X),
        lambda f: jax.jvp(f, (X,), (W,)),
        lambda f: jax.hessian(lambda v: cube_loss(f)(v.reshape(3, 5)))(X.ravel()),
        lambda f: jax.jacrev(jax.grad(cube_loss(f)))(X),
        lambda f: jax.vmap(jax.grad(cube_loss(f)))(XB),
        lambda f: jax.jit(jax.vmap(lambda x: jax.jvp(f, (x,), (x,))))(XB),
    ],
    ids=["grad", "jvp", "hessian", "rev_over_rev", "vmap_of_grad", "jit_vmap_jvp"],
)
def test_my_cube_matches_jax(transform):
    _close(transform(MyCube.apply), transform(plain_cube))


# ----------------------------------------------------------------------------------------------
# ctx semantics and the seed's errors


class RecordNeeds(Function):
    generate_vmap_rule = True
    seen = []

    @staticmethod
    def forward(x, y):
        return x * y

    @staticmethod
    def setup_context(ctx, inputs, output):
        RecordNeeds.seen.append(ctx.needs_input_grad)
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y, g * x


def test_needs_input_grad():
    jax.grad(lambda x: jnp.sum(RecordNeeds.apply(x, W)))(X)
    assert RecordNeeds.seen[-1] == (True, False)
    jax.grad(lambda x, y: jnp.sum(RecordNeeds.apply(x, y)), argnums=(0, 1))(X, W)
    assert RecordNeeds.seen[-1] == (True, True)


def _cube_variant(**attrs):
    return type("Variant", (MyCube,), attrs)


def test_both_vmap_rules_is_an_error():
    both = _cube_variant(vmap=staticmethod(lambda info, in_dims, x: (MyCube.apply(x), 0)))
    with pytest.raises(RuntimeError, match="both generate_vmap_rule=True and an overriden vmap"):
        jax.vmap(both.apply)(XB)


def test_no_vmap_rule_is_an_error_only_when_vmapped():
    neither = _cube_variant(generate_vmap_rule=False)
    _close(neither.apply(X), plain_cube(X))
    with pytest.raises(RuntimeError, match="does not have vmap support"):
        jax.vmap(neither.apply)(XB)


@pytest.mark.parametrize(
    "rule, message",
    [
        (lambda info, in_dims, x: MyCube.apply(jnp.moveaxis(x, in_dims[0], 0))[0], "two returns"),
        (lambda info, in_dims, x: (1, 2, 3), "Got 3 returns"),
        (lambda info, in_dims, x: (MyCube.apply(jnp.moveaxis(x, in_dims[0], 0)), (0, 0, 0)), "incompatible"),
    ],
)
def test_malformed_vmap_return(rule, message):
    bad = _cube_variant(generate_vmap_rule=False, vmap=staticmethod(rule))
    with pytest.raises(RuntimeError, match=message):
        jax.vmap(bad.apply)(XB)


def test_missing_jvp_and_wrong_gradient_count():
    no_jvp = _cube_variant(jvp=Function.jvp)
    with pytest.raises(TypeError, match="needs the jvp staticmethod"):
        jax.jvp(no_jvp.apply, (X,), (W,))
    wrong = _cube_variant(backward=staticmethod(lambda ctx, g, gd: (g, g)))
    with pytest.raises(TypeError, match="incorrect number of gradients"):
        jax.grad(lambda x: jnp.sum(wrong.apply(x)[0]))(X)


def test_unhashable_static_argument_is_refused():
    with pytest.raises(TypeError, match="neither an array nor hashable"):
        ScaleGradient.apply(X, [1.0])


class Mul(Function):
    """A literal port of torch's two-input Function: its jvp reads both tangents."""

    @staticmethod
    def forward(x, y):
        return x * y

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_forward(*inputs)
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * y, grad * x

    @staticmethod
    def jvp(ctx, tx, ty):
        x, y = ctx.saved_tensors
        return tx * y + x * ty


def test_jvp_gets_zeros_for_an_input_without_tangent_as_torch():
    x, y = jnp.asarray([1.0, 2.0]), jnp.asarray([3.0, -1.0])
    _, tangent = jax.jvp(lambda a: Mul.apply(a, y), (x,), (jnp.ones(2),))
    np.testing.assert_allclose(tangent, y)
    hess = jax.hessian(lambda a: jnp.sum(Mul.apply(a, a) * y))(x)
    np.testing.assert_allclose(hess, 2 * np.diag(np.asarray(y)))
    tx, ty = torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([3.0, -1.0], dtype=torch.float64)

    class TorchMul(torch.autograd.Function):
        @staticmethod
        def forward(a, b):
            return a * b

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_forward(*inputs)

        @staticmethod
        def jvp(ctx, ta, tb):
            a, b = ctx.saved_tensors
            assert tb is not None  # torch passes zeros for the input without a tangent
            return ta * b + a * tb

    with fwAD.dual_level():
        out = fwAD.unpack_dual(TorchMul.apply(fwAD.make_dual(tx, torch.ones(2, dtype=torch.float64)), ty)).tangent
    np.testing.assert_allclose(tangent, out.numpy())


class OldStyle(Function):
    def forward(self, x):
        return x * 2


class CtxForward(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


@pytest.mark.parametrize("cls", [OldStyle, CtxForward])
def test_torch_old_style_forward_says_what_to_write(cls):
    with pytest.raises(TypeError, match="staticmethod forward") as info:
        cls.apply(jnp.ones(2))
    assert "setup_context" in str(info.value)
