"""Registry records of ``jaxrules.ops.sorting``, in that module's order: samples, singular points,
torch references. Only ``registry.load_records()`` imports them (``import jaxrules`` and its
namespaces never do)."""

from __future__ import annotations

import numpy as np

from jaxrules.ops._sampling import distinct, f64
from jaxrules.ops.sorting import cummax, cummin, nanmedian, quantile, sort, topk
from jaxrules.registry import Sample, SingularPoint, record

_NP = "jaxrules.numpy."
_SELECT = ("value_selecting_reduction_backward",)


def _values_of(fn):
    """The record's function: the values (the indices are integers; tests/test_sorting.py
    compares them with torch's)."""
    return lambda x, *args, **kw: fn(x, *args, **kw).values


def _with_nan(rng, dt, *shape, p=0.25):
    x = distinct(rng, dt, *shape)
    return np.where(rng.uniform(size=shape) < p, np.nan, x).astype(dt)


def _torch_sort(torch, x, axis=-1, descending=False):
    if axis is None:
        x, axis = x.reshape(-1), 0
    return torch.sort(x, dim=axis, descending=descending, stable=True).values


record(
    "sort", fn=sort, public=(_NP + "sort",), formula_ops=("sort",),
    seed=("value_selecting_reduction_backward (sort)", "gather_with_keepdimed_indices"),
    samples=lambda rng, dt: [
        Sample((distinct(rng, dt, 3, 5),)),
        Sample((distinct(rng, dt, 4, 3),), {"axis": 0, "descending": True}),
        Sample((distinct(rng, dt, 2, 3),), {"axis": None}),
    ],
    torch_fn=_torch_sort, torch_name="torch.sort(stable=True)", low_precision=("float32", "bfloat16"),
    singular=(
        SingularPoint("ties", (f64(2.0, 1.0, 2.0, 2.0),), (f64(1, 1, 1, 1),)),
        SingularPoint("NaN and signed zeros", (f64(0.0, np.nan, -0.0, 1.0),), (f64(1, 1, 1, 1),), {"descending": True}),
    ),
)
record(
    "topk", fn=_values_of(topk), public=(_NP + "topk",), formula_ops=("topk",),
    seed=_SELECT + ("gather_with_keepdimed_indices",),
    samples=lambda rng, dt: [
        Sample((distinct(rng, dt, 3, 5), 2)),
        Sample((distinct(rng, dt, 4, 3), 3), {"axis": 0, "largest": False}),
    ],
    torch_fn=lambda torch, x, k, axis=-1, largest=True: torch.topk(x, k, dim=axis, largest=largest).values,
    torch_name="torch.topk",
    singular=(
        SingularPoint("NaN is the largest", (f64(1.0, np.nan, 2.0), 1), (f64(0, 1, 0),)),
        SingularPoint("ties: the earlier positions", (f64(3.0, 1.0, 3.0, 3.0), 2), (f64(1, 0, 1, 0),),
                      torch_differs="torch 2.13 (CPU) returns indices [2, 3] here (gradient [0, 0, 1, 1]): its "
                      "choice among equal values follows its partial sort, undocumented; jaxrules takes the "
                      "earlier positions (the stable order)."),
        SingularPoint("ties, smallest", (f64(3.0, 1.0, 3.0, 1.0, 1.0), 2), (f64(0, 1, 0, 1, 0),), {"largest": False},
                      torch_differs="torch 2.13 (CPU) returns indices [1, 4] here (gradient [0, 1, 0, 0, 1]); "
                      "jaxrules takes the earlier positions [1, 3]."),
    ),
    deviations="Among equal values the indices are the earliest positions (the stable order); torch "
    "2.13's CPU topk picks by its partial sort (topk([3, 1, 3, 3], 2) gives [2, 3]). sorted=False still sorts.",
)


def _cummaxmin_samples(rng, dt):
    return [Sample((distinct(rng, dt, 3, 5),), {"axis": 1}), Sample((distinct(rng, dt, 4, 3),), {"axis": 0})]


