"""NaN and ±inf inputs propagate to values and gradients as torch's do.

For every record: its first float64 sample, one element of each differentiable argument in turn
set to NaN, +inf and -inf (the middle element, flat index ``size // 2``): 168 records, 741 cases.
The op's value and the gradient of ``sum(Re(out))`` (of ``sum(Re(g out))``, ``g`` standard
normal, for the cases in ``GENERIC_COTANGENT``; one jitted program per record, called for every
poisoned input) against the record's torch reference with autograd on the same input
(``jaxrules.testing._torch_grads``, as the harness's torch check): the NaN pattern, the
infinities with their signs, and the finite entries within a tolerance.

Cases where they differ are listed below, each with its reason, and checked to differ (so that a
fix shows up here as a failure to update the table): ``TORCH_WRONG`` where torch's answer is
mathematically wrong and jaxrules keeps the right one (checked independently where that is
simple), ``FOLLOWS_JAX`` where jaxrules gives what JAX's own op gives (an XLA primitive's
non-finite arithmetic; checked: value and gradients equal JAX's), ``OPEN`` for differences not
fixed yet, ``TORCH_RAISES`` where torch refuses the input (ours must then give a non-finite
value). ``NOT_COMPARED``: the gradients torch cannot give.

A CI run compares half the records (``NONFINITE_SHARE``, a rotating subset chosen by the commit,
``tests/_rotation.py``; all of them took 51 CPU s of CI's 2,290); ``JAXRULES_NONFINITE_ALL=1``
compares every record. ``test_every_listed_case_exists`` reads every record's cases each run."""

import dataclasses
import fnmatch
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _rotation import rotating_share

import jaxrules.nn
from jaxrules import records
from jaxrules.registry import Sample
from jaxrules.testing import _closure, _loss, _samples, _torch, _torch_grads

RECORDS = records()
NONFINITE_SHARE = 2
COMPARED = rotating_share(RECORDS, NONFINITE_SHARE, "nonfinite", "JAXRULES_NONFINITE_ALL")
POISONS = {"nan": np.nan, "+inf": np.inf, "-inf": -np.inf}
RTOL = 1e-6  # finite entries: |ours - torch| <= RTOL max(1, |torch|)

# Case keys: "op/argI/poison", ``I`` the position of the poisoned argument in the sample's call,
# shell-style globs allowed. Every case a key matches must differ from torch (or, in
# ``TORCH_RAISES``, torch must raise), and every key must match a case.
_MULTILINEAR = "the partial derivative in the poisoned entry does not involve that entry (the op is " \
    "linear in each entry), so it is finite; torch divides by the entry (inf/inf, NaN/NaN = NaN)"
_AFFINE_INF = "an infinite weight w_c: y = w_c x_hat + b_c is +-inf (x_hat != 0); torch's fused scale-shift " \
    "x (w rstd) + (b - mean w rstd) gives inf - inf = NaN"
_GROUP_WEIGHT = "infinite weight, one per normalized group: the input gradient w B(g) (w B(g) = B(g w) for a " \
    "per-group w: +-inf for a generic cotangent) at the all-ones cotangent is w times B(1) = 0 computed as " \
    "rounding residuals, +-inf or NaN (an exact 0) by each implementation's residual (the loss sum(y) is itself " \
    "inf - inf = NaN there): nothing to match; compared at a generic cotangent instead"
_UNDEFINED_GRADIENT = "an infinite weight w_j that varies within a normalized group: the value is w x_hat + b, " \
    "+-inf at j (checked against numpy; torch's group_norm gives NaN, see _AFFINE_INF), and the input gradient " \
    "is undefined over the group: ours is NaN at every entry of it (E[g w] is infinite: partials.defined_mean), " \
    "torch's NaN at most entries and +-inf at the few where its inf - inf terms happen not to meet (checked: ours " \
    "is torch's with those infinities NaN). The limit as w_j grows is +-inf at every entry (coefficient -(1 + " \
    "x_hat_i x_hat_j) / n + [i = j] of w_j); it needs two more reductions per group, which made the XLA " \
    "backward 1.5-5% slower on an H100 when tried: the finite path comes first"
