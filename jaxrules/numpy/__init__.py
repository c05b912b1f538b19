"""Drop-in replacements for ``jax.numpy`` functions, with hand-written derivative rules:
``import jaxrules.numpy as jnp``. Also ``var_mean``, ``std_mean`` and ``logcumsumexp``
(torch's names), which ``jax.numpy`` lacks."""

from jaxrules.numpy import fft, linalg
from jaxrules.ops.elementwise import (
    abs,
    absolute,
    angle,
    arctan2,
    clip,
    copysign,
    deg2rad,
    degrees,
    log1p,
    power,
    rad2deg,
    radians,
    sign,
    sinc,
)
from jaxrules.ops.indexing import scatter_reduce
from jaxrules.ops.linalg import matmul
from jaxrules.ops.reductions import (
    amax,
    amin,
    cumprod,
    cumsum,
    logcumsumexp,
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
from jaxrules.ops.shape import concatenate, masked_fill, pad, stack, take_along_axis

__all__ = [
    "abs", "absolute", "amax", "amin", "angle", "arctan2", "clip", "concatenate", "copysign", "cumprod",
    "cumsum", "deg2rad", "degrees", "fft", "linalg", "log1p", "logcumsumexp", "masked_fill", "matmul", "max",
    "mean", "median", "min", "nansum", "pad", "power", "prod", "rad2deg", "radians", "scatter_reduce",
    "sign", "sinc", "stack", "std", "std_mean", "sum", "take_along_axis", "var", "var_mean",
]
