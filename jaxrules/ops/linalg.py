"""Linear algebra: primal, residuals, JVP and VJP formulas of each op, side by side (gathered in
``jvp_rules`` and ``vjp_rules``). Public through ``jaxrules.numpy`` (``matmul``),
``jaxrules.numpy.linalg``, ``jaxrules.scipy.linalg``, ``jaxrules.linalg`` (torch-only ops and
torch's signatures) and ``jaxrules.nn`` (``linear``).

Every op takes batched input (leading dims). Decompositions whose vectors are defined only up
to a sign or phase (svd, eig, eigh, qr's extra columns) follow torch's gauge; their records
check gauge-invariant functions of the outputs, which is all a finite difference can see.
"""

from __future__ import annotations

import collections
import functools
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.numpy.linalg import slogdet as _jnp_slogdet
from jax.typing import ArrayLike

from jaxrules import _validate as V
from jaxrules import partials as P
from jaxrules._namespace import exported_as
from jaxrules.batching import batch_axis_at, leading_batch_rule, vmap_size
from jaxrules.mechanism import concrete_value, define_op, explicit_sharding, full_spec, unsharded_along
from jaxrules.partials.linalg import expm as scaling_and_squaring_expm

# ----------------------------------------------------------------------------------------------
# Ops

# Formulas batched over leading dims (shapes in comments are per matrix). Holomorphic maps are
# transposed directly (JAX's convention); the VJP formulas with real parts, conjugates or Hermitian
# projections are written as torch writes them (the Hermitian adjoint) and wrapped by
# ``_torch_convention`` (conjugate in, conjugate out).

_mT, _mH, _herm, _diag, _embed = P.mT, P.mH, P.herm, P.diagonal, P.diag_embed


def _torch_convention(backward):
    """JAX's VJP from a torch backward formula: ``conj(backward(conj(ct)))``."""

    @functools.wraps(backward)
    def vjp(res, ct, **static):
        cts = backward(res, jax.tree.map(jnp.conj, ct), **static)
        return tuple(None if c is None else jnp.conj(c) for c in cts)

    return vjp


def _matrix(op: str, name: str, x, *, square=False, min_ndim=2, inexact=True):
    x = V.array(op, name, x, inexact=inexact)
    if x.ndim < min_ndim:
        raise ValueError(f"{op}: {name} must have rank >= {min_ndim}, got shape {x.shape}")
    if square and x.shape[-1] != x.shape[-2]:
        raise ValueError(f"{op}: {name} must be square in its last two axes, got shape {x.shape}")
    return x


def _broadcast_batch(op: str, a, b, b_core: int):
    """``a`` (..., m, n) and ``b`` (..., *core) broadcast to a common batch shape."""
    try:
        batch = jnp.broadcast_shapes(a.shape[:-2], b.shape[: b.ndim - b_core])
    except ValueError:
        raise ValueError(f"{op}: batch dimensions do not broadcast ({a.shape} and {b.shape})") from None
    return jnp.broadcast_to(a, batch + a.shape[-2:]), jnp.broadcast_to(b, batch + b.shape[b.ndim - b_core :])


def _same_dtype(*arrays):
    dtype = jnp.result_type(*arrays)
    return [x.astype(dtype) for x in arrays]


# ----------------------------------------------------------------------------------------------
# Ops: Products


def matmul_jvp(res, ta, tb, **_):
    """``dA B + A dB`` (seed ``mm_mat1_backward`` / ``mm_mat2_backward``, forward)."""
    a, b = res
    return P.terms(None if ta is None else P.matmul(ta, b), None if tb is None else P.matmul(a, tb))


def matmul_vjp(res, ct, **_):
    """``(ct B^T, A^T ct)`` (seed ``mm_mat1_backward`` / ``mm_mat2_backward``, JAX convention),
    each summed over the leading batch dims its operand lacks inside its product
    (``partials.matmul_cotangents``); batch dims of size 1 are summed by the mechanism."""
    a, b = res
    # b's gradient sums over a's rows, which may be sharded: it is sharded as b (Explicit mesh)
    out = explicit_sharding(b, a, ct) if a.ndim >= b.ndim else None
    return P.matmul_cotangents(a, b, ct, out_sharding=out)


matmul_op = define_op("matmul", P.matmul, matmul_jvp, matmul_vjp)


def _product(spec, precision):
    return lambda u, v: jnp.einsum(spec, u, v, precision=precision)


def _matmul_at_jvp(res, ta, tb, *, precision):
    """``matmul_jvp`` (``dA B + A dB``) with its products at ``precision``."""
    a, b = res
    mm = _product("...ij,...jk->...ik", precision)
    terms = [t for t in (None if ta is None else mm(ta, b), None if tb is None else mm(a, tb)) if t is not None]
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


def _matmul_at_vjp(res, ct, *, precision):
    """``matmul_vjp`` (``(ct B^T, A^T ct)``, ``partials.matmul_cotangents``) with its products at
    ``precision``."""
    a, b = res
    return P.matmul_cotangents(a, b, ct, precision)


# matmul at a non-default precision (jax.numpy's ``precision=``): the same formulas, every product
# of the forward, JVP and VJP at that precision
matmul_at_op = define_op("matmul", lambda a, b, *, precision: _product("...ij,...jk->...ik", precision)(a, b),
                         _matmul_at_jvp, _matmul_at_vjp)


def linear_jvp(res, tx, tw, tb, **_):
    """``dx W^T + x dW^T + db`` (torch ``linear``)."""
    x, w = res
    product = lambda u, v: jnp.einsum("...i,oi->...o", u, v)  # noqa: E731 - x W^T, x may be 1-D
    return P.terms(None if tx is None else product(tx, w), None if tw is None else product(x, tw), tb)


def linear_vjp(res, ct, **_):
    """``gx = ct W``, ``gW = ct^T x`` (summed over leading dims), ``gb = ct`` (summed by the
    mechanism). Its derivative (bilinear in ct and the inputs) is seed
    ``linear_double_backward``."""
    x, w = res
    # Contracting a batch-sharded axis: the sum is sharded like w (an Explicit mesh wants it said).
    gw = jnp.einsum("...o,...i->oi", ct, x, out_sharding=explicit_sharding(w, x, ct))
    return jnp.einsum("...o,oi->...i", ct, w), gw, ct


linear_op = define_op(
    "linear",
    lambda x, w, b: jnp.einsum("...i,oi->...o", x, w) + P.with_rank(b, max(x.ndim, 1)),
    linear_jvp,
    linear_vjp,
    lambda out, x, w, b: (x, w),
)


def _split_by_batch(x, operands, batch_at, nb, groups_first):
    """Under an ``Explicit`` mesh (XLA infers no sharding for a ragged product): every operand
    resharded to ``x``'s sharding of its ``nb`` batch dims (replicated where only another
    operand is on the mesh) (at ``batch_at``) and nothing else,
    and the output's sharding (its batch dims after the group dim when ``groups_first``, then
    two unsharded dims); else the operands as they are and ``None``."""
    pspec = jax.sharding.PartitionSpec
    sharding = explicit_sharding(x, *operands)
    if sharding is None:
        return operands, None
    batch = full_spec(sharding, x.ndim)[:nb]
    placed = tuple(jax.sharding.reshard(a, pspec(*(None,) * at, *batch, *(None,) * (a.ndim - at - nb)))
                   for a, at in zip(operands, batch_at, strict=True))
    return placed, jax.sharding.NamedSharding(sharding.mesh, pspec(*(None,) * groups_first, *batch, None, None))


def _rows_grouped(x, w, group_sizes, preferred):
    """``out[..., rows of group g, :] = x[..., rows of group g, :] @ w[g, ...]``: ``x``
    ``(*b, M, K)``, ``w`` ``(G, *b, K, N)``, group sizes ``(*b, G)``, out ``(*b, M, N)``; rows
    past the groups give 0 (``lax.ragged_dot_general``, ``b`` its batch dims)."""
    nb = x.ndim - 2
    numbers = lax.RaggedDotDimensionNumbers(
        dot_dimension_numbers=(([nb + 1], [nb + 1]), (list(range(nb)), list(range(1, nb + 1)))),
        lhs_ragged_dimensions=[nb], rhs_group_dimensions=[0])
    (x, w, group_sizes), out = _split_by_batch(x, (x, w, group_sizes), (0, 1, 0), nb, False)
    return lax.ragged_dot_general(x, w, group_sizes, numbers, preferred_element_type=preferred, out_sharding=out)


def _contraction_grouped(x, y, group_sizes, preferred):
    """``out[g, ...] = x[..., :, k in group g] @ y[..., k in group g, :]``: ``x`` ``(*b, M, K)``,
    ``y`` ``(*b, K, N)``, group sizes ``(*b, G)``, out ``(G, *b, M, N)`` (a ragged contracting
    dimension)."""
    nb = x.ndim - 2
    numbers = lax.RaggedDotDimensionNumbers(
        dot_dimension_numbers=(([nb + 1], [nb]), (list(range(nb)), list(range(nb)))),
        lhs_ragged_dimensions=[nb + 1], rhs_group_dimensions=[])
    (x, y, group_sizes), out = _split_by_batch(x, (x, y, group_sizes), (0, 0, 0), nb, True)
    return lax.ragged_dot_general(x, y, group_sizes, numbers, preferred_element_type=preferred, out_sharding=out)


def rows_grouped_jvp(res, tx, tw, _, *, preferred):
    """``d(x W_g) = dx W_g + x dW_g`` per row group (bilinear)."""
    x, w, sizes = res
    return P.terms(None if tx is None else rows_grouped_op(tx, w, sizes, preferred=preferred),
                   None if tw is None else rows_grouped_op(x, tw, sizes, preferred=preferred))


def rows_grouped_vjp(res, ct, *, preferred):
    """``gx = ct W_g^T`` per row group, ``gW_g = x_g^T ct_g`` (the rows of group g contracted: a
    ragged contraction); rows past the groups get 0."""
    x, w, sizes = res
    gx = rows_grouped_op(ct, jnp.swapaxes(w, -1, -2), sizes, preferred=None).astype(x.dtype)
    gw = contraction_grouped_op(jnp.swapaxes(x, -1, -2), ct, sizes, preferred=None).astype(w.dtype)
    return gx, gw, None


def contraction_grouped_jvp(res, tx, ty, _, *, preferred):
    """``d(x_g y_g) = dx_g y_g + x_g dy_g`` per contraction group (bilinear)."""
    x, y, sizes = res
    return P.terms(None if tx is None else contraction_grouped_op(tx, y, sizes, preferred=preferred),
                   None if ty is None else contraction_grouped_op(x, ty, sizes, preferred=preferred))


def contraction_grouped_vjp(res, ct, *, preferred):
    """``gx[..., :, k] = ct_g y[..., k, :]^T`` and ``gy[..., k, :] = x[..., :, k]^T ct_g`` for
    ``k`` in group ``g``: row-grouped products over ``K`` (``y`` and ``x^T`` with rows grouped,
    ``ct`` per group)."""
    x, y, sizes = res
    gx = jnp.swapaxes(rows_grouped_op(y, jnp.swapaxes(ct, -1, -2), sizes, preferred=None), -1, -2).astype(x.dtype)
    gy = rows_grouped_op(jnp.swapaxes(x, -1, -2), ct, sizes, preferred=None).astype(y.dtype)
    return gx, gy, None


def _grouped_batch_rule(weight_batch_axis, out_batch_axis):
    """vmap of a grouped product: one more batch dimension of the op itself (the op again, so an
    outer vmap batches it by this rule too): leading on x and the group sizes, at
    ``weight_batch_axis`` on the second operand."""
    def rule(args, dims, *, vmap_axis_name, preferred):
        size = vmap_size(args, dims)
        x, w, sizes = (batch_axis_at(a, d, size, at) for a, d, at in zip(args, dims, (0, weight_batch_axis, 0),
                                                                          strict=True))
        op = rows_grouped_op if weight_batch_axis == 1 else contraction_grouped_op
        return op(x, w, sizes, preferred=preferred), out_batch_axis

    return rule


rows_grouped_op = define_op("grouped_mm", lambda x, w, sizes, *, preferred: _rows_grouped(x, w, sizes, preferred),
                            rows_grouped_jvp, rows_grouped_vjp, batch=_grouped_batch_rule(1, 0))
contraction_grouped_op = define_op(
    "grouped_mm", lambda x, y, sizes, *, preferred: _contraction_grouped(x, y, sizes, preferred),
    contraction_grouped_jvp, contraction_grouped_vjp, batch=_grouped_batch_rule(0, 1))


# ----------------------------------------------------------------------------------------------
# Ops: Inverse, determinants

def _all_nan_where(bad, a, fn):
    """``fn(a)`` (an array or a tuple of arrays, each with ``a``'s batch dims leading) with every
    entry NaN for the matrices of ``a`` that have an entry where ``bad`` holds: a factorization
    mixes every entry into every result entry, but the LAPACK-style algorithms leave some
    finite, depending on where the entry sits (and LAPACK's SVD may not return at all on an
    infinite matrix: ``fn`` gets zeros in place of those matrices). Two selects and one
    reduction (``O(n^2)`` beside the factorization's ``O(n^3)``)."""
    poisoned = jnp.any(bad(a), axis=(-2, -1))
    out = fn(jnp.where(poisoned[..., None, None], jnp.zeros((), a.dtype), a))

    def one(o):
        return jnp.where(poisoned.reshape(poisoned.shape + (1,) * (o.ndim - poisoned.ndim)), jnp.nan, o)

    return tuple(map(one, out)) if isinstance(out, tuple) else one(out)


def _nonfinite(a):
    return ~jnp.isfinite(a)


def _inv_primal(a):
    """``solve(A, I)`` as ``jax.numpy.linalg.inv``, with the identity built sharded like ``a``
    (an ``Explicit`` mesh refuses the vmapped solve of a sharded ``A`` and a replicated ``I``);
    all NaN for an ``A`` with a NaN entry (each entry of ``A^{-1} = adj(A)/det(A)`` involves it)."""
    eye = jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape, out_sharding=explicit_sharding(a))
    return _all_nan_where(jnp.isnan, a, lambda a: jnp.linalg.solve(a, eye))


def inv_jvp(x, ta, **_):
    """``dX = -X dA X`` (X = A^{-1}; derivatives.yaml ``linalg_inv_ex``)."""
    return -(x @ ta @ x)