TORCH_WRONG: dict[str, str] = {
    "bilinear/arg[01]/?inf": "one infinite input entry: the other input's gradient, sum_j (g W)_ij x2_j (or its "
                             "transpose), is exactly +-inf; torch's _trilinear contraction gives NaN",
    "conv_transpose/arg[01]/*": "a product of an input entry and a weight tap that lands only on output positions "
                                "cut off by padding is not in the output: the gradients leave it out (finite); "
                                "torch's backward multiplies the zeros it pads the cotangent with (0 inf = NaN)",
    "polar/arg0/*": "polar is linear in abs: d/d abs = e^{i angle} does not involve abs (finite), and d/d angle = "
                    "-abs sin(angle) is +-inf at abs = +-inf; torch's polar_backward goes through sgn(result) and "
                    "i result, NaN there",
    "nested.dropout/arg0/*": "a dropped entry is 0 (a select, as jaxrules.nn.dropout), also when it is NaN or "
                             "infinite; torch's x * mask / (1 - p) is NaN there (gradients agree)",
    "ctc_loss/arg0/-inf": "a logit of -inf is a class of probability 0 at that step: the gradient is the limit, "
                          "torch's own gradient at a logit of -1000; torch's backward reads exp(-inf - -inf) = NaN "
                          "at that step",
    "copysign/arg0/?inf": "d copysign(x, y)/dx = +-1 at x = +-inf; torch's result/x is inf/inf = NaN",
    "i1/arg0/nan": "torch's |x| <= eps branch (false comparisons at NaN) gives the x = 0 value 0.5",
    "i1e/arg0/nan": "torch's |x| <= eps branch (false comparisons at NaN) gives the x = 0 value 0.5",
    "sign/arg0/nan": "jaxrules.numpy.sign follows jax.numpy/NumPy: sign(NaN) = NaN; torch.sign(NaN) = 0",
    "cumprod/arg0/*": _MULTILINEAR,
    "prod/arg0/*": _MULTILINEAR,
    "scatter_reduce_prod/arg[03]/*": _MULTILINEAR,
    "index_reduce/arg0/*": _MULTILINEAR,
    "index_reduce/arg3/*": _MULTILINEAR,
    "logsumexp/arg0/+inf": "documented limit: the softmax weights' limit (1 on the +inf entry); torch: NaN",
    "logcumsumexp/arg0/+inf": "documented limit: the softmax weights' limit (1 on the +inf entry per later "
                              "output); torch: NaN",
    "var_mean/arg0/?inf": "the mean of values with one +-inf is +-inf; torch's var_mean (Welford) gives NaN",
    "std_mean/arg0/?inf": "the mean of values with one +-inf is +-inf; torch's var_mean (Welford) gives NaN",
    "det/arg0/?inf": "one infinite entry of a 3x3 A: the gradient is cof(A), 2x2 determinants: +-inf at the four "
                     "cofactors the entry enters, finite at the other five (checked against numpy's minors; the "
                     "value, +-inf, is torch's); torch's gradient through its LU: NaN at 8",
    "qr/arg0/nan": "the NaN is in column 0, which enters every entry of Q and of R's upper triangle (R[0, 0] = "
                   "-+||a_0||): all NaN (checked); torch's R[0, 0] is sqrt(2) ||a_0[1:]||, LAPACK's dlapy2(NaN, "
                   "||a_0[1:]||) with the NaN dropped by Fortran's MAX/MIN, not a norm of the column",
    "qr/arg0/?inf": "an infinite a_00: q_0 -> -+e_0, and Q[:, 1:], R[1:, 1:] tend to the QR of A[1:, 1:]: ours is "
                    "the limit (numpy's QR with 1e100 in place of inf, checked) wherever it is not NaN, NaN at "
                    "Q[:, 0] and R[0, 1:] as torch's; torch's Householder step also gives NaN at Q[1:, 1:], R[1:, 1:]",
    "adjugate/arg0/?inf": "one infinite entry: adj(A) = cof(A)^T, 2x2 determinants: +-inf in the four cofactors "
                          "it enters, finite in the other five (checked against numpy's minors); torch's "
                          "reference det(A) inv(A): NaN",
    "slogdet/arg0/nan": "the sign of a NaN determinant is NaN (checked; as jaxrules.numpy.sign); torch: 0, "
                        "the sign of a zero determinant",
    "svdvals/arg0/?inf": "the singular values are NaN (as torch's) and so is their gradient (checked); torch's "
                         "gradient U V^H of LAPACK's unconverged vectors is finite (the identity), not the "
                         "gradient's limit as the entry grows",
    "lstsq/arg1/?inf": "x = pinv(A) b with one infinite b_k is sign(pinv(A)[:, k]) inf (checked); torch's "
                       "Householder QR mixes inf - inf into NaN",
    "kl_div/arg1/+inf": "t (log t - x) -> +inf as t -> +inf, and d/dt = log t + 1 - x -> +inf; torch's "
                        "xlogy(t, t) - t x is inf - inf = NaN",
    "margin_ranking_loss/arg2/-inf": "the hinge is inactive around the point (loss 0), gradient 0; torch's "
                                     "chain rule multiplies 0 by y = -inf",
    "soft_margin_loss/arg1/-inf": "d/dx log(1 + exp(-y x)) = -y sigmoid(-y x) = +inf here; torch's "
                                  "-y exp(-y x) / (1 + exp(-y x)) is inf/inf = NaN",
    "soft_margin_loss/arg0/+inf": "d/dx log(1 + exp(-y x)) = -y sigmoid(-y x) -> -y / N at x = +inf (y = -1 "
                                  "here); torch's -y exp(-y x) / (1 + exp(-y x)) is inf/inf = NaN",
    "binary_cross_entropy_with_logits/arg0/-inf": "the loss -(t log sigmoid(x) + (1 - t) log sigmoid(-x)) is "
                                                  "+inf at x = -inf for 0 < t; torch's (1 - t) x + log(1 + exp(-x)) "
                                                  "is -inf + inf = NaN",
    "batch_norm/arg1/?inf": _AFFINE_INF + " (checked against numpy's w x_hat + b); the gradients agree here",
    "instance_norm/arg1/?inf": _AFFINE_INF + " (checked against numpy's w x_hat + b); the gradients agree at "
                               "the generic cotangent g (see GENERIC_COTANGENT; the input gradient checked "
                               "against numpy's w B(g))",
    "group_norm/arg2/?inf": _UNDEFINED_GRADIENT,
    "layer_norm/arg2/?inf": _UNDEFINED_GRADIENT,
    "layer_norm[[]pallas]/arg1/?inf": _UNDEFINED_GRADIENT,
    "nested.layer_norm/arg1/?inf": _UNDEFINED_GRADIENT,
    "multilabel_soft_margin_loss/arg1/?inf": "the loss -(y logsigmoid(x) + (1 - y) logsigmoid(-x)) = (1 - y) x - "
                                             "logsigmoid(x) is linear in the target y: -+inf x at y = +-inf (as "
                                             "torch's own binary_cross_entropy_with_logits); torch's two-term form "
                                             "gives inf - inf = NaN",
}
OPEN: dict[str, str] = {}
# Cases where torch 2.13's CPU kernel has two answers: its vectorized loop's blend gives a NaN
# gradient at a NaN input, its scalar loop's where chain falls through to the x > 0 branch (x > 3
# for hardswish), and which entries take which loop depends on the CPU's vector width (AVX-512 or
# AVX2) and the entry's position. Ours is the vectorized loop's NaN (NaN in, NaN out, as JAX's
# autodiff of jax.nn's), which a tensor of more than a few entries gets from torch. Not compared
# with torch here; ``test_activation_gradients_at_nan`` pins it against torch's vectorized loop.
TORCH_KERNEL_PATH: dict[str, str] = {
    "elu/arg0/nan": "the scalar loop's x > 0 branch (gradient 1) or the vectorized loop's NaN (ours)",
    "celu/arg0/nan": "the scalar loop's x > 0 branch (gradient 1) or the vectorized loop's NaN (ours)",
    "selu/arg0/nan": "the scalar loop's x > 0 branch (gradient scale) or the vectorized loop's NaN (ours)",
    "hardswish/arg0/nan": "the scalar loop's x > 3 branch (gradient 1) or the vectorized loop's NaN (ours)",
}


