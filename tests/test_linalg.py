"""Linear algebra beyond the registry harness: torch's gauge check, det at singular matrices
(first and second order), degenerate spectra, the conventions that differ from torch or JAX
(pinned against torch and finite differences), bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from _compiled import value_vjp_jvp

import jaxrules.linalg as jrl
import jaxrules.numpy as rnp
import jaxrules.scipy.linalg as rsl
import jaxrules.torch.linalg as rtl
from jaxrules import formula_spy

RNG = np.random.default_rng(11)


def _complex(*shape):
    return RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)


def _central_jvp(f, x, t, h=1e-6):
    return (f(x + h * t) - f(x - h * t)) / (2 * h)


# ----------------------------------------------------------------------------------------------
# Gauge: a loss that depends on the phase of complex vectors raises, an invariant one does not.


@pytest.mark.parametrize(
    "decompose",
    [
        lambda a: rnp.linalg.svd(a, full_matrices=False).U,
        lambda a: rnp.linalg.eig(a).eigenvectors,
        lambda a: rnp.linalg.eigh(a).eigenvectors,
    ],
    ids=["svd", "eig", "eigh"],
)
def test_phase_dependent_loss_raises(decompose):
    a = _complex(3, 3)
    phase_dependent = lambda a: jnp.real((1 + 2j) * decompose(a)[0, 1])  # noqa: E731
    with pytest.raises(Exception, match="phase"):
        jax.block_until_ready(jax.grad(phase_dependent)(a))
    with pytest.raises(Exception, match="phase"):
        jax.block_until_ready(jax.jit(jax.grad(phase_dependent))(a))
    invariant = lambda a: jnp.sum(jnp.abs(decompose(a)) ** 2 * jnp.arange(3.0))  # noqa: E731
    assert np.all(np.isfinite(jax.grad(invariant)(a)))


def test_gauge_invariant_loss_matches_torch_complex_eig():
    a = _complex(4, 4)
    weights = RNG.standard_normal((4, 4))
    ours = jax.grad(lambda a: jnp.sum(weights * jnp.abs(rnp.linalg.eig(a)[1]) ** 2))(a)
    ta = torch.tensor(a, requires_grad=True)
    (torch.tensor(weights) * torch.linalg.eig(ta)[1].abs() ** 2).sum().backward()
    np.testing.assert_allclose(ours, np.conj(ta.grad.numpy()), atol=1e-10)


# ----------------------------------------------------------------------------------------------
# det at singular matrices.


def _random_singular(n, rank):
    return RNG.standard_normal((n, rank)) @ RNG.standard_normal((rank, n))


@pytest.mark.parametrize("n, rank", [(3, 2), (4, 3), (4, 2), (4, 1), (3, 0)])
def test_det_singular_gradient_is_adjugate_and_hessian_finite(n, rank):
    a = _random_singular(n, rank)
    g = jax.grad(rnp.linalg.det)(a)
    # adj(A)^T from cofactors, through torch's create_graph path (the SVD branch), which is exact.
    ta = torch.tensor(a, requires_grad=True)
    (tg,) = torch.autograd.grad(torch.linalg.det(ta), ta, create_graph=True)
    np.testing.assert_allclose(g, tg.detach().numpy(), atol=1e-9)
    v = RNG.standard_normal((n, n))
    hvp_fwd = jax.jvp(jax.grad(rnp.linalg.det), (a,), (v,))[1]
    hvp_rev = jax.grad(lambda a: jnp.sum(jax.grad(rnp.linalg.det)(a) * v))(a)
    assert np.all(np.isfinite(hvp_fwd)) and np.all(np.isfinite(hvp_rev))
    np.testing.assert_allclose(hvp_fwd, hvp_rev, atol=1e-9)
    # The Hessian of the polynomial det, by central differences of the (exact) gradient.
    fd = _central_jvp(jax.grad(rnp.linalg.det), a, v)
    np.testing.assert_allclose(hvp_fwd, fd, rtol=1e-4, atol=1e-5)


def test_torch_default_det_backward_is_zero_at_singular_matrix_ours_is_not():
    a = np.array([[1.0, 2.0], [2.0, 4.0]])
    ta = torch.tensor(a, requires_grad=True)
    torch.linalg.det(ta).backward()
    ours = jax.grad(rnp.linalg.det)(a)
    np.testing.assert_allclose(ours, [[4.0, -2.0], [-2.0, 1.0]], atol=1e-12)  # adj(A)^T
    assert not np.allclose(ta.grad.numpy(), ours)  # what this pins: torch 2.13 differs here


# ----------------------------------------------------------------------------------------------
# Degenerate spectra.


def test_eigh_separated_subspace_loss_is_finite_and_exact_at_repeated_eigenvalues():
    q, _ = np.linalg.qr(RNG.standard_normal((4, 4)))
    a = (q * np.array([1.0, 1.0, 3.0, 5.0])) @ q.T  # a repeated pair, well separated from the rest

    def projector_loss(a):  # depends on the eigenspace of the repeated pair only
        v = rnp.linalg.eigh(a)[1][:, :2]
        return jnp.sum((v @ v.T) * weights)

    weights = RNG.standard_normal((4, 4))
    g = jax.grad(projector_loss)(a)
    assert np.all(np.isfinite(g))
    t = RNG.standard_normal((4, 4))
    t = t + t.T
    np.testing.assert_allclose(np.sum(g * t), _central_jvp(projector_loss, a, t), rtol=1e-6)


def test_svdvals_and_eigvals_of_identity_have_finite_second_derivatives():
    for f in (lambda a: jnp.sum(rnp.linalg.svdvals(a) ** 2), lambda a: jnp.sum(rnp.linalg.eigvalsh(a) ** 2)):
        h = jax.hessian(f)(np.eye(3))
        assert np.all(np.isfinite(h))


# ----------------------------------------------------------------------------------------------
# Conventions that differ from torch or JAX.


def test_cho_solve_factor_gradient_is_torchs_dense_one():
    x = RNG.standard_normal((3, 3))
    factor = np.linalg.cholesky(x @ x.T + 3 * np.eye(3))
    b = RNG.standard_normal((3, 2))
    ct = RNG.standard_normal((3, 2))
    ours = jax.grad(lambda c: jnp.sum(ct * rsl.cho_solve((c, True), b)))(factor)
    tl = torch.tensor(factor, requires_grad=True)
    (torch.tensor(ct) * torch.cholesky_solve(torch.tensor(b), tl)).sum().backward()
    np.testing.assert_allclose(ours, tl.grad.numpy(), atol=1e-12)
    assert np.abs(np.triu(ours, 1)).max() > 1e-3  # dense: torch's convention, documented


def test_cholesky_inverse_jvp_is_the_correct_one_not_the_seeds():
    x = RNG.standard_normal((3, 3))
    factor = np.linalg.cholesky(x @ x.T + 3 * np.eye(3))
    dl = np.tril(RNG.standard_normal((3, 3)))
    ours = jax.jvp(jrl.cholesky_inverse, (factor,), (dl,))[1]
    np.testing.assert_allclose(ours, _central_jvp(lambda c: np.linalg.inv(c @ c.T), factor, dl), atol=1e-7)
    x = np.linalg.inv(factor @ factor.T)
    seed_k = -x @ dl @ x @ factor.T  # the seed's cholesky_inverse_jvp
    assert not np.allclose(seed_k + seed_k.T, ours, atol=1e-4)


def test_svd_full_matrices_is_differentiable_and_consistent():
    a = RNG.standard_normal((4, 2))
    t = RNG.standard_normal((4, 2))

    def complement_projector(a):
        u = rnp.linalg.svd(a, full_matrices=True)[0]
        return u[:, 2:] @ u[:, 2:].T

    ours = jax.jvp(complement_projector, (a,), (t,))[1]
    def numpy_projector(a):
        u = np.linalg.svd(a, full_matrices=False)[0]
        return np.eye(4) - u @ u.T

    np.testing.assert_allclose(ours, _central_jvp(numpy_projector, a, t), atol=1e-7)
    with pytest.raises(NotImplementedError):
        jax.jvp(lambda a: jnp.linalg.svd(a, full_matrices=True)[0], (a,), (t,))


def test_linear_double_backward_matches_torch():
    x, w, b = RNG.standard_normal((5, 3)), RNG.standard_normal((4, 3)), RNG.standard_normal(4)
    ct = RNG.standard_normal((5, 4))
    v = [RNG.standard_normal(s) for s in ((5, 3), (4, 3), (4,))]

    def grad_dot_v(x, w, b):
        def loss(*args):
            y = jrl_linear(*args)
            return jnp.sum(ct * rnp.linalg.norm(y, axis=1)[:, None] * y)

        gs = jax.grad(loss, argnums=(0, 1, 2))(x, w, b)
        return sum(jnp.sum(g * vi) for g, vi in zip(gs, v))

    ours = jax.grad(grad_dot_v, argnums=(0, 1, 2))(x, w, b)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    y = torch.nn.functional.linear(tx, tw, tb)
    loss = (torch.tensor(ct) * torch.linalg.vector_norm(y, dim=1)[:, None] * y).sum()
    gs = torch.autograd.grad(loss, (tx, tw, tb), create_graph=True)
    second = torch.autograd.grad(sum((g * torch.tensor(vi)).sum() for g, vi in zip(gs, v)), (tx, tw, tb))
    for o, t in zip(ours, second):
        np.testing.assert_allclose(o, t.numpy(), atol=1e-10)


def jrl_linear(x, w, b):
    from jaxrules.nn import linear

    return linear(x, w, b)


def test_det_hessian_runs_the_adjugate_rules():
    a = _random_singular(3, 2)
    with formula_spy() as calls:
        jax.jvp(jax.grad(rnp.linalg.det), (a,), (np.ones((3, 3)),))
    assert ("jvp", "adjugate") in calls


# ----------------------------------------------------------------------------------------------
# Rank-deficient least squares and pseudo-inverse; LU pivots.


def test_pinv_and_lstsq_rank_deficient_along_constant_rank_perturbations():
    x, y = RNG.standard_normal((5, 2)), RNG.standard_normal((2, 3))
    dx, dy = RNG.standard_normal((5, 2)), RNG.standard_normal((2, 3))
    b = RNG.standard_normal((5, 2))
    curve = lambda t: (x + t * dx) @ (y + t * dy)  # noqa: E731  (rank 2 for every t)
    a, da = curve(0.0), dx @ y + x @ dy
    ours = jax.jvp(rnp.linalg.pinv, (a,), (da,))[1]
    h = 1e-6
    fd = (np.linalg.pinv(curve(h)) - np.linalg.pinv(curve(-h))) / (2 * h)
    np.testing.assert_allclose(ours, fd, atol=1e-6)
    solution = lambda a, b: rnp.linalg.lstsq(a, b)[0]  # noqa: E731
    ct = RNG.standard_normal((3, 2))
    ga, gb = jax.grad(lambda a, b: jnp.sum(ct * solution(a, b)), argnums=(0, 1))(a, b)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (torch.tensor(ct) * (torch.linalg.pinv(ta) @ tb)).sum().backward()
    np.testing.assert_allclose(ga, ta.grad.numpy(), atol=1e-9)
    np.testing.assert_allclose(gb, tb.grad.numpy(), atol=1e-9)
    loss_along_curve = lambda t: np.sum(ct * (np.linalg.pinv(curve(t)) @ b))  # noqa: E731
    np.testing.assert_allclose(np.sum(ga * da), _central_jvp(loss_along_curve, 0.0, 1.0), atol=1e-6)


def test_lstsq_outputs_match_jax_numpy():
    a, b = RNG.standard_normal((6, 3)), RNG.standard_normal((6, 2))
    for ours, theirs in zip(rnp.linalg.lstsq(a, b), jnp.linalg.lstsq(a, b)):
        np.testing.assert_allclose(ours, theirs, atol=1e-10)


def test_lu_factor_pivots_match_torch_and_lu_reconstructs():
    a = RNG.standard_normal((2, 4, 4))
    lu, piv = rsl.lu_factor(a)
    t_lu, t_piv = torch.linalg.lu_factor(torch.tensor(a))
    np.testing.assert_array_equal(piv, t_piv.numpy() - 1)
    np.testing.assert_allclose(lu, t_lu.numpy(), atol=1e-12)
    for shape in ((4, 4), (3, 5), (5, 3)):
        a = RNG.standard_normal(shape)
        p, lower, upper = rsl.lu(a)
        np.testing.assert_allclose(p @ lower @ upper, a, atol=1e-12)
        p2, lower2, upper2 = jrl.lu_unpack(*rsl.lu_factor(a))
        for x, y in ((p, p2), (lower, lower2), (upper, upper2)):
            np.testing.assert_allclose(x, y, atol=1e-12)


def test_expm_frechet_matches_jax_scipy():
    a, e = RNG.standard_normal((4, 4)), RNG.standard_normal((4, 4))
    ours = jax.jvp(rsl.expm, (a,), (e,))[1]
    np.testing.assert_allclose(ours, jax.scipy.linalg.expm_frechet(a, e, compute_expm=False), atol=1e-10)


def test_householder_product_matches_qr_q():
    a = RNG.standard_normal((5, 3))
    h, tau = np.linalg.qr(a, mode="raw")
    q = jrl.householder_product(h.T, tau)
    np.testing.assert_allclose(q, np.linalg.qr(a)[0], atol=1e-12)
    assert np.all(np.isfinite(jax.grad(lambda h: jnp.sum(jrl.householder_product(h, tau) ** 3))(h.T)))


def test_solve_triangular_transposes_match_jax_and_finite_differences():
    a = np.tril(RNG.standard_normal((4, 4))) + 3 * np.eye(4) + 1j * np.tril(RNG.standard_normal((4, 4)))
    b = _complex(4, 2)
    ta, tb = _complex(4, 4), _complex(4, 2)
    for trans in (0, 1, 2):
        for unit in (False, True):
            ours = lambda a, b: rsl.solve_triangular(a, b, trans=trans, lower=True, unit_diagonal=unit)  # noqa: E731
            theirs = lambda a, b: jax.scipy.linalg.solve_triangular(  # noqa: E731
                a, b, trans=trans, lower=True, unit_diagonal=unit
            )
            np.testing.assert_allclose(ours(a, b), theirs(a, b), atol=1e-12)
            out, tangent = jax.jvp(ours, (a, b), (ta, tb))
            np.testing.assert_allclose(tangent, jax.jvp(theirs, (a, b), (ta, tb))[1], atol=1e-10)
            ct = _complex(4, 2)
            g_ours = jax.grad(lambda a, b: jnp.real(jnp.sum(ct * ours(a, b))), argnums=(0, 1))(a, b)
            g_theirs = jax.grad(lambda a, b: jnp.real(jnp.sum(ct * theirs(a, b))), argnums=(0, 1))(a, b)
            for x, y in zip(g_ours, g_theirs):
                np.testing.assert_allclose(x, y, atol=1e-10)


def test_batched_ormqr_and_householder_product_equal_a_loop():
    a = RNG.standard_normal((3, 5, 3))
    h, tau = np.linalg.qr(a, mode="raw")
    h = np.swapaxes(h, -1, -2)
    c = RNG.standard_normal((3, 5, 2))
    def f(h, tau, c):
        return jnp.sum(jrl.ormqr(h, tau, c, transpose=True) ** 2) + jnp.sum(jrl.householder_product(h, tau) ** 3)

    batched = jax.grad(f, argnums=(0, 1, 2))(h, tau, c)
    for k in range(3):
        single = jax.grad(f, argnums=(0, 1, 2))(h[k], tau[k], c[k])
        for x, y in zip(batched, single):
            np.testing.assert_allclose(x[k], y, atol=1e-10)


# ----------------------------------------------------------------------------------------------
# Bad input.


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: rnp.linalg.det(np.ones((2, 3))), ValueError, ["det", "square"]),
        (lambda: rnp.linalg.inv(np.ones(3)), ValueError, ["inv", "rank"]),
        (lambda: rnp.linalg.solve(np.eye(3), np.ones(4)), ValueError, ["solve", "b"]),
        (lambda: rnp.linalg.solve(np.ones((2, 3, 3)), np.ones((4, 3, 1))), ValueError, ["solve", "batch"]),
        (lambda: rsl.solve_triangular(np.eye(3), np.ones(3), trans=3), ValueError, ["solve_triangular", "trans"]),
        (lambda: rsl.cho_solve(np.eye(3), np.ones(3)), TypeError, ["cho_solve", "c_and_lower"]),
        (lambda: rnp.linalg.qr(np.eye(3), mode="raw"), ValueError, ["qr", "mode"]),
        (lambda: rnp.linalg.eigh(np.eye(3), UPLO="X"), ValueError, ["eigh", "UPLO"]),
        (lambda: rnp.linalg.cholesky(np.eye(3), symmetrize_input=False), TypeError, ["cholesky", "symmetrize_input"]),
        (lambda: rnp.matmul(np.ones((2, 3)), np.ones((2, 3))), ValueError, ["matmul", "contracting"]),
        (lambda: jrl_linear(np.ones((2, 3)), np.ones((4, 2)), None), ValueError, ["linear", "in_features"]),
        (lambda: rnp.linalg.svd("abc"), TypeError, ["svd", "'a'"]),
        (lambda: rsl.lu_solve(np.eye(3), np.ones(3)), TypeError, ["lu_solve", "lu_and_piv"]),
        (lambda: rsl.lu_solve((np.eye(3), np.zeros(3)), np.ones(3)), TypeError, ["lu_solve", "piv"]),
        (lambda: jrl.householder_product(np.ones((2, 3)), np.ones(2)), ValueError, ["householder_product", "m >= n"]),
        (lambda: jrl.ormqr(np.ones((4, 3)), np.ones(3), np.ones((3, 2))), ValueError, ["ormqr", "other"]),
        (lambda: rnp.linalg.pinv(np.eye(3), rtol=-1.0), ValueError, ["pinv", "rtol"]),
        (lambda: rnp.linalg.lstsq(np.eye(3), np.ones(4)), ValueError, ["lstsq", "b"]),
        (lambda: rnp.linalg.lstsq(np.ones((2, 3, 3)), np.ones((4, 3, 1))), ValueError, ["lstsq", "batch"]),
        (lambda: rsl.cho_solve((np.float64(2.0), True), np.ones(3)), ValueError, ["cho_solve", "c", "rank"]),
        (lambda: jrl.cholesky_inverse(np.float64(2.0)), ValueError, ["cholesky_inverse", "L", "rank"]),
        (lambda: jrl.ormqr(np.ones((4, 3)), np.ones(3), np.ones(2)), ValueError, ["ormqr", "other", "rank"]),
    ],
)
def test_bad_input(call, error, words):
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("shape, pivots", [((4, 3), [[0, 1, 2, 0], [2, 2, 2, 1]]), ((3, 0), [[1, 2, 2], [2, 1, 2]])])
def test_lu_unpack_ignores_pivots_past_min_m_n_as_torch(shape, pivots):
    """torch.lu_unpack reads the first min(m, n) pivots and ignores the others (here the 4th of a
    4x3 LU swaps rows 3 and 0 or 1: not applied); jaxrules does the same (values, gradient)."""
    lu_ = RNG.standard_normal((2, *shape))
    piv = np.array(pivots, np.int32)
    weights = [RNG.standard_normal((2, *s)) for s in ((shape[0],) * 2, (shape[0], min(shape)), (min(shape), shape[1]))]
    loss = lambda out: sum((w * o).sum() for w, o in zip(weights, out))  # noqa: E731
    ours = jrl.lu_unpack(lu_, piv)
    t_lu = torch.tensor(lu_, requires_grad=True)
    theirs = torch.lu_unpack(t_lu, torch.tensor(piv + 1))
    for o, t in zip(ours, theirs):
        np.testing.assert_array_equal(o, t.detach().numpy())
    sum((torch.tensor(w) * t).sum() for w, t in zip(weights, theirs)).backward()
    np.testing.assert_array_equal(jax.grad(lambda a: loss(jrl.lu_unpack(a, piv)))(lu_), t_lu.grad.numpy())


def test_torch_solve_takes_a_batch_of_vectors_as_torch():
    """torch.linalg.solve reads B of shape ``A.shape[:-1]`` as a batch of vectors (NumPy 2 and
    jax.numpy read it as a matrix)."""
    a = RNG.standard_normal((2, 3, 3)) + 3 * np.eye(3)
    b = RNG.standard_normal((2, 3))
    expected = torch.linalg.solve(torch.tensor(a), torch.tensor(b)).numpy()
    np.testing.assert_allclose(jrl.solve(a, b), expected, rtol=1e-6, atol=1e-6)
    g = jax.grad(lambda a: jrl.solve(a, b).sum())(a)
    ta = torch.tensor(a, requires_grad=True)
    torch.linalg.solve(ta, torch.tensor(b)).sum().backward()
    np.testing.assert_allclose(g, ta.grad.numpy(), rtol=1e-5, atol=1e-5)
    square = RNG.standard_normal((3, 3))  # (n, n) B with (n, n) A: a matrix, as torch
    np.testing.assert_allclose(jrl.solve(a[0], square), np.linalg.solve(a[0], square), rtol=1e-6, atol=1e-6)


def test_matmul_of_integer_operands_keeps_their_dtype_as_torch_and_jax_numpy():
    a, b = np.arange(6, dtype=np.int32).reshape(2, 3) - 2, np.arange(3, dtype=np.int32)
    out = rnp.matmul(a, b)
    assert out.dtype == jnp.matmul(a, b).dtype == np.int32
    np.testing.assert_array_equal(out, torch.matmul(torch.tensor(a), torch.tensor(b)).numpy())
    assert rnp.matmul(a > 0, b > 0).dtype == jnp.matmul(a > 0, b > 0).dtype
    w = jnp.ones(3, jnp.float32)  # mixed: promoted, and the rule differentiates the float operand
    assert rnp.matmul(a, w).dtype == jnp.matmul(a, w).dtype == jnp.float32
    np.testing.assert_allclose(jax.grad(lambda w: rnp.matmul(a, w).sum())(w), a.sum(0))


@pytest.mark.parametrize("precision", ["highest", ("high", "highest"), jax.lax.Precision.HIGH,
                                       jax.lax.DotAlgorithmPreset.F32_F32_F32])
def test_matmul_precision_reaches_the_forward_and_every_derivative_product(precision):
    """jax.numpy's ``precision=`` is honoured on every backend: the forward, JVP and VJP products
    carry it (read from the lowered program, which the CPU otherwise computes alike)."""
    a, b = RNG.standard_normal((2, 3, 4)).astype(np.float32), RNG.standard_normal((4, 5)).astype(np.float32)
    f = lambda a, b: rnp.matmul(a, b, precision=precision)  # noqa: E731
    np.testing.assert_allclose(f(a, b), jnp.matmul(a, b, precision=precision), rtol=1e-6)
    grads = jax.grad(lambda a, b: jnp.sum(f(a, b) ** 2), argnums=(0, 1))(a, b)
    expected = jax.grad(lambda a, b: jnp.sum(jnp.matmul(a, b, precision=precision) ** 2), argnums=(0, 1))(a, b)
    for g, e in zip(grads, expected):  # float32 sums of products: an entry near 0 cancels, so scale by the largest
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6 * np.abs(e).max())
    programs = [
        jax.jit(f).lower(a, b).as_text(),
        jax.jit(jax.grad(lambda a, b: f(a, b).sum(), argnums=(0, 1))).lower(a, b).as_text(),
        jax.jit(lambda a, b: jax.jvp(f, (a, b), (a, b))[1]).lower(a, b).as_text(),
    ]
    for text in programs:
        dots = [line for line in text.split("\n") if "dot_general" in line]
        assert dots
        if isinstance(precision, jax.lax.DotAlgorithmPreset):
            assert all("algorithm = " in d for d in dots), dots
        else:
            assert all("precision = [" in d and "precision = [DEFAULT" not in d for d in dots), dots
    hessian = jax.hessian(lambda a: jnp.sum(f(a, b) ** 2))(a)
    reference = jax.hessian(lambda a: jnp.sum(jnp.matmul(a, b, precision=precision) ** 2))(a)
    np.testing.assert_allclose(hessian, reference, rtol=1e-4, atol=1e-4)


_BROADCAST_MATMULS = [((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((6, 2, 3, 4), (2, 4, 5)), ((3, 4), (6, 2, 4, 5)),
                      ((2, 1, 3, 4), (5, 4, 6)), ((1, 2, 3, 4), (6, 1, 4, 5)), ((4,), (2, 4, 5)), ((2, 3, 4), (4,))]


@pytest.mark.parametrize("precision", [None, "highest"])
@pytest.mark.parametrize(("a_shape", "b_shape"), _BROADCAST_MATMULS)
def test_matmul_gradients_of_broadcast_operands_match_torch(a_shape, b_shape, precision):
    """The cotangent of an operand with fewer batch dims (a weight shared over a batch) or with
    batch dims of size 1 is the sum over the broadcast dims, as torch's."""
    a, b = RNG.standard_normal(a_shape), RNG.standard_normal(b_shape)
    out, pullback = jax.vjp(lambda a, b: rnp.matmul(a, b, precision=precision), a, b)
    ct = RNG.standard_normal(out.shape)
    ta, tb = (torch.tensor(x, requires_grad=True) for x in (a, b))
    torch.matmul(ta, tb).backward(torch.tensor(ct))
    for g, t in zip(pullback(ct), (ta, tb)):
        assert g.shape == tuple(t.shape)
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("precision", [None, "highest"])
def test_matmul_weight_gradient_is_one_product_over_the_batch(precision):
    """The gradient of a weight shared over a batch, (B, L, D) @ (D, N), contracts B and L in one
    product of the weight's shape, as JAX's own transpose of ``dot_general`` (and torch's folded
    ``matmul``): no (B, D, N) batch of partial products is summed afterwards, which in bfloat16
    would hold B weight-sized temporaries, each rounded before the sum."""
    a, b = jax.ShapeDtypeStruct((2, 8, 4), jnp.bfloat16), jax.ShapeDtypeStruct((4, 16), jnp.bfloat16)
    grads = jax.make_jaxpr(jax.grad(lambda a, b: rnp.matmul(a, b, precision=precision).astype(jnp.float32).sum(),
                                    argnums=(0, 1)))(a, b)
    dots = [e for e in grads.eqns if e.primitive.name == "dot_general"]
    shapes = sorted(tuple(e.outvars[0].aval.shape) for e in dots)
    assert shapes == [(2, 8, 4), (4, 16)], shapes
    assert not [e for e in grads.eqns if e.primitive.name == "reduce_sum" and e.invars[0].aval.ndim == 3
                and e.outvars[0].aval.shape == (4, 16)]


