"""Linear algebra: matrix helpers shared by the JVP and VJP formulas (pinv, LU, Householder). Part of
``jaxrules.partials``."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.linalg import cho_solve as _cho_solve
from jax.scipy.linalg import lu_factor as _lu_factor
from jax.scipy.linalg import lu_solve as _lu_solve

from jaxrules.checking import runtime_check
from jaxrules.partials.elementwise import promoted_dtype, safe_reciprocal, with_rank
from jaxrules.partials.reductions import prod_of_others

__all__ = [  # the helpers jaxrules.partials re-exports (formulas write P.<name>)
    "apply_reflector", "band", "check_gauge", "cho_solve", "complement_adjoint", "complement_tangent", "diag_embed",
    "diagonal", "gap_reciprocal", "half_diagonal", "herm", "lu_adjoint", "lu_factor", "lu_parts", "lu_solve",
    "lu_tangent", "matmul", "matmul_cotangents", "mH", "mT", "pack_lu", "pair_products", "permutation_rows",
    "permute_rows", "pinv_adjoint", "pinv_tangent", "reflector", "reflector_sequence", "tri_solve", "unpack_lu",
    "unpermute_rows"
]

# ----------------------------------------------------------------------------------------------
# Linear algebra: matrix helpers shared by the JVP and VJP formulas (batched over leading dims).


def mT(x):
    """Transpose of the last two axes."""
    return jnp.swapaxes(x, -1, -2)


def mH(x):
    """Conjugate transpose of the last two axes."""
    return jnp.conj(mT(x))


def matmul(a, b):
    """``A B`` over broadcast leading dims, as one ``dot_general`` (no transposed copies)."""
    return jnp.einsum("...ij,...jk->...ik", a, b)


# Letters for the batch axes of a product's cotangent that its operand lacks (not i, j, k: the
# matrix axes).
_SUMMED_AXES = "abcdefghlmnopqrstuvwxyz"


def matmul_cotangents(a, b, ct, precision=None, out_sharding=None):
    """``(ct B^T, A^T ct)``, the cotangents of ``C = A B`` over broadcast leading batch dims (seed
    ``mm_mat1_backward`` / ``mm_mat2_backward``, JAX's convention: transposes), each already
    summed over the leading batch dims of ``ct`` that its operand lacks, inside its one
    ``dot_general``: torch's ``matmul`` folds them into the rows, so the weight gradient of
    (B, L, D) @ (D, N) is one (D, N) product over B L rows, and not B products of (D, N) (a
    (B, D, N) temporary, each rounded to the operands' dtype before the sum over B). No
    transpose is materialized (the contraction names the axes). Batch dims of size 1 broadcast
    against larger ones stay in the result, for the caller to sum (the mechanism's ``sum_to``).

    Args:
        a, b: the operands, (..., m, n) and (..., n, p), batch dims broadcasting.
        ct: the cotangent of ``C``, (..., m, p) over the broadcast batch dims.
        precision: JAX's, of both products (None: the default).
        out_sharding: the sharding of ``A^T ct`` under an ``Explicit`` mesh (its contracted rows
            may be sharded); None elsewhere.
    """
    batch = ct.ndim - 2

    def product(x, x_axes, y, y_axes, operand, out_axes, sharding=None):
        lead = batch - (operand.ndim - 2)  # ct's leading batch dims the operand lacks: summed
        summed = _SUMMED_AXES[:lead]
        x_lead = summed[lead - max(0, x.ndim - operand.ndim):]  # x's own axes among them
        y_lead = summed[lead - max(0, y.ndim - operand.ndim):]
        spec = f"{x_lead}...{x_axes},{y_lead}...{y_axes}->...{out_axes}"
        return jnp.einsum(spec, x, y, precision=precision, out_sharding=sharding)

    return product(ct, "ik", b, "jk", a, "ij"), product(a, "ji", ct, "jk", b, "ik", out_sharding)


def herm(x):
    """Hermitian part ``(X + X^H) / 2``."""
    return (x + mH(x)) / 2


def diagonal(x):
    """The main diagonal of each matrix, shape ``(..., min(m, n))``."""
    return jnp.diagonal(x, axis1=-2, axis2=-1)


def diag_embed(d):
    """Square matrices with ``d`` on the diagonal (torch's ``diag_embed``)."""
    return d[..., :, None] * with_rank(jnp.eye(d.shape[-1], dtype=d.dtype), d.ndim + 1)


def half_diagonal(x):
    """``x`` with its diagonal halved (torch's ``syminv`` / ``syminvadj`` / ``triliminv``)."""
    return x - diag_embed(diagonal(x)) / 2


def band(x, lower, strict=False):
    """``tril(x)`` or ``triu(x)``; strictly below (above) the diagonal when ``strict``."""
    if lower:
        return jnp.tril(x, -1 if strict else 0)
    return jnp.triu(x, 1 if strict else 0)


def tri_solve(a, b, *, lower, left=True, transpose=False, conjugate=False, unit=False):
    """``op(A)^{-1} B`` (``left``) or ``B op(A)^{-1}``, ``op(A)`` = ``A`` transposed and/or
    conjugated; only the ``lower`` (or upper) triangle of ``A`` is read."""
    return lax.linalg.triangular_solve(
        a, b, left_side=left, lower=lower, transpose_a=transpose, conjugate_a=conjugate, unit_diagonal=unit
    )


def gap_reciprocal(values, squared=False):
    """``F[..., i, j] = 1 / (w_j - w_i)`` (``w = values**2`` when ``squared``), exactly 0 on the
    diagonal and for *degenerate* pairs, ``|w_j - w_i| <= n eps max|w|``.

    The torch formulas divide by these gaps (``E`` in seed ``linalg_eig_backward`` and
    ``svd_backward``) and give inf/NaN at repeated values. Zeroing the degenerate pairs is the
    derivative in the gauge that does not rotate a degenerate subspace: a loss that depends only
    on the values, or only on well-separated subspaces, gets its exact (finite) derivative.
    """
    w = values * values if squared else values
    diff = w[..., None, :] - w[..., :, None]
    n = w.shape[-1]
    scale = jnp.max(jnp.abs(w), axis=-1, keepdims=True)[..., None]
    tiny = n * jnp.finfo(diff.dtype).eps * scale
    return safe_reciprocal(diff, jnp.abs(diff) <= tiny)


def pair_products(s):
    """``Q[..., i, k] = prod_{j not in {i, k}} s_j`` for ``i != k`` and 0 on the diagonal,
    zero-safe (exclusive products, no division): the second-order cofactors of ``diag(s)``."""
    n = s.shape[-1]
    eye = with_rank(jnp.eye(n, dtype=bool), s.ndim + 1)
    without_i = jnp.where(eye, jnp.ones_like(s)[..., None, :], s[..., None, :])
    return jnp.where(eye, 0, prod_of_others(without_i, (without_i.ndim - 1,)))


def check_gauge(im_diag, op):
    """torch's gauge check for complex eigen/singular vectors: the loss must not depend on
    their phases, i.e. ``Im diag(V^H gV)`` must vanish (``allclose(., 0, 1e-2, 1e-2)``); under
    ``vmap``, for any entry of the batch."""
    runtime_check(
        jnp.abs(im_diag) > 1e-2,
        f"{op}: the eigenvectors/singular vectors in the complex case are specified up to "
        "multiplication by e^{i phi}; the loss depends on this phase, so its gradient is "
        "ill-defined (make the loss invariant, e.g. use abs(V) or V @ V^H).",
    )


def complement_tangent(q, dq_head):
    """Tangent of the extra (complement) columns ``Q_e`` of a complete orthonormal basis
    ``[Q_k, Q_e]`` given ``dQ_k``: ``dQ_e = -Q_k dQ_k^H Q_e`` (the rotation that keeps the basis
    orthonormal and does not mix the complement with itself). torch pads zeros here (then
    ``d(Q_e Q_e^H) = 0``, which is wrong); this gauge gets every invariant of ``Q_e`` right."""
    k = dq_head.shape[-1]
    q_head, q_extra = q[..., :k], q[..., k:]
    return jnp.concatenate([dq_head, -(q_head @ (mH(dq_head) @ q_extra))], axis=-1)


def complement_adjoint(q, g, k):
    """Adjoint of ``complement_tangent`` (torch's Hermitian convention) for a complete
    basis ``q`` whose first ``k`` columns are the head: the head's cotangent becomes
    ``g_k - Q_e g_e^H Q_k``; returns the head's cotangent only."""
    q_head, q_extra = q[..., :k], q[..., k:]
    return g[..., :k] - q_extra @ (mH(g[..., k:]) @ q_head)


def lu_solve(lu, piv, b, trans=0):
    """``A^{-1} B`` (``trans`` 0), ``A^{-T} B`` (1) or ``A^{-H} B`` (2) from ``lu_factor(A)``."""
    return _lu_solve((lu, piv), b, trans=trans)


def lu_factor(a):
    """``(lu, piv)`` of ``A`` (LAPACK's packed LU with partial pivoting)."""
    return _lu_factor(a)


def cho_solve(c, lower, b):
    """``(L L^H)^{-1} B`` (``lower``) or ``(U^H U)^{-1} B`` from the triangle of ``c``."""
    return _cho_solve((c, lower), b)


# Moore-Penrose pseudo-inverse (shared by pinv and lstsq).


def chain(*mats):
    """The product ``mats[0] @ mats[1] @ ...`` (batched) associated for the fewest
    multiplications on the static shapes of the last two axes (the matrix-chain order): through
    the small dimension first, so a wide or tall ``A`` (m x n) forms no max(m, n)^2 matrix."""
    dims = [mats[0].shape[-2]] + [m.shape[-1] for m in mats]
    count = len(mats)
    cost, split = {(i, i): 0 for i in range(count)}, {}
    for length in range(2, count + 1):
        for i in range(count - length + 1):
            j = i + length - 1
            cost[i, j], split[i, j] = min(
                (cost[i, k] + cost[k + 1, j] + dims[i] * dims[k + 1] * dims[j + 1], k) for k in range(i, j))

    def build(i, j):
        return mats[i] if i == j else build(i, split[i, j]) @ build(split[i, j] + 1, j)

    return build(0, count - 1)


def pinv_tangent(a, x, da):
    """``dX = -X dA X + (I - XA) dA^H X^H X + X X^H dA^H (I - AX)`` for ``X = A^+`` of locally
    constant rank (Golub-Pereyra; seed ``pinv_jvp``), each product a ``chain`` (no n x n matrix
    for an m x n ``A``, as torch's and JAX's rules)."""
    dah, xh = mH(da), mH(x)
    return (-chain(x, da, x) + chain(dah, xh, x) - chain(x, a, dah, xh, x)
            + chain(x, xh, dah) - chain(x, xh, dah, a, x))


def pinv_adjoint(a, x, g):
    """Hermitian adjoint of ``pinv_tangent`` (seed ``pinv_backward``, torch's convention):
    ``-X^H G X^H + X^H X G^H (I - XA) + (I - AX) G^H X X^H``, each product a ``chain``."""
    gh, xh = mH(g), mH(x)
    return (-chain(xh, g, xh) + chain(xh, x, gh) - chain(xh, x, gh, x, a)
            + chain(gh, x, xh) - chain(a, x, gh, x, xh))


# LU factorization with partial pivoting: ``A[perm] = L U`` (``lax.linalg.lu``), L unit lower
# (m x k), U upper (k x n), k = min(m, n).


def lu_parts(lu):
    """``(L, U)`` from the packed factors."""
    m, n = lu.shape[-2:]
    k = min(m, n)
    lower = jnp.tril(lu[..., :, :k], -1) + with_rank(jnp.eye(m, k, dtype=lu.dtype), lu.ndim)
    return lower, jnp.triu(lu[..., :k, :])


def permutation_rows(perm, dtype):
    """``I[perm]`` (the rows of the identity in the order ``perm``: ``P^T``), as a comparison
    rather than a gather, so it keeps ``perm``'s batch sharding under an ``Explicit`` mesh."""
    return (perm[..., :, None] == with_rank(jnp.arange(perm.shape[-1], dtype=perm.dtype), perm.ndim + 1)).astype(dtype)


def permute_rows(x, perm):
    """``x[perm]`` (row permutation, batched): ``P^T X``."""
    return jnp.take_along_axis(x, perm[..., :, None], axis=-2)


def unpermute_rows(x, perm):
    """``P X``: the inverse of ``permute_rows``."""
    return jnp.take_along_axis(x, jnp.argsort(perm, axis=-1)[..., :, None], axis=-2)


def lu_tangent(lower, upper, da_perm):
    """``(dL, dU)`` from ``P^T dA`` (seed ``linalg_lu_jvp``): ``dK = L1^{-1} dA1 U1^{-1}``,
    ``dL1 = L1 tril(dK, -1)``, ``dU1 = triu(dK) U1``; wide: ``dU2 = L1^{-1} dA2 - tril(dK, -1) U2``;
    tall: ``dL2 = dA2 U1^{-1} - L2 triu(dK)``."""
    m, n = da_perm.shape[-2:]
    k = min(m, n)
    l1, u1 = lower[..., :k, :], upper[..., :, :k]
    dk = tri_solve(l1, da_perm[..., :k, :k], lower=True, unit=True)
    dk = tri_solve(u1, dk, lower=False, left=False)
    strict, upper_part = jnp.tril(dk, -1), jnp.triu(dk)
    dl, du = l1 @ strict, upper_part @ u1
    if n > k:
        du2 = tri_solve(l1, da_perm[..., :, k:], lower=True, unit=True) - strict @ upper[..., :, k:]
        du = jnp.concatenate([du, du2], axis=-1)
    if m > k:
        dl2 = tri_solve(u1, da_perm[..., k:, :], lower=False, left=False) - lower[..., k:, :] @ upper_part
        dl = jnp.concatenate([dl, dl2], axis=-2)
    return dl, du


def lu_adjoint(lower, upper, gl, gu):
    """Hermitian adjoint of ``lu_tangent``: ``P^T``-side cotangent of A from ``(gL, gU)``, in the
    seed's order of products (``linalg_lu_backward``'s three branches). Square:
    ``L^{-H} (tril(L^H gL, -1) + triu(gU U^H)) U^{-H}``; wide:
    ``L^{-H} [tril(L^H gL - gU U^H, -1) U1^{-H} + triu(gU1), gU2]``; tall:
    ``[L1^{-H} triu(gU U^H - L^H gL) + tril(gL1, -1); gL2] U^{-H}``. In the wide and tall orders
    an infinite pivot of ``U1`` meets only the solves' divisions (its ``gU U^H`` entries lie in
    the dropped triangle): the gradient is its finite limit, as torch's (the square order, also
    torch's, multiplies it into the upper triangle first: NaN, as torch; the wide order would
    give the limit there too, at 1.1x the VJP's time on finite 8x8 batches)."""
    m, k = lower.shape[-2:]
    n = upper.shape[-1]
    l1, u1 = lower[..., :k, :], upper[..., :, :k]
    if m == n:
        inner = jnp.tril(mH(lower) @ gl, -1) + jnp.triu(gu @ mH(upper))
        inner = tri_solve(u1, inner, lower=False, left=False, transpose=True, conjugate=True)
        return tri_solve(l1, inner, lower=True, unit=True, transpose=True, conjugate=True)
    if m < n:  # (the entries of gU below the diagonal, and of gL on and above it, are not read)
        gu = jnp.triu(gu)
        inner = jnp.tril(mH(lower) @ gl - gu @ mH(upper), -1)
        inner = tri_solve(u1, inner, lower=False, left=False, transpose=True, conjugate=True) + gu[..., :, :k]
        if n > k:
            inner = jnp.concatenate([inner, gu[..., :, k:]], axis=-1)
        return tri_solve(l1, inner, lower=True, unit=True, transpose=True, conjugate=True)
    gl = jnp.tril(gl, -1)
    inner = jnp.triu(gu @ mH(upper) - mH(lower) @ gl)
    inner = tri_solve(l1, inner, lower=True, unit=True, transpose=True, conjugate=True) + gl[..., :k, :]
    inner = jnp.concatenate([inner, gl[..., k:, :]], axis=-2)
    return tri_solve(u1, inner, lower=False, left=False, transpose=True, conjugate=True)


def pack_lu(dl, du):
    """Packed ``tril(dL, -1) + triu(dU)`` in the shape of ``lu`` (seed ``lu_factor_ex_jvp``)."""
    m, k = dl.shape[-2:]
    n = du.shape[-1]
    out = jnp.zeros(dl.shape[:-2] + (m, n), promoted_dtype(dl, du))
    out = out.at[..., :, :k].add(jnp.tril(dl, -1))
    return out.at[..., :k, :].add(jnp.triu(du))


def unpack_lu(g, k):
    """Cotangents ``(gL, gU)`` of the packed factors' cotangent ``g`` (seed
    ``lu_factor_ex_backward``)."""
    return jnp.tril(g[..., :, :k], -1), jnp.triu(g[..., :k, :])


# Householder reflectors ``H_j = I - tau_j v_j v_j^H`` with ``v_j = [0, ..., 0, 1, A[j+1:, j]]``.


def reflector(a, j):
    """``v_j`` from column ``j`` of the packed reflectors ``a``."""
    m = a.shape[-2]
    rows = with_rank(jnp.arange(m), a.ndim - 1)
    return jnp.where(rows == j, jnp.ones((), a.dtype), jnp.where(rows > j, a[..., :, j], 0))


def apply_reflector(tau, v, y, start=0):
    """``(I - tau v v^H) Y`` for ``v`` zero above row ``start`` (a static int): rows ``start:``
    only, as LAPACK's larf; the other rows stay exact also where ``tau`` or ``v`` is not finite
    (``0 v^H Y`` with an infinite ``v^H Y`` would be NaN)."""
    vs, ys = v[..., start:], y[..., start:, :]
    out = ys - tau[..., None, None] * (vs[..., :, None] * (jnp.conj(vs)[..., None, :] @ ys))
    return out if start == 0 else lax.dynamic_update_slice_in_dim(y, out, start, axis=-2)


def reflector_sequence(a, tau, *, adjoint, reverse):
    """``[(j, conjugate)]`` in the order the reflectors are applied to the right-hand side:
    ``H_1 H_2 ... H_k C`` applies ``H_k`` first (``reverse``); ``Q^H C`` applies ``H_1^H``
    first."""
    k = tau.shape[-1]
    order = range(k - 1, -1, -1) if reverse else range(k)
    return [(j, adjoint) for j in order]


# Scaling and squaring (Higham 2005, as ``jax.scipy.linalg.expm``): the Pade order m whose bound
# theta_m covers ||A||_1, else order 13 after scaling A by 2^-s; float64 and float32 bounds.
_EXPM_ORDERS = {
    8: ((3, 5, 7, 9, 13), (1.495585217958292e-2, 2.539398330063230e-1, 9.504178996162932e-1, 2.097847961257068,
                           5.371920351148152)),
    4: ((3, 5, 7), (4.258730016922831e-1, 1.880152677804762, 3.925724783138660)),
}


def _precise(a, b):
    return jnp.matmul(a, b, precision=lax.Precision.HIGHEST)


def _pade(a, m):
    """The numerator and denominator of exp's ``[m/m]`` Pade approximant at A: ``V + U`` and
    ``V - U``, ``U`` the odd terms, ``V`` the even ones (coefficients
    ``(2m-k)! m! / ((2m)! k! (m-k)!)``)."""
    f = math.factorial
    c = [f(2 * m - k) * f(m) / (f(2 * m) * f(k) * f(m - k)) for k in range(m + 1)]
    powers = [jnp.eye(a.shape[-1], dtype=a.dtype), _precise(a, a)]
    while len(powers) <= m // 2:
        powers.append(_precise(powers[-1], powers[1]))
    u = _precise(a, sum(c[2 * j + 1] * powers[j] for j in range(len(powers)) if 2 * j + 1 <= m))
    v = sum(c[2 * j] * powers[j] for j in range(len(powers)))
    return v + u, v - u


def expm(a, max_squarings=16):
    """``exp(A)`` of square matrices ``(..., n, n)`` by scaling and squaring with Pade
    approximants, ``jax.scipy.linalg.expm``'s algorithm (NaN beyond ``max_squarings``). The order
    is picked by comparisons of ``||A||_1`` with its bounds, where JAX's ``jnp.digitize`` runs a
    searchsorted scan that fails under ``vmap`` on an ``Explicit`` mesh."""
    if a.ndim > 2:
        return jax.vmap(lambda x: expm(x, max_squarings))(a)
    orders, bounds = _EXPM_ORDERS[8 if a.real.dtype.itemsize >= 8 else 4]
    norm = jnp.max(jnp.sum(jnp.abs(a), axis=0), initial=0)
    squarings = jnp.maximum(0, jnp.floor(jnp.log2(norm / bounds[-1])))
    order = sum((norm >= b).astype(jnp.int32) for b in bounds[:-1])
    scaled = a / (2 ** squarings).astype(a.dtype)
    p, q = lax.switch(order, [lambda x, m=m: _pade(x, m) for m in orders], scaled)
    r = jnp.linalg.solve(q, p)

    def square(r, i):
        return lax.cond(i < squarings, lambda x: _precise(x, x), lambda x: x, r), None

    r = lax.scan(square, r, jnp.arange(max_squarings, dtype=squarings.dtype))[0]
    return jnp.where(squarings > max_squarings, jnp.nan, r)
