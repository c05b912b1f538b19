"""Derivatives a port from PyTorch relies on, against torch 2.13 and JAX at the points where a
hand-written formula is easy to get wrong, and the memory of formulas that must not form a large
intermediate."""

import jax
import jax.numpy as jnp
import numpy as np
import torch

import jaxrules.linalg as rla
import jaxrules.nn as rnn
import jaxrules.numpy as rnp
import jaxrules.scipy.special as rsp

# ----------------------------------------------------------------------------------------------
# xlogy at x = 0: d/dx = log y (torch 2.13 and JAX), 0 where y <= 0 (torch's mask); d/dy = 0,
# but NaN where y is NaN (torch's x / y)


def test_xlogy_x_derivative_at_zero_is_log_y_as_torch_and_jax():
    x = np.array([0.0, 0.0, 0.0, 0.0, 1.0, -0.0, 0.0])
    y = np.array([2.0, 0.5, 0.0, -1.0, 3.0, 4.0, np.inf])
    tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
    t_dx, _ = torch.autograd.grad(torch.special.xlogy(tx, ty).sum(), [tx, ty])
    (t_dx2,) = torch.autograd.grad(torch.xlogy(tx, ty).sum(), [tx])
    dx, dy = jax.grad(lambda a, b: jnp.sum(rsp.xlogy(a, b)), (0, 1))(jnp.asarray(x), jnp.asarray(y))
    np.testing.assert_allclose(dx, t_dx.numpy(), rtol=1e-15)
    np.testing.assert_allclose(dx, t_dx2.numpy(), rtol=1e-15)
    positive = y > 0
    jax_dx = jax.grad(lambda a: jnp.sum(jax.scipy.special.xlogy(a, jnp.asarray(y))))(jnp.asarray(x))
    np.testing.assert_allclose(dx[positive], jax_dx[positive], rtol=1e-15)
    tangent = jax.jvp(lambda a: rsp.xlogy(a, jnp.asarray(y)), (jnp.asarray(x),), (jnp.ones(7),))[1]
    np.testing.assert_allclose(tangent, t_dx.numpy(), rtol=1e-15)
    # the second derivative d/dy d/dx = 1 / y where log y is not masked (torch's double backward)
    (t_dxy,) = torch.autograd.grad(torch.autograd.grad(torch.xlogy(tx, ty).sum(), tx, create_graph=True)[0].sum(), ty)
    dxy = jax.grad(lambda b: jnp.sum(jax.grad(lambda a: jnp.sum(rsp.xlogy(a, b)))(jnp.asarray(x))))(jnp.asarray(y))
    # (at x = y = 0 torch's double backward of its masked_fill is 0 * (1 / 0) = NaN; the mask's
    # derivative there is 0)
    np.testing.assert_allclose(dxy[y != 0], t_dxy.numpy()[y != 0], rtol=1e-15)
    assert np.isnan(t_dxy.numpy()[2]) and dxy[2] == 0
    np.testing.assert_array_equal(dy[x == 0], 0.0)


def test_xlogy_of_zero_and_nan_is_nan_as_torch_and_jax():
    x = np.array([0.0, -0.0, 0.0, 1.0, 0.0])
    y = np.array([np.nan, np.nan, 0.0, np.nan, 2.0])
    expected = torch.xlogy(torch.tensor(x), torch.tensor(y)).numpy()
    np.testing.assert_array_equal(jax.scipy.special.xlogy(jnp.asarray(x), jnp.asarray(y)), expected)
    np.testing.assert_array_equal(rsp.xlogy(jnp.asarray(x), jnp.asarray(y)), expected)
    np.testing.assert_array_equal(jax.jit(rsp.xlogy)(jnp.asarray(x), jnp.asarray(y)), expected)
    assert np.isnan(rsp.xlogy(0.0, np.nan)) and np.isnan(rsp.xlogy(jnp.float32(0), jnp.float32(np.nan)))



