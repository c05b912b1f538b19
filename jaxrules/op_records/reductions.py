"""Registry records of ``jaxrules.ops.reductions``, in that module's order: samples, singular points,
torch references. Only ``registry.load_records()`` imports them (``import jaxrules`` and its
namespaces never do)."""

from __future__ import annotations

import functools

import numpy as np

from jaxrules.ops._sampling import distinct, f64, normal
from jaxrules.ops.reductions import (
    amax,
    amin,
    cumprod,
    cumsum,
    kthvalue,
    logcumsumexp,
    logsumexp,
    max,
    mean,
    median,
    min,
    nansum,
    prod,
    std,
    std_mean,
    sum,
    var,
    var_mean,
)
from jaxrules.registry import Sample, SingularPoint, record

_NP = "jaxrules.numpy."
_CPLX = ("float64", "complex128")


def _axis_samples(make):
    """Samples over the usual axis choices; ``make(rng, dtype, *shape)`` draws the input."""

    def samples(rng, dt):
        return [
            Sample((make(rng, dt, 3, 4),)),
            Sample((make(rng, dt, 3, 4),), {"axis": 1}),
            Sample((make(rng, dt, 2, 3, 4),), {"axis": (0, 2), "keepdims": True}),
            Sample((make(rng, dt, 2, 3),), {"axis": -2}),
        ]

    return samples


def _torch_dim(axis):
    return () if axis is None else axis


record(
    "sum", fn=sum, public=(_NP + "sum",), formula_ops=("sum",), seed=("sum_backward",), samples=_axis_samples(normal),
    torch_fn=lambda torch, x, axis=None, keepdims=False: torch.sum(x, dim=_torch_dim(axis), keepdim=keepdims),
    torch_name="torch.sum", dtypes=_CPLX, low_precision=("float32", "bfloat16"),
)
record(
    "mean", fn=mean, public=(_NP + "mean",), formula_ops=("mean",), seed=("mean_backward",),
    samples=_axis_samples(normal),
    torch_fn=lambda torch, x, axis=None, keepdims=False: torch.mean(x, dim=_torch_dim(axis), keepdim=keepdims),
    torch_name="torch.mean", dtypes=_CPLX, low_precision=("float32", "bfloat16"),
)
record(
    "nansum", fn=nansum, public=(_NP + "nansum",), formula_ops=("nansum",), seed=("nansum_backward",),
    samples=lambda rng, dt: [
        Sample((np.where(rng.uniform(size=(3, 4)) < 0.3, np.nan, normal(rng, dt, 3, 4)).astype(dt),)),
        Sample((normal(rng, dt, 3, 4),), {"axis": 0, "keepdims": True}),
    ],
    torch_fn=lambda torch, x, axis=None, keepdims=False: torch.nansum(x, dim=_torch_dim(axis), keepdim=keepdims),
    torch_name="torch.nansum", singular=(SingularPoint("NaN entry", (f64(1.0, np.nan, 2.0),), (f64(1, 0, 1),)),),
)
record(
    "prod", fn=prod, public=(_NP + "prod",), formula_ops=("prod",), seed=("prod_backward", "prod_safe_zeros_backward"),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 3, 4),)),
        Sample((normal(rng, dt, 3, 4),), {"axis": 1}),
        Sample((normal(rng, dt, 2, 3, 4),), {"axis": -1, "keepdims": True}),
    ],
    torch_fn=lambda torch, x, axis=None, keepdims=False: (torch.prod(x).reshape([1] * x.ndim if keepdims else []) if axis is None else torch.prod(x, dim=axis, keepdim=keepdims)),
    torch_name="torch.prod", dtypes=_CPLX,
    singular=(
        SingularPoint("one zero", (f64(2.0, 0.0, 3.0),), (f64(0, 6, 0),)),
        SingularPoint("two zeros", (f64(0.0, 0.0, 3.0),), (f64(0, 0, 0),)),
        SingularPoint("zero in a row", (np.array([[2.0, 0.0], [3.0, 4.0]]),), (np.array([[0.0, 2.0], [4.0, 3.0]]),), {"axis": 1}),
    ),
)
record(
    "cumsum", fn=cumsum, public=(_NP + "cumsum",), formula_ops=("cumsum",), seed=("cumsum_backward",),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 3, 4),), {"axis": 1}), Sample((normal(rng, dt, 3, 4),))],
    torch_fn=lambda torch, x, axis=None: torch.cumsum(x.reshape(-1) if axis is None else x, dim=0 if axis is None else axis),
    torch_name="torch.cumsum", dtypes=_CPLX,
)
record(
    "cumprod", fn=cumprod, public=(_NP + "cumprod",), formula_ops=("cumprod",),
    seed=("cumprod_backward (derivatives.yaml)",),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 3, 4),), {"axis": 1}), Sample((normal(rng, dt, 2, 3),), {"axis": 0})],
    torch_fn=lambda torch, x, axis=None: torch.cumprod(x.reshape(-1) if axis is None else x, dim=0 if axis is None else axis),
    torch_name="torch.cumprod", dtypes=_CPLX,
    singular=(
        SingularPoint("one zero", (f64(2.0, 0.0, 3.0),), (f64(1, 8, 0),), {"axis": 0}),
        SingularPoint("two zeros", (f64(0.0, 0.0, 3.0),), (f64(1, 0, 0),), {"axis": 0}),
    ),
)