def inv_vjp(x, ct, **_):
    """``-X^T ct X^T`` (X = A^{-1})."""
    return (-(_mT(x) @ ct @ _mT(x)),)


inv_op = define_op("inv", _inv_primal, inv_jvp, inv_vjp, lambda out, a: out, batch=leading_batch_rule(_inv_primal))


def _adjugate_by_svd(a):
    u, s, vh = jnp.linalg.svd(a)
    c = jnp.linalg.det(u) * jnp.linalg.det(vh)
    return c[..., None, None] * ((P.mH(vh) * P.prod_of_others(s, (s.ndim - 1,)).astype(vh.dtype)[..., None, :]) @ P.mH(u))


def _cofactors_3x3(a):
    """The cofactors ``C_ij = a[i+1, j+1] a[i+2, j+2] - a[i+1, j+2] a[i+2, j+1]`` (indices mod 3)
    of 3x3 matrices: each a 2x2 determinant of the entries outside row i and column j, so an
    infinite entry gives the exact +-inf in the four cofactors it enters and leaves the other
    five finite (the LU and SVD routes mix it into NaN everywhere)."""
    e = [[a[..., i, j] for j in range(3)] for i in range(3)]

    def cofactor(i, j):
        i1, i2, j1, j2 = (i + 1) % 3, (i + 2) % 3, (j + 1) % 3, (j + 2) % 3
        return e[i1][j1] * e[i2][j2] - e[i1][j2] * e[i2][j1]

    return jnp.stack([jnp.stack([cofactor(i, j) for j in range(3)], -1) for i in range(3)], -2)


def _adjugate_primal(a):
    """``det(A) A^{-1}`` from one LU factorization when no pivot is (relatively) zero, else
    through the SVD (``c V diag(prod of the other singular values) U^H``, exact at every rank).
    The SVD branch runs only when some matrix of the batch needs it. A 3x3 matrix with an
    infinite entry: its cofactors, transposed (exact: +-inf where the entry enters)."""
    if a.size == 0:
        return jnp.zeros_like(a)  # no entries (an empty batch, or 0x0 matrices)
    lu_, pivots, perm = lax.linalg.lu(a)
    diag = P.diagonal(lu_)
    n = a.shape[-1]
    swaps = jnp.sum(pivots != P.with_rank(jnp.arange(n, dtype=pivots.dtype), pivots.ndim), axis=-1)
    det = jnp.prod(diag, axis=-1) * jnp.where(swaps % 2 == 1, -1, 1).astype(a.dtype)
    magnitude = jnp.abs(diag)
    regular = jnp.all(jnp.isfinite(lu_), axis=(-2, -1)) & (
        jnp.min(magnitude, -1) > n * jnp.finfo(magnitude.dtype).eps * jnp.max(magnitude, -1)
    )

    def by_lu():
        lower, upper = P.lu_parts(lu_)
        p_transpose = P.permutation_rows(perm, a.dtype)
        inverse = P.tri_solve(upper, P.tri_solve(lower, p_transpose, lower=True, unit=True), lower=False)
        return det[..., None, None] * inverse

    def mixed():  # a non-finite entry is not regular: NaN, exact cofactors for 3x3 with infinities
        adjugate = jnp.where(regular[..., None, None], by_lu(), _all_nan_where(_nonfinite, a, _adjugate_by_svd))
        if n != 3:
            return adjugate
        return jnp.where(jnp.any(jnp.isinf(a), (-2, -1))[..., None, None], P.mT(_cofactors_3x3(a)), adjugate)

    return lax.cond(jnp.all(regular), by_lu, mixed)


def _save_adjugate(out, a):
    u, s, vh = _all_nan_where(_nonfinite, a, lambda a: tuple(jnp.linalg.svd(a)))
    return u, s, vh, jnp.linalg.det(u) * jnp.linalg.det(vh)


def _slogdet_primal(a):
    """``jax.numpy.linalg.slogdet``; sign and logabsdet NaN for an ``A`` with a NaN entry."""
    return _all_nan_where(jnp.isnan, a, lambda a: tuple(jnp.linalg.slogdet(a)))


def adjugate_jvp(res, ta, **_):
    """``d adj(A)[E] = c V (diag(Q diag(E~)) - Q o E~) U^H`` with ``A = U S V^H``,
    ``E~ = U^H E V``, ``c = det(U) det(V^H)`` and ``Q`` the pair products of ``S``
    (``partials.pair_products``): exact at every rank (adj(A U S V^H) factors through the SVD
    with U, V held fixed), so det's second derivative is finite at singular matrices."""
    u, s, vh, c = res
    e = _mH(u) @ ta @ _mH(vh)
    q = P.pair_products(s).astype(e.dtype)
    m = _embed(jnp.einsum("...ik,...k->...i", q, _diag(e))) - q * e
    return c[..., None, None] * (_mH(vh) @ m @ _mH(u))


@_torch_convention
def adjugate_vjp(res, g, **_):
    """Adjoint of ``jvp_rules.adjugate_jvp``: ``U M(conj(c) V^H G U) V^H`` (``M`` is
    self-adjoint)."""
    u, s, vh, c = res
    e = jnp.conj(c)[..., None, None] * (vh @ g @ u)
    q = P.pair_products(s).astype(e.dtype)
    m = _embed(jnp.einsum("...ik,...k->...i", q, _diag(e))) - q * e
    return (u @ m @ vh,)


adjugate_op = define_op("adjugate", _adjugate_primal, adjugate_jvp, adjugate_vjp, _save_adjugate)
def _det_primal(a):
    """``jax.numpy.linalg.det``; a 3x3 matrix with an infinite entry whose closed form gives NaN
    (its six Leibniz products meet the entry with both signs): the cofactor expansion along the
    first row holding an infinite entry, exact (+-inf for one infinite entry, as torch's LU).
    The expansion runs only when some determinant of the batch is NaN (one check: their sum)."""
    det = jnp.linalg.det(a)
    if a.shape[-1] != 3 or a.size == 0:
        return det

    def expanded():
        infinite_rows = jnp.any(jnp.isinf(a), axis=-1)
        redo = jnp.isnan(det) & jnp.any(infinite_rows, axis=-1)
        by_row = jnp.sum(a * _cofactors_3x3(a), axis=-1)
        exact = jnp.take_along_axis(by_row, jnp.argmax(infinite_rows, axis=-1)[..., None], axis=-1)[..., 0]
        return jnp.where(redo, exact, det)

    return lax.cond(jnp.isnan(jnp.sum(det)), expanded, lambda: det)


def det_jvp(adj, ta, **_):
    """``d det = tr(adj(A) dA)`` (seed ``linalg_det_jvp``; the adjugate instead of
    ``det A^{-1}``, exact at singular A)."""
    return jnp.einsum("...ij,...ji->...", adj, ta)


def det_vjp(adj, ct, **_):
    """``ct adj(A)^T`` (seed ``linalg_det_backward``): the adjugate, exact at singular A where
    torch's default (no create_graph) path returns 0."""
    return (ct[..., None, None] * _mT(adj),)


det_op = define_op("det", _det_primal, det_jvp, det_vjp, lambda out, a: adjugate_op(a))


def slogdet_jvp(ainv, ta, **_):
    """``d logabs = Re tr(A^{-1} dA)``, ``d sign = i sign Im tr(A^{-1} dA)`` (0 for real A)
    (seed ``slogdet_jvp``). Residuals: ``A^{-1}`` and the sign."""
    ainv, sign = ainv
    tr = jnp.einsum("...ij,...ji->...", ainv, ta)
    dsign = 1j * sign * tr.imag.astype(sign.dtype) if jnp.iscomplexobj(tr) else jnp.zeros_like(sign)
    return dsign, tr.real


def slogdet_vjp(res, ct, **_):
    """``(g_logabs + i Im(g_sign sign)) A^{-T}`` (seed ``slogdet_backward``, JAX convention);
    real A: ``g_logabs A^{-T}``."""
    ainv, sign = res
    g_sign, g_logabs = ct
    scale = g_logabs.astype(ainv.dtype)
    if jnp.iscomplexobj(ainv):
        scale = scale + 1j * (g_sign * sign).imag.astype(scale.dtype)
    return (scale[..., None, None] * _mT(ainv),)


slogdet_op = define_op("slogdet", _slogdet_primal, slogdet_jvp, slogdet_vjp, lambda out, a: (inv_op(a), out[0]))


# ----------------------------------------------------------------------------------------------
# Ops: Solves

def _solve_primal(a, b, *, left):
    """``A^{-1} B`` (``left``) or ``B A^{-1}`` from A's LU factors; all NaN for an ``A`` with a NaN
    entry (as ``inv``)."""
    def solve(a):
        lu, piv = P.lu_factor(a)
        return P.lu_solve(lu, piv, b) if left else P.mT(P.lu_solve(lu, piv, P.mT(b), trans=1))

    return _all_nan_where(jnp.isnan, a, solve)


def solve_jvp(res, ta, tb, *, left, **_):
    """Left: ``dX = A^{-1}(dB - dA X)``; right (``X A = B``): ``dX = (dB - X dA) A^{-1}``
    (seed ``linalg_solve_jvp`` / ``generic_solve_jvp``). Residuals: the LU factors of A and X."""
    lu, piv, x = res
    if left:
        rhs = P.terms(tb, None if ta is None else -(ta @ x))
        return P.lu_solve(lu, piv, rhs, trans=0)
    rhs = P.terms(tb, None if ta is None else -(x @ ta))
    return _mT(P.lu_solve(lu, piv, _mT(rhs), trans=1))


def solve_vjp(res, ct, *, left, **_):
    """Left: ``gB = A^{-T} ct``, ``gA = -gB X^T``; right: ``gB = ct A^{-T}``, ``gA = -X^T gB``
    (seed ``linalg_solve_backward``, JAX convention; the LU factors are reused)."""
    lu, piv, x = res
    if left:
        gb = P.lu_solve(lu, piv, ct, trans=1)
        return -(gb @ _mT(x)), gb
    gb = _mT(P.lu_solve(lu, piv, _mT(ct), trans=0))
    return -(_mT(x) @ gb), gb


solve_op = define_op("solve", _solve_primal, solve_jvp, solve_vjp, lambda out, a, b, **_: (*P.lu_factor(a), out))


def _tri_flags(op, trans):
    codes = {0: (False, False), "N": (False, False), 1: (True, False), "T": (True, False), 2: (True, True), "C": (True, True)}
    if isinstance(trans, bool) or trans not in codes:
        raise ValueError(f"{op}: trans must be 0/'N', 1/'T' or 2/'C', got {trans!r}")
    return codes[trans]


def solve_triangular_jvp(res, ta, tb, *, lower, unit, transpose, conjugate, left):
    """``dX = M^{-1}(dB - dM X)`` (``left``) or ``(dB - X dM) M^{-1}`` with ``M = op(A)`` and
    ``dM = op(P(dA))``, ``P`` the projection on the triangle read (strict if ``unit``) (seed
    ``linalg_solve_triangular_forward_AD``)."""
    a, x = res
    dm = None
    if ta is not None:
        dm = P.band(ta, lower, unit)
        dm = _mT(dm) if transpose else dm
        dm = jnp.conj(dm) if conjugate else dm
    rhs = P.terms(tb, None if dm is None else -(dm @ x if left else x @ dm))
    return P.tri_solve(a, rhs, lower=lower, left=left, transpose=transpose, conjugate=conjugate, unit=unit)


def solve_triangular_vjp(res, ct, *, lower, unit, transpose, conjugate, left):
    """``gB = M^{-T} ct`` (left) or ``ct M^{-T}``, ``gM = -gB X^T`` or ``-X^T gB``, and
    ``gA = P(op(gM))`` (seed ``linalg_solve_triangular_backward``; the transpose of a
    conjugation is a conjugation in JAX's convention)."""
    a, x = res
    gb = P.tri_solve(a, ct, lower=lower, left=left, transpose=not transpose, conjugate=conjugate, unit=unit)
    gm = -(gb @ _mT(x) if left else _mT(x) @ gb)
    gm = _mT(gm) if transpose else gm
    gm = jnp.conj(gm) if conjugate else gm
    return P.band(gm, lower, unit), gb


solve_triangular_op = define_op("solve_triangular", lambda a, b, *, lower, unit, transpose, conjugate, left: P.tri_solve(
        a, b, lower=lower, left=left, transpose=transpose, conjugate=conjugate, unit=unit
    ), solve_triangular_jvp, solve_triangular_vjp, lambda out, a, b, **_: (a, out))


# ----------------------------------------------------------------------------------------------
# Ops: Cholesky


def cholesky_jvp(factor, ta, **_):
    """``dL = L Phi(L^{-1} herm(dA) L^{-H})``, ``Phi(X) = tril(X) - diag(X)/2`` (seed
    ``cholesky_jvp``; the tangent is symmetrized as the primal is, jnp's convention)."""
    y = P.tri_solve(factor, _herm(ta), lower=True)
    y = P.tri_solve(factor, y, lower=True, left=False, transpose=True, conjugate=True)
    return factor @ P.half_diagonal(jnp.tril(y))


@_torch_convention
def cholesky_vjp(factor, g, **_):
    """``gA = herm(L^{-H} Phi(L^H gL) L^{-1})``, ``Phi(X) = tril(X) - diag(X)/2`` (seed
    ``cholesky_backward``)."""
    y = _mH(factor) @ g
    y = P.half_diagonal(jnp.tril(y))
    y = P.tri_solve(factor, y, lower=True, transpose=True, conjugate=True)
    y = P.tri_solve(factor, y, lower=True, left=False)
    return (_herm(y),)


cholesky_op = define_op("cholesky", lambda a: jnp.linalg.cholesky(a), cholesky_jvp, cholesky_vjp, lambda out, a: out)


def cho_solve_jvp(res, tc, tb, *, lower):
    """``dA = dK + dK^H`` with ``dK = dL L^H`` (lower) or ``dU^H U`` (upper), then
    ``dX = A^{-1}(dB - dA X)`` (seed ``cholesky_solve_jvp``: the factor's tangent is used whole,
    torch's convention)."""
    c, x = res
    da = None
    if tc is not None:
        dk = tc @ _mH(c) if lower else _mH(tc) @ c
        da = dk + _mH(dk)
    rhs = P.terms(tb, None if da is None else -(da @ x))
    return P.cho_solve(c, lower, rhs)


