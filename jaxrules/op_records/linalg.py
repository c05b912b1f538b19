"""Registry records of ``jaxrules.ops.linalg``, in that module's order: samples, singular points,
torch references. Only ``registry.load_records()`` imports them (``import jaxrules`` and its
namespaces never do)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrules import partials as P
from jaxrules.ops._sampling import normal
from jaxrules.ops.linalg import (
    _matrix,
    adjugate,
    cho_solve,
    cholesky,
    cholesky_inverse,
    det,
    eig,
    eigh,
    eigvals,
    eigvalsh,
    expm,
    householder_product,
    inv,
    linear,
    lstsq,
    lu,
    lu_factor,
    lu_solve,
    lu_unpack,
    matmul,
    matrix_power,
    ormqr,
    pinv,
    qr,
    slogdet,
    svd,
    svdvals,
    torch_solve,
    torch_solve_triangular,
)
from jaxrules.registry import Sample, SingularPoint, record
from jaxrules.torch.nn import functional as F


def well_conditioned(rng, dt, *shape):
    """``normal + 2 sqrt(n) I``: eigenvalues away from 0 (well-conditioned, invertible)."""
    n = shape[-1]
    return (normal(rng, dt, *shape) + 2 * np.sqrt(n) * np.eye(n)).astype(dt)


def positive_definite(rng, dt, *shape):
    """``X X^H / n + I``."""
    x = normal(rng, dt, *shape)
    return (x @ np.conj(np.swapaxes(x, -1, -2)) / shape[-1] + np.eye(shape[-1])).astype(dt)


def _lower_factor(rng, dt, *shape):
    """A Cholesky factor: lower triangular with a positive diagonal."""
    return np.linalg.cholesky(positive_definite(rng, dt, *shape)).astype(dt)


_C = ("float64", "complex128")


record(
    "matmul", fn=matmul, public=("jaxrules.numpy.matmul",), formula_ops=("matmul",),
    seed=("mm_mat1_backward", "mm_mat2_backward"),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 3, 4), normal(rng, dt, 4, 2))),
        Sample((normal(rng, dt, 2, 3, 4), normal(rng, dt, 4, 5))),
        Sample((normal(rng, dt, 4), normal(rng, dt, 2, 4, 3))),
        Sample((normal(rng, dt, 3, 4), normal(rng, dt, 4))),
    ],
    torch_fn=lambda torch, a, b: torch.matmul(a, b), torch_name="torch.matmul", dtypes=_C,
)
record(
    "linear", fn=linear, public=("jaxrules.nn.linear",), formula_ops=("linear",), seed=("linear_double_backward",),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 5, 3), normal(rng, dt, 4, 3), normal(rng, dt, 4))),
        Sample((normal(rng, dt, 2, 5, 3), normal(rng, dt, 4, 3))),
        Sample((normal(rng, dt, 3), normal(rng, dt, 4, 3), normal(rng, dt, 4))),
    ],
    torch_fn=lambda torch, x, w, b=None: torch.nn.functional.linear(x, w, b), torch_name="torch.nn.functional.linear",
    dtypes=_C,
)
record(
    "inv", fn=inv, public=("jaxrules.numpy.linalg.inv",), formula_ops=("inv",),
    seed=("linalg_inv_ex (derivatives.yaml)",),
    samples=lambda rng, dt: [Sample((well_conditioned(rng, dt, 3, 3),)), Sample((well_conditioned(rng, dt, 2, 4, 4),))],
    torch_fn=lambda torch, a: torch.linalg.inv(a), torch_name="torch.linalg.inv", dtypes=_C,
)
record(
    "matrix_power", fn=matrix_power, public=("jaxrules.numpy.linalg.matrix_power", "jaxrules.linalg.matrix_power"), formula_ops=("matmul", "inv"),
    seed=("mm_mat1_backward", "mm_mat2_backward", "linalg_inv_ex (derivatives.yaml)"),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 3, 3), 3)), Sample((well_conditioned(rng, dt, 2, 4, 4), -2)),
                             Sample((normal(rng, dt, 2, 3, 3), 6)), Sample((well_conditioned(rng, dt, 2, 2), -1))],
    torch_fn=lambda torch, a, n: torch.linalg.matrix_power(a, n), torch_name="torch.linalg.matrix_power", dtypes=_C,
)

_SINGULAR = (
    ("rank 2 of 3", np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])),
    ("rank 1 of 3", np.outer([1.0, -2.0, 0.5], [3.0, 1.0, -1.0])),
    ("zero matrix", np.zeros((3, 3))),
    ("rank 2 of 4", np.array([[2.0, 0, 0, 1], [0, 1, 0, 0], [4.0, 0, 0, 2], [0, 0, 0, 0]])),
)


def _adjugate_np(a):
    """The adjugate by cofactors (NumPy, exact for these small integer-like matrices)."""
    n = a.shape[-1]
    out = np.empty_like(a)
    for i in range(n):
        for j in range(n):
            minor = np.delete(np.delete(a, j, 0), i, 1)
            out[i, j] = (-1) ** (i + j) * np.linalg.det(minor)
    return out


record(
    "adjugate", fn=adjugate, public=("jaxrules.linalg.adjugate",), formula_ops=("adjugate",),
    seed=("linalg_det_backward (SVD branch)",),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 3, 3),)), Sample((normal(rng, dt, 2, 4, 4),))],
    torch_fn=lambda torch, a: torch.linalg.det(a)[..., None, None] * torch.linalg.inv(a),
    torch_name="det(A) inv(A) in torch", dtypes=_C,
    singular=tuple(
        # Finite second derivatives asked where at most one singular value is zero: with repeated
        # zero singular values they go through JAX's SVD derivative (1 / (s_i^2 - s_j^2)), NaN when
        # LAPACK returns them exactly equal — machine-dependent (the deviation below).
        SingularPoint(label, (a,), finite_second=a.shape[-1] - np.linalg.matrix_rank(a) <= 1,
                      torch_differs="torch has no adjugate; det(A) inv(A) is undefined at singular A")
        for label, a in _SINGULAR
    ),
    deviations="Second derivatives (det's third) at matrices with repeated zero singular values, "
    "such as the zero matrix, are NaN: they go through JAX's SVD derivative.",
)
record(
    "det", fn=det, public=("jaxrules.numpy.linalg.det",), formula_ops=("det", "adjugate"),
    seed=("linalg_det_jvp", "linalg_det_backward"),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 3, 3),)), Sample((normal(rng, dt, 2, 4, 4),))],
    torch_fn=lambda torch, a: torch.linalg.det(a), torch_name="torch.linalg.det", dtypes=_C,
    singular=tuple(
        SingularPoint(
            label, (a,), (_adjugate_np(a).T,),
            torch_differs="torch's default backward (no create_graph) returns 0 at exactly singular "
            "matrices; the gradient is the adjugate (torch's create_graph path agrees)." if label != "zero matrix" else "",
        )
        for label, a in _SINGULAR
    ),
    deviations="At singular matrices the gradient is the adjugate (torch's default path gives 0) "
    "and second derivatives are finite (JAX: NaN in 10-35% of random singular cases).",
    double_backward="adjugate op's rules (SVD with fixed singular vectors; finite at every rank)",
)
record(
    "slogdet", fn=slogdet, public=("jaxrules.numpy.linalg.slogdet",), formula_ops=("slogdet",),
    seed=("slogdet_jvp", "slogdet_backward"),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 3, 3),)), Sample((well_conditioned(rng, dt, 2, 4, 4),))],
    torch_fn=lambda torch, a: tuple(torch.linalg.slogdet(a)), torch_name="torch.linalg.slogdet", dtypes=_C,
    double_backward="inv op's rules (the saved A^{-1} is computed by the inv op)",
)


def _torch_solve(torch, a, b, left=True):
    if b.ndim == 1 and not left:  # torch takes a vector right-hand side only for left=True
        return torch.linalg.solve(a, b[None, :], left=False)[0]
    return torch.linalg.solve(a, b, left=left)


record(
    "solve", fn=torch_solve, public=("jaxrules.numpy.linalg.solve", "jaxrules.linalg.solve"), formula_ops=("solve",),
    seed=("linalg_solve_jvp", "linalg_solve_backward"),
    samples=lambda rng, dt: [
        Sample((well_conditioned(rng, dt, 3, 3), normal(rng, dt, 3))),
        Sample((well_conditioned(rng, dt, 2, 3, 3), normal(rng, dt, 3, 4))),
        Sample((well_conditioned(rng, dt, 3, 3), normal(rng, dt, 2, 3)), {"left": False}),
    ],
    torch_fn=_torch_solve, torch_name="torch.linalg.solve", dtypes=_C,
)


def _triangular_samples(rng, dt):
    a = well_conditioned(rng, dt, 4, 4)
    return [
        Sample((a, normal(rng, dt, 2, 4)), {"upper": True, "left": False}),
        Sample((a, normal(rng, dt, 4, 2)), {"upper": False, "unitriangular": True}),
        Sample((well_conditioned(rng, dt, 2, 3, 3), normal(rng, dt, 3, 2)), {"upper": False}),
    ]


def _torch_solve_triangular(torch, a, b, **kw):
    return torch.linalg.solve_triangular(a, b, **kw)


record(
    "solve_triangular", fn=torch_solve_triangular,
    public=("jaxrules.scipy.linalg.solve_triangular", "jaxrules.linalg.solve_triangular"),
    formula_ops=("solve_triangular",), seed=("linalg_solve_triangular_forward_AD", "linalg_solve_triangular_backward"),
    samples=_triangular_samples, torch_fn=_torch_solve_triangular, torch_name="torch.linalg.solve_triangular",
    dtypes=_C,
)


record(
    "cholesky", fn=cholesky, public=("jaxrules.numpy.linalg.cholesky",), formula_ops=("cholesky",),
    seed=("cholesky_jvp", "cholesky_backward"),
    samples=lambda rng, dt: [Sample((positive_definite(rng, dt, 3, 3),)), Sample((positive_definite(rng, dt, 2, 4, 4),))],
    torch_fn=lambda torch, a: torch.linalg.cholesky((a + a.mH) / 2), torch_name="torch.linalg.cholesky", dtypes=_C,
    deviations="The input and its tangent are symmetrized, (A + A^H)/2, as jax.numpy does; torch "
    "reads the lower triangle and its JVP assumes a Hermitian tangent (equal for Hermitian tangents).",
)


def _torch_cholesky_solve(torch, c, b, lower=True):
    factor = torch.tril(c) if lower else torch.triu(c)
    if b.ndim == 1:
        return torch.cholesky_solve(b[..., None], factor, upper=not lower)[..., 0]
    return torch.cholesky_solve(b, factor, upper=not lower)


def _cho_solve_tril(c, b, lower=True):
    """cho_solve with the factor's unused triangle zeroed (the records' function: the factor's
    dense gradient, torch's convention, then agrees with finite differences)."""
    return cho_solve((P.band(_matrix("cho_solve", "c", c, square=True), lower), lower), b)