@pytest.mark.parametrize("case", ["rank_deficient", "tall", "wide", "vector"])
@pytest.mark.parametrize("numpy_resid", [False, True])
def test_lstsq_residuals_follow_jax_numpy_numpy_resid(case, numpy_resid):
    """JAX's default returns the residuals always; ``numpy_resid=True`` NumPy's (empty when
    m <= n or rank-deficient)."""
    rng = np.random.default_rng(5)
    a = {"rank_deficient": rng.standard_normal((4, 2)) @ rng.standard_normal((2, 3)),
         "tall": rng.standard_normal((4, 3)), "wide": rng.standard_normal((2, 3)),
         "vector": rng.standard_normal((4, 3))}[case]
    b = rng.standard_normal(4) if case == "vector" else rng.standard_normal((a.shape[0], 2))
    ours = rnp.linalg.lstsq(a, b, numpy_resid=numpy_resid)[1]
    theirs = jnp.linalg.lstsq(a, b, numpy_resid=numpy_resid)[1]
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, atol=1e-8)
    if numpy_resid:
        np.testing.assert_allclose(ours, np.linalg.lstsq(a, b, rcond=None)[1], atol=1e-8)


@pytest.mark.parametrize("n", [0, 1, -1, 2])
def test_matrix_power_small_exponents_match_torch(n):
    """n = 0 (the identity, zero derivative) and n = 1 (A itself) run no product, so the record
    leaves them out of its formula check; values and gradients against torch here."""
    a = np.random.default_rng(3).standard_normal((2, 3, 3)) + 3 * np.eye(3)
    weights = np.random.default_rng(4).standard_normal((2, 3, 3))
    value, grad = jax.value_and_grad(lambda a: jnp.sum(weights * jrl.matrix_power(a, n)))(jnp.asarray(a))
    ta = torch.tensor(a, requires_grad=True)
    (torch.tensor(weights) * torch.linalg.matrix_power(ta, n)).sum().backward()
    np.testing.assert_allclose(value, (weights * np.linalg.matrix_power(a, n)).sum(), rtol=1e-12)
    np.testing.assert_allclose(grad, ta.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_matrix_power_dtypes_shapes_and_bad_exponents():
    ints = jnp.array([[1, 2], [3, 4]])
    assert rnp.linalg.matrix_power(ints, 3).dtype == ints.dtype  # jax.numpy keeps integers
    np.testing.assert_array_equal(rnp.linalg.matrix_power(ints, 3), [[37, 54], [81, 118]])
    np.testing.assert_allclose(rnp.linalg.matrix_power(ints, -1), [[-2, 1], [1.5, -0.5]], rtol=1e-5)
    assert rnp.linalg.matrix_power(jnp.zeros((0, 3, 3)), 5).shape == (0, 3, 3)
    assert rnp.linalg.matrix_power(jnp.zeros((2, 0, 0)), -2).shape == (2, 0, 0)
    for bad in (1.0, True, "2", None):
        with pytest.raises(TypeError, match="matrix_power: n must be an integer"):
            rnp.linalg.matrix_power(ints, bad)
    with pytest.raises(ValueError, match="matrix_power: a must be square"):
        rnp.linalg.matrix_power(jnp.ones((2, 3)), 2)


@pytest.mark.parametrize("a, tau, c", [((4, 3), (0,), (4, 2)), ((4, 3), (2,), (4, 0)), ((0, 4, 3), (0, 2), (0, 4, 2))])
def test_ormqr_of_an_empty_product_is_c_without_the_lapack_kernel(a, tau, c):
    """No entry of C, or no reflector (Q = I): C itself, LAPACK's ormqr not called (on jaxlib
    0.11.2's CPU the derivative program of such samples died of SIGFPE; see ``_ormqr_primal``)."""
    args = [jnp.asarray(np.random.default_rng(0).standard_normal(s)) for s in (a, tau, c)]
    assert "ormqr" not in str(jax.make_jaxpr(lambda *x: jrl.ormqr(*x))(*args))
    np.testing.assert_array_equal(jrl.ormqr(*args), args[2])
    grads = jax.grad(lambda *x: jnp.sum(jrl.ormqr(*x) ** 2), argnums=(0, 1, 2))(*args)
    np.testing.assert_array_equal(grads[2], 2 * args[2])


# torch's OpInfo samples of ormqr: geqrf of (*batch, m, n) with m, n in {5, 2, 0}; here the
# families with m < n or an empty dimension (the others are the records' and the tests' above).
_ORMQR_BATCHES = [(), (0,), (2, 1)]  # (2, 1): a batch of two and a unit axis
_ORMQR_SHAPES = [(0, 0), (0, 2), (0, 5), (2, 0), (5, 0), (2, 5)]


@pytest.mark.parametrize("batch", _ORMQR_BATCHES)
@pytest.mark.parametrize("m, n", _ORMQR_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
def test_ormqr_of_empty_and_wide_reflectors_as_torch(batch, m, n, dtype):
    """Value, VJP (``torch.autograd.grad``) and JVP (against torch's VJP: ``<g, J t> = <J^H g,
    t>``; torch's ormqr has no forward AD) for every (left, transpose); zero-size gradients of
    the arguments' shapes where the arguments are empty."""
    gen = torch.Generator().manual_seed(m * 7 + n + len(batch))
    reflectors, tau = torch.geqrf(torch.randn(*batch, m, n, dtype=dtype, generator=gen))
    for left, transpose in ((True, False), (True, True), (False, False), (False, True)):
        c = torch.randn(*batch, *((m, n) if left else (n, m)), dtype=dtype, generator=gen)
        leaves = [t.clone().requires_grad_(True) for t in (reflectors, tau, c)]
        expected = torch.ormqr(*leaves, left=left, transpose=transpose)
        g = torch.randn(expected.shape, dtype=dtype, generator=gen)
        expected_grads = torch.autograd.grad(expected, leaves, g, allow_unused=True)
        expected_grads = [(torch.zeros_like(x) if e is None else e).numpy() for x, e in zip(leaves, expected_grads)]
        expected, g = expected.detach().numpy(), g.numpy()
        tangents = [torch.randn(t.shape, dtype=dtype, generator=gen).numpy() for t in (reflectors, tau, c)]
        args = [t.numpy() for t in (reflectors, tau, c)]

        def ours(*args, left=left, transpose=transpose):
            return jrl.ormqr(*args, left=left, transpose=transpose)
        # torch's gradient of a real loss is the conjugate of JAX's cotangent pullback
        value, grads, jvp = value_vjp_jvp(ours, args, np.conj(g), tangents)
        assert value.shape == expected.shape
        np.testing.assert_allclose(value, expected, rtol=1e-12, atol=1e-12)
        for ours_grad, theirs, arg in zip(grads, expected_grads, args):
            assert ours_grad.shape == arg.shape
            np.testing.assert_allclose(np.conj(ours_grad), theirs, rtol=1e-10, atol=1e-12)
        assert jvp.shape == expected.shape
        lhs = np.real(np.vdot(g, jvp))
        rhs = sum(np.real(np.vdot(e, t)) for e, t in zip(expected_grads, tangents))
        np.testing.assert_allclose(lhs, rhs, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("a, tau, c, words", [
    ((2, 5), (3,), (2, 2), ["ormqr", "tau", "k <= min(m, n)"]),
    ((5, 2), (3,), (5, 2), ["ormqr", "tau", "k <= min(m, n)"]),
    ((0, 2), (1,), (0, 2), ["ormqr", "tau", "k <= min(m, n)"]),
    ((5, 2), (2,), (4, 2), ["ormqr", "other", "does not match"]),
    ((3, 5, 2), (2, 2), (3, 5, 2), ["ormqr", "tau", "batch"]),
    ((3, 5, 2), (3, 2), (2, 5, 2), ["ormqr", "other", "batch"]),
    ((3, 5, 2), (3, 2), (5, 2), ["ormqr", "other", "batch"]),
    ((3, 0, 2), (3, 0), (1, 0, 2), ["ormqr", "other", "batch"]),
])
def test_ormqr_refuses_the_shapes_torch_refuses(a, tau, c, words):
    args = [np.ones(s) for s in (a, tau, c)]
    with pytest.raises(RuntimeError, match="torch.ormqr"):
        torch.ormqr(*map(torch.from_numpy, args))
    with pytest.raises(ValueError) as info:
        jrl.ormqr(*args)
    assert all(w in str(info.value) for w in words), str(info.value)


@pytest.mark.parametrize("axis", [(1, 2), (2, 1), (0, 2), (2, 0), (-1, -2)])
@pytest.mark.parametrize("order", [1, -1, np.inf, -np.inf])
def test_matrix_norm_takes_its_axes_in_the_order_given_as_torch_and_numpy(axis, order):
    # axis=(1, 0) names the transpose: its 1-norm is the inf-norm of the matrix as stored
    x = RNG.standard_normal((2, 3, 4))
    expected = torch.linalg.matrix_norm(torch.tensor(x), order, dim=axis)
    np.testing.assert_allclose(rnp.linalg.norm(x, order, axis=axis), np.linalg.norm(x, order, axis=axis), rtol=1e-12)
    np.testing.assert_allclose(rtl.matrix_norm(jnp.asarray(x), order, dim=axis), expected.detach().numpy(), rtol=1e-12)
    grad = jax.grad(lambda a: jnp.sum(rnp.linalg.norm(a, order, axis=axis)))(x)
    t = torch.tensor(x, requires_grad=True)
    torch.linalg.matrix_norm(t, order, dim=axis).sum().backward()
    np.testing.assert_allclose(grad, t.grad.numpy(), rtol=1e-12)