@_torch_convention
def cho_solve_vjp(res, g, *, lower):
    """``gB = A^{-1} g``, ``C = gB X^H``, factor gradient ``-(C + C^H) L`` (lower) or
    ``-U (C + C^H)`` (upper), not projected on the triangle (seed
    ``cholesky_solve_backward``: torch's convention)."""
    c, x = res
    gb = P.cho_solve(c, lower, g)
    cc = gb @ _mH(x)
    cc = cc + _mH(cc)
    return -(cc @ c if lower else c @ cc), gb


cho_solve_op = define_op("cho_solve", lambda c, b, *, lower: P.cho_solve(c, lower, b), cho_solve_jvp, cho_solve_vjp, lambda out, c, b, **_: (c, out))


def _cholesky_inverse_primal(c, *, lower):
    """``X = W W^H`` with ``W = L^{-H}`` (lower) or ``U^{-1}`` (upper), upper triangular, as
    LAPACK's potri (trtri, then the triangular product). ``W`` is solved from the left by rows from
    the last, which keeps its rows exact below a non-finite factor entry ``L[p, q]`` (NaN in the
    rows ``<= q``), and its strict lower triangle, the structural zeros the solve divides by the
    entry, is set to 0. Then ``X[q+1:, q+1:] = (L22 L22^H)^{-1}`` stays finite, as torch's
    (``cho_solve(L, I)`` solves ``L^{-1} I`` by rows from the first: NaN in every row ``>= p``,
    so every entry of X)."""
    eye = jnp.broadcast_to(jnp.eye(c.shape[-1], dtype=c.dtype), c.shape)
    w = jnp.triu(P.tri_solve(c, eye, lower=lower, transpose=lower, conjugate=lower))
    return P.matmul(w, P.mH(w))


def cholesky_inverse_jvp(res, tc, *, lower):
    """``dX = K + K^H`` with ``K = -X dL L^H X`` (lower) or ``-X U^H dU X`` (upper). The seed's
    ``cholesky_inverse_jvp`` uses ``K = -X dL X L^H``, which is wrong (it assumes
    ``L^{-H} L^{-1} = L^{-1} L^{-H}``; torch 2.13 fails its own forward-AD gradcheck)."""
    c, x = res
    k = -(x @ tc @ _mH(c) @ x) if lower else -(x @ _mH(c) @ tc @ x)
    return k + _mH(k)


@_torch_convention
def cholesky_inverse_vjp(res, g, *, lower):
    """``-X (G + G^H) X L`` (lower) or ``-U X (G + G^H) X`` (upper) (seed
    ``cholesky_inverse_backward``; the factor is treated as dense, as torch does)."""
    c, x = res
    m = x @ (g + _mH(g)) @ x
    return (-(m @ c) if lower else -(c @ m),)


cholesky_inverse_op = define_op("cholesky_inverse", _cholesky_inverse_primal, cholesky_inverse_jvp, cholesky_inverse_vjp, lambda out, c, **_: (c, out))


# ----------------------------------------------------------------------------------------------
# Ops: Eigen, singular value and QR decompositions

def _eigh_primal(a):
    w, v = jnp.linalg.eigh(a)
    return w, v


def eigh_jvp(res, ta, **_):
    """``dP = V^H herm(dA) V``, ``dw = Re diag(dP)``, ``dV = V (F o dP)`` with
    ``F_ij = 1/(w_j - w_i)`` (0 for degenerate pairs, ``partials.gap_reciprocal``) (seed
    ``linalg_eig_jvp``, hermitian branch)."""
    w, v = res
    dp = _mH(v) @ _herm(ta) @ v
    return _diag(dp).real, v @ (P.gap_reciprocal(w).astype(dp.dtype) * dp)


@_torch_convention
def eigh_vjp(res, g, **_):
    """Seed ``linalg_eig_backward`` (hermitian): ``gA = herm(V (diag gw + F o V^H gV) V^H)``,
    ``F_ij = 1/(w_j - w_i)`` (0 for degenerate pairs), with torch's gauge check (complex)."""
    w, v = res
    gw, gv = g
    vhgv = _mH(v) @ gv
    if jnp.iscomplexobj(vhgv):
        P.check_gauge(_diag(vhgv).imag, "eigh")
    inner = _embed(gw.astype(vhgv.dtype)) + P.gap_reciprocal(w).astype(vhgv.dtype) * vhgv
    return (_herm(v @ inner @ _mH(v)),)


eigh_op = define_op("eigh", _eigh_primal, eigh_jvp, eigh_vjp, lambda out, a: out)


def eigvalsh_jvp(v, ta, **_):
    """``dw = Re diag(V^H dA V)``."""
    return _diag(_mH(v) @ ta @ v).real


@_torch_convention
def eigvalsh_vjp(v, g, **_):
    """``V diag(gw) V^H`` (seed ``linalg_eig_backward``, values only)."""
    return ((v * g.astype(v.dtype)[..., None, :]) @ _mH(v),)


# The values-only ops save vectors computed by the full op, so their second derivatives go through
# the full op's rules (finite at repeated values).
eigvalsh_op = define_op("eigvalsh", lambda a: jnp.linalg.eigh(a)[0], eigvalsh_jvp, eigvalsh_vjp, lambda out, a: eigh_op(a)[1])


def svd_jvp(res, ta, *, full_matrices):
    """Seed ``linalg_svd_jvp``: ``dP = U^H dA V``, ``dS = Re diag dP``,
    ``dU = U(sym(dP S) o F + i Im diag(dP)/(2S)) (+ (I - UU^H) dA V S^{-1})``, ``dV^H``
    likewise, ``F_ij = 1/(S_j^2 - S_i^2)`` (0 for degenerate pairs), ``1/S`` taken as 0 at
    ``S = 0``. ``full_matrices``: the extra columns get ``complement_tangent`` (torch: zeros)."""
    u, s, vh = res
    m, n = ta.shape[-2:]
    k = s.shape[-1]
    uk, vhk = u[..., :k], vh[..., :k, :]
    vk = _mH(vhk)
    dp = _mH(uk) @ ta @ vk
    ds = _diag(dp).real
    dp = dp - _embed(ds.astype(dp.dtype))
    f = P.gap_reciprocal(s, squared=True).astype(dp.dtype)
    sinv = P.safe_reciprocal(s, s == 0).astype(dp.dtype)
    sym = lambda x: x + _mH(x)  # noqa: E731
    sc = s.astype(dp.dtype)
    du = sym(dp * sc[..., None, :]) * f
    dvh = sym(dp * -sc[..., :, None]) * f
    if jnp.iscomplexobj(dp):
        half = _embed(_diag(dp) * (sinv / 2))
        du, dvh = du + half, dvh + half
    du, dvh = uk @ du, dvh @ vhk
    if m > k:
        x = ta @ (vk * sinv[..., None, :])
        du = du + x - uk @ (_mH(uk) @ x)
    if n > k:
        x = (_mH(uk) * sinv[..., :, None]) @ ta
        dvh = dvh + x - (x @ vk) @ vhk
    if full_matrices and m > k:
        du = P.complement_tangent(u, du)
    if full_matrices and n > k:
        dvh = _mH(P.complement_tangent(_mH(vh), _mH(dvh)))
    return du, ds, dvh


@_torch_convention
def svd_vjp(res, g, *, full_matrices):
    """Seed ``svd_backward``: ``gA = U[(skew(U^H gU) S + S skew(V^H gV)) o F + diag gS
    + i Im diag(U^H gU)/S] V^H`` plus the ``(I - UU^H) gU S^{-1} V^H`` (m > n) or
    ``U S^{-1} gV^H (I - VV^H)`` (m < n) terms; ``F_ij = 1/(S_j^2 - S_i^2)`` (0 for degenerate
    pairs), ``1/S`` taken as 0 at ``S = 0``; torch's gauge check (complex). ``full_matrices``:
    the extra columns' cotangent enters through ``complement_tangent``'s adjoint."""
    u, s, vh = res
    gu, gs, gvh = g
    m, n = u.shape[-2], vh.shape[-1]
    k = s.shape[-1]
    uk, vhk = u[..., :k], vh[..., :k, :]
    gu = P.complement_adjoint(u, gu, k) if full_matrices and m > k else gu[..., :k]
    gvh = _mH(P.complement_adjoint(_mH(vh), _mH(gvh), k)) if full_matrices and n > k else gvh[..., :k, :]
    skew = lambda x: x - _mH(x)  # noqa: E731
    uhgu, vhgv = skew(_mH(uk) @ gu), skew(vhk @ _mH(gvh))
    if jnp.iscomplexobj(uhgu):
        P.check_gauge(_diag(uhgu).imag + _diag(vhgv).imag, "svd")
    f = P.gap_reciprocal(s, squared=True).astype(uhgu.dtype)
    sinv = P.safe_reciprocal(s, s == 0).astype(uhgu.dtype)
    sc = s.astype(uhgu.dtype)
    ret = (uhgu * sc[..., None, :] + sc[..., :, None] * vhgv) * f + _embed(gs.astype(uhgu.dtype))
    if jnp.iscomplexobj(ret):
        ret = ret + _embed(_diag(uhgu) * (sinv / 2))
    if m > k:
        x = gu * sinv[..., None, :]
        return ((uk @ ret + x - uk @ (_mH(uk) @ x)) @ vhk,)
    if n > k:
        x = gvh * sinv[..., :, None]
        return (uk @ (ret @ vhk + x - (x @ _mH(vhk)) @ vhk),)
    return (uk @ ret @ vhk,)


# A NaN or infinite entry makes the whole SVD NaN (and so pinv and lstsq, through it): LAPACK
# leaves some singular vectors finite (a permutation) that belong to no limit; torch: all NaN.
svd_op = define_op("svd", lambda a, *, full_matrices: _all_nan_where(_nonfinite, a, lambda a: tuple(jnp.linalg.svd(a, full_matrices=full_matrices))), svd_jvp, svd_vjp, lambda out, a, **_: out)


def svdvals_jvp(res, ta, **_):
    """``dS = Re diag(U^H dA V)`` (seed ``linalg_svd_jvp``, values only)."""
    u, vh = res
    return _diag(_mH(u) @ ta @ _mH(vh)).real


@_torch_convention
def svdvals_vjp(res, g, **_):
    """``U diag(gS) V^H`` (seed ``svd_backward``'s svdvals fast path)."""
    u, vh = res
    return (u @ (g.astype(u.dtype)[..., :, None] * vh),)


svdvals_op = define_op("svdvals", lambda a: _all_nan_where(_nonfinite, a, lambda a: jnp.linalg.svd(a, full_matrices=False)[1]), svdvals_jvp, svdvals_vjp, lambda out, a: svd_op(a, full_matrices=False)[::2])
def _qr_primal(a, *, complete):
    """``jnp.linalg.qr``; under an ``Explicit`` mesh the matrix axes unsharded and the factoring
    run per shard of the leading (batch) axes (JAX's QR lowering builds its triangle mask
    unsharded beside a sharded batch and fails)."""
    def factor(x):
        return tuple(jnp.linalg.qr(x, "complete" if complete else "reduced"))

    a = unsharded_along(a, (a.ndim - 2, a.ndim - 1))
    sharding = explicit_sharding(a)
    if sharding is None or all(e is None for e in sharding.spec):
        return factor(a)
    spec = jax.sharding.PartitionSpec(*sharding.spec, *(None,) * (a.ndim - len(sharding.spec)))
    return jax.shard_map(factor, mesh=sharding.mesh, in_specs=spec, out_specs=(spec, spec))(a)


def _pad(x, size, axis):
    """Zero-pad ``x`` along ``axis`` (-1 or -2) to ``size``."""
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, widths)


def qr_jvp(res, ta, *, complete):
    """Seed ``linalg_qr_jvp``. m >= n: ``dR' = syminv(sym(Q^H dA R^{-1}))``,
    ``dQ = dA R^{-1} - Q dR'``, ``dR = dR' R``; m < n: the ``trilim``/``triliminv`` branch.
    ``complete`` with m > n (torch raises): the extra columns get ``complement_tangent``."""
    q, r = res
    m, n = ta.shape[-2:]
    if m >= n:
        qn, rn = q[..., :n], r[..., :n, :]
        da_rinv = P.tri_solve(rn, ta, lower=False, left=False)
        x = _mH(qn) @ da_rinv
        dr = P.half_diagonal(jnp.triu(x + _mH(x)))
        dq = da_rinv - qn @ dr
        dr = dr @ rn
        if complete and m > n:
            dq, dr = P.complement_tangent(q, dq), _pad(dr, m, -2)
        return dq, dr
    qh_da = _mH(q) @ ta
    x = P.tri_solve(r[..., :m], qh_da[..., :m], lower=False, left=False)
    d = _diag(x)
    trilim = jnp.tril(x, -1) + _embed(d - d.real.astype(d.dtype))
    dq = P.half_diagonal(trilim - _mH(trilim))
    return q @ dq, qh_da - dq @ r


@_torch_convention
def qr_vjp(res, g, *, complete):
    """Seed ``linalg_qr_backward`` with ``M = gR R^H - Q^H gQ``. m >= n:
    ``gA = (Q syminvadj(triu M) + gQ) R^{-H}``; m < n: ``gA = [Q trilImInvAdjSkew(-M) R_1^{-H}, 0]
    + Q gR``. ``complete`` with m > n: the extra columns' cotangent enters through
    ``complement_tangent``'s adjoint (torch raises)."""
    q, r = res
    gq, gr = g
    m, n = q.shape[-2], r.shape[-1]
    if m >= n:
        if complete and m > n:
            gq, gr, q, r = P.complement_adjoint(q, gq, n), gr[..., :n, :], q[..., :n], r[..., :n, :]
        mm = gr @ _mH(r) - _mH(q) @ gq
        y = jnp.triu(mm)
        ga = q @ P.half_diagonal(y + _mH(y)) + gq
        return (P.tri_solve(r, ga, lower=False, left=False, transpose=True, conjugate=True),)
    mm = gr @ _mH(r) - _mH(q) @ gq
    y = P.half_diagonal(jnp.tril(-mm - _mH(-mm)))
    ga = P.tri_solve(r[..., :m], q @ y, lower=False, left=False, transpose=True, conjugate=True)
    return (jnp.concatenate([ga, jnp.zeros(ga.shape[:-1] + (n - m,), ga.dtype)], axis=-1) + q @ gr,)


qr_op = define_op("qr", _qr_primal, qr_jvp, qr_vjp, lambda out, a, **_: out, batch=leading_batch_rule(_qr_primal))


