"""Drop-in replacements for ``jax.numpy`` functions, with hand-written derivative rules:
``import jaxrules.numpy as jnp``. Also ``var_mean``, ``std_mean`` and ``logcumsumexp``
(torch's names), which ``jax.numpy`` lacks. Every other public name of ``jax.numpy`` is JAX's own
object (``jaxrules.numpy.float32 is jax.numpy.float32``); the array-API aliases ``pow``,
``atan2`` are jaxrules' ``power``, ``arctan2``; ``concat`` runs ``concatenate``."""

import jax.numpy as _jax_namespace

from jaxrules import _namespace
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
from jaxrules.ops.indexing import index_reduce, scatter_reduce
from jaxrules.ops.linalg import matmul
from jaxrules.ops.reductions import (
    amax,
    amin,
    cumprod,
    cumsum,
    kthvalue,
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
from jaxrules.ops.shape import (
    array_split,
    concat,
    concatenate,
    masked_fill,
    pad,
    repeat,
    split,
    stack,
    take,
    take_along_axis,
    tile,
    unstack,
)
from jaxrules.ops.sorting import argsort, cummax, cummin, nanmedian, quantile, sort, topk

__all__ = [
    "abs", "absolute", "amax", "amin", "angle", "arctan2", "array_split", "clip", "concatenate", "copysign",
    "cumprod", "cumsum", "deg2rad", "degrees", "fft", "index_reduce", "kthvalue", "linalg", "log1p", "logcumsumexp",
    "masked_fill", "matmul", "max", "mean", "median", "min", "nansum", "pad", "power", "prod", "rad2deg", "radians",
    "repeat", "scatter_reduce", "sign", "sinc", "split", "stack", "std", "std_mean", "sum", "take", "take_along_axis",
    "tile", "unstack", "var", "var_mean", "pow", "atan2", "concat",
]

__all__ += ["argsort", "cummax", "cummin", "nanmedian", "quantile", "sort", "topk"]

pow, atan2 = power, arctan2  # the array-API spellings: one op, one gradient

_namespace.forward_jax_names(globals(), _jax_namespace)