record(
    "cho_solve", fn=_cho_solve_tril, public=("jaxrules.scipy.linalg.cho_solve", "jaxrules.linalg.cholesky_solve"),
    formula_ops=("cho_solve",), seed=("cholesky_solve_backward", "cholesky_solve_jvp"),
    samples=lambda rng, dt: [
        Sample((_lower_factor(rng, dt, 3, 3), normal(rng, dt, 3, 2))),
        Sample((np.conj(np.swapaxes(_lower_factor(rng, dt, 3, 3), -1, -2)), normal(rng, dt, 3)), {"lower": False}),
        Sample((_lower_factor(rng, dt, 2, 4, 4), normal(rng, dt, 4, 2))),
    ],
    torch_fn=_torch_cholesky_solve, torch_name="torch.cholesky_solve", dtypes=_C,
    deviations="The factor's gradient is torch's (not projected on the triangle the forward reads); "
    "the harness checks cho_solve of tril(L), and tests/test_linalg.py pins the dense gradient.",
)


def _cholesky_inverse_tril(c, upper=False):
    """cholesky_inverse with the factor's unused triangle zeroed (as ``_cho_solve_tril``)."""
    return cholesky_inverse(P.band(_matrix("cholesky_inverse", "L", c, square=True), not upper), upper)