def eig_jvp(res, ta, **_):
    """Seed ``linalg_eig_jvp``: ``dP = V^{-1} dA V``, ``dw = diag dP``,
    ``dX = V (F o dP)`` (``F_ij = 1/(w_j - w_i)``, 0 for degenerate pairs),
    ``dV = dX - V Re diag(V^H dX)`` (unit-norm eigenvectors)."""
    w, v = res
    dp = jnp.linalg.solve(v, ta.astype(v.dtype) @ v)
    dx = v @ (P.gap_reciprocal(w) * dp)
    return _diag(dp), dx - v * _diag(_mH(v) @ dx).real.astype(v.dtype)[..., None, :]


@_torch_convention
def eig_vjp(res, g, **_):
    """Seed ``linalg_eig_backward``: ``gA = V^{-H} (diag gw + (V^H gV - V^H V Re diag(V^H gV))
    o conj(F)) V^H`` with ``F_ij = 1/(w_j - w_i)`` (0 for degenerate pairs) and torch's gauge
    check."""
    w, v = res
    gw, gv = g
    vhgv = _mH(v) @ gv
    d = _diag(vhgv)
    P.check_gauge(d.imag, "eig")
    vhgv = vhgv - _mH(v) @ (v * d.real.astype(v.dtype)[..., None, :])
    inner = vhgv * jnp.conj(P.gap_reciprocal(w)) + _embed(gw)
    return (jnp.linalg.solve(_mH(v), inner @ _mH(v)),)


eig_op = define_op("eig", lambda a: tuple(jnp.linalg.eig(a)), eig_jvp, eig_vjp, lambda out, a: out)


def eigvals_jvp(v, ta, **_):
    """``dw = diag(V^{-1} dA V)``."""
    return _diag(jnp.linalg.solve(v, ta.astype(v.dtype) @ v))


@_torch_convention
def eigvals_vjp(v, g, **_):
    """``V^{-H} diag(gw) V^H`` (seed ``linalg_eig_backward``, values only)."""
    return (jnp.linalg.solve(_mH(v), g[..., :, None] * _mH(v)),)


eigvals_op = define_op("eigvals", lambda a: jnp.linalg.eig(a)[0], eigvals_jvp, eigvals_vjp, lambda out, a: eig_op(a)[1])


# ----------------------------------------------------------------------------------------------
# Ops: Pseudo-inverse and least squares

def _pseudo_inverse(a, rtol):
    """NumPy's pseudo-inverse, as ``jax.numpy.linalg.pinv`` computes it (the same operations, so
    the same values) but not through its ``custom_jvp``, whose ``rtol`` is a non-differentiable
    argument that must be static under ``jax_custom_jvp3`` (jax 0.11), where ours is an array:
    ``V diag(1/s) U^H`` from the SVD of ``conj(a)``, singular values at or below ``rtol max(s)``
    dropped."""
    m, n = a.shape[-2:]
    if m == 0 or n == 0:
        return jnp.zeros(a.shape[:-2] + (n, m), a.dtype)
    u, s, vh = jnp.linalg.svd(jnp.conj(a), full_matrices=False)
    # rtol broadcasts against the batch dims explicitly (valid under jax_numpy_rank_promotion="raise")
    cutoff = jnp.broadcast_to(jnp.asarray(rtol)[..., None], s.shape[:-1] + (1,)) * s[..., :1]
    s = jnp.where(s > cutoff, s, jnp.inf).astype(u.dtype)
    return jnp.matmul(_mT(vh), _mT(u) / s[..., None], precision=lax.Precision.HIGHEST).astype(a.dtype)


# ``rtol`` is an array argument (a number, an array over the batch, a tracer): the cutoff moves
# no singular value across it under a small change, so its derivative is 0 (the formulas
# ignore its tangent and give it no cotangent).
def _pinv_primal(a, rtol):
    return _all_nan_where(_nonfinite, a, lambda a: _pseudo_inverse(a, rtol))


def pinv_jvp(res, ta, trtol):
    """Seed ``pinv_jvp`` (``partials.pinv_tangent``; valid where the rank is locally constant);
    the cutoff ``rtol`` has derivative 0."""
    a, x = res
    return None if ta is None else P.pinv_tangent(a, x, ta)


@_torch_convention
def pinv_vjp(res, g):
    """Seed ``pinv_backward`` (``partials.pinv_adjoint``); none for ``rtol``."""
    a, x = res
    return P.pinv_adjoint(a, x, g), None


pinv_op = define_op("pinv", _pinv_primal, pinv_jvp, pinv_vjp, lambda out, a, rtol: (a, out))


def lstsq_jvp(res, ta, tb, trtol):
    """``dX = d(A^+) B + A^+ dB`` (seed ``linalg_lstsq_jvp``); ``rtol``: derivative 0."""
    a, x, b = res
    return P.terms(None if ta is None else P.pinv_tangent(a, x, ta) @ b, None if tb is None else x @ tb)


@_torch_convention
def lstsq_vjp(res, g):
    """``gA = pinv_backward(gX B^H)``, ``gB = A^{+H} gX`` (seed ``linalg_lstsq_backward``, whose
    translated gB line is damaged; this is upstream's); none for ``rtol``."""
    a, x, b = res
    return P.pinv_adjoint(a, x, g @ _mH(b)), _mH(x) @ g, None


lstsq_op = define_op("lstsq", lambda a, b, rtol: _pinv_primal(a, rtol) @ b, lstsq_jvp, lstsq_vjp, lambda out, a, b, rtol: (a, pinv_op(a, rtol), b))


# ----------------------------------------------------------------------------------------------
# Ops: LU

def _save_lu(out, a, **_):
    lu, _, perm = lax.linalg.lu(a)
    return lu, perm


def _permutation_matrix(perm, dtype):
    """``P`` with ``P^T A = A[perm]``."""
    return P.mT(P.permutation_rows(perm, dtype))


def _lu_primal(a):
    lu_, _, perm = lax.linalg.lu(a)
    return (_permutation_matrix(perm, a.dtype), *P.lu_parts(lu_))


def _lu_tangent(res, ta):
    lu, perm = res
    lower, upper = P.lu_parts(lu)
    return P.lu_tangent(lower, upper, P.permute_rows(ta, perm))


def lu_jvp(res, ta, **_):
    """``(dP, dL, dU) = (0, ...)`` of ``A = P L U`` (seed ``linalg_lu_jvp``)."""
    dl, du = _lu_tangent(res, ta)
    return jnp.zeros(ta.shape[:-1] + (ta.shape[-2],), ta.dtype), dl, du


def _lu_cotangent(res, gl, gu):
    lu, perm = res
    lower, upper = P.lu_parts(lu)
    return P.unpermute_rows(P.lu_adjoint(lower, upper, gl, gu), perm)


@_torch_convention
def lu_vjp(res, g, **_):
    """Seed ``linalg_lu_backward`` (square, wide and tall); P has no derivative."""
    _, gl, gu = g
    return (_lu_cotangent(res, gl, gu),)


lu_op = define_op("lu", _lu_primal, lu_jvp, lu_vjp, _save_lu)


def lu_factor_jvp(res, ta, **_):
    """The packed ``tril(dL, -1) + triu(dU)`` (seed ``lu_factor_ex_jvp``); pivots: no tangent."""
    return P.pack_lu(*_lu_tangent(res, ta)), None


@_torch_convention
def lu_factor_vjp(res, g, **_):
    """Seed ``lu_factor_ex_backward``: unpack, then ``linalg_lu_backward``."""
    glu, _ = g
    k = min(glu.shape[-2:])
    return (_lu_cotangent(res, *P.unpack_lu(glu, k)),)


lu_factor_op = define_op("lu_factor", lambda a: tuple(P.lu_factor(a)), lu_factor_jvp, lu_factor_vjp, _save_lu)


def _save_lu_solve(out, lu, piv, b, **_):
    return lu, piv, lax.linalg.lu_pivots_to_permutation(piv, lu.shape[-2]), out


def _lu_matrix_tangent(lu, tlu):
    """``dA' = dL U + L dU`` (``A' = P^T A = L U``) from a tangent of the packed factors."""
    lower, upper = P.lu_parts(lu)
    k = lower.shape[-1]
    return jnp.tril(tlu[..., :, :k], -1) @ upper + lower @ jnp.triu(tlu[..., :k, :])


def lu_solve_jvp(res, tlu, tpiv, tb, *, trans):
    """``X = op(A)^{-1} B`` with ``A = P L U``: ``dX = op(A)^{-1}(dB - op(dA) X)``,
    ``dA = P (dL U + L dU)`` (seed ``linalg_lu_solve_jvp``)."""
    lu, piv, perm, x = res
    dop = None
    if tlu is not None:
        da = P.unpermute_rows(_lu_matrix_tangent(lu, tlu), perm)
        dop = da if trans == 0 else (_mT(da) if trans == 1 else _mH(da))
    rhs = P.terms(tb, None if dop is None else -(dop @ x))
    return P.lu_solve(lu, piv, rhs, trans=trans)


@_torch_convention
def lu_solve_vjp(res, g, *, trans):
    """Seed ``linalg_lu_solve_LU`` in its order of products (``A = P L U``, packed factors'
    cotangent ``tril(gL, -1) + triu(gU)``). ``trans`` 0: ``W = U^{-H} g``, ``gB = P L^{-H} W``,
    ``gR = -W X^H``, ``gL = L^{-H} gR U^H``, ``gU = gR``. ``trans`` 2 (``A^H``; 1: ``A^T``, with
    g and X conjugated): ``V = L^{-1} P^T g``, ``gB = A^{-1} g = U^{-1} V``,
    ``gR = -P^T X g^H P L^{-H} = -P^T X V^H``, ``gL = gR``, ``gU = L^H gR U^{-H} =
    -L^H P^T X gB^H``. Each entry then involves only the factor entries and rows of X it depends
    on: a NaN pivot of U leaves the entries of ``triu(gR)`` finite that torch's are
    (``P^T gA = -L^{-H} U^{-H} g X^H`` formed first and multiplied back by ``L^H`` spreads it)."""
    lu, _, perm, x = res
    lower, upper = P.lu_parts(lu)
    solve_h = functools.partial(P.tri_solve, lu, transpose=True, conjugate=True)  # op(T) = T^H
    if trans == 0:
        w = solve_h(g, lower=False)
        gb = P.unpermute_rows(solve_h(w, lower=True, unit=True), perm)
        gr = -(w @ _mH(x))
        return jnp.tril(solve_h(gr @ _mH(upper), lower=True, unit=True), -1) + jnp.triu(gr), None, gb
    g, x = (jnp.conj(g), jnp.conj(x)) if trans == 1 else (g, x)
    v = P.tri_solve(lu, P.permute_rows(g, perm), lower=True, unit=True)  # L^{-1} P^T g
    gb = P.tri_solve(lu, v, lower=False)  # A^{-1} g
    px = -P.permute_rows(x, perm)
    gr = px @ _mH(v)  # -P^T X g^H P L^{-H}
    gu = jnp.triu((_mH(lower) @ px) @ _mH(gb))  # L^H gR U^{-H} = -L^H P^T X gB^H
    return jnp.tril(gr, -1) + gu, None, jnp.conj(gb) if trans == 1 else gb


lu_solve_op = define_op("lu_solve", lambda lu, piv, b, *, trans: P.lu_solve(lu, piv, b, trans), lu_solve_jvp, lu_solve_vjp, _save_lu_solve)


def _lu_unpack_primal(lu, piv, *, k):
    """The parts are cut out of the matrix: under an ``Explicit`` mesh its two axes unsharded
    first (leading batch axes stay as they are)."""
    perm = lax.linalg.lu_pivots_to_permutation(piv, lu.shape[-2])
    return (_permutation_matrix(perm, lu.dtype), *P.lu_parts(unsharded_along(lu, (lu.ndim - 2, lu.ndim - 1))))


def lu_unpack_jvp(res, tlu, tpiv, *, k):
    """``(0, tril(dLU, -1), triu(dLU))`` restricted to L's and U's shapes (the unpacking is
    linear; the matrix axes unsharded under an ``Explicit`` mesh, as the primal's)."""
    m, n = tlu.shape[-2:]
    tlu = unsharded_along(tlu, (tlu.ndim - 2, tlu.ndim - 1))
    return jnp.zeros(tlu.shape[:-2] + (m, m), tlu.dtype), jnp.tril(tlu[..., :, :k], -1), jnp.triu(tlu[..., :k, :])


def lu_unpack_vjp(res, g, *, k):
    """``tril(gL, -1) + triu(gU)`` packed (seed ``lu_unpack_backward``)."""
    _, gl, gu = g
    return P.pack_lu(gl, gu), None


lu_unpack_op = define_op("lu_unpack", _lu_unpack_primal, lu_unpack_jvp, lu_unpack_vjp, lambda out, lu, piv, **_: ())


# ----------------------------------------------------------------------------------------------
# Ops: Matrix exponential, Householder products


def _block_exp_corner(a, e):
    """``scaling_and_squaring_expm([[A, E], [0, A]])[:n, n:]``: the Frechet derivative of expm at A along E (seed
    ``differential_analytic_matrix_function``)."""

    n = a.shape[-1]
    top = jnp.concatenate([a, e], axis=-1)
    bottom = jnp.concatenate([jnp.zeros_like(a), a], axis=-1)
    return scaling_and_squaring_expm(jnp.concatenate([top, bottom], axis=-2))[..., :n, n:]


def expm_jvp(a, ta, **_):
    """``scaling_and_squaring_expm([[A, dA], [0, A]])_12`` (seed ``linalg_matrix_exp_differential``)."""
    return _block_exp_corner(a, ta)


def expm_vjp(a, ct, **_):
    """``scaling_and_squaring_expm([[A^T, ct], [0, A^T]])_12`` (seed ``linalg_matrix_exp_differential`` with
    ``adjoint=True``, JAX convention: transpose, not conjugate transpose)."""
    return (_block_exp_corner(_mT(a), ct),)


expm_op = define_op("expm", scaling_and_squaring_expm, expm_jvp, expm_vjp)


def _householder_primal(a, tau):
    return lax.linalg.householder_product(a, tau)