@dataclasses.dataclass(frozen=True)
class FollowsJax:
    """``reason``; ``op``: JAX's own op with the record's signature, whose value and gradients at
    the poisoned input ours must equal; ``numpy``: NumPy's op, whose value must equal too."""
    reason: str
    op: Callable
    numpy: Callable | None = None


def _lax_conv1d(x, w, b, stride, padding):
    """The conv record's first sample (1-d, stride and symmetric padding) through lax."""
    out = jax.lax.conv_general_dilated(x, w, (stride,), [(padding, padding)], dimension_numbers=("NCH", "OIH", "NCH"))
    return out + b[:, None]


def _lax_grouped_mm(a, b, offs):
    """The grouped_mm record's first sample (rows grouped) through lax."""
    return jax.lax.ragged_dot(a, b, jnp.diff(offs, prepend=0).astype(jnp.int32))


# torch differs, and jaxrules gives what JAX's own op gives: a non-finite entry meeting an XLA
# primitive's arithmetic, which no formula of ours can change.
FOLLOWS_JAX: dict[str, FollowsJax] = {
    "conv/arg1/*": FollowsJax("XLA's convolution (jax.lax.conv_general_dilated) skips the zero-padding taps, so an "
                              "output where a non-finite weight tap meets only padding stays finite; torch multiplies "
                              "the padding zeros (0 inf = NaN)", _lax_conv1d),
    "grouped_mm/arg1/*": FollowsJax("XLA's ragged product (jax.lax.ragged_dot) on a CPU multiplies every group's "
                                    "weights with every row and masks the products: a non-finite weight of one "
                                    "group reaches the other groups' rows (0 inf = NaN); torch's grouped GEMM reads "
                                    "each row's own group only", _lax_grouped_mm),
    "irfft/arg0/?inf": FollowsJax("jaxrules.numpy.fft follows jax.numpy.fft (XLA's FFT): NaN (inf - inf in the "
                                  "butterflies) at 3 of 14 outputs whose exact value is +-inf, as numpy.fft.irfft; "
                                  "torch's pocketfft: +-inf there", jnp.fft.irfft, np.fft.irfft),
}

