"""Linear algebra at NaN and infinite entries, beyond tests/test_nonfinite.py's one poisoned
entry per record: batches (only the poisoned matrix changes), both sides of solve, the SVD
family, the exact 3x3 adjugate, and values against torch 2.13 in float64 (the all-NaN SVD of one
non-finite matrix is compared with torch by tests/test_nonfinite.py; torch's batched SVD raises)."""

import jax
import numpy as np
import pytest

import jaxrules.linalg as jrl
import jaxrules.numpy.linalg as rla
import jaxrules.scipy.linalg as rsl

LAPACK_NONFINITE = pytest.mark.skipif(
    jax.default_backend() != "cpu",
    reason=("a GPU's decompositions are cuSOLVER's, whose QR and LU spread a NaN or infinite entry over more of "
            "their factors than LAPACK's and torch's CPU kernels (docs/compatibility.md)"))

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(7)
A = RNG.normal(size=(3, 4, 4)) + 4 * np.eye(4)  # three well-conditioned matrices


def _poison(a, value, k=1, at=(1, 2)):
    a = a.copy()
    a[(k, *at)] = value
    return a


@pytest.mark.parametrize("name", ["inv", "slogdet", "solve_left", "solve_right"])
def test_nan_entry_poisons_its_matrix_only(name):
    b = RNG.normal(size=(3, 4, 2))
    fns = {"inv": rla.inv, "slogdet": lambda a: rla.slogdet(a), "solve_left": lambda a: jrl.solve(a, b),
           "solve_right": lambda a: jrl.solve(a, np.swapaxes(b, -1, -2), left=False)}
    clean = jax.tree.leaves(fns[name](A))
    poisoned = jax.tree.leaves(fns[name](_poison(A, np.nan)))
    for c, p in zip(clean, poisoned):
        c, p = np.asarray(c), np.asarray(p)
        assert np.isnan(p[1]).all()  # every entry of A^{-1}, det and the solution involves the NaN entry
        np.testing.assert_array_equal(p[[0, 2]], c[[0, 2]])


def test_nan_entry_inv_and_solve_match_torch():
    a = _poison(A, np.nan)
    b = RNG.normal(size=(3, 4, 2))
    np.testing.assert_array_equal(np.isnan(rla.inv(a)), np.isnan(torch.linalg.inv(torch.tensor(a)).numpy()))
    np.testing.assert_array_equal(np.isnan(jrl.solve(a, b)),
                                  np.isnan(torch.linalg.solve(torch.tensor(a), torch.tensor(b)).numpy()))


def test_nan_entry_slogdet_gradient_all_nan_as_torch():
    a = _poison(A, np.nan)
    g = np.asarray(jax.grad(lambda a: rla.slogdet(a)[1].sum())(a))
    ta = torch.tensor(a, requires_grad=True)
    torch.linalg.slogdet(ta)[1].sum().backward()
    np.testing.assert_array_equal(np.isnan(g), np.isnan(ta.grad.numpy()))
    assert np.isnan(g[1]).all() and np.isfinite(g[[0, 2]]).all()