def _reflector_jvp(a, tau, c, ta, ttau, tc, steps):
    """Product rule along the reflector sequence: ``Y <- S Y``, ``dY <- dS Y + S dY`` with
    ``S = I - t v v^H``, ``dS = -dt v v^H - t (dv v^H + v dv^H)``."""
    y, dy = c, tc
    for j, conjugate in steps:
        v = P.reflector(a, j)
        t = jnp.conj(tau[..., j]) if conjugate else tau[..., j]
        new_y = P.apply_reflector(t, v, y, j)
        terms = [] if dy is None else [P.apply_reflector(t, v, dy, j)]
        vh_y = jnp.conj(v)[..., None, :] @ y
        if ttau is not None:
            dt = jnp.conj(ttau[..., j]) if conjugate else ttau[..., j]
            terms.append(-dt[..., None, None] * (v[..., :, None] * vh_y))
        if ta is not None:
            dv = P.reflector(ta, j) - P.with_rank(jnp.where(jnp.arange(v.shape[-1]) == j, 1, 0).astype(v.dtype), v.ndim)
            dvh_y = jnp.conj(dv)[..., None, :] @ y
            terms.append(-t[..., None, None] * (dv[..., :, None] * vh_y + v[..., :, None] * dvh_y))
        y, dy = new_y, (P.terms(*terms) if terms else None)
    return dy


def householder_product_jvp(res, ta, ttau, **_):
    """Seed ``householder_product_jvp``: ``dQ = sum_i H_1..H_{i-1} dH_i H_{i+1}..H_k`` (first n
    columns), by the product rule along ``Q = H_1 (H_2 (... (H_k I_{m x n})))``."""
    a, tau, _ = res
    m, n = a.shape[-2:]
    eye = jnp.broadcast_to(jnp.eye(m, n, dtype=a.dtype), a.shape)
    return _reflector_jvp(a, tau, eye, ta, ttau, None, P.reflector_sequence(a, tau, adjoint=False, reverse=True))


def _reflector_adjoint(a, tau, out, g, steps):
    """Reverse pass along the reflector sequence without stored states (seed
    ``householder_product_backward``): ``Y_before = S^{-1} Y_after`` with
    ``S^{-1} = I - s v v^H``, ``s = t / (t |v|^2 - 1)``; ``gS = gY Y_before^H`` gives
    ``gt = -v^H gS v`` and ``gv = -conj(t) gS v - t gS^H v``; ``gY <- S^H gY``. Torch's
    (Hermitian) convention."""
    y, gy = out, g
    ga = jnp.zeros(a.shape, P.promoted_dtype(a, g))
    gtau = jnp.zeros(tau.shape, P.promoted_dtype(tau, g))
    rows = jnp.arange(a.shape[-2])
    for j, conjugate in reversed(steps):
        v = P.reflector(a, j)
        t = jnp.conj(tau[..., j]) if conjugate else tau[..., j]
        norm2 = jnp.sum((v * jnp.conj(v)).real, axis=-1)
        y = P.apply_reflector(t / (t * norm2.astype(t.dtype) - 1), v, y, j)
        gs = gy @ _mH(y)
        gs_v = (gs @ v[..., :, None])[..., 0]
        gt = -jnp.sum(jnp.conj(v) * gs_v, axis=-1)
        gv = -(jnp.conj(t)[..., None] * gs_v) - t[..., None] * (_mH(gs) @ v[..., :, None])[..., 0]
        ga = ga.at[..., :, j].add(jnp.where(rows > j, gv, 0))
        gtau = gtau.at[..., j].add(jnp.conj(gt) if conjugate else gt)
        gy = P.apply_reflector(jnp.conj(t), v, gy, j)
    return ga, gtau, gy


@_torch_convention
def householder_product_vjp(res, g, **_):
    """Seed ``householder_product_backward``, starting from the saved output."""
    a, tau, q = res
    ga, gtau, _ = _reflector_adjoint(a, tau, q, g, P.reflector_sequence(a, tau, adjoint=False, reverse=True))
    return ga, gtau


householder_product_op = define_op("householder_product", _householder_primal, householder_product_jvp, householder_product_vjp, lambda out, a, tau: (a, tau, out))


def _ormqr_primal(a, tau, c, *, left, transpose):
    """LAPACK's ormqr; for an empty product (no entry of C, or no reflector: Q = I) C itself, the
    kernel not called: on jaxlib 0.11.2's CPU the ``empty`` check's derivative program of ormqr
    died of an integer division by zero (SIGFPE, in XLA's library) on such samples; with C
    returned it passes. (LAPACK's ormqr itself, eagerly or jitted, returned those shapes.)"""
    if c.size == 0 or tau.shape[-1] == 0:
        return c
    return lax.linalg.ormqr(a, tau, c, left=left, transpose=transpose)


def ormqr_jvp(res, ta, ttau, tc, *, left, transpose):
    """``d(op(Q) C)`` (seed: the derivative ``ormqr_backward`` transposes): the product rule
    along the reflectors applied to C; ``C op(Q) = (op(Q)^H C^H)^H``."""
    a, tau, c, _ = res
    if left:
        steps = P.reflector_sequence(a, tau, adjoint=transpose, reverse=not transpose)
        return _reflector_jvp(a, tau, c, ta, ttau, tc, steps)
    steps = P.reflector_sequence(a, tau, adjoint=not transpose, reverse=transpose)
    return _mH(_reflector_jvp(a, tau, _mH(c), ta, ttau, None if tc is None else _mH(tc), steps))


@_torch_convention
def ormqr_vjp(res, g, *, left, transpose):
    """Seed ``ormqr_backward``: the reverse pass along the reflectors applied to C (``gC`` is
    ``op(Q)^H g``, i.e. ormqr with the opposite ``transpose``)."""
    a, tau, c, out = res
    if left:
        steps = P.reflector_sequence(a, tau, adjoint=transpose, reverse=not transpose)
        return _reflector_adjoint(a, tau, out, g, steps)
    steps = P.reflector_sequence(a, tau, adjoint=not transpose, reverse=transpose)
    ga, gtau, gc = _reflector_adjoint(a, tau, _mH(out), _mH(g), steps)
    return ga, gtau, _mH(gc)


ormqr_op = define_op("ormqr", _ormqr_primal, ormqr_jvp, ormqr_vjp, lambda out, a, tau, c, **_: (a, tau, c, out))


# ----------------------------------------------------------------------------------------------
# Public functions: Products

def matmul(a, b, precision=None):
    """``jax.numpy.matmul`` (1-D operands promoted as NumPy does, batch dims broadcast), with
    seed ``mm_mat1_backward`` / ``mm_mat2_backward`` (complex included); ``precision`` (JAX's,
    hashable; None: the default) applies to the forward and derivative products alike."""
    a, b = _same_dtype(V.array("matmul", "a", a), V.array("matmul", "b", b))
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: operands must not be scalars (use multiply)")
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise V.ShapeTypeError(f"matmul: contracting dimensions differ ({a.shape} @ {b.shape})")
    V.broadcast("matmul", a=np.empty(a2.shape[:-2] + (1, 1), bool), b=np.empty(b2.shape[:-2] + (1, 1), bool))
    out = matmul_op(a2, b2) if precision is None else matmul_at_op(a2, b2, precision=precision)
    if b.ndim == 1:
        out = out[..., 0]
    if a.ndim == 1:
        out = out[..., 0, :] if b.ndim > 1 else out[..., 0]
    return out


@exported_as("jaxrules.nn.linear")
def linear(input: ArrayLike, weight: ArrayLike, bias: ArrayLike | None = None) -> Array:  # noqa: A002 - torch's argument name
    """``input @ weight^T + bias`` with ``weight`` of shape (out, in) as torch (not flax's
    (in, out)); VJP ``g_input = g W``, ``g_W = g^T input``, ``g_bias = sum g`` (summed over the
    batch dims). Mirrors ``torch.nn.functional.linear``; its double backward (JAX's derivative
    of the bilinear VJP formula) is seed ``linear_double_backward``.

    Args:
        input: the input, (..., in_features) (integer and boolean input is promoted to float).
        weight: the weight, (out_features, in_features).
        bias: the bias, (out_features,); None adds nothing.

    Returns:
        (..., out_features), in the common dtype of the three arguments.

    Raises:
        ValueError: when ``weight`` is not 2-D, ``input``'s last axis is not in_features or
            ``bias`` is not (out_features,).
    """
    x, w = V.array("linear", "input", input), _matrix("linear", "weight", weight)
    if w.ndim != 2:
        raise ValueError(f"linear: weight must have shape (out_features, in_features), got {w.shape}")
    if x.ndim == 0 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"linear: input's last dimension must be in_features={w.shape[1]}, got {x.shape}")
    b = jnp.zeros(w.shape[0], w.dtype) if bias is None else V.array("linear", "bias", bias)
    if b.shape != (w.shape[0],):
        raise ValueError(f"linear: bias must have shape ({w.shape[0]},), got {b.shape}")
    x, w, b = _same_dtype(x, w, b)
    return linear_op(x, w, b)


# ----------------------------------------------------------------------------------------------
# Public functions: Inverse, determinants

@exported_as("jaxrules.numpy.linalg.inv", "jaxrules.linalg.inv")
def inv(a: ArrayLike) -> Array:
    """The inverse ``X = A^{-1}``; JVP ``dX = -X dA X``, VJP ``gA = -X^T g X^T`` (``^H`` for
    complex, torch's convention). Mirrors ``jax.numpy.linalg.inv`` (``torch.linalg.inv``).

    Args:
        a: square matrices (..., n, n) (integer and boolean input is promoted to float).

    Returns:
        The inverses, of ``a``'s shape (inf or NaN where A is singular, as jax.numpy).

    Raises:
        ValueError: when ``a`` has rank < 2 or is not square.
    """
    return inv_op(_matrix("inv", "a", a, square=True))


@exported_as("jaxrules.numpy.linalg.matrix_power", "jaxrules.linalg.matrix_power")
def matrix_power(a: ArrayLike, n: int) -> Array:
    """``A^n`` for an integer ``n``: binary exponentiation by ``matmul`` (about ``2 log2 n``
    products, in torch's order), ``(A^{-1})^{|n|}`` by ``inv`` for negative ``n``, the identity for
    ``n = 0``. An
    explicit composition of ops with JVP/VJP formulas, as torch's ``linalg_matrix_power`` (a
    composite op): JVP ``d(A^n) = sum_k A^k dA A^{n-1-k}``, here through each product's seed
    ``mm_mat1_backward`` / ``mm_mat2_backward`` and ``inv``'s ``-X dA X``. Mirrors
    ``jax.numpy.linalg.matrix_power`` (``torch.linalg.matrix_power``).

    Args:
        a: square matrices (..., m, m). Integer and boolean input keeps its dtype for ``n >= 0``
            (jax.numpy's result; no derivative) and is promoted to float for ``n < 0``.
        n: the exponent, a Python or NumPy integer (static, as jax.numpy's).

    Returns:
        ``A^n``, of ``a``'s shape (inf or NaN entries for ``n < 0`` where A is singular, as
        ``inv``).

    Raises:
        TypeError: when ``n`` is not an integer.
        ValueError: when ``a`` has rank < 2 or is not square.
    """
    op = "matrix_power"
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"{op}: n must be an integer, got {type(n).__name__} {n!r}")
    n = int(n)
    x = _matrix(op, "a", a, square=True, inexact=n < 0)
    if not jnp.issubdtype(x.dtype, jnp.inexact):  # nothing to differentiate: jax.numpy's, which keeps the dtype
        return jnp.linalg.matrix_power(x, n)
    if n == 0:
        return jnp.broadcast_to(jnp.eye(x.shape[-1], dtype=x.dtype), x.shape)
    base, power, result = (inv_op(x) if n < 0 else x), abs(n), None
    if power == 3:  # torch's (A A) A: with infinite entries the association decides where NaN appears
        return matmul_op(matmul_op(base, base), base)
    while True:  # torch's binary decomposition: result = result z, z = z z
        if power & 1:
            result = base if result is None else matmul_op(result, base)
        power >>= 1
        if not power:
            return result
        base = matmul_op(base, base)


@exported_as("jaxrules.linalg.adjugate")
def adjugate(a: ArrayLike) -> Array:
    """The adjugate ``adj(A)`` (``det(A) A^{-1}`` when A is invertible), defined and
    differentiable at every rank: derivatives through the SVD ``A = U S V^H`` with the singular
    vectors held fixed (``jvp_rules.adjugate_jvp``), finite at singular matrices. Neither torch
    nor jax.numpy has it as a function (torch's ``linalg_det_backward`` computes it inside).

    Args:
        a: square matrices (..., n, n) (integer and boolean input is promoted to float).

    Returns:
        The adjugates, of ``a``'s shape.

    Raises:
        ValueError: when ``a`` has rank < 2 or is not square.
    """
    return adjugate_op(_matrix("adjugate", "a", a, square=True))


@exported_as("jaxrules.numpy.linalg.det", "jaxrules.linalg.det")
def det(a: ArrayLike) -> Array:
    """The determinant; JVP ``d det = tr(adj(A) dA)``, VJP ``gA = g adj(A)^T`` (seed
    ``linalg_det_jvp`` / ``linalg_det_backward``). Mirrors ``jax.numpy.linalg.det``
    (``torch.linalg.det``). At singular A the gradient is the adjugate (torch's default path
    returns 0) and second derivatives are finite (through ``adjugate``'s rule; JAX gives NaN in
    10-35% of random singular cases).

    Args:
        a: square matrices (..., n, n) (integer and boolean input is promoted to float).

    Returns:
        The determinants, of shape ``a.shape[:-2]``.

    Raises:
        ValueError: when ``a`` has rank < 2 or is not square.

    Example:
        >>> import jax, jax.numpy as jnp, jaxrules.numpy as rnp
        >>> a = jnp.array([[1.0, 2.0], [2.0, 4.0]])  # singular
        >>> print(rnp.linalg.det(a) == 0, jax.grad(rnp.linalg.det)(a).round(4).tolist())  # adj(a)^T; torch's: 0
        True [[4.0, -2.0], [-2.0, 1.0]]
    """
    return det_op(_matrix("det", "a", a, square=True))