# Cases compared at a generic cotangent (standard normal, seed 0) instead of all ones.
GENERIC_COTANGENT: dict[str, str] = {
    "instance_norm/arg1/?inf": _GROUP_WEIGHT,
}

# torch refuses the input; ours must then return at least one non-finite value (never all finite;
# a case also in ``OPEN`` must still return only finite values).
TORCH_RAISES: dict[str, str] = {
    "binary_cross_entropy/arg[01]/*": "torch: all elements of input/target should be between 0 and 1",
    "gaussian_nll_loss/arg2/-inf": "torch: var has negative entry/entries",
    "cholesky/arg0/-inf": "torch: not positive-definite",
    "cholesky/arg0/nan": "torch: not positive-definite",
    "eig/arg0/*": "torch: input tensor should not contain infs or NaNs",
    "eigvals/arg0/*": "torch: input tensor should not contain infs or NaNs",
    "eigh/arg0/nan": "torch: the algorithm failed to converge",
    "eigvalsh/arg0/nan": "torch: the algorithm failed to converge",
    "svd/arg0/nan": "torch: the algorithm failed to converge",
    "svdvals/arg0/nan": "torch: the algorithm failed to converge",
    "pinv/arg0/nan": "torch: the algorithm (svd) failed to converge",
    "lstsq/arg0/*": "torch: the input matrix does not have full rank / internal assert",
    "lstsq/arg1/nan": "torch: internal assert (LAPACK's argument check)",
}

# Gradients not compared: arguments the record says torch cannot differentiate (values and the
# other arguments' gradients are still compared for these cases).
NOT_COMPARED: dict[str, str] = {
    "margin_ranking_loss/arg2": "torch does not differentiate the target y",
    "soft_margin_loss/arg1": "torch does not differentiate the target",
}


def _first_sample(record) -> Sample:
    return next(s for s in _samples(record, "float64") if s.diff_argnums())