def _var_samples(rng, dt):
    return [
        Sample((normal(rng, dt, 3, 4),)),
        Sample((normal(rng, dt, 3, 4),), {"axis": 1, "ddof": 1}),
        Sample((normal(rng, dt, 2, 3, 4),), {"axis": (0, 2), "keepdims": True}),
    ]


def _torch_var(name):
    def call(torch, x, axis=None, ddof=0, keepdims=False):
        return getattr(torch, name)(x, dim=axis, correction=ddof, keepdim=keepdims)

    return call


record(
    "var", fn=var, public=(_NP + "var",), formula_ops=("var",), seed=("var_backward",), samples=_var_samples,
    torch_fn=_torch_var("var"), torch_name="torch.var", dtypes=_CPLX, low_precision=("float32", "bfloat16"),
    singular=(
        SingularPoint("constant input", (f64(2.0, 2.0, 2.0),), (f64(0, 0, 0),), {"ddof": 1}),
        SingularPoint(
            "N - correction = 0", (f64(1.0, 3.0),), (f64(-np.inf, np.inf),), {"ddof": 2}, finite_second=False,
            torch_differs="torch's var_backward gives +inf at both entries; the derivative "
            "2(x - mean)/0 has the sign of x - mean.",
        ),
    ),
    deviations="With N - correction <= 0 the value is NaN, as in jax.numpy (torch: inf), and "
    "the gradient +-inf with the sign of x - mean (torch: +inf everywhere).",
)
record(
    "std", fn=std, public=(_NP + "std",), formula_ops=("std",), seed=("std_backward",), samples=_var_samples,
    torch_fn=_torch_var("std"), torch_name="torch.std", dtypes=_CPLX, low_precision=("float32", "bfloat16"),
    singular=(
        SingularPoint("constant input", (f64(2.0, 2.0, 2.0),), (f64(0, 0, 0),), {"ddof": 1}),
        SingularPoint("constant rows", (np.full((2, 3), 5.0),), (np.zeros((2, 3)),), {"axis": 1}),
    ),
)


def _torch_moments(name):
    def call(torch, x, axis=None, correction=1, keepdims=False):
        return getattr(torch, name)(x, dim=axis, correction=correction, keepdim=keepdims)

    return call


def _moment_samples(rng, dt):
    return [
        Sample((normal(rng, dt, 3, 4),)),
        Sample((normal(rng, dt, 3, 4),), {"axis": 0, "correction": 0, "keepdims": True}),
    ]


record(
    "var_mean", fn=var_mean, public=(_NP + "var_mean",), formula_ops=("var_mean",), seed=("var_mean_backward",),
    samples=_moment_samples, torch_fn=_torch_moments("var_mean"), torch_name="torch.var_mean", dtypes=_CPLX,
    singular=(SingularPoint("constant input", (f64(2.0, 2.0, 2.0),), (f64(1, 1, 1) / 3,)),),
)
record(
    "std_mean", fn=std_mean, public=(_NP + "std_mean",), formula_ops=("std_mean",), seed=("std_mean_backward",),
    samples=_moment_samples, torch_fn=_torch_moments("std_mean"), torch_name="torch.std_mean", dtypes=_CPLX,
    singular=(SingularPoint("constant input", (f64(2.0, 2.0, 2.0),), (f64(1, 1, 1) / 3,)),),
)