record(
    "cholesky_inverse", fn=_cholesky_inverse_tril, public=("jaxrules.linalg.cholesky_inverse",),
    formula_ops=("cholesky_inverse",), seed=("cholesky_inverse_backward", "cholesky_inverse_jvp (corrected)"),
    samples=lambda rng, dt: [
        Sample((_lower_factor(rng, dt, 3, 3),)),
        Sample((np.conj(np.swapaxes(_lower_factor(rng, dt, 3, 3), -1, -2)), True)),
        Sample((_lower_factor(rng, dt, 2, 4, 4),)),
    ],
    torch_fn=lambda torch, c, upper=False: torch.cholesky_inverse(torch.triu(c) if upper else torch.tril(c), upper=upper),
    torch_name="torch.cholesky_inverse", dtypes=_C,
    torch_jvp_differs="torch's cholesky_inverse_jvp is wrong (the seed's formula)",
    deviations="JVP: the seed's (and torch 2.13's) cholesky_inverse_jvp is wrong (K = -X dL X L^H "
    "instead of -X dL L^H X; error 0.016-0.02 against finite differences); jaxrules uses the "
    "correct one, so `torch` JVP parity is not expected for this op.",
)


def _abs2(x):
    return (x * jnp.conj(x)).real


def _eigh_invariants(a):
    """What a finite difference can see of ``eigh``: the eigenvalues and ``|V|^2``."""
    w, v = eigh(a)
    return w, _abs2(v)


