"""Registry records of ``jaxrules.ops.elementwise``, in that module's order: samples, singular points,
torch references. Only ``registry.load_records()`` imports them (``import jaxrules`` and its
namespaces never do)."""

from __future__ import annotations

import math

import numpy as np

from jaxrules.ops._sampling import away_from_zero, f64, normal, uniform
from jaxrules.ops.elementwise import (
    abs,
    angle,
    arctan2,
    clip,
    copysign,
    deg2rad,
    i1,
    i1e,
    log1p,
    logit,
    multigammaln,
    polar,
    power,
    rad2deg,
    sign,
    sinc,
    xlogy,
)
from jaxrules.registry import Sample, SingularPoint, record

_NP = "jaxrules.numpy."
_SP = "jaxrules.scipy.special."

record(
    "abs", fn=abs, public=(_NP + "abs", _NP + "absolute"), formula_ops=("abs",), seed=("abs_backward", "sgn"),
    samples=lambda rng, dt: [Sample((away_from_zero(rng, dt, 3, 4),)), Sample((away_from_zero(rng, dt),))],
    torch_fn=lambda torch, x: torch.abs(x), torch_name="torch.abs", dtypes=("float64", "complex128"),
    low_precision=("float32", "bfloat16"),
    singular=(
        SingularPoint("zero and signed zero", (f64(0.0, -0.0, 2.0),), (f64(0, 0, 1),)),
        SingularPoint("complex zero", (np.array([0j, 3 + 4j]),), (np.array([0, 0.6 - 0.8j]),)),
    ),
)
record(
    "sign", fn=sign, public=(_NP + "sign",), formula_ops=("sign",), seed=("sgn_backward",),
    samples=lambda rng, dt: [Sample((away_from_zero(rng, dt, 3, 4),))], torch_fn=lambda torch, x: torch.sgn(x),
    torch_name="torch.sgn / torch.sign", dtypes=("float64", "complex128"),
    singular=(
        SingularPoint("complex zero", (np.array([0j, 1j]),), (np.array([0, 1 + 0j]),)),
        SingularPoint("real zero", (f64(0.0, -1.0),), (f64(0, 0),)),
    ),
    deviations="Complex sign has the derivative of torch.sgn (JAX's is identically 0).",
)
record(
    "angle", fn=angle, public=(_NP + "angle",), formula_ops=("angle",), seed=("angle_backward",),
    samples=lambda rng, dt: [Sample((away_from_zero(rng, dt, 3, 4),)), Sample((away_from_zero(rng, dt, 5),), {"deg": True})],
    torch_fn=lambda torch, x, deg=False: torch.rad2deg(torch.angle(x)) if deg else torch.angle(x),
    torch_name="torch.angle", dtypes=("float64", "complex128"),
    singular=(
        SingularPoint("real input", (f64(-1.0, 0.0, 2.0),), (f64(0, 0, 0),)),
        SingularPoint("complex zero", (np.array([0j, 1 + 1j]),), (np.array([0, -0.5 - 0.5j]),)),
    ),
)
record(
    "arctan2", fn=arctan2, public=(_NP + "arctan2",), formula_ops=("arctan2",), seed=("atan2_backward",),
    samples=lambda rng, dt: [
        Sample((away_from_zero(rng, dt, 3, 4), away_from_zero(rng, dt, 3, 4))),
        Sample((away_from_zero(rng, dt, 3, 1), away_from_zero(rng, dt, 4))),
    ],
    torch_fn=lambda torch, y, x: torch.atan2(y, x), torch_name="torch.atan2",
    rank_promotion="broadcasts its arguments as jax.numpy.arctan2 does",
    singular=(SingularPoint("origin", (f64(0.0, 1.0), f64(0.0, 0.0)), (f64(0, 0), f64(0, -1))),),
    deviations="At (0, 0) both formulas give 0 (the seed's formula is NaN; torch 2.13's VJP "
    "gives 0 and its JVP NaN).",
)
record(
    "power", fn=power, public=(_NP + "power",), formula_ops=("power",),
    seed=("pow_backward_self", "pow_backward_exponent"),
    samples=lambda rng, dt: [
        Sample((uniform(rng, dt, 0.5, 2.0, 3, 4), normal(rng, dt, 3, 4))),
        Sample((uniform(rng, dt, 0.5, 2.0, 3, 1), normal(rng, dt, 4))),
    ] if not np.issubdtype(dt, np.complexfloating) else [
        Sample((normal(rng, dt, 3, 4) + 2, normal(rng, dt, 3, 4))),
    ],
    torch_fn=lambda torch, x, y: torch.pow(x, y), torch_name="torch.pow(Tensor, Tensor)",
    rank_promotion="broadcasts its arguments as jax.numpy.power does",
    dtypes=("float64", "complex128"),
    singular=(
        SingularPoint("zero base, exponents 0 and 2", (f64(0.0, 0.0), f64(0.0, 2.0)), (f64(0, 0), f64(0, 0))),
        SingularPoint(
            "zero base, negative exponent", (f64(0.0, 2.0), f64(-1.0, 0.0)),
            (f64(-np.inf, 0), f64(-np.inf, math.log(2))), finite_second=False,
        ),
    ),
    deviations="",
)
record(
    "power_scalar_exponent", fn=lambda x, e: power(x, e), public=(_NP + "power",),
    formula_ops=("power_scalar_exponent",), seed=("pow_backward",),
    samples=lambda rng, dt: [
        Sample((uniform(rng, dt, 0.5, 2.0, 3, 4), 2.5)),
        Sample((normal(rng, dt, 3, 4), 3)),
        Sample((uniform(rng, dt, 0.5, 2.0, 4), -1.5)),
    ] if not np.issubdtype(dt, np.complexfloating) else [
        Sample((normal(rng, dt, 3, 4), 2)), Sample((normal(rng, dt, 4) + 3, 0.5)),
    ],
    torch_fn=lambda torch, x, e: torch.pow(x, e), torch_name="torch.pow(Tensor, Scalar)",
    dtypes=("float64", "complex128"), low_precision=("float32", "bfloat16"),
    singular=(
        SingularPoint("0 ** 0.0", (f64(0.0), 0.0), (f64(0),)),
        SingularPoint("0 ** 1.0", (f64(0.0), 1.0), (f64(1),)),
        SingularPoint("0 ** 2", (f64(0.0), 2), (f64(0),)),
        SingularPoint("0 ** 0.5", (f64(0.0), 0.5), (f64(np.inf),), finite_second=False),
    ),
)
record(
    "power_scalar_base", fn=lambda b, y: power(b, y), public=(_NP + "power",), formula_ops=("power_scalar_base",),
    seed=("pow_backward_exponent",),
    samples=lambda rng, dt: [Sample((2.0, normal(rng, dt, 3, 4))), Sample((0.5, normal(rng, dt, 4)))],
    torch_fn=lambda torch, b, y: torch.pow(b, y), torch_name="torch.pow(Scalar, Tensor)",
    dtypes=("float64", "complex128"),
    singular=(
        SingularPoint("zero base", (0.0, f64(0.0, 2.0)), (f64(0, 0),)),
        SingularPoint("zero base, negative exponent", (0.0, f64(-1.0)), (f64(-np.inf),), finite_second=False),
    ),
)
record(
    "copysign", fn=copysign, public=(_NP + "copysign",), formula_ops=("copysign",),
    seed=("copysign_tensor_self_backward",),
    samples=lambda rng, dt: [Sample((away_from_zero(rng, dt, 3, 4), away_from_zero(rng, dt, 4)))],
    torch_fn=lambda torch, x, y: torch.copysign(x, y), torch_name="torch.copysign",
    rank_promotion="broadcasts its arguments as jax.numpy.copysign does",
    singular=(
        SingularPoint(
            "zero magnitude", (f64(0.0, -0.0, 2.0, -3.0), f64(-1.0, 1.0, -1.0, 1.0)),
            (f64(0, 0, -1, -1), f64(0, 0, 0, 0)),
        ),
    ),
    deviations="",
)
record(
    "sinc", fn=sinc, public=(_NP + "sinc",), formula_ops=("sinc",), seed=("sinc_backward (derivatives.yaml)",),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 3, 4),)), Sample((f64(1e-4, -3e-3, 0.02).astype(dt),))],
    torch_fn=lambda torch, x: torch.sinc(x), torch_name="torch.sinc",
    singular=(SingularPoint("zero", (f64(0.0),), (f64(0),)),),
)
record(
    "log1p", fn=log1p, public=(_NP + "log1p",), formula_ops=("log1p",), seed=("log1p_backward",),
    samples=lambda rng, dt: [Sample((uniform(rng, dt, -0.5, 2.0, 3, 4),))]
            if not np.issubdtype(dt, np.complexfloating) else [Sample((0.5 * normal(rng, dt, 3, 4),))],
    torch_fn=lambda torch, x: torch.log1p(x), torch_name="torch.log1p", dtypes=("float64", "complex128"),
    low_precision=("float32", "bfloat16"),
    singular=(SingularPoint("pole at -1", (f64(-1.0, 0.0),), (f64(np.inf, 1),), finite_second=False),),
)
record(
    "deg2rad", fn=deg2rad, public=(_NP + "deg2rad", _NP + "radians"), formula_ops=("deg2rad",),
    seed=("deg2rad_backward",), samples=lambda rng, dt: [Sample((normal(rng, dt, 3, 4),))],
    torch_fn=lambda torch, x: torch.deg2rad(x), torch_name="torch.deg2rad",
)
record(
    "rad2deg", fn=rad2deg, public=(_NP + "rad2deg", _NP + "degrees"), formula_ops=("rad2deg",),
    seed=("rad2deg_backward",), samples=lambda rng, dt: [Sample((normal(rng, dt, 3, 4),))],
    torch_fn=lambda torch, x: torch.rad2deg(x), torch_name="torch.rad2deg",
)
record(
    "clip", fn=clip, public=(_NP + "clip",), formula_ops=("clip",),
    seed=("clamp_backward", "clamp_backward_min_max", "clamp_jvp"),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 3, 4), normal(rng, dt, 4) - 1, normal(rng, dt, 4) + 1)),
        Sample((normal(rng, dt, 3, 4), -0.5, 0.5)),
        Sample((normal(rng, dt, 3, 4), normal(rng, dt, 3, 1), normal(rng, dt, 4) - 2)),
    ],
    torch_fn=lambda torch, x, lo, hi: torch.clamp(x, lo, hi), torch_name="torch.clamp",
    rank_promotion="broadcasts its arguments as jax.numpy.clip does",
    low_precision=("float32", "bfloat16"),
    singular=(
        SingularPoint("ties with scalar bounds", (f64(1.0, 2.0, 3.0, 4.0), 2.0, 3.0), (f64(0, 1, 1, 0),)),
        SingularPoint(
            "ties with array bounds", (f64(1.0, 2.0, 3.0, 4.0), f64(2, 2, 2, 2), f64(3, 3, 3, 3)),
            (f64(0, 1, 1, 0), f64(1, 0, 0, 0), f64(0, 0, 0, 1)),
        ),
        SingularPoint("min > max", (f64(1.0, 5.0), f64(3, 3), f64(2, 2)), (f64(0, 0), f64(0, 0), f64(1, 1))),
        SingularPoint(
            "min == max, x below", (f64(1.0), f64(2.0), f64(2.0)), (f64(0), f64(1), f64(0)),
            torch_differs="torch's clamp_backward_min_max gives no gradient to min or max here "
            "while its clamp_jvp gives min's tangent; jaxrules keeps the JVP and makes the VJP its "
            "transpose (min gets the gradient).",
        ),
    ),
    deviations="At min == max with x < min, the gradient goes to min (the transpose of torch's "
    "own clamp_jvp); torch's backward drops it.",
)
record(
    "logit", fn=logit, public=(_SP + "logit",), formula_ops=("logit",),
    seed=("infinitely_differentiable_logit_backward",),
    samples=lambda rng, dt: [
        Sample((uniform(rng, dt, 0.1, 0.9, 3, 4),)),
        Sample((uniform(rng, dt, 0.1, 0.9, 5),), {"eps": 0.05}),
    ],
    torch_fn=lambda torch, x, eps=None: torch.logit(x, eps), torch_name="torch.logit",
    singular=(
        SingularPoint("at eps", (f64(0.1),), (f64(1 / 0.09),), {"eps": 0.1}),
        SingularPoint("below eps", (f64(0.05),), (f64(0),), {"eps": 0.1}),
        SingularPoint("outside [0, 1] without eps", (f64(1.2),), (f64(np.nan),), finite_second=False),
    ),
)
record(
    "i1", fn=i1, public=(_SP + "i1",), formula_ops=("i1",), seed=("i1_backward (derivatives.yaml)",),
    samples=lambda rng, dt: [Sample((2 * normal(rng, dt, 3, 4),))], torch_fn=lambda torch, x: torch.special.i1(x),
    torch_name="torch.special.i1", singular=(SingularPoint("zero", (f64(0.0),), (f64(0.5),)),),
)
record(
    "i1e", fn=i1e, public=(_SP + "i1e",), formula_ops=("i1e",), seed=("i1e_backward (derivatives.yaml)",),
    samples=lambda rng, dt: [Sample((2 * away_from_zero(rng, dt, 3, 4),))],
    torch_fn=lambda torch, x: torch.special.i1e(x), torch_name="torch.special.i1e",
    singular=(SingularPoint("zero", (f64(0.0),), (f64(0.5),)),),
)
record(
    "multigammaln", fn=multigammaln, public=(_SP + "multigammaln",), formula_ops=("multigammaln",),
    seed=("mvlgamma_backward",),
    samples=lambda rng, dt: [Sample((uniform(rng, dt, 2.0, 4.0, 3, 4), 3)), Sample((uniform(rng, dt, 1.0, 3.0, 5), 1))],
    torch_fn=lambda torch, a, d: torch.special.multigammaln(a, d), torch_name="torch.special.multigammaln",
)
record(
    "xlogy", fn=xlogy, public=(_SP + "xlogy",), formula_ops=("xlogy",), seed=("special_xlogy (derivatives.yaml)",),
    samples=lambda rng, dt: [
        Sample((away_from_zero(rng, dt, 3, 4), uniform(rng, dt, 0.5, 2.0, 3, 4))),
        Sample((away_from_zero(rng, dt, 4), uniform(rng, dt, 0.5, 2.0, 3, 1))),
    ],
    torch_fn=lambda torch, x, y: torch.special.xlogy(x, y), torch_name="torch.special.xlogy",
    rank_promotion="broadcasts its arguments as jax.scipy.special.xlogy does",
    singular=(
        SingularPoint("x = 0, y = 1", (f64(0.0), f64(1.0)), (f64(0), f64(0))),
        SingularPoint("x = 0, y = 2: d/dx = log y", (f64(0.0), f64(2.0)), (f64(np.log(2.0)), f64(0))),
        SingularPoint("x = 0, y = -1: torch's mask", (f64(0.0), f64(-1.0)), (f64(0), f64(0))),
        SingularPoint(
            "x = 0, y = 0", (f64(0.0), f64(0.0)), (f64(0), f64(0)),
            torch_differs="torch's y-derivative x/y is NaN at x = y = 0; x log y is identically 0 "
            "along x = 0, so jaxrules gives 0.",
        ),
    ),
    deviations="d/dy at x = y = 0 is 0 (torch: NaN).",
)
record(
    "polar", fn=polar, public=(_NP + "polar",), formula_ops=("polar",), seed=("polar_backward",),
    samples=lambda rng, dt: [
        Sample((uniform(rng, dt, 0.5, 2.0, 3, 4), normal(rng, dt, 3, 4))),
        Sample((uniform(rng, dt, 0.5, 2.0, 3, 1), 3 * normal(rng, dt, 4))),
        Sample((uniform(rng, dt, 0.5, 2.0, 0, 2), normal(rng, dt, 0, 2))),
    ],
    torch_fn=lambda torch, r, theta: torch.polar(*torch.broadcast_tensors(r, theta)), torch_name="torch.polar",
    rank_promotion="broadcasts abs and angle against each other",
    singular=(
        SingularPoint(
            "zero magnitude", (f64(0.0, 0.0), f64(0.5, -2.0)), (f64(math.cos(0.5), math.cos(-2.0)), f64(0, 0)),
            torch_differs="torch's polar_backward takes the phasor as sgn(result), which is 0 at abs = 0, so "
            "abs gets no gradient there (its own JVP gives e^{i angle}); jaxrules gives cos(angle), the "
            "transpose of that JVP.",
        ),
        SingularPoint(
            "negative magnitude", (f64(-1.0), f64(0.5)), (f64(math.cos(0.5)), f64(math.sin(0.5))),
            torch_differs="for abs < 0 torch's sgn(result) is -e^{i angle}, so its backward gives abs the "
            "gradient -cos(angle); d/d abs of abs cos(angle) is cos(angle).",
        ),
    ),
    deviations="abs gets the gradient Re(g e^{i angle}) also at abs <= 0 and at infinite or NaN abs "
    "(torch's backward, through sgn(result), gives 0 at abs = 0, the opposite sign for abs < 0 and NaN "
    "at a non-finite abs; its forward AD agrees with jaxrules); angle gets -abs Im(g e^{i angle}), "
    "+-inf at an infinite abs where torch's is NaN.",
)