@exported_as("jaxrules.linalg.slogdet")
def slogdet(a: ArrayLike) -> tuple[Array, Array]:
    """``(sign, log|det A|)``; JVP ``d logabsdet = Re tr(A^{-1} dA)``, ``d sign = i Im
    tr(A^{-1} dA) sign`` (complex), VJP ``gA = g_logabsdet A^{-T}`` plus the complex sign term
    (seed ``slogdet_jvp`` / ``slogdet_backward``). Mirrors ``jax.numpy.linalg.slogdet``
    (``torch.linalg.slogdet``).

    Args:
        a: square matrices (..., n, n) (integer and boolean input is promoted to float).

    Returns:
        jax.numpy's ``SlogdetResult(sign, logabsdet)``, each of shape ``a.shape[:-2]``: sign 0
        and logabsdet -inf where A is singular.

    Raises:
        ValueError: when ``a`` has rank < 2 or is not square.
    """
    sign, logabsdet = slogdet_op(_matrix("slogdet", "a", a, square=True))
    return type(_jnp_slogdet(jnp.eye(1)))(sign, logabsdet)


# ----------------------------------------------------------------------------------------------
# Public functions: Solves

def _solve_with(op_name, bound_op, a, b, left):
    """Shared by the solves: validate, make a 1-D ``b`` a column (``left``) or row, broadcast the
    batch dims, call ``bound_op(a, b)`` and restore the vector shape."""
    a = _matrix(op_name, "a", a, square=True)
    b = V.array(op_name, "b", b)
    a, b = _same_dtype(a, b)
    vector = b.ndim == 1
    b2 = b[:, None] if vector and left else (b[None, :] if vector else b)
    axis = -2 if left else -1
    if b2.ndim < 2 or b2.shape[axis] != a.shape[-1]:
        raise ValueError(f"{op_name}: b of shape {b.shape} does not match a of shape {a.shape}")
    x = bound_op(*_broadcast_batch(op_name, a, b2, 2))
    return x[..., 0] if vector and left else (x[..., 0, :] if vector else x)


def _solve(op, a, b, left):
    return _solve_with(op, lambda a, b: solve_op(a, b, left=left), a, b, left)


@exported_as("jaxrules.numpy.linalg.solve")
def solve(a: ArrayLike, b: ArrayLike) -> Array:
    """Solves ``A X = B``; JVP ``dX = A^{-1} (dB - dA X)``, VJP ``gB = A^{-T} g``,
    ``gA = -gB X^T`` (seed ``linalg_solve_jvp`` / ``linalg_solve_backward``, reusing the LU
    factors of the forward). Mirrors ``jax.numpy.linalg.solve`` (NumPy 2's rule: ``b`` is a
    vector only when it is 1-D).

    Args:
        a: square matrices (..., n, n) (integer and boolean input is promoted to float).
        b: right-hand sides (..., n, k), or one vector (n,); batch dims broadcast with ``a``'s.

    Returns:
        X, of shape (..., n, k) (or (..., n) for a 1-D ``b``), in the common dtype.

    Raises:
        ValueError: when ``a`` is not square or the shapes do not match or broadcast.
    """
    return _solve("solve", a, b, True)


@exported_as("jaxrules.linalg.solve")
def torch_solve(A: ArrayLike, B: ArrayLike, *, left: bool = True) -> Array:  # noqa: N803 - torch's argument names
    """Solves ``A X = B`` (``left``) or ``X A = B``, with ``solve``'s derivatives
    (``dX = A^{-1} (dB - dA X)`` on the left). Mirrors ``torch.linalg.solve``: ``B`` is a batch
    of vectors when it is 1-D or its shape is ``A.shape[:-1]`` (torch's rule).

    Args:
        A: square matrices (..., n, n) (integer and boolean input is promoted to float).
        B: right-hand sides (..., n, k), or vectors (n,) or (..., n) as above; for
            ``left=False``, (..., k, n) or a 1-D row (n,) (which torch refuses).
        left: solve ``A X = B`` when True, ``X A = B`` when False.

    Returns:
        X, of ``B``'s shape up to the broadcast batch dims, in the common dtype.

    Raises:
        ValueError: when ``A`` is not square or the shapes do not match or broadcast.
    """
    a, b = _matrix("solve", "A", A), V.array("solve", "B", B)
    if left and b.ndim >= 2 and b.shape == a.shape[:-1]:  # torch's batch of vectors
        return _solve("solve", a, b[..., None], True)[..., 0]
    return _solve("solve", a, b, bool(left))


def _solve_triangular(op, a, b, *, lower, unit, trans, left):
    transpose, conjugate = _tri_flags(op, trans)
    flags = dict(lower=bool(lower), unit=bool(unit), transpose=transpose, conjugate=conjugate, left=left)
    return _solve_with(op, lambda a, b: solve_triangular_op(a, b, **flags), a, b, left)


@exported_as("jaxrules.scipy.linalg.solve_triangular")
def solve_triangular(a: ArrayLike, b: ArrayLike, trans: int | str = 0, lower: bool = False, unit_diagonal: bool = False, overwrite_b: bool = False, debug: None = None, check_finite: bool = True) -> Array:
    """Solves ``op(A) X = B`` reading one triangle of A; JVP ``dX = op(A)^{-1} (dB - op(dA) X)``
    on that triangle, VJP ``gB = op(A)^{-T} g``, ``gA`` the triangle of ``-gB X^T`` (strictly
    below/above the diagonal when ``unit_diagonal``; seed ``linalg_solve_triangular_forward_AD``
    / ``linalg_solve_triangular_backward``). Mirrors ``jax.scipy.linalg.solve_triangular``.

    Args:
        a: triangular matrices (..., n, n); only the triangle ``lower`` names is read.
        b: right-hand sides (..., n, k), or one vector (n,); batch dims broadcast.
        trans: ``op``: 0 or ``"N"`` (A), 1 or ``"T"`` (A^T), 2 or ``"C"`` (A^H).
        lower: read the lower triangle (True) or the upper one (False).
        unit_diagonal: take the diagonal as ones (it is not read).
        overwrite_b: SciPy's; ignored (as JAX).
        debug: SciPy's; ignored (as JAX).
        check_finite: SciPy's; ignored (as JAX).

    Returns:
        X, of shape (..., n, k) (or (n,) for a 1-D ``b``), in the common dtype.

    Raises:
        ValueError: when ``a`` is not square, the shapes do not match or ``trans`` is invalid.
    """
    del overwrite_b, debug, check_finite
    return _solve_triangular("solve_triangular", a, b, lower=lower, unit=unit_diagonal, trans=trans, left=True)


@exported_as("jaxrules.linalg.solve_triangular")
def torch_solve_triangular(A: ArrayLike, B: ArrayLike, *, upper: bool, left: bool = True, unitriangular: bool = False) -> Array:  # noqa: N803
    """Solves ``A X = B`` (``left``) or ``X A = B`` reading one triangle of A, with
    ``solve_triangular``'s derivatives (``dX = A^{-1} (dB - dA X)``, the gradient of A in the
    triangle read). Mirrors ``torch.linalg.solve_triangular``.

    Args:
        A: triangular matrices (..., n, n); only the triangle ``upper`` names is read.
        B: right-hand sides (..., n, k) (``left``) or (..., k, n); batch dims broadcast.
        upper: read the upper triangle (True) or the lower one (False); required, as torch.
        left: solve ``A X = B`` when True, ``X A = B`` when False.
        unitriangular: take the diagonal as ones (it is not read).

    Returns:
        X, of ``B``'s shape up to the broadcast batch dims, in the common dtype.

    Raises:
        ValueError: when ``A`` is not square or the shapes do not match.
    """
    return _solve_triangular("solve_triangular", A, B, lower=not upper, unit=unitriangular, trans=0, left=bool(left))


# ----------------------------------------------------------------------------------------------
# Public functions: Cholesky

@exported_as("jaxrules.numpy.linalg.cholesky", "jaxrules.linalg.cholesky")
def cholesky(a: ArrayLike, *, upper: bool = False, symmetrize_input: bool = True) -> Array:
    """The Cholesky factor L of ``(A + A^H)/2 = L L^H`` (jax.numpy's convention; the tangent is
    symmetrized too, where torch's ``cholesky_jvp`` assumes a Hermitian tangent); JVP
    ``dL = L Phi(L^{-1} dA L^{-H})`` (Phi: the lower triangle, half diagonal), VJP of seed
    ``cholesky_backward``. Mirrors ``jax.numpy.linalg.cholesky`` and ``torch.linalg.cholesky``
    (``upper``).

    Args:
        a: Hermitian positive-definite matrices (..., n, n) (integer and boolean input is
            promoted to float).
        upper: return the upper factor ``U = L^H`` (``A = U^H U``) instead, as torch.
        symmetrize_input: must be True (``TypeError`` otherwise: the rules assume it).

    Returns:
        The factors, of ``a``'s shape (NaN where A is not positive definite, as jax.numpy).

    Raises:
        ValueError: when ``a`` has rank < 2 or is not square.
        TypeError: when ``symmetrize_input`` is False.

    Example:
        >>> import jax.numpy as jnp, jaxrules.numpy as rnp
        >>> print(rnp.linalg.cholesky(jnp.array([[4.0, 2.0], [2.0, 2.0]])))
        [[2. 0.]
         [1. 1.]]
    """
    if not symmetrize_input:
        raise TypeError("cholesky: symmetrize_input=False is not supported by jaxrules (the rules assume it)")
    factor = cholesky_op(_matrix("cholesky", "a", a, square=True))
    return P.mH(factor) if upper else factor


@exported_as("jaxrules.scipy.linalg.cho_solve")
def cho_solve(c_and_lower: tuple[ArrayLike, bool], b: ArrayLike, overwrite_b: bool = False, check_finite: bool = True) -> Array:
    """Solves ``(L L^H) X = B`` from one triangle of the Cholesky factor; JVP
    ``dX = A^{-1} (dB - dA X)`` with ``A = L L^H``, ``dA = dL L^H + L dL^H``; VJP
    ``gB = A^{-1} g`` and, torch's ``cholesky_solve`` convention, the factor's gradient
    ``-(C + C^H) L`` with ``C = gB X^H``, *not* projected on the triangle (the entries the forward ignores get torch's nonzero gradient;
    project with ``jnp.tril`` if you need the other convention). Mirrors
    ``jax.scipy.linalg.cho_solve`` (``torch.cholesky_solve``).

    Args:
        c_and_lower: the pair ``(c, lower)``: the factor (..., n, n) and whether it is the
            lower (``L``) or the upper (``U = L^H``) triangle that is read.
        b: right-hand sides (..., n, k), or one vector (n,); batch dims broadcast.
        overwrite_b: SciPy's; ignored (as JAX).
        check_finite: SciPy's; ignored (as JAX).

    Returns:
        X, of shape (..., n, k) (or (n,) for a 1-D ``b``), in the common dtype.

    Raises:
        TypeError: when ``c_and_lower`` is not a pair.
        ValueError: when ``c`` is not square or the shapes do not match.
    """
    del overwrite_b, check_finite
    try:
        c, lower = c_and_lower
    except (TypeError, ValueError):
        raise TypeError("cho_solve: c_and_lower must be a pair (c, lower)") from None
    c = _matrix("cho_solve", "c", c, square=True)
    b = _matrix("cho_solve", "b", b, min_ndim=1)
    c, b = _same_dtype(c, b)
    vector = b.ndim == 1
    b2 = b[:, None] if vector else b
    if b2.shape[-2] != c.shape[-1]:
        raise ValueError(f"cho_solve: b of shape {b.shape} does not match c of shape {c.shape}")
    c, b2 = _broadcast_batch("cho_solve", c, b2, 2)
    x = cho_solve_op(c, b2, lower=bool(lower))
    return x[..., 0] if vector else x


@exported_as("jaxrules.linalg.cholesky_solve")
def torch_cholesky_solve(B: ArrayLike, L: ArrayLike, upper: bool = False) -> Array:  # noqa: N803 - torch's argument names
    """Solves ``(L L^H) X = B`` (or ``(U^H U) X = B``) from a Cholesky factor, with
    ``cho_solve``'s derivatives (torch's dense factor gradient ``-(C + C^H) L``,
    ``C = gB X^H``). Mirrors ``torch.cholesky_solve`` (its argument order: B first).

    Args:
        B: right-hand sides (..., n, k); batch dims broadcast.
        L: the factor (..., n, n); only the triangle ``upper`` names is read.
        upper: ``L`` is the upper factor U when True.

    Returns:
        X, of shape (..., n, k), in the common dtype.

    Raises:
        ValueError: when ``L`` is not square or the shapes do not match.
    """
    return cho_solve((L, not upper), B)


@exported_as("jaxrules.linalg.cholesky_inverse")
def cholesky_inverse(L: ArrayLike, upper: bool = False) -> Array:  # noqa: N803 - torch's argument name
    """``X = (L L^H)^{-1}`` (or ``(U^H U)^{-1}``) from a Cholesky factor, with seed
    ``cholesky_inverse_backward`` (``gL = -X (g + g^H) X L``, dense, as torch) and a corrected
    ``cholesky_inverse_jvp``: the seed's ``K = -X dL X L^H`` is wrong; the derivative
    is ``dX = K + K^H`` with ``K = -X dL L^H X`` (torch 2.13 fails its own forward-AD gradcheck
    here). Mirrors ``torch.cholesky_inverse``.

    Args:
        L: the factor (..., n, n); only the triangle ``upper`` names is read.
        upper: ``L`` is the upper factor U when True.

    Returns:
        The inverses, of ``L``'s shape.

    Raises:
        ValueError: when ``L`` has rank < 2 or is not square.
    """
    return cholesky_inverse_op(_matrix("cholesky_inverse", "L", L, square=True), lower=not upper)


# ----------------------------------------------------------------------------------------------
# Public functions: Eigen, singular value and QR decompositions

EighResult = collections.namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
SVDResult = collections.namedtuple("SVDResult", ["U", "S", "Vh"])
QRResult = collections.namedtuple("QRResult", ["Q", "R"])
EigResult = collections.namedtuple("EigResult", ["eigenvalues", "eigenvectors"])


def _hermitian_input(op, a, UPLO, symmetrize_input):
    if UPLO not in (None, "L", "U"):
        raise ValueError(f"{op}: UPLO must be 'L' or 'U', got {UPLO!r}")
    if not symmetrize_input:
        raise TypeError(f"{op}: symmetrize_input=False is not supported by jaxrules (the rules assume it)")
    return _matrix(op, "a", a, square=True)