def test_xlogy_derivatives_at_a_nan_y_are_nan_as_torch():
    """At x = 0, y = NaN the value is NaN and both derivatives are NaN (torch: ``log y`` and
    ``x / y``); at x = 0 and a number y the y-derivative stays 0 and the x-derivative log y."""
    x = np.array([0.0, -0.0, 1.0, 0.0, 0.0, 0.0, np.nan])
    y = np.array([np.nan, np.nan, np.nan, 2.0, -1.0, 0.5, 0.0])
    tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
    t_dx, t_dy = torch.autograd.grad(torch.xlogy(tx, ty).sum(), [tx, ty])
    ax, ay = jnp.asarray(x), jnp.asarray(y)
    dx, dy = jax.grad(lambda a, b: jnp.sum(rsp.xlogy(a, b)), (0, 1))(ax, ay)
    np.testing.assert_array_equal(dx, t_dx.numpy())
    np.testing.assert_array_equal(dy, t_dy.numpy())
    assert np.isnan(dy[:3]).all() and np.isnan(dx[:3]).all()
    # forward mode: the same factors, one argument at a time
    jx = jax.jvp(lambda a: rsp.xlogy(a, ay), (ax,), (jnp.ones(7),))[1]
    jy = jax.jvp(lambda b: rsp.xlogy(ax, b), (ay,), (jnp.ones(7),))[1]
    np.testing.assert_array_equal(jx, t_dx.numpy())
    np.testing.assert_array_equal(jy, t_dy.numpy())
    # float32, under jit
    gx32, gy32 = jax.jit(jax.grad(rsp.xlogy, (0, 1)))(jnp.float32(0), jnp.float32(np.nan))
    assert np.isnan(gx32) and np.isnan(gy32)

# ----------------------------------------------------------------------------------------------
# pinv's derivatives of a wide or tall matrix form no max(m, n)^2 intermediate (JAX's rule does
# not either; a (2, 400000) input would need 1.2 TB)


def _pinv_loss(w):
    return lambda m: jnp.sum(rla.pinv(m) * w)


def _derivative_temporaries(shape) -> tuple[int, int, int]:
    """Temporary bytes of the compiled primal, gradient and JVP of a weighted sum of pinv."""
    x, loss = jnp.zeros(shape), _pinv_loss(jnp.zeros(shape[::-1]))
    jvp = jax.jit(lambda m, t: jax.jvp(loss, (m,), (t,)))
    return tuple(c.memory_analysis().temp_size_in_bytes for c in (
        jax.jit(loss).lower(x).compile(), jax.jit(jax.grad(loss)).lower(x).compile(), jvp.lower(x, x).compile()))


def test_pinv_derivatives_of_a_wide_or_tall_matrix_stay_small_and_match_torch():
    rng = np.random.default_rng(0)
    for shape in ((2, 3000), (3000, 2)):
        # The derivatives' temporaries grow linearly with the long side: from n = 3000 to 6000 a
        # (max side)^2 float64 intermediate would add 3 n^2 8 bytes (216 MB), (n, 2) arrays add
        # kilobytes. Their size itself also holds what does not grow: a GPU's SVD and GEMM
        # workspaces (on an H200 the derivatives' programs took 34 MB, the primal's 97 KB).
        double = tuple(2 * d if d > 2 else d for d in shape)
        (p1, g1, j1), (p2, g2, j2) = _derivative_temporaries(shape), _derivative_temporaries(double)
        n = max(shape)
        assert max(g2 - g1, j2 - j1, p2 - p1) < 3 * n * n * 8 / 100, (p1, g1, j1, p2, g2, j2)
        a = rng.standard_normal(shape)
        w = rng.standard_normal(shape[::-1])
        loss = _pinv_loss(w)
        x = jnp.asarray(a)
        ta = torch.tensor(a, requires_grad=True)
        (t_grad,) = torch.autograd.grad((torch.linalg.pinv(ta) * torch.tensor(w)).sum(), ta)
        np.testing.assert_allclose(jax.grad(loss)(x), t_grad.numpy(), rtol=1e-8, atol=1e-12)
        t = rng.standard_normal(shape)
        np.testing.assert_allclose(jax.jvp(loss, (x,), (jnp.asarray(t),))[1],
                                   np.sum(t_grad.numpy() * t), rtol=1e-8)