@pytest.mark.parametrize("value", [np.inf, -np.inf])
@pytest.mark.parametrize("name", ["svd", "svdvals", "pinv"])
def test_infinite_entry_makes_the_svd_family_nan(name, value):
    a = _poison(RNG.normal(size=(3, 5, 3)), value, at=(2, 1))
    fns = {"svd": lambda a: rla.svd(a, full_matrices=False), "svdvals": rla.svdvals, "pinv": rla.pinv}
    leaves = [np.asarray(x) for x in jax.tree.leaves(fns[name](a))]
    for x in leaves:
        assert np.isnan(x[1]).all() and np.isfinite(x[[0, 2]]).all()
    tfn = {"svd": lambda t: torch.linalg.svd(t, full_matrices=False), "svdvals": torch.linalg.svdvals,
           "pinv": torch.linalg.pinv}[name]
    theirs = tfn(torch.tensor(a[[0, 2]]))  # torch's batched SVD raises for the poisoned batch
    for x, t in zip(leaves, theirs if isinstance(theirs, tuple) else (theirs,)):
        np.testing.assert_allclose(np.abs(x[[0, 2]]), np.abs(t.numpy()), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("at", [(0, 0), (1, 1), (2, 0), (1, 2)])
@pytest.mark.parametrize("value", [np.inf, -np.inf])
def test_adjugate_3x3_with_infinite_entry_is_the_cofactor_matrix(at, value):
    a = RNG.normal(size=(2, 3, 3))
    a[(1, *at)] = value
    ours = np.asarray(jrl.adjugate(a))
    cof = np.array([[(-1) ** (i + j) * np.linalg.det(np.delete(np.delete(a[1], i, 0), j, 1)) for j in range(3)]
                    for i in range(3)])
    np.testing.assert_array_equal(np.isinf(ours[1]), np.isinf(cof.T))
    np.testing.assert_allclose(ours[1], cof.T, rtol=1e-12)  # equal infinities (signs too), finite entries close
    assert np.isinf(ours[1]).sum() == 4
    np.testing.assert_allclose(ours[0], np.linalg.det(a[0]) * np.linalg.inv(a[0]), rtol=1e-10)
    # det's gradient is the cofactor matrix (its residual is the adjugate)
    np.testing.assert_allclose(np.asarray(jax.grad(lambda m: rla.det(m).sum())(a))[1], cof, rtol=1e-12)


@pytest.mark.parametrize("at", [(0, 0), (1, 1), (2, 0), (1, 2)])
@pytest.mark.parametrize("value", [np.inf, -np.inf])
def test_det_3x3_with_infinite_entry_is_the_cofactor_expansion(at, value):
    """det of a 3x3 matrix with one infinite entry: the expansion along its row, a_rc C_rc + finite
    terms = +-inf (jax.numpy's closed form: inf - inf = NaN), as torch's where its LU meets the
    entry as a pivot (at (1, 2) here torch's elimination gives inf - inf, NaN); the other matrices
    of the batch keep jax.numpy's value; jit and vmap agree."""
    a = np.random.default_rng(10).normal(size=(2, 3, 3))
    a[(1, *at)] = value
    r, c = at
    minor = np.delete(np.delete(a[1], r, 0), c, 1)
    expected = np.sign((-1) ** (r + c) * np.linalg.det(minor)) * value
    theirs = torch.linalg.det(torch.tensor(a[1])).item()
    assert theirs == expected or (np.isnan(theirs) and at == (1, 2))
    for ours in (rla.det(a), jax.jit(rla.det)(a), jax.vmap(rla.det)(a)):
        ours = np.asarray(ours)
        assert ours[1] == expected
        np.testing.assert_allclose(ours[0], np.linalg.det(a[0]), rtol=1e-12)


def test_adjugate_of_empty_batches():
    assert rla.det(np.zeros((0, 4, 4))).shape == (0,)
    assert jrl.adjugate(np.zeros((0, 4, 4))).shape == (0, 4, 4)
    assert jrl.adjugate(np.zeros((2, 0, 0))).shape == (2, 0, 0)


def _torch_value_and_grad(fn, *args):
    """torch's value and gradients of ``sum(out)`` (float64)."""
    ts = [torch.tensor(a, requires_grad=True) for a in args]
    out = fn(*ts)
    out.sum().backward()
    return out.detach().numpy(), [t.grad.numpy() for t in ts]


def _assert_like_torch(ours, theirs, limit=None):
    """Same NaN and infinity positions (and signs), finite entries close. With ``limit`` (the
    result with 1e100 in place of an infinite input entry; for a NaN entry, the result where it is
    the same at two finite values of the entry, else NaN): where torch gives NaN, ours may be the
    limit instead (+-inf where it is beyond 1e90: an entry that grows with the input entry)."""
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    if limit is not None:
        limit = np.asarray(limit)
        better = np.isnan(theirs) & ~np.isnan(ours)
        expected = np.where(np.abs(limit) > 1e90, np.sign(limit) * np.inf, limit)
        np.testing.assert_allclose(ours[better], expected[better], rtol=1e-8, atol=1e-10)
        theirs = np.where(better, ours, theirs)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)  # (equal_nan; infinities must be equal)


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("value, at", [(np.nan, (1, 1)), (np.nan, (2, 1)), (np.nan, (3, 0)), (np.inf, (1, 1)),
                                       (-np.inf, (0, 0)), (np.inf, (3, 3))])
def test_cholesky_inverse_nonfinite_factor_entry_keeps_the_trailing_block(at, value, upper):
    """A NaN ``L[p, q]`` enters ``X = (L L^H)^{-1}`` in the rows and columns ``<= q`` only:
    ``X[q+1:, q+1:] = (L22 L22^H)^{-1}`` stays finite, as torch's (LAPACK potri); an infinite
    diagonal entry too; the gradient as torch's. (An infinite entry below the diagonal is not
    covered: XLA's triangular solve multiplies the structural zeros of L^{-1} by it, NaN where
    LAPACK's trtri, skipping them, gives the limit +-inf.)"""
    factor = np.linalg.cholesky(A @ np.swapaxes(A, -1, -2) / 4 + np.eye(4))
    factor[(1, *at)] = value
    if upper:
        factor = np.swapaxes(factor, -1, -2)
    fn = lambda c: jrl.cholesky_inverse(c, upper=upper)  # noqa: E731
    ours, grad = fn(factor), jax.grad(lambda c: fn(c).sum())(factor)
    theirs, (t_grad,) = _torch_value_and_grad(lambda c: torch.cholesky_inverse(c, upper=upper), factor)
    q = at[1]
    if value != value:  # NaN: the trailing block is finite
        assert np.isfinite(np.asarray(ours)[1, q + 1:, q + 1:]).all() and np.isnan(np.asarray(ours)[1, q]).all()
    _assert_like_torch(ours, theirs)
    _assert_like_torch(grad, t_grad)


