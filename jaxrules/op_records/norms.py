"""Registry records of ``jaxrules.ops.norms``, in that module's order: samples, singular points,
torch references. Only ``registry.load_records()`` imports them (``import jaxrules`` and its
namespaces never do)."""

from __future__ import annotations

import math

import numpy as np

from jaxrules.ops._sampling import away_from_zero, f64, normal
from jaxrules.ops.norms import (
    cdist,
    cosine_similarity,
    dist,
    norm,
    normalize,
    pairwise_distance,
    pdist,
    renorm,
    vector_norm,
)
from jaxrules.registry import Sample, SingularPoint, record

_ORDS = (2, 1, math.inf, -math.inf, 0.5, 3, 1.5)


def _norm_samples(rng, dt):
    out = [Sample((away_from_zero(rng, dt, 3, 4),), {"ord": o}) for o in _ORDS]
    out.append(Sample((normal(rng, dt, 2, 3, 4),), {"axis": (0, 2), "keepdims": True}))
    out.append(Sample((normal(rng, dt, 3, 4),), {"axis": 1, "ord": 3}))
    return out


def _torch_vector_norm(torch, x, axis=None, keepdims=False, ord=2):
    return torch.linalg.vector_norm(x, ord=ord, dim=axis, keepdim=keepdims)


_ZERO = np.zeros(3)
_norm_singular = tuple(
    SingularPoint(f"zero vector, ord={o}", (_ZERO,), (_ZERO,), {"ord": o}) for o in (2, 1, math.inf, -math.inf, 0.5, 3, 1.5)
) + (
    SingularPoint("zero entry, ord=0.5", (f64(0.0, 2.0, -1.0),), (f64(0, 2**-0.5 * (1 + 2**0.5), -(1 + 2**0.5)),), {"ord": 0.5}),
    SingularPoint("zero entry, ord=1", (f64(0.0, 2.0, -1.0),), (f64(0, 1, -1),), {"ord": 1}),
    SingularPoint("inf-norm ties", (f64(3.0, -3.0, 1.0),), (f64(0.5, -0.5, 0),), {"ord": math.inf}),
    SingularPoint("complex zero", (np.zeros(2, complex),), (np.zeros(2, complex),)),
    SingularPoint(
        "ord=0", (f64(0.0, 2.0, -1.0),), (f64(0, 0, 0),), {"ord": 0},
        torch_differs="torch's norm_backward leaves ord 0 undefined (no gradient); the count of "
        "nonzeros is locally constant, so jaxrules gives 0.",
    ),
)

record(
    "vector_norm", fn=vector_norm, public=("jaxrules.numpy.linalg.vector_norm",), formula_ops=("vector_norm",),
    seed=("norm_backward", "norm_jvp", "linalg_vector_norm_backward", "linalg_vector_norm_jvp"), samples=_norm_samples,
    torch_fn=_torch_vector_norm, torch_name="torch.linalg.vector_norm", dtypes=("float64", "complex128"),
    low_precision=("float32", "bfloat16"), singular=_norm_singular,
    deviations="ord=0 has gradient 0 (torch: undefined). The zero subgradient also holds at "
    "second order (torch's second derivative at 0 is NaN, functorch#1097).",
)


def _torch_norm(torch, x, ord=None, axis=None, keepdims=False):
    return torch.linalg.norm(x, ord=ord, dim=axis, keepdim=keepdims)


record(
    "norm", fn=norm, public=("jaxrules.numpy.linalg.norm",),
    formula_ops=("vector_norm", "abs", "sum", "amax", "amin", "svdvals"), seed=("norm_backward", "norm_jvp"),
    samples=lambda rng, dt: [
        Sample((away_from_zero(rng, dt, 4),)),
        Sample((away_from_zero(rng, dt, 3, 4),)),
        Sample((away_from_zero(rng, dt, 3, 4),), {"ord": 1, "axis": 1}),
        Sample((away_from_zero(rng, dt, 2, 3, 4),), {"ord": "fro", "axis": (0, 2)}),
    ] + ([] if np.issubdtype(dt, np.complexfloating) else [
        Sample((away_from_zero(rng, dt, 3, 4),), {"ord": o}) for o in (1, -1, math.inf, -math.inf)
    ]) + [Sample((normal(rng, dt, 3, 4),), {"ord": o}) for o in (2, -2, "nuc")]
    + [Sample((normal(rng, dt, 2, 3, 4),), {"ord": "nuc", "axis": (0, 2), "keepdims": True})],
    torch_fn=_torch_norm, torch_name="torch.linalg.norm", dtypes=("float64", "complex128"),
    singular=(SingularPoint("zero matrix", (np.zeros((2, 2)),), (np.zeros((2, 2)),)),),
)