# ----------------------------------------------------------------------------------------------
# Complex input where torch's op takes it: values as torch 2.13; the gradient of the real loss
# Re(sum(out * c)) is torch's conjugated (JAX's convention); the JVP against central differences


def _complex(rng, shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def _check_complex_against_torch(ours, theirs, args, rng):
    targs = [torch.tensor(a, requires_grad=True) for a in args]
    t_out = theirs(*targs)
    out = ours(*map(jnp.asarray, args))
    np.testing.assert_allclose(out, t_out.detach().numpy(), rtol=1e-12, atol=1e-12)
    c = _complex(rng, t_out.shape)
    t_grads = torch.autograd.grad((t_out * torch.tensor(c)).real.sum(), targs)
    grads = jax.grad(lambda *a: jnp.sum((ours(*a) * c).real), tuple(range(len(args))))(*map(jnp.asarray, args))
    for g, t_g in zip(grads, t_grads):
        np.testing.assert_allclose(np.conj(g), t_g.numpy(), rtol=1e-12, atol=1e-12)
    ts = [_complex(rng, np.shape(a)) for a in args]
    tangent = jax.jvp(ours, tuple(map(jnp.asarray, args)), tuple(map(jnp.asarray, ts)))[1]
    eps = 1e-6
    plus = ours(*[jnp.asarray(a + eps * t) for a, t in zip(args, ts)])
    minus = ours(*[jnp.asarray(a - eps * t) for a, t in zip(args, ts)])
    np.testing.assert_allclose(tangent, (plus - minus) / (2 * eps), rtol=1e-6, atol=1e-7)


def test_complex_conv_conv_transpose_unfold_fold_match_torch():
    rng = np.random.default_rng(0)
    cases = [
        ("conv_transpose1d", ((2, 4, 5), (4, 3, 3), (6,)),
         {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}),
        ("conv_transpose2d", ((1, 2, 4, 4), (2, 3, 2, 2), (3,)), {"stride": 2, "padding": 1}),
        ("conv_transpose3d", ((1, 2, 3, 3, 3), (2, 1, 2, 2, 2)), {"dilation": 2}),
        ("conv1d", ((2, 4, 7), (6, 2, 3), (6,)), {"stride": 2, "padding": 1, "groups": 2}),
        ("conv2d", ((1, 2, 5, 5), (3, 2, 2, 2), (3,)), {"padding": "same", "dilation": 2}),
        ("conv3d", ((1, 2, 4, 4, 4), (2, 2, 2, 2, 2)), {"stride": (1, 2, 1)}),
        ("unfold", ((2, 2, 5, 4),), {"kernel_size": (2, 3), "padding": 1, "stride": 2}),
        ("fold", ((2, 12, 15),), {"output_size": (4, 5), "kernel_size": (2, 3), "padding": 1, "stride": (2, 1)}),
    ]
    for name, shapes, kw in cases:
        args = [_complex(rng, s) for s in shapes]
        _check_complex_against_torch(lambda *a, name=name, kw=kw: getattr(rnn, name)(*a, **kw),
                                     lambda *a, name=name, kw=kw: getattr(torch.nn.functional, name)(*a, **kw),
                                     args, rng)


def test_complex_rms_norm_matches_torch():
    # torch squares x without conjugating: y = x rsqrt(mean(x^2) + eps) w, holomorphic
    rng = np.random.default_rng(1)
    x, w = _complex(rng, (3, 2, 4)), _complex(rng, (2, 4))
    for eps in (None, 1e-3):
        _check_complex_against_torch(lambda a, eps=eps: rnn.rms_norm(a, (2, 4), eps=eps),
                                     lambda a, eps=eps: torch.nn.functional.rms_norm(a, (2, 4), eps=eps), [x], rng)
        _check_complex_against_torch(lambda a, b, eps=eps: rnn.rms_norm(a, (2, 4), b, eps),
                                     lambda a, b, eps=eps: torch.nn.functional.rms_norm(a, (2, 4), b, eps), [x, w], rng)
    real_w = rng.standard_normal(4)
    y = rnn.rms_norm(jnp.asarray(x, jnp.complex64), 4, jnp.asarray(real_w, jnp.float32))
    t_y = torch.nn.functional.rms_norm(torch.tensor(x, dtype=torch.complex64), (4,),
                                       torch.tensor(real_w, dtype=torch.float32))
    assert y.dtype == jnp.complex64 and t_y.dtype == torch.complex64
    np.testing.assert_allclose(y, t_y.numpy(), rtol=1e-5, atol=1e-6)


def test_complex_l1_loss_gradient_is_torchs_sgn_conjugated():
    rng = np.random.default_rng(2)
    x, y = _complex(rng, 5), _complex(rng, 5)
    y[2] = x[2]  # a tie: sgn(0) = 0
    for reduction in ("mean", "sum", "none"):
        tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
        t_loss = torch.nn.functional.l1_loss(tx, ty, reduction=reduction)
        loss = rnn.l1_loss(jnp.asarray(x), jnp.asarray(y), reduction=reduction)
        assert loss.dtype == jnp.float64 and t_loss.dtype == torch.float64
        np.testing.assert_allclose(loss, t_loss.detach().numpy(), rtol=1e-14)
        t_gx, t_gy = torch.autograd.grad(t_loss.sum(), (tx, ty))
        gx, gy = jax.grad(lambda a, b, r=reduction: jnp.sum(rnn.l1_loss(a, b, reduction=r)), (0, 1))(
            jnp.asarray(x), jnp.asarray(y))
        np.testing.assert_allclose(np.conj(gx), t_gx.numpy(), rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(np.conj(gy), t_gy.numpy(), rtol=1e-14, atol=1e-15)
        assert gx[2] == 0 and t_gx[2] == 0


def test_complex_logcumsumexp_is_on_torchs_branch():
    # torch keeps the imaginary part of each step's term of larger real part: not the principal
    # branch (its first entry is x[0] as is, 1 + 10j here, not 1 + (10 - 4 pi) j)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 12)) * 2 + 1j * rng.standard_normal((3, 12)) * 30
    x[0, :2] = -np.inf  # leading -inf: -inf + 0j, as torch
    x[1, 5] = -np.inf + 4j
    x[2, 3:6] = 1.0 + np.array([7j, -20j, 40j])  # ties of the real part
    x[2, 0] = 1 + 10j
    for axis in (0, 1, -1):
        tx = torch.tensor(x, requires_grad=True)
        t_out = torch.logcumsumexp(tx, axis)
        out = rnp.logcumsumexp(jnp.asarray(x), axis)
        np.testing.assert_allclose(out, t_out.detach().numpy(), rtol=1e-13, atol=1e-13)
        c = _complex(rng, x.shape)
        (t_grad,) = torch.autograd.grad((t_out * torch.tensor(c)).real.sum(), tx)
        grad = jax.grad(lambda a, axis=axis: jnp.sum((rnp.logcumsumexp(a, axis) * c).real))(jnp.asarray(x))
        t_grad = t_grad.resolve_conj().numpy()
        finite = np.isfinite(t_grad)
        assert finite.mean() > 0.5
        np.testing.assert_allclose(np.conj(grad)[finite], t_grad[finite], rtol=1e-10, atol=1e-12)
