"""Convolution and max pooling with torch.nn.functional's semantics (channels first:
(N, C, *spatial), 1 to 3 spatial axes): ``jaxrules.nn.conv`` (``conv1d``/``conv2d``/``conv3d``)
and ``jaxrules.nn.max_pool`` (``max_pool1d``/``2d``/``3d``). Formulas in ``jvp_rules`` /
``vjp_rules``; the convolution algebra in ``partials``."""

from __future__ import annotations

import math
import numbers

import jax.numpy as jnp
import numpy as np

from jaxrules import _validate as V
from jaxrules import jvp_rules as J
from jaxrules import partials as P
from jaxrules import vjp_rules as R
from jaxrules.mechanism import define_op
from jaxrules.ops._sampling import distinct, f64, normal
from jaxrules.registry import OpRecord, Sample, SingularPoint, register


def _convolution_primal(x, w, b, *, stride, padding, dilation, groups):
    return P.conv(x, w, stride, padding, dilation, groups) + P.bias_view(b, x.ndim)


convolution_op = define_op("convolution", _convolution_primal, J.convolution_jvp, R.convolution_vjp,
                           lambda out, x, w, b, **_: (x, w))


def _window_positions(spatial, kernel, stride, padding, dilation):
    """Static (prod(kernel), *out) flat input positions of every window element, row-major in
    the window; -1 where the window covers padding."""
    axes = []
    for n, k, s, (lo, hi), d in zip(spatial, kernel, stride, padding, dilation):
        out = (n + lo + hi - d * (k - 1) - 1) // s + 1
        pos = np.arange(out)[None, :] * s + np.arange(k)[:, None] * d - lo  # (k, out)
        axes.append(np.where((pos >= 0) & (pos < n), pos, -1))
    grids = np.meshgrid(*[np.arange(a.shape[0]) for a in axes], *[np.arange(a.shape[1]) for a in axes], indexing="ij")
    dims = len(axes)
    coords = [axes[i][grids[i], grids[dims + i]] for i in range(dims)]
    inside = np.all([c >= 0 for c in coords], axis=0)
    flat = np.ravel_multi_index([np.maximum(c, 0) for c in coords], spatial)
    flat = np.where(inside, flat, -1)
    return flat.reshape(math.prod(kernel), *flat.shape[dims:])


def _max_pool_index(x, *, kernel, stride, padding, dilation, **_):
    """torch's index: the first maximum in the window's row-major order (NaN wins; padding
    never does)."""
    positions = _window_positions(x.shape[2:], kernel, stride, padding, dilation)
    planes = x.reshape(x.shape[:2] + (-1,))
    padded = jnp.concatenate([planes, jnp.full(x.shape[:2] + (1,), -jnp.inf, x.dtype)], axis=2)
    windows = padded[:, :, np.where(positions >= 0, positions, planes.shape[2])]  # (N, C, prod(kernel), *out)
    pick = jnp.argmax(windows, axis=2)  # NaN counts as the maximum; the first maximum wins
    rest = tuple(np.indices(positions.shape[1:], sparse=True))
    return jnp.asarray(positions)[(pick, *rest)].astype(jnp.int32)


def _max_pool_primal(x, **static):
    index = _max_pool_index(x, **static)
    return P.pool_flat_gather(x, index), index


max_pool_op = define_op("max_pool", _max_pool_primal, J.max_pool_jvp, R.max_pool_vjp,
                        lambda out, x, **_: out[1])


# ----------------------------------------------------------------------------------------------
# Argument handling (torch's: an int or one value per spatial axis)


def _per_axis(op, name, value, dims, minimum):
    values = (value,) * dims if isinstance(value, numbers.Integral) else tuple(value)
    if len(values) != dims or not all(isinstance(v, numbers.Integral) and v >= minimum for v in values):
        raise ValueError(f"{op}: {name} must be an int >= {minimum} or {dims} of them, got {value!r}")
    return tuple(int(v) for v in values)


def _input(op, x, dims_hint=None):
    x = V.array(op, "input", x)
    if jnp.iscomplexobj(x):
        raise TypeError(f"{op}: input must be real, got {x.dtype}")
    if x.ndim < 3 or x.ndim > 5 or (dims_hint is not None and x.ndim != dims_hint + 2):
        want = "(N, C, *spatial) with 1 to 3 spatial axes" if dims_hint is None else f"rank {dims_hint + 2}"
        raise ValueError(f"{op}: input must have {want}, got shape {x.shape}")
    return x