record(
    "cummax", fn=_values_of(cummax), public=(_NP + "cummax",), formula_ops=("cummax",), seed=("cummaxmin_backward",),
    samples=_cummaxmin_samples, torch_fn=lambda torch, x, axis: torch.cummax(x, dim=axis).values,
    torch_name="torch.cummax",
    singular=(
        SingularPoint("ties: the later index", (f64(1.0, 3.0, 3.0, 2.0),), (f64(1, 1, 2, 0),), {"axis": 0}),
        SingularPoint("NaN: the latest NaN's index", (f64(1.0, np.nan, 2.0, np.nan, 0.0),), (f64(1, 2, 0, 2, 0),),
                      {"axis": 0}),
    ),
)
record(
    "cummin", fn=_values_of(cummin), public=(_NP + "cummin",), formula_ops=("cummin",), seed=("cummaxmin_backward",),
    samples=_cummaxmin_samples, torch_fn=lambda torch, x, axis: torch.cummin(x, dim=axis).values,
    torch_name="torch.cummin",
    singular=(
        SingularPoint("ties: the later index", (f64(2.0, 1.0, 1.0, 3.0),), (f64(1, 1, 2, 0),), {"axis": 0}),
        SingularPoint("NaN: the latest NaN's index", (f64(1.0, np.nan, 0.0, np.nan, 2.0),), (f64(1, 2, 0, 2, 0),),
                      {"axis": 0}),
    ),
)


def _torch_quantile(torch, x, q, axis=None, method="linear", keepdims=False):
    if method == "inverted_cdf":  # torch has none: the sorted slice's entry at ceil(q n) - 1 (an int axis), NaN
        # for a slice with a NaN
        n = x.shape[axis]
        pos = np.clip(np.ceil(np.asarray(q, np.float64) * n) - 1, 0, n - 1).astype(np.int64)
        picked = torch.movedim(torch.sort(x, dim=axis).values.index_select(axis, torch.tensor(pos.ravel())), axis, 0)
        picked = torch.where(torch.isnan(x).any(dim=axis), torch.nan, picked)  # torch.quantile's NaN rule
        if keepdims:  # x's axis kept with length 1, after q's
            picked = picked.unsqueeze(axis % x.ndim + 1)
        return picked.reshape(picked.shape[1:]) if np.ndim(q) == 0 else picked
    qt = torch.tensor(q, dtype=x.dtype)
    return torch.quantile(x, qt, dim=axis, keepdim=keepdims, interpolation=method)


record(
    "quantile", fn=quantile, public=(_NP + "quantile", _NP + "percentile"), formula_ops=("quantile",),
    seed=("lerp and sort backward (torch's composite quantile)",),
    samples=lambda rng, dt: [
        Sample((distinct(rng, dt, 3, 5), 0.3)),
        Sample((distinct(rng, dt, 3, 6), [0.1, 0.5, 0.85]), {"axis": 1}),
        Sample((distinct(rng, dt, 5, 2), 0.4), {"axis": 0, "method": "midpoint", "keepdims": True}),
        Sample((distinct(rng, dt, 5, 3), [0.2, 0.7]), {"axis": 0, "method": "lower"}),
        Sample((distinct(rng, dt, 5, 3), [0.2, 0.7]), {"axis": 0, "method": "higher"}),
        Sample((distinct(rng, dt, 6, 3), [0.3, 0.9]), {"axis": 0, "method": "nearest"}),
        Sample((distinct(rng, dt, 6, 3), [0.0, 0.2, 0.5, 0.9]), {"axis": 0, "method": "inverted_cdf"}),
    ],
    torch_fn=_torch_quantile, torch_name="torch.quantile (inverted_cdf: torch.sort, index_select)",
    singular=(
        SingularPoint("linear between ties", (f64(3.0, 1.0, 2.0, 2.0, 5.0), 0.3), (f64(0, 0, 0.8, 0.2, 0),)),
        SingularPoint("NaN: the last NaN", (f64(3.0, 1.0, np.nan, 2.0, np.nan), 0.3), (f64(0, 0, 0, 0, 1),)),
        SingularPoint("nearest: half to even", (f64(4.0, 3.0, 2.0, 1.0, 0.0), 0.375), (f64(0, 0, 1, 0, 0),),
                      {"method": "nearest"}),
        SingularPoint("rank on an entry", (f64(4.0, 3.0, 2.0, 1.0, 0.0), 0.5), (f64(0, 0, 1, 0, 0),)),
    ),
    deviations="method='nearest' rounds half to even, as torch and numpy (jax.numpy 0.10.2 rounds half down). "
    "A traced q's derivative is torch's and jax.numpy's ((n - 1)(x[hi] - x[lo]) for linear; "
    "tests/test_sorting.py), not this record's: its q is a static number.",
)