def _svd_invariants(a, full_matrices=False):
    """What a finite difference can see of ``svd``: ``|U_k|^2``, ``S``, ``|V_k^H|^2``, the
    polar factor ``U_k V_k^H`` and, when full, the projectors on the complements."""
    u, s, vh = svd(a, full_matrices=full_matrices)
    k = s.shape[-1]
    out = [_abs2(u[..., :k]), s, _abs2(vh[..., :k, :]), u[..., :k] @ vh[..., :k, :]]
    if full_matrices:
        out += [u[..., k:] @ P.mH(u[..., k:]), P.mH(vh[..., k:, :]) @ vh[..., k:, :]]
    return tuple(out)


def _torch_svd_invariants(torch, a, full_matrices=False):
    u, s, vh = torch.linalg.svd(a, full_matrices=False)
    out = [(u * u.conj()).real, s, (vh * vh.conj()).real, u @ vh]
    if full_matrices:  # torch gives the complement a zero tangent: use its closed form
        eye = lambda n: torch.eye(n, dtype=a.dtype)  # noqa: E731
        out += [eye(a.shape[-2]) - u @ u.mH, eye(a.shape[-1]) - vh.mH @ vh]
    return tuple(out)


def _qr_invariants(a, mode="reduced"):
    """``Q_k``, ``R`` and, for a complete tall Q, the projector on the complement."""
    q, r = qr(a, mode)
    k = min(a.shape[-2:])
    if mode == "complete" and a.shape[-2] > a.shape[-1]:
        return q[..., :k], r, q[..., k:] @ P.mH(q[..., k:])
    return q, r


def _torch_qr_invariants(torch, a, mode="reduced"):
    q, r = torch.linalg.qr(a, mode="reduced")
    if mode == "complete" and a.shape[-2] > a.shape[-1]:
        n = a.shape[-1]
        return q, torch.cat([r, torch.zeros(a.shape[-2] - n, n, dtype=a.dtype)], -2), torch.eye(a.shape[-2], dtype=a.dtype) - q @ q.mH
    return q, r


def _eig_invariants(a):
    """Eigenvalues and ``|V|^2``, ordered by the eigenvalues (LAPACK's order is not stable across
    precisions). The order is piecewise constant: its keys carry no tangent (JAX's sort JVP rule
    adds an iota without the batch sharding, refused under vmap on an ``Explicit`` mesh)."""
    w, v = eig(a)
    order = jnp.lexsort(lax.stop_gradient((w.imag, w.real)))
    return jnp.take_along_axis(w, order, -1), jnp.take_along_axis(_abs2(v), order[..., None, :], -1)


def _torch_eig_invariants(torch, a):
    w, v = torch.linalg.eig(a)
    order = torch.from_numpy(np.lexsort((w.imag.detach().numpy(), w.real.detach().numpy()), axis=-1))
    return w.gather(-1, order), (v * v.conj()).real.gather(-1, order[..., None, :].expand(v.shape))