def _torch_extremum(full, along):
    """torch.max()/min() for a full reduction (NaN-aware evenly_distribute_backward), torch.amax/
    amin along axes."""

    def call(torch, x, axis=None, keepdims=False):
        if axis is None and not keepdims:
            return getattr(torch, full)(x)
        return getattr(torch, along)(x, dim=_torch_dim(axis), keepdim=keepdims)

    return call


def _selection_singular(sign):
    return (
        SingularPoint("ties", (sign * f64(1.0, 3.0, 3.0),), (f64(0, 0.5, 0.5),)),
        SingularPoint("NaN", (sign * f64(1.0, np.nan, 2.0),), (f64(0, 1, 0),)),
        SingularPoint("two NaNs", (sign * f64(1.0, np.nan, np.nan),), (f64(0, 0.5, 0.5),)),
        SingularPoint("ties along an axis", (sign * np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]]),),
                      (np.array([[0, 0.5, 0.5], [0.5, 0.5, 0]]),), {"axis": 1}),
    )


record(
    "amax", fn=amax, public=(_NP + "max", _NP + "amax"), formula_ops=("amax",),
    seed=("evenly_distribute_backward", "scale_grad_by_count", "evenly_read_jvp"), samples=_axis_samples(distinct),
    torch_fn=_torch_extremum("max", "amax"), torch_name="torch.max() / torch.amax",
    low_precision=("float32", "bfloat16"), singular=_selection_singular(1.0),
    deviations="The JVP handles NaN like the VJP (the seed's evenly_read_jvp ignores NaN).",
)
record(
    "amin", fn=amin, public=(_NP + "min", _NP + "amin"), formula_ops=("amin",),
    seed=("evenly_distribute_backward", "scale_grad_by_count", "evenly_read_jvp"), samples=_axis_samples(distinct),
    torch_fn=_torch_extremum("min", "amin"), torch_name="torch.min() / torch.amin", singular=_selection_singular(-1.0),
)


def _torch_selection(name):
    def fn(torch, x, *args, axis=-1, keepdims=False):
        return getattr(torch, name)(x, *args, dim=axis, keepdim=keepdims).values

    return fn


def _values_of(fn):
    """The record's function: the values (the indices are integers; tests/test_indexing.py
    compares them with torch's)."""
    return lambda x, *args, **kw: fn(x, *args, **kw).values


def _selection_samples(rng, dt):
    return [Sample((distinct(rng, dt, 3, 5),), {"axis": 1}), Sample((distinct(rng, dt, 4, 3),), {"axis": 0, "keepdims": True})]


_TIE_INDEX = (
    "Among equal values the index is the stable sort's (earlier position first); torch documents no "
    "tie rule for median/kthvalue indices. Values and the single-index gradient agree with torch."
)
for _name, _fn, _point in (
    ("max", max, (f64(3.0, 1.0, 3.0), (f64(1, 0, 0),))),
    ("min", min, (f64(1.0, 3.0, 1.0), (f64(1, 0, 0),))),
    ("median", median, (f64(2.0, 2.0, 1.0, 5.0), (f64(1, 0, 0, 0),))),
):
    record(
        f"{_name}_with_indices", fn=_values_of(functools.partial(_fn, return_indices=True)),
        public=(_NP + f"{_name}(..., return_indices=True)",), formula_ops=("value_selection",),
        seed=("value_selecting_reduction_backward", "value_selecting_reduction_jvp"), samples=_selection_samples,
        torch_fn=_torch_selection(_name), torch_name=f"torch.{_name}(dim)",
        singular=(SingularPoint("ties: the derivative to the returned index only", (_point[0],), _point[1],
                                {"axis": 0}),),
        deviations=_TIE_INDEX if _name == "median" else "",
    )
record(
    "kthvalue", fn=_values_of(kthvalue), public=(_NP + "kthvalue",), formula_ops=("value_selection",),
    seed=("value_selecting_reduction_backward", "value_selecting_reduction_jvp"),
    samples=lambda rng, dt: [Sample((distinct(rng, dt, 3, 5), 2)), Sample((distinct(rng, dt, 4, 3), 4), {"axis": 0})],
    torch_fn=lambda torch, x, k, axis=-1, keepdims=False: torch.kthvalue(x, k, dim=axis, keepdim=keepdims).values,
    torch_name="torch.kthvalue", deviations=_TIE_INDEX,
    singular=(SingularPoint("ties: the derivative to the returned index only", (f64(2.0, 1.0, 2.0), 2), (f64(1, 0, 0),),
                            {"axis": 0}),),
)