def _poisoned(sample: Sample, argnum: int, value: float) -> Sample:
    args = list(sample.args)
    a = np.array(args[argnum], copy=True)
    a.reshape(-1)[a.size // 2] = value
    args[argnum] = a
    return Sample(tuple(args), sample.kwargs)


def _parts(x):
    """``x`` as float64 real and imaginary parts, and the NaN mask (either part NaN)."""
    x = np.asarray(x)
    if x.dtype == bool or np.issubdtype(x.dtype, np.integer):
        x = x.astype(np.float64)
    re, im = np.real(x).astype(np.float64), np.imag(x).astype(np.float64)
    return re, im, np.isnan(re) | np.isnan(im)


def _differences(what: str, ours, theirs) -> list[str]:
    """How ``ours`` differs from ``theirs``: shapes, NaN positions, infinities (and their signs)
    where neither is NaN, finite entries beyond the tolerance. Empty when they agree."""
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    if ours.shape != theirs.shape:
        return [f"{what}: shape {ours.shape} vs torch's {theirs.shape}"]
    o_re, o_im, o_nan = _parts(ours)
    t_re, t_im, t_nan = _parts(theirs)
    out = []
    if (o_nan != t_nan).any():
        where = np.argwhere(o_nan != t_nan)[:3].tolist()
        out.append(f"{what}: NaN at {int(o_nan.sum())} entries vs torch's {int(t_nan.sum())} "
                   f"(differ at {where}, ours {ours[tuple(where[0])]} torch {theirs[tuple(where[0])]})")
    both = ~(o_nan | t_nan)
    for part, o, t in (("", o_re, t_re), (" (imaginary part)", o_im, t_im)):
        o_inf, t_inf = np.where(both, np.isinf(o) * np.sign(o), 0), np.where(both, np.isinf(t) * np.sign(t), 0)
        if (o_inf != t_inf).any():
            where = np.argwhere(o_inf != t_inf)[:3].tolist()
            out.append(f"{what}{part}: infinities differ at {where} "
                       f"(ours {o[tuple(where[0])]} torch {t[tuple(where[0])]})")
        finite = both & np.isfinite(o) & np.isfinite(t)
        err = np.abs(o - t) / np.maximum(1.0, np.abs(t))
        err = np.where(finite, err, 0.0)
        if (err > RTOL).any():
            k = tuple(np.argwhere(err > RTOL)[0])
            out.append(f"{what}{part}: finite entries differ by up to {err.max():.3g} "
                       f"(at {list(k)}: ours {o[k]} torch {t[k]})")
    return out


def _case_key(record, argnum: int, poison: str) -> str:
    return f"{record.name}/arg{argnum}/{poison}"


def _listed(table: dict[str, str], key: str) -> str | None:
    return next((reason for pattern, reason in table.items() if fnmatch.fnmatchcase(key, pattern)), None)


def _program(record, sample):
    f, args = _closure(record, sample)
    ct = jax.tree.map(lambda o: np.ones(o.shape, o.dtype), jax.eval_shape(f, *args))

    @jax.jit
    def value_and_grads(a, ct):
        return f(*a), jax.grad(_loss(f, ct), argnums=tuple(range(len(a))))(*a)

    return value_and_grads, ct


def _generic(ct):
    """A cotangent like ``ct``, standard normal (seed 0)."""
    return jax.tree.map(lambda o: np.random.default_rng(0).standard_normal(o.shape).astype(o.dtype), ct)


def _numpy_affine_norm(name, x, w, b, args):
    """``(w x_hat + b, x_hat, rstd, axes)`` of a normalization record's sample in numpy (batch
    statistics, eps 1e-5): batch/instance norm per channel at axis 1, group norm per group of
    channels (``args[1]`` groups), layer norm (and the nested and kernel forms) over the last axis."""
    op = name.split("[")[0]
    per_channel = (1, -1) + (1,) * (x.ndim - 2)
    if op in ("batch_norm", "instance_norm"):
        axes = (0, *range(2, x.ndim)) if op == "batch_norm" else tuple(range(2, x.ndim))
        view, w, b = x, w.reshape(per_channel), b.reshape(per_channel)
    elif op == "group_norm":
        axes, view, w, b = (2,), x.reshape(x.shape[0], args[1], -1), w.reshape(per_channel), b.reshape(per_channel)
    else:
        axes, view = (-1,), x
    rstd = 1 / np.sqrt(view.var(axes, keepdims=True) + 1e-5)
    xhat = ((view - view.mean(axes, keepdims=True)) * rstd).reshape(x.shape)
    rstd = rstd if view is x else np.broadcast_to(rstd, view.shape).reshape(x.shape)
    return w * xhat + b, xhat, rstd, axes


def _check_right_answer(record, sample, argnum, value, reason, out, grads, ct) -> list[str]:
    """Where torch is listed as wrong, what jaxrules gives instead (at the cotangent ``ct``) is
    checked independently for the cases where that is simple: ``[]`` when right (or not checked),
    else the problems."""
    k = np.asarray(sample.args[argnum]).size // 2
    if reason == _MULTILINEAR:
        # The poisoned entry's own partial derivative is torch's at the unpoisoned sample.
        torch = _torch()
        clean_ct = jax.tree.map(lambda o: np.ones(np.shape(o), np.asarray(o).dtype), out)
        _, t_grads = _torch_grads(torch, record, sample, clean_ct)
        j = sample.diff_argnums().index(argnum)
        ours, clean = np.asarray(grads[j]).reshape(-1)[k], np.asarray(t_grads[j]).reshape(-1)[k]
        if not abs(ours - clean) <= RTOL * max(1.0, abs(clean)):
            return [f"the poisoned entry's gradient {ours} is not torch's at the clean input, {clean}"]
    if record.name == "ctc_loss":  # the limit: torch's gradient where the logit is -1000 (exp underflows to 0)
        _, t_grads = _torch_grads(_torch(), record, _poisoned(sample, argnum, -1000.0), ct)
        return _differences("gradient vs torch's at a logit of -1000", grads[0], t_grads[0])
    if record.name in ("adjugate", "det"):  # the cofactors, from numpy's determinants of the minors
        a = np.asarray(_poisoned(sample, argnum, value).args[0])
        n = a.shape[-1]
        cof = np.array([[(-1) ** (i + j) * np.linalg.det(np.delete(np.delete(a, i, 0), j, 1)) for j in range(n)]
                        for i in range(n)])
        if record.name == "det":  # its gradient
            return _differences("gradient", grads[0], cof)
        return _differences("value", out, cof.T)
    if reason in (_UNDEFINED_GRADIENT,) or reason.startswith(_AFFINE_INF):  # numpy's w x_hat + b
        case = _poisoned(sample, argnum, value)
        x, w, b = (np.asarray(a) for a in (case.args[0], case.args[argnum], case.args[argnum + 1]))
        y, xhat, rstd, axes = _numpy_affine_norm(record.name, x, w, b, case.args)
        problems = _differences("value", jax.tree.leaves(out)[0], y)
        if record.name == "instance_norm":  # the input gradient w B(g)
            g = np.asarray(ct)
            proj = rstd * (g - g.mean(axes, keepdims=True) - xhat * (g * xhat).mean(axes, keepdims=True))
            problems += _differences("input gradient", grads[0], w.reshape((1, -1) + (1,) * (x.ndim - 2)) * proj)
        if reason == _UNDEFINED_GRADIENT:  # torch's input gradient with its infinities NaN
            _, t_grads = _torch_grads(_torch(), record, case, ct)
            t = np.asarray(t_grads[0])
            problems += _differences("input gradient", grads[0], np.where(np.isfinite(t), t, np.nan))
        return problems
    if record.name == "qr":  # the poisoned column c enters Q[:, c:], R[c:, c:] and R[:, c] (R[i, j] = q_i^H a_j)
        a = np.asarray(_poisoned(sample, argnum, value).args[0])
        ours = [np.asarray(x) for x in jax.tree.leaves(out)]
        if np.isnan(value):
            b, _, c = np.unravel_index(k, a.shape)
            i, j = np.indices(ours[1].shape[-2:])
            entered = (i <= j) & ((i >= c) | (j == c))
            if not (np.isnan(ours[0][b][:, c:]).all() and np.isnan(ours[1][b][entered]).all()):
                return ["not NaN at every entry of Q[:, c:], R[c:, c:] and R[:, c] (c the poisoned column)"]
            return []
        a[np.isinf(a)] = np.sign(value) * 1e100
        problems = []
        for name, o, limit in zip("QR", ours, np.linalg.qr(a)):
            limit = np.where(np.abs(limit) > 1e90, np.sign(limit) * np.inf, limit)
            if not np.allclose(o[~np.isnan(o)], limit[~np.isnan(o)], rtol=1e-8, atol=1e-12):
                problems.append(f"{name}: entries other than NaN are not the limit (1e100 in place of inf)")
        return problems
    if record.name in ("slogdet", "svdvals"):
        leaves = jax.tree.leaves(out) + (list(grads) if record.name == "svdvals" else [])
        if not all(np.isnan(np.asarray(x)).all() for x in leaves):
            return ["not all NaN"]
    if record.name == "lstsq" and argnum == 1:
        a = np.asarray(sample.args[0])
        expected = np.sign(np.linalg.pinv(a)[:, k]) * value
        if not np.array_equal(np.asarray(out), expected):
            return [f"solution {np.asarray(out)} is not sign(pinv(A)[:, k]) {value} = {expected}"]
    return []


def _jax_differences(record, case, follows, out, grads, ct) -> list[str]:
    """How our value and gradients at ``case`` differ from JAX's own op's (and the value from
    NumPy's): empty when equal (NaN pattern, infinities, finite entries within the tolerance)."""
    program, _ = _program(dataclasses.replace(record, fn=follows.op), case)
    j_out, j_grads = program([np.asarray(case.args[i]) for i in case.diff_argnums()], ct)
    found = _differences("value vs JAX's", out, j_out)
    found += [d for g, jg in zip(grads, j_grads) for d in _differences("gradient vs JAX's", g, jg)]
    if follows.numpy is not None:
        with np.errstate(invalid="ignore"):
            found += _differences("value vs NumPy's", out, follows.numpy(*case.args, **case.kwargs))
    return found


# Records whose non-finite values come from a platform library: LAPACK, pocketfft and XLA's CPU
# convolution on a CPU, as torch's CPU kernels; cuSOLVER, cuFFT and cuDNN on a GPU, which put NaN
# elsewhere (e.g. cuFFT: inf + NaN j where pocketfft gives inf - 2.26j; cuSOLVER's LU: finite where
# LAPACK's is NaN). The tables above pin the CPU's; on a GPU these records are not compared
# (docs/compatibility.md lists what the H200 gives).
PLATFORM_LIBRARY = {"adjugate", "cholesky", "conv", "conv_transpose", "det", "eig", "eigh", "eigvals", "eigvalsh",
                    "fft", "householder_product", "ifft", "ifftn", "irfft", "lu", "lu_factor", "rfft", "solve"}


def _param(record):
    if record.torch_fn is None:
        return pytest.param(record, id=record.name, marks=pytest.mark.skip(reason="no torch reference to compare"))
    if record.name in PLATFORM_LIBRARY and jax.default_backend() != "cpu":
        return pytest.param(record, id=record.name, marks=pytest.mark.skip(
            reason="its non-finite values are cuSOLVER's, cuFFT's or cuDNN's here; the tables pin LAPACK's, "
                   "pocketfft's and XLA's CPU convolution's, as torch's CPU kernels"))
    return pytest.param(record, id=record.name)


@pytest.mark.parametrize("record", [_param(r) for r in COMPARED])
def test_nonfinite_inputs_propagate_like_torch(record):
    torch = _torch()
    sample = _first_sample(record)
    program, ct = _program(record, sample)
    diff = sample.diff_argnums()
    problems = []
    for argnum in diff:
        for poison, value in POISONS.items():
            case = _poisoned(sample, argnum, value)
            key = _case_key(record, argnum, poison)
            case_ct = _generic(ct) if _listed(GENERIC_COTANGENT, key) else ct
            out, grads = program([np.asarray(case.args[i]) for i in diff], case_ct)
            if _listed(TORCH_KERNEL_PATH, key) is not None:
                continue
            raises = _listed(TORCH_RAISES, key)
            try:
                t_out, t_grads = _torch_grads(torch, record, case, case_ct)
            except (RuntimeError, ValueError) as err:  # e.g. LAPACK refusing a NaN matrix
                finite = all(np.isfinite(np.asarray(o, np.complex128)).all() for o in jax.tree.leaves(out))
                if raises is None:
                    problems.append(f"{key}: torch raises {type(err).__name__}: {str(err).splitlines()[0][:100]}")
                elif finite and _listed(OPEN, key) is None:
                    problems.append(f"{key}: a non-finite input gives an all-finite value")
                elif not finite and _listed(OPEN, key) is not None:
                    problems.append(f"{key}: listed ({_listed(OPEN, key)}) but the value is no longer all finite")
                continue
            if raises is not None:
                problems.append(f"{key}: listed ({raises}) but torch does not raise")
                continue
            outs = jax.tree.leaves(out)
            t_outs = list(t_out) if isinstance(t_out, tuple) else [t_out]
            found = [d for k, (o, t) in enumerate(zip(outs, t_outs)) for d in _differences(f"value {k}", o, t)]
            for i, g, tg in zip(diff, grads, t_grads):
                if tg is False:  # torch cannot differentiate this argument (the record says so)
                    continue
                expected = np.zeros_like(np.asarray(g)) if tg is None else tg
                found += _differences(f"gradient of arg{i}", g, expected)
            wrong, reason, follows = _listed(TORCH_WRONG, key), _listed(OPEN, key), _listed(FOLLOWS_JAX, key)
            if wrong is not None and found:
                right = _check_right_answer(record, sample, argnum, value, wrong, out, grads, case_ct)
                problems += [f"{key}: {p}" for p in right]
                continue
            if follows is not None and found:
                problems += [f"{key}: {p}" for p in _jax_differences(record, case, follows, out, grads, case_ct)]
                continue
            reason = wrong or reason or (follows and follows.reason)
            if reason is None and found:
                problems.append(f"{key}: " + "; ".join(found))
            elif reason is not None and not found:
                problems.append(f"{key}: listed ({reason}) but agrees with torch")
    assert not problems, "\n".join(problems)


def test_uncompared_gradients_are_listed():
    """The gradients the main test leaves out (torch cannot differentiate the argument) are exactly
    ``NOT_COMPARED``'s."""
    uncompared = {f"{r.name}/arg{i}" for r in RECORDS if r.torch_fn is not None
                  for i in _first_sample(r).diff_argnums() if i in r.torch_no_grad_args}
    assert uncompared == set(NOT_COMPARED)


def test_platform_library_records_exist():
    assert PLATFORM_LIBRARY <= {r.name for r in RECORDS if r.torch_fn is not None}


def test_every_listed_case_exists():
    """Each key of the tables names a record and matches one of its cases."""
    keys = {_case_key(r, i, p) for r in RECORDS for i in _first_sample(r).diff_argnums() for p in POISONS}
    for table in (TORCH_WRONG, FOLLOWS_JAX, GENERIC_COTANGENT, OPEN, TORCH_RAISES, TORCH_KERNEL_PATH):
        for pattern in table:
            assert any(fnmatch.fnmatchcase(k, pattern) for k in keys), pattern


@pytest.mark.parametrize("name, jax_name", [("elu", "elu"), ("celu", "celu"), ("selu", "selu"),
                                            ("hardswish", "hard_swish")])
def test_activation_gradients_at_nan(name, jax_name):
    """``TORCH_KERNEL_PATH``'s cases: ours is NaN at a NaN entry, in float64 and float32, as torch's
    vectorized loop (entry 0 of 64, inside the vectorized part at any vector width) and JAX's
    autodiff of ``jax.nn``'s; the finite entries' gradients are torch's."""
    torch = _torch()
    fn = getattr(jaxrules.nn, name)
    for dtype in (np.float64, np.float32):
        x = np.linspace(-4, 4, 64).astype(dtype)
        x[0] = np.nan
        grad = np.asarray(jax.grad(lambda v: jnp.sum(fn(v)))(jnp.asarray(x)))
        theirs = np.asarray(jax.grad(lambda v: jnp.sum(getattr(jax.nn, jax_name)(v)))(jnp.asarray(x)))
        t = torch.tensor(x, requires_grad=True)
        getattr(torch.nn.functional, name)(t).sum().backward()
        assert np.isnan(grad[0]) and np.isnan(theirs[0]) and np.isnan(t.grad[0].item())
        np.testing.assert_allclose(grad[1:], t.grad.numpy()[1:], rtol=1e-6)