def _spectral(rng, dt, values, *batch):
    """``Q diag(values) Q^H`` with a random unitary Q."""
    n = len(values)
    q, _ = np.linalg.qr(normal(rng, dt, *batch, n, n))
    return (q * np.asarray(values)) @ np.conj(np.swapaxes(q, -1, -2))


record(
    "eigh", fn=_eigh_invariants, public=("jaxrules.numpy.linalg.eigh",), formula_ops=("eigh",),
    seed=("linalg_eig_jvp", "linalg_eig_backward"),
    samples=lambda rng, dt: [
        Sample((_spectral(rng, dt, [-1.0, 0.5, 2.0]),)),
        Sample((_spectral(rng, dt, [-2.0, -0.5, 1.0, 3.0], 2),)),
    ],
    torch_fn=lambda torch, a: (lambda w, v: (w, (v * v.conj()).real))(*torch.linalg.eigh((a + a.mH) / 2)),
    torch_name="torch.linalg.eigh", dtypes=_C,
    singular=(SingularPoint(
        "repeated eigenvalue", (np.diag([1.0, 1.0, 2.0]),), (np.eye(3),),
        torch_differs="torch gives NaN at repeated eigenvalues (the loss sum(w) + sum|V|^2 = tr A + n "
        "does not depend on the degenerate eigenvectors).",
    ),),
    deviations="Repeated eigenvalues: the degenerate pairs' terms are dropped (torch and JAX: NaN), "
    "so eigenvalue-only and separated-subspace losses have finite exact gradients.",
)
record(
    "eigvalsh", fn=eigvalsh, public=("jaxrules.numpy.linalg.eigvalsh",), formula_ops=("eigvalsh",),
    seed=("linalg_eig_backward",),
    samples=lambda rng, dt: [Sample((_spectral(rng, dt, [-1.0, 0.5, 2.0]),)), Sample((_spectral(rng, dt, [1.0, 2.0, 3.0, 4.0], 2),))],
    torch_fn=lambda torch, a: torch.linalg.eigvalsh((a + a.mH) / 2), torch_name="torch.linalg.eigvalsh", dtypes=_C,
    singular=(SingularPoint("identity (all repeated)", (np.eye(3),), (np.eye(3),)),),
)


def _svd_samples(rng, dt):
    return [  # square matrices come in the batched sample
        Sample((normal(rng, dt, 4, 2),)),
        Sample((normal(rng, dt, 2, 3, 3),)),
        Sample((normal(rng, dt, 4, 2),), {"full_matrices": True}),
        Sample((normal(rng, dt, 2, 3),), {"full_matrices": True}),
    ]


record(
    "svd", fn=_svd_invariants, public=("jaxrules.numpy.linalg.svd",), formula_ops=("svd",),
    seed=("linalg_svd_jvp", "svd_backward"), samples=_svd_samples, torch_fn=_torch_svd_invariants,
    torch_name="torch.linalg.svd", dtypes=_C,
    deviations="full_matrices=True is differentiable (JAX raises): the extra columns get the tangent "
    "that keeps the basis orthonormal (torch: zero, which makes d(U_e U_e^H) wrong). Repeated "
    "singular values: degenerate pairs dropped (torch, JAX: NaN); 1/S is 0 at S = 0.",
)
record(
    "svdvals", fn=svdvals, public=("jaxrules.numpy.linalg.svdvals",), formula_ops=("svdvals",),
    seed=("svd_backward (svdvals path)",),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 3, 3),)), Sample((normal(rng, dt, 2, 4, 2),))],
    torch_fn=lambda torch, a: torch.linalg.svdvals(a), torch_name="torch.linalg.svdvals", dtypes=_C,
    singular=(SingularPoint("identity (all repeated)", (np.eye(3),), (np.eye(3),)),),
)
record(
    "qr", fn=_qr_invariants, public=("jaxrules.numpy.linalg.qr",), formula_ops=("qr",),
    seed=("linalg_qr_jvp", "linalg_qr_backward"),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 2, 3, 3),)),
        Sample((normal(rng, dt, 2, 4),)),
        Sample((normal(rng, dt, 4, 3),)),
        Sample((normal(rng, dt, 4, 2), "complete")),
        # ('complete' with m <= n is 'reduced': the formulas branch on m > n only; no sample)
    ],
    torch_fn=_torch_qr_invariants, torch_name="torch.linalg.qr", dtypes=_C,
    deviations="mode='complete' with more rows than columns is differentiable (torch raises): the "
    "extra columns get the tangent that keeps Q orthonormal.",
)