def _renorm_samples(rng, dt):
    x = normal(rng, dt, 3, 4)
    x[1] *= 0.1  # one slice under maxnorm, the others over
    return [
        Sample((x, 2, 0, 1.0)),
        Sample((normal(rng, dt, 2, 3, 2), 1, 1, 0.5)),
        Sample((normal(rng, dt, 3, 4), 3, 1, 1.2)),
    ]


record(
    "renorm", fn=renorm, public=("jaxrules.linalg.renorm",), formula_ops=("renorm",),
    seed=("renorm_backward", "renorm_jvp"), samples=_renorm_samples,
    torch_fn=lambda torch, x, p, dim, maxnorm: torch.renorm(x, p, dim, maxnorm), torch_name="torch.renorm",
    dtypes=("float64", "complex128"),
    singular=(
        SingularPoint(
            "all-zero slice", (np.array([[0.0, 0.0], [3.0, 4.0]]), 2, 0, 1.0),
            (np.array([[1.0, 1.0], [0.2 - 0.6 * 7 / 25, 0.2 - 0.8 * 7 / 25]]),),
        ),
    ),
    tolerance={"singular": 1e-7},  # the expected values leave out torch's 1e-7 in norm + 1e-7
)
record(
    "dist", fn=dist, public=("jaxrules.linalg.dist",), formula_ops=("vector_norm",), seed=("norm_backward", "norm_jvp"),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 3, 4), normal(rng, dt, 3, 4))),
        Sample((normal(rng, dt, 3, 4), normal(rng, dt, 4), 1)),
        Sample((normal(rng, dt, 5), normal(rng, dt, 5), 3.5)),
    ],
    torch_fn=lambda torch, x, y, p=2: torch.dist(x, y, p), torch_name="torch.dist",
    rank_promotion="broadcasts x and y as torch.dist does", dtypes=("float64", "complex128"),
    singular=(SingularPoint("zero distance", (f64(1.0, 2.0), f64(1.0, 2.0)), (f64(0, 0), f64(0, 0))),),
)
record(
    "cdist", fn=cdist, public=("jaxrules.linalg.cdist",), formula_ops=("vector_norm",),
    seed=("norm_backward", "_euclidean_dist_backward"),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 4, 3), normal(rng, dt, 5, 3))),
        Sample((normal(rng, dt, 2, 4, 3), normal(rng, dt, 2, 2, 3), 1.0)),
        Sample((normal(rng, dt, 3, 2), normal(rng, dt, 4, 2), 3.0)),
    ],
    torch_fn=lambda torch, x1, x2, p=2.0: torch.cdist(x1, x2, p), torch_name="torch.cdist",
    singular=(
        SingularPoint(
            "coincident points", (np.array([[0.0, 0.0], [1.0, 1.0]]), np.array([[0.0, 0.0]])),
            (np.array([[0.0, 0.0], [2**-0.5, 2**-0.5]]), np.array([[-(2**-0.5), -(2**-0.5)]])),
        ),
    ),
)
record(
    "normalize", fn=normalize, public=("jaxrules.nn.normalize",), formula_ops=("vector_norm", "clip"),
    seed=("norm_backward", "clamp_backward"),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 3, 4),)),
        Sample((normal(rng, dt, 2, 3, 4), 1.0, -1)),
        Sample((normal(rng, dt, 5), 3.0, 0, 1e-3)),
    ],
    torch_fn=lambda torch, x, p=2.0, axis=1, eps=1e-12: torch.nn.functional.normalize(x, p, axis, eps),
    torch_name="torch.nn.functional.normalize",
    singular=(SingularPoint("zero vector", (f64(0.0, 0.0, 0.0), 2.0, 0, 0.5), (f64(2.0, 2.0, 2.0),)),),
)
record(
    "pairwise_distance", fn=pairwise_distance, public=("jaxrules.nn.pairwise_distance",), formula_ops=("vector_norm",),
    seed=("norm_backward",),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 4, 3), normal(rng, dt, 4, 3))),
        Sample((normal(rng, dt, 4, 3), normal(rng, dt, 3), 1.0, 1e-6, True)),
        Sample((normal(rng, dt, 5), normal(rng, dt, 5), 3.0)),
    ],
    torch_fn=lambda torch, x1, x2, p=2.0, eps=1e-6, keepdims=False: torch.nn.functional.pairwise_distance(x1, x2, p, eps, keepdims),
    torch_name="torch.nn.functional.pairwise_distance",
    rank_promotion="broadcasts x1 and x2 as torch.nn.functional.pairwise_distance does",
    singular=(SingularPoint("equal points", (f64(1.0, 2.0), f64(1.0, 2.0), 2.0, 0.0), (f64(0, 0), f64(0, 0))),),
)
record(
    "cosine_similarity", fn=cosine_similarity, public=("jaxrules.nn.cosine_similarity",),
    formula_ops=("vector_norm", "clip", "sum"), seed=("norm_backward", "clamp_backward", "sum_backward"),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 4, 3), normal(rng, dt, 4, 3))),
        Sample((normal(rng, dt, 2, 3, 4), normal(rng, dt, 3, 1), -1)),
        Sample((normal(rng, dt, 5), normal(rng, dt, 5), 0, 1e-3)),
        Sample((normal(rng, dt, 3, 4), normal(rng, dt, 3, 4), 0)),
        Sample((normal(rng, dt, 0, 3), normal(rng, dt, 0, 3))),  # zero-size: no formula runs, as torch
    ],
    torch_fn=lambda torch, x1, x2, axis=1, eps=1e-8: torch.nn.functional.cosine_similarity(x1, x2, axis, eps),
    torch_name="torch.nn.functional.cosine_similarity",
    singular=(
        # x1 = 0: the output is <x1, x2 / ||x2||> / eps near it: gradient x2 / (3 eps) in x1, 0 in x2.
        SingularPoint("zero x1", (f64(0.0, 0.0, 0.0), f64(1.0, 2.0, 2.0), 0), (f64(1.0, 2.0, 2.0) / 3e-8, f64(0, 0, 0))),
        SingularPoint("both zero", (f64(0.0, 0.0, 0.0), f64(0.0, 0.0, 0.0), 0), (f64(0, 0, 0), f64(0, 0, 0))),
        # 0 < ||x1|| = 1e-9 < eps: still linear in x1 (gradient x2 / (3 eps)); in x2 the gradient
        # is (x1 / eps)(I - u u^T) / ||x2||, u = x2 / ||x2||: 0.1 (e1 - u / 3) / 3.
        SingularPoint("x1 below eps", (f64(1e-9, 0.0, 0.0), f64(1.0, 2.0, 2.0), 0),
                      (f64(1.0, 2.0, 2.0) / 3e-8, f64(0.8 / 27, -0.2 / 27, -0.2 / 27)),
                      torch_differs="torch's clamp of the norm (in place, under no_grad) keeps the norm's "
                      "gradient: 3.0e7 for x1's first entry instead of 3.33e7; the forward is linear in x1 there."),
    ),
    deviations="Finite second derivatives at a zero vector (torch: NaN); below eps the norm's gradient is "
    "dropped, as the forward's (torch keeps it through its no_grad clamp).",
)
record(
    "pdist", fn=pdist, public=("jaxrules.nn.pdist",), formula_ops=("vector_norm",),
    seed=("_pdist_backward", "norm_backward"),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 4, 3),)),
        Sample((normal(rng, dt, 5, 2), 1.0)),
        Sample((normal(rng, dt, 3, 4), 3.0)),
        Sample((normal(rng, dt, 3, 4), 0.5)),
        Sample((normal(rng, dt, 4, 3), np.inf)),
    ],
    torch_fn=lambda torch, x, p=2.0: torch.nn.functional.pdist(x, p), torch_name="torch.nn.functional.pdist",
    singular=(
        # Rows 0 and 1 coincide: that distance has the zero subgradient; the others 5 = ||(3, 4)||.
        SingularPoint("coincident rows", (np.array([[1.0, 2.0], [1.0, 2.0], [4.0, 6.0]]),),
                      (np.array([[-0.6, -0.8], [-0.6, -0.8], [1.2, 1.6]]),)),
        SingularPoint("coincident rows, p=1", (np.array([[1.0, 2.0], [1.0, 2.0], [4.0, 6.0]]), 1.0),
                      (np.array([[-1.0, -1.0], [-1.0, -1.0], [2.0, 2.0]]),)),
    ),
    deviations="Finite second derivatives at coincident rows (torch has no double backward for pdist).",
)
