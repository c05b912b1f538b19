"""polar and masked_fill with an array fill value beyond their records: torch 2.13 parity of
signatures and semantics, the deliberate deviation of polar's gradient at abs <= 0, non-finite
input, zero-size and 0-d input, traced fill values and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrules.ops.elementwise import polar
from jaxrules.ops.shape import masked_fill

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(5)


def _t(x, grad=False):
    return torch.tensor(np.asarray(x), requires_grad=grad)


# ----------------------------------------------------------------------------------------------
# polar


def test_polar_matches_torch_value_gradient_and_jvp_with_broadcasting():
    r, theta = RNG.uniform(0.5, 2, (3, 1)), RNG.standard_normal(4)
    ct = RNG.standard_normal((3, 4)) + 1j * RNG.standard_normal((3, 4))
    tr, tt = _t(r, True), _t(theta, True)
    z = torch.polar(*torch.broadcast_tensors(tr, tt))
    (z * _t(ct).conj()).real.sum().backward()
    out, vjp = jax.vjp(polar, r, theta)
    np.testing.assert_allclose(out, z.detach().numpy(), rtol=1e-14)
    assert out.dtype == jnp.complex128 and out.shape == (3, 4)
    g_r, g_theta = vjp(jnp.conj(ct))  # JAX's cotangent is the conjugate of torch's
    np.testing.assert_allclose(g_r, tr.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(g_theta, tt.grad.numpy(), rtol=1e-12)
    # JVP: e^{i theta} (dr + i r dtheta), hand-derived
    dr, dt = RNG.standard_normal((3, 1)), RNG.standard_normal(4)
    _, tangent = jax.jvp(polar, (r, theta), (dr, dt))
    np.testing.assert_allclose(tangent, np.exp(1j * theta) * (dr + 1j * r * dt), rtol=1e-12)


def test_polar_gradient_at_zero_and_negative_abs_is_the_math_not_torchs():
    r, theta = np.array([0.0, -1.0, 2.0]), np.array([0.5, 0.5, 1.0])
    g_r, g_theta = jax.grad(lambda a, b: jnp.sum(jnp.real(polar(a, b))), (0, 1))(r, theta)
    np.testing.assert_allclose(g_r, np.cos(theta), rtol=1e-14)  # d(r cos t)/dr
    np.testing.assert_allclose(g_theta, -r * np.sin(theta), rtol=1e-14)
    tr = _t(r, True)
    torch.polar(tr, _t(theta)).real.sum().backward()
    # torch's backward uses sgn(result): 0 at r = 0 and the opposite sign for r < 0 ...
    np.testing.assert_allclose(tr.grad.numpy(), [0.0, -np.cos(0.5), np.cos(1.0)], rtol=1e-14)
    # ... while its forward AD gives e^{i theta}, as jaxrules does in both modes
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level():
        d = torch.polar(fwAD.make_dual(_t(r), _t(np.ones(3))), _t(theta))
        np.testing.assert_allclose(fwAD.unpack_dual(d).tangent.numpy(), np.exp(1j * theta), rtol=1e-14)
    np.testing.assert_allclose(jax.jvp(lambda a: polar(a, theta), (r,), (np.ones(3),))[1], np.exp(1j * theta))
    hess = jax.hessian(lambda a: jnp.sum(jnp.imag(polar(a, a))))(r)
    assert np.all(np.isfinite(hess))


def test_polar_non_finite_zero_size_0d_and_dtypes_as_torch():
    r = np.array([np.inf, np.nan, 1.0, 0.0, 1.0])
    theta = np.array([0.0, 1.0, np.inf, np.inf, np.nan])
    np.testing.assert_array_equal(polar(r, theta), torch.polar(_t(r), _t(theta)).numpy())
    out = polar(np.zeros((0, 2)), np.zeros((0, 2)))
    assert out.shape == (0, 2) and out.dtype == jnp.complex128
    np.testing.assert_allclose(polar(np.float64(2.0), np.float64(1.0)), torch.polar(_t(2.0), _t(1.0)).item())
    assert polar(np.float32(1), np.float32(2)).dtype == jnp.complex64
    assert polar(2, 1).dtype == jnp.complex128  # integers promoted (torch: an error)
    g = jax.grad(lambda a: jnp.real(polar(a, np.pi)))(np.float64(3.0))
    np.testing.assert_allclose(g, -1.0)


def test_polar_gradient_with_non_finite_abs_is_linear_in_abs_where_torch_gives_nan():
    r, theta = np.array([np.inf, -np.inf, np.nan]), np.array([0.5, 0.5, 0.5])
    g_r, g_theta = jax.grad(lambda a, b: jnp.sum(jnp.real(polar(a, b))), (0, 1))(r, theta)
    np.testing.assert_array_equal(g_r, np.cos(theta))  # polar is linear in abs: d/d abs = cos(angle)
    np.testing.assert_array_equal(g_theta, -r * np.sin(theta))  # -abs sin(angle): -inf, +inf, NaN
    tr = _t(r, True)
    torch.polar(tr, _t(theta)).real.sum().backward()
    assert np.isnan(tr.grad.numpy()).all()  # torch: through sgn(result), NaN


@pytest.mark.parametrize(
    "args, err, words",
    [
        ((np.ones(3) + 1j, np.ones(3)), TypeError, ["polar", "abs", "real"]),
        ((np.ones(3), np.ones(3) * 1j), TypeError, ["polar", "angle"]),
        ((np.ones(3), np.ones(4)), ValueError, ["polar", "abs", "angle"]),
        (("a", np.ones(3)), TypeError, ["polar", "abs"]),
    ],
)
def test_polar_bad_input(args, err, words):
    with pytest.raises(err) as info:
        polar(*args)
    assert all(w in str(info.value) for w in words)


# ----------------------------------------------------------------------------------------------
# masked_fill with an array value


def test_masked_fill_array_value_gradient_is_the_masked_sum_as_torch():
    x, value = RNG.standard_normal((3, 4)), np.float64(0.7)
    mask = np.array([[True], [False], [True]])
    ct = RNG.standard_normal((3, 4))
    tx, tv = _t(x, True), _t(value, True)
    y = torch.masked_fill(tx, _t(mask), tv)
    (y * _t(ct)).sum().backward()
    out, vjp = jax.vjp(masked_fill, x, mask, value)
    np.testing.assert_allclose(out, y.detach().numpy())
    g_x, _, g_v = vjp(ct)
    np.testing.assert_allclose(g_x, tx.grad.numpy())
    np.testing.assert_allclose(g_v, tv.grad.numpy(), rtol=1e-14)
    np.testing.assert_allclose(g_v, ct[[0, 2]].sum(), rtol=1e-14)  # hand: sum of ct under the mask
    _, tangent = jax.jvp(lambda a, v: masked_fill(a, mask, v), (x, value), (np.ones_like(x), np.float64(3.0)))
    np.testing.assert_array_equal(tangent, np.broadcast_to(np.where(mask, 3.0, 1.0), x.shape))


def test_masked_fill_traced_value_under_jit_and_vmap():
    x = RNG.standard_normal((2, 3))
    mask = np.array([True, False, True])
    f = jax.jit(lambda v: jnp.sum(masked_fill(x, mask, v) ** 2))
    np.testing.assert_allclose(jax.grad(f)(1.5), 2 * 1.5 * 4)
    values = np.array([0.5, -1.0, 2.0])
    batched = jax.vmap(lambda v: masked_fill(x, mask, v))(values)
    np.testing.assert_array_equal(batched, np.stack([np.where(mask, v, x) for v in values]))
    # the Python-number path stays a constant: no gradient slot, and the same value
    np.testing.assert_array_equal(masked_fill(x, mask, 1.5), masked_fill(x, mask, np.float64(1.5)))


def test_masked_fill_value_dtypes_nan_and_zero_size_as_torch():
    x = RNG.standard_normal(3)
    mask = np.array([True, False, True])
    for v in (np.float32(1.5), np.array(2), np.float64(np.nan), np.array(True)):
        want = torch.masked_fill(_t(x), _t(mask), _t(v)).numpy()
        got = masked_fill(x, mask, v)
        assert got.dtype == jnp.float64
        np.testing.assert_array_equal(got, want)
    xc = x + 1j
    np.testing.assert_array_equal(
        masked_fill(xc, mask, np.float64(2.0)), torch.masked_fill(_t(xc), _t(mask), _t(2.0)).numpy()
    )
    empty = masked_fill(np.zeros((0, 2)), np.zeros((0, 2), bool), np.float64(1.0))
    assert empty.shape == (0, 2)
    g = jax.grad(lambda v: jnp.sum(masked_fill(np.zeros((0, 2)), np.zeros((0, 2), bool), v)))(1.0)
    assert g == 0.0
    assert masked_fill(np.float64(1.0), np.array(True), np.float64(4.0)) == 4.0  # 0-d x


@pytest.mark.parametrize(
    "value, err, words",
    [
        (np.array([1.0]), ValueError, ["masked_fill", "value", "0-d", "(1,)"]),
        (np.float64(1.0) + 1j, TypeError, ["masked_fill", "value", "complex"]),
        ("a", TypeError, ["masked_fill", "value"]),
    ],
)
def test_masked_fill_bad_value(value, err, words):
    with pytest.raises(err) as info:
        masked_fill(np.ones(3), np.array([True, False, True]), value)
    assert all(w in str(info.value) for w in words)
    with pytest.raises(RuntimeError, match="0-dim"):  # torch also refuses a value of rank 1
        torch.masked_fill(torch.ones(3), torch.tensor([True, False, True]), torch.ones(1))