@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("arg, at, value", [(0, (1, 1), np.nan), (0, (0, 2), np.nan), (0, (2, 2), np.inf),
                                            (0, (2, 0), np.nan), (0, (3, 1), -np.inf),
                                            (2, (1, 0), np.inf), (2, (2, 1), -np.inf), (2, (0, 1), np.nan)])
def test_lu_solve_nonfinite_entry_gradients_as_torch(trans, arg, at, value):
    """lu_solve's gradients in the seed's order of products: a non-finite pivot of U or entry of B
    leaves finite (or +-inf) the entries of the factors' gradient that torch's are (``gA = -gB
    X^H`` formed first, then multiplied back by ``L^H``, is NaN everywhere). Where torch's
    are NaN, ours may be exact: with an infinite entry of B and trans 1 or 2, two entries are the
    limit -inf; with a NaN in L and trans 1 or 2, five entries of gL do not depend on it."""
    lu_, piv = (np.asarray(x) for x in jax.scipy.linalg.lu_factor(A[1]))
    clean = [lu_, np.random.default_rng(8).normal(size=(4, 3))]
    fn = lambda lu_, b: rsl.lu_solve((lu_, piv), b, trans=trans)  # noqa: E731
    grad = jax.grad(lambda lu_, b: fn(lu_, b).sum(), (0, 1))

    def poisoned(v):
        args = [x.copy() for x in clean]
        args[arg // 2][at] = v
        return args

    ours, grads = fn(*poisoned(value)), grad(*poisoned(value))
    if np.isinf(value):
        limits = grad(*poisoned(np.sign(value) * 1e100))
    else:  # the entries that do not depend on the NaN entry
        limits = [np.where(np.isclose(g1, g2, rtol=1e-12, atol=1e-14), g1, np.nan)
                  for g1, g2 in zip(grad(*poisoned(0.5)), grad(*poisoned(-1.5)))]
    t_piv = torch.tensor(piv + 1, dtype=torch.int32)
    theirs, t_grads = _torch_value_and_grad(lambda lu_, b: torch.linalg.lu_solve(lu_, t_piv, b, adjoint=trans > 0),
                                            *poisoned(value))
    _assert_like_torch(ours, theirs)
    for g, tg, limit in zip(grads, t_grads, limits):
        _assert_like_torch(g, tg, limit)


# An infinite last entry of a square A: LAPACK's U[:, 3] is (0.25, inf, inf, NaN), as torch's;
# cuSOLVER's is NaN in all four.
@pytest.mark.parametrize("shape, at", [((3, 5), (1, 2)), ((3, 5), (0, 4)), ((4, 4), (2, 2)),
                                       pytest.param((4, 4), (3, 3), marks=LAPACK_NONFINITE),
                                       ((4, 4), (0, 1)), ((5, 3), (1, 2)), ((5, 3), (4, 0))])
@pytest.mark.parametrize("value", [np.inf, -np.inf])
def test_lu_infinite_entry_gradient_is_torchs_or_the_limit(shape, at, value):
    """lu's gradient in the seed's orders of products: an infinite entry (here it becomes an
    infinite pivot of U, or an entry of U2 / L2) gives the finite gradient torch's wide and tall
    branches give, equal to the gradient at 1e100 (the limit); square A: torch's branch, NaN
    where torch's is. Values as torch's (or the limit where torch's are NaN). (Not covered: an
    entry that makes two pivots infinite, e.g. (1, 2) of this 4x4, where XLA's LU gives
    L[3, 2] = 0, the limit 0.51, torch's inf/inf NaN: the factorization, not a formula.)"""
    rng = np.random.default_rng(9)
    a = rng.normal(size=shape)
    a[at] = value
    weights = [rng.normal(size=(shape[0], min(shape))), rng.normal(size=(min(shape), shape[1]))]
    loss = lambda w, lower, upper: (w[0] * lower).sum() + (w[1] * upper).sum()  # noqa: E731
    ours = rsl.lu(a)
    grad = jax.grad(lambda a: loss(weights, *rsl.lu(a)[1:]))
    ta = torch.tensor(a, requires_grad=True)
    theirs = torch.linalg.lu(ta)
    loss([torch.tensor(w) for w in weights], *theirs[1:]).backward()
    limit_input = a.copy()
    limit_input[at] = np.sign(value) * 1e100
    for o, t, limit in zip(ours, theirs, rsl.lu(limit_input)):  # (torch's L can be inf/inf = NaN: ours the limit)
        _assert_like_torch(o, t.detach().numpy(), limit)
    limit = np.asarray(grad(limit_input))
    ours_grad = np.asarray(grad(a))
    _assert_like_torch(ours_grad, ta.grad.numpy(), limit)
    finite = np.isfinite(ours_grad)
    np.testing.assert_allclose(ours_grad[finite], limit[finite], rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("left, transpose", [(True, False), (True, True), (False, False), (False, True)])
@pytest.mark.parametrize("arg, at, value", [(0, (2, 0), np.inf), (0, (3, 1), -np.inf), (0, (1, 0), np.nan),
                                            (1, (1,), np.nan), (1, (0,), np.inf), (1, (2,), -np.inf)])
def test_ormqr_nonfinite_reflector_gradient_of_c_as_torch(left, transpose, arg, at, value):
    """The reflectors are applied to C's cotangent one at a time on the rows each touches (LAPACK's
    larf): a non-finite reflector entry or tau leaves the rows above its reflector exact, as
    torch's (``0 (v^H Y)`` with an infinite ``v^H Y`` made them NaN); values and all three
    gradients as torch's."""
    rng = np.random.default_rng(12)
    h, tau = np.linalg.qr(rng.normal(size=(4, 3)), mode="raw")
    args = [np.swapaxes(h, -1, -2).copy(), tau.copy(), rng.normal(size=(4, 2) if left else (2, 4))]
    args[arg][at] = value
    ours = jrl.ormqr(*args, left=left, transpose=transpose)
    grads = jax.grad(lambda *x: jrl.ormqr(*x, left=left, transpose=transpose).sum(), (0, 1, 2))(*args)
    theirs, t_grads = _torch_value_and_grad(lambda *x: torch.ormqr(*x, left=left, transpose=transpose), *args)
    _assert_like_torch(ours, theirs)
    for g, tg in zip(grads, t_grads):
        _assert_like_torch(g, tg)


@LAPACK_NONFINITE
@pytest.mark.parametrize("at", [(0, 0), (2, 1), (1, 2)])
def test_qr_nan_entry_poisons_its_column_and_the_later_ones(at):
    """Column c of A enters Q[:, c:], R[c:, c:] and R[:, c] only (R[i, j] = q_i^H a_j): a NaN
    there leaves the other entries exact, as torch's, and makes those NaN (torch's R[0, 0] for a
    NaN in column 0 is LAPACK's dlapy2(NaN, ||a_0[1:]||) = sqrt(2) ||a_0[1:]||, not a norm:
    listed in tests/test_nonfinite.py's TORCH_WRONG)."""
    a = np.random.default_rng(13).normal(size=(4, 3))
    a[at] = np.nan
    c = at[1]
    q, r = (np.asarray(x) for x in rla.qr(a))
    i, j = np.indices((3, 3))
    entered = (i <= j) & ((i >= c) | (j == c))
    assert np.isnan(q[:, c:]).all() and np.isnan(r[entered]).all()
    assert np.isfinite(q[:, :c]).all() and np.isfinite(r[~entered]).all()
    tq, tr = (x.numpy() for x in torch.linalg.qr(torch.tensor(a)))
    np.testing.assert_allclose(q[:, :c], tq[:, :c], rtol=1e-12)
    if c > 0:
        np.testing.assert_allclose(r[~entered], tr[~entered], rtol=1e-12, atol=1e-15)
        assert np.isnan(tr[entered]).all()


@LAPACK_NONFINITE
@pytest.mark.parametrize("value", [np.inf, -np.inf])
def test_qr_infinite_corner_is_the_limit_where_not_nan(value):
    """An infinite a_00: q_0 -> -+e_0 and Q[:, 1:], R[1:, 1:] tend to the QR of A[1:, 1:]. Ours
    gives that limit (numpy's QR with 1e100 in place of inf) at every entry that is not NaN, and
    R[0, 0] = -+inf as torch's (torch's are NaN at Q[1:, 1:] and R[1:, 1:] too)."""
    a = np.random.default_rng(14).normal(size=(4, 3))
    a[0, 0] = value
    limit_input = a.copy()
    limit_input[0, 0] = np.sign(value) * 1e100
    ours = [np.asarray(x) for x in rla.qr(a)]
    assert ours[1][0, 0] == -value == torch.linalg.qr(torch.tensor(a))[1][0, 0].item()
    for o, limit in zip(ours, np.linalg.qr(limit_input)):
        limit = np.where(np.abs(limit) > 1e90, np.sign(limit) * np.inf, limit)
        np.testing.assert_allclose(o[~np.isnan(o)], limit[~np.isnan(o)], rtol=1e-10, atol=1e-12)
    assert np.isfinite(ours[0][1:, 1:]).all() and np.isfinite(ours[1][1:, 1:]).all()