@exported_as("jaxrules.numpy.linalg.eigh", "jaxrules.linalg.eigh")
def eigh(a: ArrayLike, UPLO: str | None = None, symmetrize_input: bool = True) -> EighResult:  # noqa: N803 - jax.numpy's argument name
    """The eigendecomposition ``A = V diag(w) V^H`` of ``(A + A^H)/2``; JVP ``dP = V^H dA V``,
    ``dw = Re diag(dP)``, ``dV = V (F o dP)`` with ``F_ij = 1/(w_j - w_i)`` (seed
    ``linalg_eig_jvp`` / ``linalg_eig_backward``, hermitian). Mirrors
    ``jax.numpy.linalg.eigh`` (``torch.linalg.eigh``). Repeated eigenvalues: the degenerate
    pairs' terms are dropped (``partials.gap_reciprocal``), so losses of the eigenvalues or of
    well-separated eigenspaces have finite, exact derivatives (torch and JAX: NaN). Complex: a
    loss that depends on the eigenvectors' phases raises (torch's check).

    Args:
        a: Hermitian matrices (..., n, n) (integer and boolean input is promoted to float).
        UPLO: None, ``"L"`` or ``"U"``, accepted for jax.numpy's signature: the input is
            symmetrized, so both triangles are read (torch reads only the one named).
        symmetrize_input: must be True (``TypeError`` otherwise: the rules assume it).

    Returns:
        ``EighResult(eigenvalues, eigenvectors)``: the real eigenvalues (..., n) in ascending
        order and the unit eigenvectors as columns (..., n, n).

    Raises:
        ValueError: when ``a`` is not square or ``UPLO`` is invalid.
        TypeError: when ``symmetrize_input`` is False.

    Example:
        >>> import jax, jax.numpy as jnp, jaxrules.numpy as rnp
        >>> w, v = rnp.linalg.eigh(jnp.array([[2.0, 1.0], [1.0, 2.0]]))
        >>> print(w.round(4), abs(v[:, 1]).round(4))
        [1. 3.] [0.7071 0.7071]
        >>> print(jax.grad(lambda a: rnp.linalg.eigh(a)[0][1])(jnp.array([[2.0, 1.0], [1.0, 2.0]])).round(4))  # v v^T
        [[0.5 0.5]
         [0.5 0.5]]
    """
    return EighResult(*eigh_op(_hermitian_input("eigh", a, UPLO, symmetrize_input)))


@exported_as("jaxrules.numpy.linalg.eigvalsh", "jaxrules.linalg.eigvalsh")
def eigvalsh(a: ArrayLike, UPLO: str | None = "L", *, symmetrize_input: bool = True) -> Array:  # noqa: N803 - jax.numpy's signature
    """The eigenvalues of the Hermitian ``(A + A^H)/2``; JVP ``dw = Re diag(V^H dA V)``, VJP
    ``gA = V diag(gw) V^H`` (finite at repeated eigenvalues). Mirrors
    ``jax.numpy.linalg.eigvalsh`` (``torch.linalg.eigvalsh``).

    Args:
        a: Hermitian matrices (..., n, n) (integer and boolean input is promoted to float).
        UPLO: None, ``"L"`` or ``"U"``, accepted for jax.numpy's signature: the input is
            symmetrized, so both triangles are read (torch reads only the one named).
        symmetrize_input: must be True (``TypeError`` otherwise: the rules assume it).

    Returns:
        The real eigenvalues (..., n), in ascending order.

    Raises:
        ValueError: when ``a`` is not square or ``UPLO`` is invalid.
        TypeError: when ``symmetrize_input`` is False.
    """
    return eigvalsh_op(_hermitian_input("eigvalsh", a, UPLO, symmetrize_input))


@exported_as("jaxrules.numpy.linalg.svd", "jaxrules.linalg.svd")
def svd(a: ArrayLike, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False, subset_by_index: None = None) -> SVDResult | Array:
    """The SVD ``A = U diag(S) Vh``; JVP ``dP = U^H dA V``, ``dS = Re diag(dP)``, ``dU``, ``dV``
    through ``F_ij = 1/(S_j^2 - S_i^2)`` (seed ``linalg_svd_jvp`` / ``svd_backward``),
    ``full_matrices`` included (JAX raises there). Mirrors ``jax.numpy.linalg.svd``
    (``torch.linalg.svd``). The extra columns of a full U (or rows of Vh) get the tangent that
    keeps the basis orthonormal without rotating the complement (torch: 0, which makes
    ``d(U_e U_e^H)`` wrong). Repeated singular values: degenerate pairs dropped (as ``eigh``);
    ``1/S`` is taken as 0 at ``S = 0``. Complex: a phase-dependent loss raises (torch's check).

    Args:
        a: matrices (..., m, n) (integer and boolean input is promoted to float).
        full_matrices: return the square U (..., m, m) and Vh (..., n, n); else
            (..., m, k) and (..., k, n), ``k = min(m, n)``.
        compute_uv: return ``(U, S, Vh)``; when False only S (``svdvals``' rule).
        hermitian: accepted; the general SVD is used (results agree to rounding).
        subset_by_index: must be None (``TypeError`` otherwise).

    Returns:
        ``SVDResult(U, S, Vh)``, or S alone when ``compute_uv`` is False: the singular values
        (..., k), real, in descending order.

    Raises:
        ValueError: when ``a`` has rank < 2.
        TypeError: when ``subset_by_index`` is given.

    Example:
        >>> import jax, jax.numpy as jnp, jaxrules.numpy as rnp
        >>> a = jnp.array([[3.0, 0.0], [0.0, -2.0]])
        >>> print(rnp.linalg.svd(a)[1].round(4))
        [3. 2.]
        >>> print(jax.grad(lambda a: rnp.linalg.svd(a)[1].sum())(a).round(4))  # the nuclear norm's: U V^H
        [[ 1.  0.]
         [ 0. -1.]]
    """
    a = _matrix("svd", "a", a)
    V.unsupported("svd", subset_by_index=subset_by_index)
    del hermitian
    if not compute_uv:
        return svdvals_op(a)
    return SVDResult(*svd_op(a, full_matrices=bool(full_matrices)))


@exported_as("jaxrules.numpy.linalg.svdvals", "jaxrules.linalg.svdvals")
def svdvals(x: ArrayLike, /) -> Array:
    """The singular values; JVP ``dS = Re diag(U^H dA V)``, VJP ``gA = U diag(gS) V^H``.
    Mirrors ``jax.numpy.linalg.svdvals`` (``torch.linalg.svdvals``).

    Args:
        x: matrices (..., m, n) (integer and boolean input is promoted to float).

    Returns:
        The singular values (..., min(m, n)), real, in descending order.

    Raises:
        ValueError: when ``x`` has rank < 2.
    """
    return svdvals_op(_matrix("svdvals", "x", x))


@exported_as("jaxrules.numpy.linalg.qr", "jaxrules.linalg.qr")
def qr(a: ArrayLike, mode: str = "reduced") -> QRResult | Array:
    """The QR decomposition ``A = Q R``; JVP (m >= n) ``dR' = syminv(sym(Q^H dA R^{-1}))``,
    ``dQ = dA R^{-1} - Q dR'``, ``dR = dR' R`` (seed ``linalg_qr_jvp`` /
    ``linalg_qr_backward``). Mirrors ``jax.numpy.linalg.qr`` (``torch.linalg.qr``).
    ``"complete"`` with more rows than columns (torch raises in backward): the extra columns
    get the tangent that keeps Q orthonormal without rotating the complement.

    Args:
        a: matrices (..., m, n) (integer and boolean input is promoted to float).
        mode: ``"reduced"`` (Q (..., m, k), R (..., k, n), ``k = min(m, n)``),
            ``"complete"`` (Q (..., m, m), R (..., m, n)) or ``"r"`` (R alone, reduced).

    Returns:
        ``QRResult(Q, R)``, or R alone in mode ``"r"``.

    Raises:
        ValueError: when ``a`` has rank < 2 or ``mode`` is invalid.
    """
    a = _matrix("qr", "a", a)
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    q, r = qr_op(a, complete=mode == "complete")
    return r if mode == "r" else QRResult(q, r)


@exported_as("jaxrules.numpy.linalg.eig", "jaxrules.linalg.eig")
def eig(a: ArrayLike) -> EigResult:
    """The eigendecomposition ``A V = V diag(w)`` of a general matrix, differentiable (JAX
    raises); JVP ``dP = V^{-1} dA V``, ``dw = diag(dP)``, ``dV = V (F o dP)`` renormalized
    (``F_ij = 1/(w_j - w_i)``; seed ``linalg_eig_jvp`` / ``linalg_eig_backward``). Mirrors
    ``jax.numpy.linalg.eig`` (``torch.linalg.eig``): unit-norm eigenvectors in torch's gauge,
    torch's phase check (a loss that depends on the phases raises), degenerate pairs dropped.

    Args:
        a: square matrices (..., n, n) (integer and boolean input is promoted to float).

    Returns:
        ``EigResult(eigenvalues, eigenvectors)``, complex: (..., n) and the unit eigenvectors
        as columns (..., n, n), in LAPACK's order.

    Raises:
        ValueError: when ``a`` has rank < 2 or is not square.

    Example:
        >>> import jax, jax.numpy as jnp, jaxrules.numpy as rnp
        >>> a = jnp.array([[2.0, 1.0], [0.0, 3.0]])
        >>> print(rnp.linalg.eig(a)[0])
        [2.+0.j 3.+0.j]
        >>> print(jax.grad(lambda a: rnp.linalg.eig(a)[0].real.sum())(a).round(4))  # the trace's gradient
        [[1. 0.]
         [0. 1.]]
    """
    return EigResult(*eig_op(_matrix("eig", "a", a, square=True)))


@exported_as("jaxrules.numpy.linalg.eigvals", "jaxrules.linalg.eigvals")
def eigvals(a: ArrayLike) -> Array:
    """The eigenvalues of a general matrix; JVP ``dw = diag(V^{-1} dA V)``, VJP
    ``gA = V^{-H} diag(gw) V^H``. Mirrors ``jax.numpy.linalg.eigvals``
    (``torch.linalg.eigvals``).

    Args:
        a: square matrices (..., n, n) (integer and boolean input is promoted to float).

    Returns:
        The complex eigenvalues (..., n), in LAPACK's order.

    Raises:
        ValueError: when ``a`` has rank < 2 or is not square.
    """
    return eigvals_op(_matrix("eigvals", "a", a, square=True))


# ----------------------------------------------------------------------------------------------
# Public functions: Pseudo-inverse and least squares

def _rtol(op, value, a, name="rtol/rcond"):
    """The relative cutoff as a real array broadcasting over ``a``'s batch (default
    ``10 max(m, n) eps``, jax.numpy's): a number, an array or a tracer."""
    real = jnp.finfo(a.dtype).dtype
    if value is None:
        return jnp.asarray(10.0 * max(a.shape[-2:]) * jnp.finfo(real).eps, real)
    if isinstance(value, bool) or not isinstance(value, numbers.Real | jax.Array | np.ndarray | np.generic):
        raise TypeError(f"{op}: {name} must be a real number or array, got {value!r}")
    tol = jnp.asarray(value)
    if tol.dtype == bool or not (jnp.issubdtype(tol.dtype, jnp.integer) or jnp.issubdtype(tol.dtype, jnp.floating)):
        raise TypeError(f"{op}: {name} must be real, got dtype {tol.dtype}")
    try:
        jnp.broadcast_shapes(tol.shape, a.shape[:-2])
    except ValueError:
        raise ValueError(f"{op}: {name} of shape {tol.shape} does not broadcast over the batch {a.shape[:-2]}") from None
    known = concrete_value(tol)
    if known is not None and np.any(known < 0):
        raise ValueError(f"{op}: {name} must be non-negative, got {value!r}")
    return tol.astype(real)


@exported_as("jaxrules.numpy.linalg.pinv", "jaxrules.linalg.pinv")
def pinv(a: ArrayLike, rtol: ArrayLike | None = None, hermitian: bool = False, *, rcond: ArrayLike | None = None) -> Array:
    """The Moore-Penrose pseudo-inverse ``A^+``; JVP ``dA^+ = -A^+ dA A^+ + A^+ A^{+H} dA^H
    (I - A A^+) + (I - A^+ A) dA^H A^{+H} A^+`` (Golub-Pereyra; seed ``pinv_jvp`` /
    ``pinv_backward``: the derivative where the rank is locally constant). Mirrors
    ``jax.numpy.linalg.pinv`` (``torch.linalg.pinv``).

    Args:
        a: matrices (..., m, n) (integer and boolean input is promoted to float).
        rtol: singular values below ``rtol * max(S)`` are taken as zero: a non-negative number
            or array broadcasting over the batch; None: ``10 max(m, n) eps`` (jax.numpy's).
            No derivative.
        hermitian: accepted; the general SVD is used.
        rcond: the older spelling of ``rtol``; give one of the two.

    Returns:
        The pseudo-inverses, (..., n, m).

    Raises:
        ValueError: when ``a`` has rank < 2, both ``rtol`` and ``rcond`` are given, or a
            tolerance is negative or does not broadcast.
        TypeError: when a tolerance is not real.
    """
    del hermitian
    if rtol is not None and rcond is not None:
        raise ValueError("pinv: give rtol or rcond, not both")
    a = _matrix("pinv", "a", a)
    return pinv_op(a, _rtol("pinv", rtol if rcond is None else rcond, a))