def _torch_median(torch, x, axis=None, keepdims=False):
    """numpy's median from torch's lower median: (lower(x) + upper(x))/2 with
    upper(x) = -lower(-x); a full reduction uses torch.median()'s evenly_distribute_backward."""
    if axis is None:
        return 0.5 * (torch.median(x) - torch.median(-x))
    lower = torch.median(x, dim=axis, keepdim=keepdims).values
    return 0.5 * (lower - torch.median(-x, dim=axis, keepdim=keepdims).values)


record(
    "median", fn=median, public=(_NP + "median",), formula_ops=("median",),
    seed=("evenly_distribute_backward", "evenly_read_jvp"),
    samples=lambda rng, dt: [
        Sample((distinct(rng, dt, 3, 5),)),
        Sample((distinct(rng, dt, 3, 4),)),
        Sample((distinct(rng, dt, 3, 5),), {"axis": 1}),
        Sample((distinct(rng, dt, 4, 3),), {"axis": 0, "keepdims": True}),
    ],
    torch_fn=_torch_median, torch_name="torch.median (numpy's even-count convention)",
    singular=(
        SingularPoint("ties", (f64(1.0, 3.0, 3.0),), (f64(0, 0.5, 0.5),)),
        SingularPoint("even count", (f64(4.0, 1.0, 3.0, 2.0),), (f64(0, 0, 0.5, 0.5),)),
    ),
    deviations="Follows numpy: the median of an even count is the mean of the two middle values "
    "(torch.median returns the lower one).",
)
record(
    "logsumexp", fn=logsumexp, public=("jaxrules.nn.logsumexp", "jaxrules.scipy.special.logsumexp"),
    formula_ops=("logsumexp",), seed=("logsumexp_backward",), samples=_axis_samples(normal),
    torch_fn=lambda torch, x, axis=None, keepdims=False: torch.logsumexp(x, dim=tuple(range(x.ndim)) if axis is None else axis, keepdim=keepdims),
    torch_name="torch.logsumexp", dtypes=_CPLX, low_precision=("float32", "bfloat16"),
    singular=(
        SingularPoint("one -inf", (f64(-np.inf, 0.0),), (f64(0, 1),)),
        SingularPoint("all -inf", (f64(-np.inf, -np.inf),), (f64(0.5, 0.5),),
                      torch_differs="torch gives NaN; jaxrules gives the softmax's limit (even weights)."),
        SingularPoint("+inf entry", (f64(np.inf, 1.0),), (f64(1, 0),),
                      torch_differs="torch gives [NaN, 0]; jaxrules gives the softmax's limit."),
    ),
    deviations="All -inf and +inf inputs get the softmax's limit (even weights over the "
    "entries equal to the result) instead of NaN. Complex gradients follow JAX's convention "
    "(the seed's formula lacks torch's later .conj()).",
)


record(
    "logcumsumexp", fn=logcumsumexp, public=(_NP + "logcumsumexp",), formula_ops=("logcumsumexp",),
    seed=("logcumsumexp_backward", "logcumsumexp_jvp"),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 3, 5),), {"axis": 1}),
        Sample((normal(rng, dt, 4, 2),), {"axis": 0}),
        Sample((3 * normal(rng, dt, 6),), {"axis": -1}),
    ],
    torch_fn=lambda torch, x, axis: torch.logcumsumexp(x, dim=axis),
    torch_name="torch.logcumsumexp", dtypes=_CPLX,
    singular=(
        SingularPoint(
            "leading -inf", (f64(-np.inf, -np.inf, 0.0),), (f64(1.5, 0.5, 1),), {"axis": 0},
            jvp=f64(1, 1, 1),
            torch_differs="torch's backward is NaN after leading -inf; jaxrules gives the limit "
            "(y_0 = x_0 exactly; even weights while all entries are -inf).",
        ),
        SingularPoint(
            "precision", (f64(-40.0, 0.0),), (f64(1, 1),), {"axis": 0}, jvp=f64(1, 1),
            torch_differs="torch's JVP gives 4.2e-5 for the first entry (exact: 1).",
        ),
    ),
    deviations="JVP exact (torch's loses precision: x=[-40, 0] gives 4.2e-5 instead of 1); both "
    "formulas finite after leading -inf (torch: NaN). Complex values on torch's branch (each step "
    "keeps its dominant term's imaginary part), not log's principal one.",
)