def conv(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002 - torch's name
    """torch.nn.functional.conv1d/2d/3d (the rank comes from ``weight`` (O, C / groups,
    *kernel)); ``padding`` an int, one per axis, ``'valid'`` or ``'same'`` (stride 1). JVP seed
    ``convolution_jvp``; VJP ``convolution_backward`` (transposed convolution for the input,
    correlation for the weight, sums for the bias); double backward: JAX's derivative of the VJP
    (seed ``_convolution_double_backward``)."""
    w = V.array("conv", "weight", weight)
    dims = w.ndim - 2
    if dims not in (1, 2, 3):
        raise ValueError(f"conv: weight must have shape (out, in / groups, *kernel) with 1 to 3 kernel axes, got {w.shape}")
    x = _input("conv", input, dims)
    if isinstance(groups, bool) or not isinstance(groups, numbers.Integral) or groups < 1:
        raise ValueError(f"conv: groups must be a positive int, got {groups!r}")
    if x.shape[1] != w.shape[1] * groups or w.shape[0] % groups:
        raise ValueError(
            f"conv: input has {x.shape[1]} channels and weight {w.shape}: need in_channels = weight.shape[1] * groups "
            f"and out_channels divisible by groups={groups}"
        )
    stride = _per_axis("conv", "stride", stride, dims, 1)
    dilation = _per_axis("conv", "dilation", dilation, dims, 1)
    kernel = w.shape[2:]
    if isinstance(padding, str):
        if padding == "valid":
            pads = ((0, 0),) * dims
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise ValueError("conv: padding='same' needs stride 1 (as torch)")
            totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
            pads = tuple((t // 2, t - t // 2) for t in totals)
        else:
            raise ValueError(f"conv: padding must be an int, a tuple, 'valid' or 'same', got {padding!r}")
    else:
        pads = tuple((p, p) for p in _per_axis("conv", "padding", padding, dims, 0))
    for n, k, d, (lo, hi) in zip(x.shape[2:], kernel, dilation, pads):
        if n + lo + hi < d * (k - 1) + 1:
            raise ValueError(f"conv: the (padded) input {x.shape} is smaller than the dilated kernel {kernel}")
    b = jnp.zeros(w.shape[0], w.dtype) if bias is None else V.array("conv", "bias", bias)
    if b.shape != (w.shape[0],):
        raise ValueError(f"conv: bias must have shape ({w.shape[0]},), got {b.shape}")
    dtype = jnp.result_type(x, w, b)
    return convolution_op(x.astype(dtype), w.astype(dtype), b.astype(dtype), stride=stride, padding=pads,
                          dilation=dilation, groups=int(groups))


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    """torch.nn.functional.conv1d (see ``conv``)."""
    return _conv_rank("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    """torch.nn.functional.conv2d (see ``conv``)."""
    return _conv_rank("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    """torch.nn.functional.conv3d (see ``conv``)."""
    return _conv_rank("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


def _conv_rank(op, dims, input, weight, bias, stride, padding, dilation, groups):  # noqa: A002
    if np.ndim(weight) != dims + 2:
        raise ValueError(f"{op}: weight must have rank {dims + 2}, got shape {np.shape(weight)}")
    return conv(input, weight, bias, stride, padding, dilation, groups)


def max_pool(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):  # noqa: A002
    """torch.nn.functional.max_pool1d/2d/3d over the trailing ``len(kernel_size)`` axes of
    (N, C, *spatial) (an int kernel_size: every spatial axis). ``return_indices``: also the flat
    index of each maximum within its (N, C) plane, as torch returns (first maximum in window
    order; NaN wins). VJP seed ``max_pool2d_with_indices_backward`` (the cotangent added at the
    argmax); JVP and double backward: the seed's ``max_pool_double_backward`` (a gather at the
    argmax)."""
    x = _input("max_pool", input)
    dims = x.ndim - 2
    kernel = _per_axis("max_pool", "kernel_size", kernel_size, dims, 1)
    stride = kernel if stride is None or stride == () else _per_axis("max_pool", "stride", stride, dims, 1)
    dilation = _per_axis("max_pool", "dilation", dilation, dims, 1)
    pad = _per_axis("max_pool", "padding", padding, dims, 0)
    if any(2 * p > k for p, k in zip(pad, kernel)):
        raise ValueError(f"max_pool: padding {pad} must be at most half the kernel size {kernel} (as torch)")
    pads = []
    for n, k, s, d, p in zip(x.shape[2:], kernel, stride, dilation, pad):
        span = d * (k - 1) + 1
        if n + 2 * p < span:
            raise ValueError(f"max_pool: the (padded) input {x.shape} is smaller than the dilated window {kernel}")
        steps = (n + 2 * p - span) / s
        out = (math.ceil(steps) if ceil_mode else math.floor(steps)) + 1
        if ceil_mode and (out - 1) * s >= n + p:  # torch: the last window must start inside
            out -= 1
        pads.append((p, (out - 1) * s + span - n - p))
    values, index = max_pool_op(x, kernel=kernel, stride=stride, padding=tuple(pads), dilation=dilation, shape=x.shape)
    return (values, index) if return_indices else values


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):  # noqa: A002
    """torch.nn.functional.max_pool1d (see ``max_pool``)."""
    _input("max_pool1d", input, 1)
    return max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):  # noqa: A002
    """torch.nn.functional.max_pool2d (see ``max_pool``)."""
    _input("max_pool2d", input, 2)
    return max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):  # noqa: A002
    """torch.nn.functional.max_pool3d (see ``max_pool``)."""
    _input("max_pool3d", input, 3)
    return max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


# ----------------------------------------------------------------------------------------------
# Records


def _torch_conv(torch, x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    fn = getattr(torch.nn.functional, f"conv{w.ndim - 2}d")
    return fn(x, w, b, stride, padding, dilation, groups)


register(OpRecord(
    "conv", conv, ("jaxrules.nn.conv", "jaxrules.nn.conv1d", "jaxrules.nn.conv2d", "jaxrules.nn.conv3d"),
    ("convolution",), ("convolution_jvp", "convolution_backward", "_convolution_double_backward"),
    lambda rng, dt: [
        Sample((normal(rng, dt, 2, 3, 7), normal(rng, dt, 4, 3, 3), normal(rng, dt, 4)), {"stride": 2, "padding": 1}),
        Sample((normal(rng, dt, 1, 4, 5, 6), normal(rng, dt, 2, 2, 2, 3), normal(rng, dt, 2)),
               {"padding": (1, 0), "dilation": (2, 1), "groups": 2}),
        Sample((normal(rng, dt, 1, 2, 4, 3, 3), normal(rng, dt, 2, 2, 2, 2, 2), None), {"stride": (1, 2, 1)}),
        Sample((normal(rng, dt, 2, 2, 6), normal(rng, dt, 3, 2, 3)), {"padding": "same", "dilation": 2}),
    ],
    _torch_conv, "torch.nn.functional.conv1d/2d/3d", low_precision=("float32",),
    tolerance={"float32": 1e-3},  # float32 convolutions may run in TF32 on a GPU
))


def _torch_max_pool(torch, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    fn = getattr(torch.nn.functional, f"max_pool{x.ndim - 2}d")
    return fn(x, kernel_size, stride, padding, dilation, ceil_mode)


def _pool_samples(rng, dt):
    return [
        Sample((distinct(rng, dt, 2, 2, 7), 3), {"stride": 2, "padding": 1}),
        Sample((distinct(rng, dt, 1, 2, 5, 6), (2, 3)), {"stride": (2, 2), "dilation": (1, 2), "ceil_mode": True}),
        Sample((distinct(rng, dt, 1, 1, 4, 4, 4), 2),),
    ]


register(OpRecord(
    "max_pool", max_pool, ("jaxrules.nn.max_pool", "jaxrules.nn.max_pool1d", "jaxrules.nn.max_pool2d",
                           "jaxrules.nn.max_pool3d"),
    ("max_pool",), ("max_pool2d_with_indices_backward", "max_pool_double_backward"), _pool_samples,
    _torch_max_pool, "torch.nn.functional.max_pool1d/2d/3d",
    singular=(SingularPoint("ties: the derivative to the first maximum only",
                            (f64(1.0, 3.0, 3.0, 2.0).reshape(1, 1, 4), 2), (f64(0, 2, 1, 0).reshape(1, 1, 4),),
                            {"stride": 1}),),
))