def _torch_nanmedian(torch, x, axis=None, keepdims=False):
    """numpy's even-count nanmedian from torch's lower one: (lower(x) + upper(x)) / 2 with
    upper(x) = -lower(-x)."""
    if axis is None:
        return 0.5 * (torch.nanmedian(x) - torch.nanmedian(-x))
    lower = torch.nanmedian(x, dim=axis, keepdim=keepdims).values
    return 0.5 * (lower - torch.nanmedian(-x, dim=axis, keepdim=keepdims).values)


_TIES = ("Among equal values the index is the stable order's (earlier position first); torch documents no tie rule "
         "for nanmedian's index (its CPU kernel uses nth_element). An all-NaN slice gives index 0 (torch 2.13 CPU: "
         "0 for up to 3 entries, then 2, 2, 3, 5, 6 for 4..8 entries).")
record(
    "nanmedian", fn=nanmedian, public=(_NP + "nanmedian",), formula_ops=("quantile",),
    seed=("lerp and sort backward (torch's composite quantile)",),
    samples=lambda rng, dt: [
        Sample((_with_nan(rng, dt, 3, 5),)),
        Sample((_with_nan(rng, dt, 3, 6),), {"axis": 1}),
        Sample((_with_nan(rng, dt, 4, 3),), {"axis": 0, "keepdims": True}),
    ],
    torch_fn=_torch_nanmedian, torch_name="torch.nanmedian (numpy's even-count convention)",
    singular=(
        SingularPoint("even count with NaN", (f64(4.0, np.nan, 1.0, 3.0, 2.0),), (f64(0, 0, 0, 0.5, 0.5),)),
        SingularPoint("ties: the middle positions", (f64(2.0, 2.0, 2.0, 1.0),), (f64(0.5, 0.5, 0, 0),),
                      torch_differs="torch.nanmedian() without dim spreads its gradient over all entries equal to "
                      "the result (evenly_distribute_backward: 1/2 (1/3 + 1/3) to each 2); jaxrules gives each "
                      "middle order statistic's half to its own position, as nanmedian(dim) does."),
        SingularPoint("all NaN", (f64(np.nan, np.nan),), (f64(1, 0),),
                      torch_differs="torch.nanmedian() spreads the gradient over the NaNs (evenly_distribute_backward, "
                      "[0.5, 0.5]); jaxrules reads position 0, as nanmedian(dim) does."),
    ),
    deviations="Follows numpy: an even count gives the mean of the two middle numbers (torch: the lower one), "
    "half the derivative to each; ties are not spread (torch.nanmedian() without dim spreads over them). " + _TIES,
)
record(
    "nanmedian_with_indices", fn=_values_of(lambda x, **kw: nanmedian(x, return_indices=True, **kw)),
    public=(_NP + "nanmedian(..., return_indices=True)",), formula_ops=("quantile",), seed=_SELECT,
    samples=lambda rng, dt: [
        Sample((_with_nan(rng, dt, 3, 6),), {"axis": 1}),
        Sample((_with_nan(rng, dt, 5, 3),), {"axis": 0, "keepdims": True}),
    ],
    torch_fn=lambda torch, x, axis=-1, keepdims=False: torch.nanmedian(x, dim=axis, keepdim=keepdims).values,
    torch_name="torch.nanmedian(dim)", deviations=_TIES,
    singular=(
        SingularPoint("even count: the lower middle", (f64(4.0, np.nan, 1.0, 3.0, 2.0),), (f64(0, 0, 0, 0, 1),),
                      {"axis": 0}),
        SingularPoint("ties: the derivative to the returned index only", (f64(2.0, np.nan, 2.0, 1.0, 2.0),),
                      (f64(1, 0, 0, 0, 0),), {"axis": 0}),
        SingularPoint("all NaN: index 0", (f64(np.nan, np.nan),), (f64(1, 0),), {"axis": 0}),
    ),
)