def _eig_samples(rng, dt):
    def diagonalizable(values, *batch):
        n = len(values)
        p = np.eye(n) + 0.3 * normal(rng, dt, *batch, n, n)
        return ((p * np.asarray(values)) @ np.linalg.inv(p)).astype(dt)

    return [Sample((diagonalizable([-1.0, 0.5, 2.0]),)), Sample((diagonalizable([-2.0, -0.5, 1.0, 3.0], 2),)),
            Sample((normal(rng, dt, 3, 3),))]


record(
    "eig", fn=_eig_invariants, public=("jaxrules.numpy.linalg.eig",), formula_ops=("eig",),
    seed=("linalg_eig_jvp", "linalg_eig_backward"), samples=_eig_samples, torch_fn=_torch_eig_invariants,
    torch_name="torch.linalg.eig", dtypes=_C,
    tolerance={"float32": 1e-3},  # eigenvector gradients amplify float32 rounding by 1/gap
    deviations="Differentiable (jnp.linalg.eig raises even for eigenvalue-only losses); repeated "
    "eigenvalues: degenerate pairs dropped (torch: NaN).",
)
record(
    "eigvals", fn=eigvals, public=("jaxrules.numpy.linalg.eigvals",), formula_ops=("eigvals",),
    seed=("linalg_eig_backward",), samples=_eig_samples, torch_fn=lambda torch, a: torch.linalg.eigvals(a),
    torch_name="torch.linalg.eigvals", dtypes=_C,
)


record(
    "pinv", fn=pinv, public=("jaxrules.numpy.linalg.pinv",), formula_ops=("pinv",), seed=("pinv_jvp", "pinv_backward"),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 3, 5),)), Sample((normal(rng, dt, 5, 3),)), Sample((normal(rng, dt, 2, 3, 3),))],
    torch_fn=lambda torch, a: torch.linalg.pinv(a), torch_name="torch.linalg.pinv", dtypes=_C,
    deviations="Rank-deficient inputs: the constant-rank derivative (as torch); tests/test_linalg.py "
    "checks it along perturbations that keep the rank.",
)


def _lstsq_solution(a, b, rcond=None):
    return lstsq(a, b, rcond)[0]


record(
    "lstsq", fn=_lstsq_solution, public=("jaxrules.numpy.linalg.lstsq",), formula_ops=("lstsq",),
    seed=("linalg_lstsq_jvp", "linalg_lstsq_backward"),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 5, 3), normal(rng, dt, 5))),
        Sample((normal(rng, dt, 2, 4), normal(rng, dt, 2, 3))),
        Sample((normal(rng, dt, 2, 4, 3) + 2 * np.eye(4, 3), normal(rng, dt, 4, 2))),  # batched, well-conditioned
    ],
    torch_fn=lambda torch, a, b, rcond=None: torch.linalg.lstsq(a, b.expand(a.shape[:-2] + b.shape), driver="gelsd").solution,
    torch_name="torch.linalg.lstsq", dtypes=_C,
)


def _lu_samples(rng, dt):
    return [Sample((normal(rng, dt, 3, 5),)), Sample((normal(rng, dt, 5, 3),)), Sample((normal(rng, dt, 2, 3, 3),))]


record(
    "lu", fn=lu, public=("jaxrules.scipy.linalg.lu",), formula_ops=("lu",),
    seed=("linalg_lu_jvp", "linalg_lu_backward"), samples=_lu_samples,
    torch_fn=lambda torch, a: tuple(torch.linalg.lu(a)), torch_name="torch.linalg.lu", dtypes=_C,
)
def _packed_factors(a):
    """lu_factor's differentiable output (the pivots are integers; tests/test_linalg.py compares
    them with torch's)."""
    return lu_factor(a)[0]