@exported_as("jaxrules.numpy.linalg.lstsq", "jaxrules.linalg.lstsq")
def lstsq(a: ArrayLike, b: ArrayLike, rcond: ArrayLike | None = None, *, numpy_resid: bool = False) -> tuple[Array, Array, Array, Array]:
    """The least-squares solution ``x = A^+ B`` (the minimum-norm one when A is
    rank-deficient); JVP ``dx = d(A^+) B + A^+ dB`` (seed ``linalg_lstsq_jvp`` /
    ``linalg_lstsq_backward``). Mirrors ``jax.numpy.linalg.lstsq`` (``torch.linalg.lstsq``
    with driver ``"gelsd"``), batched over leading dims.

    Args:
        a: matrices (..., m, n) (integer and boolean input is promoted to float).
        b: right-hand sides (..., m, k), or one vector (m,); batch dims broadcast.
        rcond: singular values below ``rcond * max(S)`` are taken as zero; None:
            ``max(m, n) eps`` (jax.numpy's). No derivative.
        numpy_resid: False (JAX's default): the residuals are always returned; True:
            NumPy's convention, empty when m <= n or some matrix is rank-deficient (under
            ``jit``, where the rank is traced: zeros for the rank-deficient ones).

    Returns:
        ``(x, residuals, rank, singular_values)``: x (..., n, k) (or (n,) for a 1-D ``b``);
        the residuals ``|B - A x|^2`` summed over rows, (..., k) (see ``numpy_resid``); the
        int32 rank; the singular values (``svdvals``).

    Raises:
        ValueError: when ``a`` has rank < 2 or the shapes do not match or broadcast.
        TypeError: when ``numpy_resid`` is not a bool.
    """
    numpy_resid = V.flag("lstsq", "numpy_resid", numpy_resid)
    a = _matrix("lstsq", "a", a)
    b = V.array("lstsq", "b", b)
    a, b = _same_dtype(a, b)
    vector = b.ndim == 1
    b2 = b[:, None] if vector else b
    if b2.ndim < 2 or b2.shape[-2] != a.shape[-2]:
        raise ValueError(f"lstsq: b of shape {b.shape} does not match a of shape {a.shape}")
    a, b2 = _broadcast_batch("lstsq", a, b2, 2)
    rtol = _rtol("lstsq", rcond, a, "rcond")
    x = lstsq_op(a, b2, rtol)
    s = svdvals(a)
    m, n = a.shape[-2:]
    tol = (max(m, n) * jnp.finfo(s.dtype).eps if rcond is None else rtol[..., None]) * s[..., :1]
    rank = jnp.sum(s > tol, axis=-1).astype(jnp.int32)
    r = b2 - a @ x
    resid = jnp.sum((r * jnp.conj(r)).real, axis=-2)
    if numpy_resid:  # NumPy's: empty unless every matrix has full column rank and m > n
        known = concrete_value(rank)
        if m <= n or (known is not None and np.any(known < n)):
            resid = jnp.zeros(resid.shape[:-1] + (0,), resid.dtype)
        else:
            resid = jnp.where((rank == n)[..., None], resid, jnp.zeros_like(resid))
    return (x[..., 0] if vector else x), resid, rank, s


# ----------------------------------------------------------------------------------------------
# Public functions: LU

@exported_as("jaxrules.scipy.linalg.lu")
def lu(a: ArrayLike, permute_l: bool = False, overwrite_a: bool = False, check_finite: bool = True) -> tuple[Array, Array, Array] | tuple[Array, Array]:
    """The LU decomposition ``A = P L U`` with partial pivoting, square, wide and tall; JVP
    ``P^T dA = dL U + L dU`` solved for the triangles (seed ``linalg_lu_jvp``, whose
    translated tall branch is damaged; this is upstream's math / ``linalg_lu_backward``); P
    has a zero derivative. Mirrors ``jax.scipy.linalg.lu`` (``torch.linalg.lu``).

    Args:
        a: matrices (..., m, n) (integer and boolean input is promoted to float).
        permute_l: return ``(P L, U)`` instead of ``(P, L, U)``.
        overwrite_a: SciPy's; ignored (as JAX).
        check_finite: SciPy's; ignored (as JAX).

    Returns:
        ``(P, L, U)``: the permutation (..., m, m), unit lower L (..., m, k) and upper U
        (..., k, n), ``k = min(m, n)``; or ``(P L, U)``.

    Raises:
        ValueError: when ``a`` has rank < 2.
    """
    del overwrite_a, check_finite
    p, lower, upper = lu_op(_matrix("lu", "a", a))
    return (p @ lower, upper) if permute_l else (p, lower, upper)


@exported_as("jaxrules.linalg.lu_factor", "jaxrules.scipy.linalg.lu_factor")
def lu_factor(a: ArrayLike, overwrite_a: bool = False, check_finite: bool = True) -> tuple[Array, Array]:
    """The packed LU factorization ``A = P L U``: ``lu = tril(L, -1) + U`` and the pivots;
    JVP the packed ``tril(dL, -1) + triu(dU)`` (seed ``lu_factor_ex_jvp`` /
    ``lu_factor_ex_backward``). Mirrors ``jax.scipy.linalg.lu_factor``
    (``torch.linalg.lu_factor``, whose pivots are 1-based).

    Args:
        a: matrices (..., m, n) (integer and boolean input is promoted to float).
        overwrite_a: SciPy's; ignored (as JAX).
        check_finite: SciPy's; ignored (as JAX).

    Returns:
        ``(lu, piv)``: the packed factors (..., m, n) and the 0-based int32 row pivots
        (..., min(m, n)) (no derivative).

    Raises:
        ValueError: when ``a`` has rank < 2.
    """
    del overwrite_a, check_finite
    return lu_factor_op(_matrix("lu_factor", "a", a))


@exported_as("jaxrules.scipy.linalg.lu_solve")
def lu_solve(lu_and_piv: tuple[ArrayLike, ArrayLike], b: ArrayLike, trans: int = 0, overwrite_b: bool = False, check_finite: bool = True) -> Array:
    """Solves ``op(A) X = B`` from ``lu_factor(A)``; JVP ``dX = op(A)^{-1} (dB - op(dA) X)``
    with ``dA = P (dL U + L dU)``, differentiable in the packed factors (seed
    ``linalg_lu_solve_LU``) and in B (seed ``linalg_lu_solve_jvp``). Mirrors
    ``jax.scipy.linalg.lu_solve`` (``torch.linalg.lu_solve``).

    Args:
        lu_and_piv: the pair ``(lu, piv)`` of ``lu_factor``: packed factors (..., n, n) and
            integer 0-based pivots (..., n).
        b: right-hand sides (..., n, k) with the same batch dims, or vectors (..., n).
        trans: ``op``: 0 (A), 1 (A^T) or 2 (A^H).
        overwrite_b: SciPy's; ignored (as JAX).
        check_finite: SciPy's; ignored (as JAX).

    Returns:
        X, of ``b``'s shape, in the common dtype.

    Raises:
        TypeError: when ``lu_and_piv`` is not a pair or the pivots are not integers of shape
            ``lu.shape[:-1]``.
        ValueError: when ``lu`` is not square, ``trans`` is invalid or ``b`` does not match.
    """
    del overwrite_b, check_finite
    try:
        lu_, piv = lu_and_piv
    except (TypeError, ValueError):
        raise TypeError("lu_solve: lu_and_piv must be a pair (lu, piv) from lu_factor") from None
    lu_ = _matrix("lu_solve", "lu", lu_, square=True)
    piv = jnp.asarray(piv)
    if not jnp.issubdtype(piv.dtype, jnp.integer) or piv.shape != lu_.shape[:-1]:
        raise TypeError(f"lu_solve: piv must be integer pivots of shape {lu_.shape[:-1]}, got {piv.dtype} {piv.shape}")
    if trans not in (0, 1, 2) or isinstance(trans, bool):
        raise ValueError(f"lu_solve: trans must be 0, 1 or 2, got {trans!r}")
    b = _matrix("lu_solve", "b", b, min_ndim=1)
    lu_, b = _same_dtype(lu_, b)
    vector = b.ndim == lu_.ndim - 1
    b2 = b[..., None] if vector else b
    if b2.shape[-2] != lu_.shape[-1] or b2.shape[:-2] != lu_.shape[:-2]:
        raise ValueError(f"lu_solve: b of shape {b.shape} does not match lu of shape {lu_.shape}")
    x = lu_solve_op(lu_, piv.astype(jnp.int32), b2, trans=int(trans))
    return x[..., 0] if vector else x


@exported_as("jaxrules.linalg.lu_unpack")
def lu_unpack(LU: ArrayLike, pivots: ArrayLike) -> tuple[Array, Array, Array]:  # noqa: N803 - torch's argument name
    """Unpacks ``lu_factor``'s output into ``(P, L, U)`` with ``A = P L U``; linear in LU: JVP
    ``(0, tril(dLU, -1), triu(dLU))``, VJP the packed sum (seed ``lu_unpack_backward``).
    Mirrors ``torch.lu_unpack``, with 0-based pivots (as ``jaxrules.scipy.linalg.lu_factor``
    returns; torch's are 1-based).

    Args:
        LU: the packed factors (..., m, n) (integer and boolean input is promoted to float).
        pivots: the 0-based integer row pivots (..., min(m, n)); no derivative. Pivots past
            the first ``min(m, n)`` are ignored, as torch ignores them.

    Returns:
        ``(P, L, U)``: the permutation (..., m, m), unit lower L (..., m, k) and upper U
        (..., k, n), ``k = min(m, n)``.

    Raises:
        ValueError: when ``LU`` has rank < 2.
        TypeError: when ``pivots`` are not integers.
    """
    lu_ = _matrix("lu_unpack", "LU", LU)
    piv = jnp.asarray(pivots)
    if not jnp.issubdtype(piv.dtype, jnp.integer):
        raise TypeError(f"lu_unpack: pivots must be integers, got {piv.dtype}")
    k = min(lu_.shape[-2:])
    return lu_unpack_op(lu_, piv[..., :k].astype(jnp.int32), k=k)


# ----------------------------------------------------------------------------------------------
# Public functions: Matrix exponential, Householder products

@exported_as("jaxrules.scipy.linalg.expm")
def expm(A: ArrayLike, *, upper_triangular: bool = False, max_squarings: int = 16) -> Array:  # noqa: N803 - jax.scipy's argument name
    """The matrix exponential ``exp(A)``; JVP ``expm([[A, dA], [0, A]])_12``, VJP
    ``expm([[A^T, g], [0, A^T]])_12`` (seed ``linalg_matrix_exp_differential`` /
    ``differential_analytic_matrix_function``). Mirrors ``jax.scipy.linalg.expm``
    (``torch.linalg.matrix_exp``).

    Args:
        A: square matrices (..., n, n) (integer and boolean input is promoted to float).
        upper_triangular: JAX's hint; ignored (the general algorithm is used).
        max_squarings: JAX's cap on the squarings; ignored (JAX's default, 16, is used).

    Returns:
        ``exp(A)``, of ``A``'s shape.

    Raises:
        ValueError: when ``A`` has rank < 2 or is not square.
    """
    del upper_triangular, max_squarings
    return expm_op(_matrix("expm", "A", A, square=True))


@exported_as("jaxrules.linalg.matrix_exp")
def matrix_exp(A: ArrayLike) -> Array:  # noqa: N803 - torch's argument name
    """The matrix exponential ``exp(A)`` (``expm``: JVP ``expm([[A, dA], [0, A]])_12``).
    Mirrors ``torch.linalg.matrix_exp``.

    Args:
        A: square matrices (..., n, n) (integer and boolean input is promoted to float).

    Returns:
        ``exp(A)``, of ``A``'s shape.

    Raises:
        ValueError: when ``A`` has rank < 2 or is not square.
    """
    return expm(A)


def _reflectors(op, a, tau):
    a = _matrix(op, "input", a)
    tau = _matrix(op, "tau", tau, min_ndim=1)
    a, tau = _same_dtype(a, tau)
    m, n = a.shape[-2:]
    if m < n or tau.shape != a.shape[:-2] + (tau.shape[-1],) or tau.shape[-1] > n:
        raise ValueError(f"{op}: input must be (..., m, n) with m >= n and tau (..., k) with k <= n, got {a.shape} and {tau.shape}")
    return a, tau


@exported_as("jaxrules.linalg.householder_product")
def householder_product(input: ArrayLike, tau: ArrayLike) -> Array:  # noqa: A002 - torch's argument name
    """The first n columns of ``prod_{i=1..k} H_i``, ``H_i = I - tau_i v_i v_i^H`` (LAPACK orgqr);
    differentiable (JAX has no rule) by the product rule along the reflectors,
    ``dH_i = -dtau_i v_i v_i^H - tau_i (dv_i v_i^H + v_i dv_i^H)`` (seed
    ``householder_product_jvp`` / ``householder_product_backward``; assumes
    ``tau_i |v_i|^2 != 1``, true for geqrf's output). Mirrors
    ``torch.linalg.householder_product``.

    Args:
        input: the reflectors (..., m, n), m >= n: ``v_i`` is column i below the diagonal
            with an implicit 1 on it (as ``torch.geqrf`` returns).
        tau: the scales (..., k), k <= n.

    Returns:
        Q's first n columns, (..., m, n).

    Raises:
        ValueError: when m < n, k > n or the batch dims differ.
    """
    return householder_product_op(*_reflectors("householder_product", input, tau))


@exported_as("jaxrules.linalg.ormqr")
def ormqr(input: ArrayLike, tau: ArrayLike, other: ArrayLike, left: bool = True, transpose: bool = False) -> Array:  # noqa: A002 - torch's argument names
    """``op(Q) C`` (``left``) or ``C op(Q)``, Q the full product ``prod_{i=1..k} H_i`` of the
    reflectors, ``op`` the conjugate transpose when ``transpose``; differentiable in all three
    arguments by the product rule along the reflectors (JAX has no rule; seed
    ``ormqr_backward``). Mirrors ``torch.ormqr``.

    Args:
        input: the reflectors (..., m, n): ``v_i`` is column i below the diagonal with an
            implicit 1 on it (as ``torch.geqrf`` returns, also for m < n).
        tau: the scales (..., k), k <= min(m, n): Q is the product of the first k reflectors
            (torch requires k == min(m, n)).
        other: C, (..., m, p) when ``left``, else (..., p, m), with input's batch dimensions.
        left: multiply from the left (``op(Q) C``) or from the right (``C op(Q)``).
        transpose: use ``Q^H`` instead of Q.

    Returns:
        The product, of ``other``'s shape, in the common dtype.

    Raises:
        ValueError: when ``other`` has rank < 2 (as torch), k > min(m, n) or the shapes do not
            match.
    """
    a = _matrix("ormqr", "input", input)
    tau = _matrix("ormqr", "tau", tau, min_ndim=1)
    c = _matrix("ormqr", "other", other)
    a, tau, c = _same_dtype(a, tau, c)
    (m, n), k = a.shape[-2:], tau.shape[-1]
    if tau.shape[:-1] != a.shape[:-2] or c.shape[:-2] != a.shape[:-2]:
        raise ValueError(f"ormqr: the batch dimensions of tau {tau.shape} and other {c.shape} must equal "
                         f"those of input {a.shape}")
    if c.shape[-2 if left else -1] != m:
        raise ValueError(f"ormqr: other of shape {c.shape} does not match input of shape {a.shape}")
    if k > min(m, n):
        raise ValueError(f"ormqr: tau (..., k) must have k <= min(m, n) for input (..., m, n), got {tau.shape} "
                         f"and {a.shape}")
    # Q is built from the first k columns only: with them, the reflectors are (..., m, k), m >= k.
    a = a[..., :k] if m < n else a
    return ormqr_op(a, tau, c, left=bool(left), transpose=bool(transpose))