record(
    "lu_factor", fn=_packed_factors, public=("jaxrules.scipy.linalg.lu_factor", "jaxrules.linalg.lu_factor"),
    formula_ops=("lu_factor",), seed=("lu_factor_ex_jvp", "lu_factor_ex_backward"), samples=_lu_samples,
    torch_fn=lambda torch, a: torch.linalg.lu_factor(a)[0], torch_name="torch.linalg.lu_factor", dtypes=_C,
    deviations="Pivots are 0-based (jax.scipy's convention; torch's are 1-based).",
)


def _factored(rng, dt, *shape):
    lu_, piv = P.lu_factor(well_conditioned(rng, dt, *shape))
    return np.asarray(lu_), np.asarray(piv)


def _lu_solve_samples(rng, dt):
    out = []
    # Each trans once; the batched factor rides on trans=2 (batching and trans are independent
    # paths of the formulas: one sample covers both).
    for trans, shape, rhs in ((0, (3, 3), (3, 2)), (1, (3, 3), (3,)), (2, (2, 4, 4), (2, 4, 3))):
        lu_, piv = _factored(rng, dt, *shape)
        out.append(Sample((lu_, piv, normal(rng, dt, *rhs)), {"trans": trans}))
    return out


def _lu_solve_unpacked(lu_, piv, b, trans=0):
    return lu_solve((lu_, piv), b, trans)


def _torch_lu_solve(torch, lu_, piv, b, trans=0):
    vector = b.ndim == lu_.ndim - 1
    b = b[..., None] if vector else b
    piv = piv.to(torch.int32) + 1
    if trans == 1:  # A^T X = B  <=>  A^H conj(X) = conj(B)
        x = torch.linalg.lu_solve(lu_, piv, b.conj(), adjoint=True).conj()
    else:
        x = torch.linalg.lu_solve(lu_, piv, b, adjoint=trans == 2)
    return x[..., 0] if vector else x


record(
    "lu_solve", fn=_lu_solve_unpacked, public=("jaxrules.scipy.linalg.lu_solve",), formula_ops=("lu_solve",),
    seed=("linalg_lu_solve_LU", "linalg_lu_solve_jvp"), samples=_lu_solve_samples, torch_fn=_torch_lu_solve,
    torch_name="torch.linalg.lu_solve", dtypes=_C, torch_no_grad_args=(1,),
)
record(
    "lu_unpack", fn=lu_unpack, public=("jaxrules.linalg.lu_unpack",), formula_ops=("lu_unpack",),
    seed=("lu_unpack_backward",),
    samples=lambda rng, dt: [Sample(_factored(rng, dt, 4, 4)), Sample(_factored(rng, dt, 2, 3, 3))]
            + [Sample(tuple(np.asarray(x) for x in P.lu_factor(normal(rng, dt, *s)))) for s in ((3, 5), (5, 3))],
    torch_fn=lambda torch, lu_, piv: tuple(torch.lu_unpack(lu_, piv.to(torch.int32) + 1)), torch_name="torch.lu_unpack",
    dtypes=_C, deviations="Pivots are 0-based, as lu_factor returns them.",
)
record(
    "expm", fn=expm, public=("jaxrules.scipy.linalg.expm", "jaxrules.linalg.matrix_exp"), formula_ops=("expm",),
    seed=("linalg_matrix_exp_differential", "differential_analytic_matrix_function"),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 3, 3),)), Sample((0.5 * normal(rng, dt, 2, 4, 4),))],
    torch_fn=lambda torch, a: torch.linalg.matrix_exp(a), torch_name="torch.linalg.matrix_exp", dtypes=_C,
)


def _geqrf(rng, dt, *shape):
    """LAPACK geqrf's packed reflectors and taus (NumPy's ``qr(mode='raw')`` returns them
    transposed)."""
    h, tau = np.linalg.qr(normal(rng, dt, *shape), mode="raw")
    return np.swapaxes(h, -1, -2).astype(dt), tau.astype(dt)


record(
    "householder_product", fn=householder_product, public=("jaxrules.linalg.householder_product",),
    formula_ops=("householder_product",), seed=("householder_product_jvp", "householder_product_backward"),
    samples=lambda rng, dt: [Sample(_geqrf(rng, dt, 4, 4)), Sample(_geqrf(rng, dt, 5, 3)), Sample(_geqrf(rng, dt, 2, 4, 2))],
    torch_fn=lambda torch, a, tau: torch.linalg.householder_product(a, tau),
    torch_name="torch.linalg.householder_product", dtypes=_C,
    deviations="Differentiable (JAX has no derivative rule for it).",
)


def _ormqr_samples(rng, dt):
    out = []
    for left, transpose in ((True, False), (False, True)):  # the other two: tests/test_linalg.py
        a, tau = _geqrf(rng, dt, 4, 3)
        c = normal(rng, dt, 4, 2) if left else normal(rng, dt, 2, 4)
        out.append(Sample((a, tau, c), {"left": left, "transpose": transpose}))
    return out


record(
    "ormqr", fn=ormqr, public=("jaxrules.linalg.ormqr",), formula_ops=("ormqr",), seed=("ormqr_backward",),
    samples=_ormqr_samples,
    torch_fn=lambda torch, a, tau, c, left=True, transpose=False: torch.ormqr(a, tau, c, left, transpose),
    torch_name="torch.ormqr", dtypes=_C,
    deviations="Differentiable (JAX has no derivative rule for it). tau may hold k < min(m, n) scales: Q is the "
               "product of the first k reflectors (LAPACK's ormqr; torch 2.13 requires k = min(m, n)).",
)


_GROUP_ENDS = np.array([2, 2, 5, 6], np.int32)  # an empty group; the 7th row / column past the last group


def _grouped_mm_samples(rng, dt):
    """The four layouts of ``grouped_mm``: rows, columns and contraction grouped at
    ``_GROUP_ENDS``, and a batch."""
    return [Sample((normal(rng, dt, 7, 3), normal(rng, dt, 4, 3, 2)), {"offs": _GROUP_ENDS}),
            Sample((normal(rng, dt, 4, 2, 3), normal(rng, dt, 3, 7)), {"offs": _GROUP_ENDS}),
            Sample((normal(rng, dt, 2, 6), normal(rng, dt, 6, 3)), {"offs": _GROUP_ENDS}),
            Sample((normal(rng, dt, 4, 2, 3), normal(rng, dt, 4, 3, 2)))]


def _grouped_mm_empty(rng, dt):
    """No rows, no contraction, every group empty."""
    none = np.zeros(4, np.int32)
    return [Sample((normal(rng, dt, 0, 3), normal(rng, dt, 4, 3, 2)), {"offs": none}),
            Sample((normal(rng, dt, 2, 0), normal(rng, dt, 0, 3)), {"offs": none}),
            Sample((normal(rng, dt, 5, 3), normal(rng, dt, 4, 3, 2)), {"offs": none})]


def _torch_grouped_mm(t, a, b, offs=None):
    """One ``torch.matmul`` per group (torch's ``grouped_mm`` runs float32/bfloat16 only and its
    CPU backward fails); rows or columns past the last group are 0."""
    if offs is None:
        return a @ b
    ends = [int(e) for e in offs]
    starts = [0, *ends[:-1]]
    if b.ndim == 3:
        return t.cat([a[s:e] @ b[g] for g, (s, e) in enumerate(zip(starts, ends))] + [0 * a[ends[-1]:] @ b[0]])
    if a.ndim == 3:
        return t.cat([a[g] @ b[:, s:e] for g, (s, e) in enumerate(zip(starts, ends))] + [a[0] @ (0 * b[:, ends[-1]:])],
                     1)
    return t.stack([a[:, s:e] @ b[s:e] for s, e in zip(starts, ends)])


record(
    "grouped_mm", fn=F.grouped_mm, public=("jaxrules.torch.nn.functional.grouped_mm",),
    formula_ops=("grouped_mm", "matmul"), seed=("mm_mat1_backward", "mm_mat2_backward"),
    samples=_grouped_mm_samples, empty_samples=_grouped_mm_empty, torch_fn=_torch_grouped_mm,
    torch_name="torch.nn.functional.grouped_mm (float64: one torch.matmul per group)",
    deviations="Rows (columns) past the last group are 0; torch leaves them unwritten.",
    singular=(SingularPoint("every group empty", (np.arange(6.0).reshape(3, 2), np.ones((4, 2, 5))),
                            (np.zeros((3, 2)), np.zeros((4, 2, 5))), {"offs": np.zeros(4, np.int32)}),),
)
