"""Convolution and pooling with torch.nn.functional's semantics (channels first:
(N, C, *spatial), 1 to 3 spatial axes): ``jaxrules.nn.conv`` (``conv1d``/``conv2d``/``conv3d``),
``conv_transpose`` (``conv_transpose1d``/``2d``/``3d``), ``unfold`` and ``fold`` (im2col and
col2im, 2 spatial axes), ``max_pool`` and ``avg_pool`` (and their ``1d``/``2d``/``3d``),
``adaptive_avg_pool1d``/``2d``/``3d`` and ``adaptive_max_pool1d``/``2d``/``3d``. Formulas beside each op (gathered in
``jvp_rules`` / ``vjp_rules``); the convolution and pooling algebra in ``partials``."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.typing import ArrayLike

from jaxrules import _validate as V
from jaxrules import partials as P
from jaxrules._namespace import exported_as
from jaxrules.mechanism import define_op, explicit_sharding

# ----------------------------------------------------------------------------------------------
# Ops

def _convolution_primal(x, w, b, *, stride, padding, dilation, groups):
    return P.conv(x, w, stride, padding, dilation, groups) + P.bias_view(b, x.ndim)


def _bilinear_jvp(conv, res, tx, tw, tb, conv_args):
    """``conv(dx, w) + conv(x, dw) + db``: the JVP of ``conv(x, w) + b``, linear in each of x, w
    and b (a ``None`` tangent contributes nothing)."""
    x, w = res
    terms = [conv(tx, w, *conv_args)] if tx is not None else []
    if tw is not None:
        terms.append(conv(x, tw, *conv_args))
    out = P.terms(*terms) if terms else 0
    return out if tb is None else out + P.bias_view(tb, x.ndim)


def convolution_jvp(res, tx, tw, tb, *, stride, padding, dilation, groups):
    """Seed ``convolution_jvp``: ``conv(dx, w) + conv(x, dw) + db``."""
    return _bilinear_jvp(P.conv, res, tx, tw, tb, (stride, padding, dilation, groups))


def convolution_vjp(res, ct, *, stride, padding, dilation, groups):
    """Seed ``convolution_backward``: grad_input by the transposed convolution, grad_weight by
    correlating the input with ``ct``, grad_bias the sum over batch and space."""
    x, w = res
    gx = P.conv_input_grad(ct, w, x.shape[2:], stride, padding, dilation, groups)
    gw = P.conv_weight_grad(x, ct, w.shape[2:], stride, padding, dilation, groups, explicit_sharding(w, x, ct))
    gb = ct.sum(axis=(0, *range(2, ct.ndim)))
    return gx, gw, gb


convolution_op = define_op("convolution", _convolution_primal, convolution_jvp, convolution_vjp,
                           lambda out, x, w, b, **_: (x, w))


def _conv_transpose_primal(x, w, b, *, stride, padding, dilation, groups):
    return P.conv_transpose(x, w, stride, padding, dilation, groups) + P.bias_view(b, x.ndim)


def conv_transpose_jvp(res, tx, tw, tb, *, stride, padding, dilation, groups):
    """Seed ``convolution_jvp`` with ``transposed=true``: ``conv_transpose(dx, w) +
    conv_transpose(x, dw) + db``."""
    return _bilinear_jvp(P.conv_transpose, res, tx, tw, tb, (stride, padding, dilation, groups))


def conv_transpose_vjp(res, ct, *, stride, padding, dilation, groups):
    """Seed ``convolution_backward`` with ``transposed=true``: grad_input by the (forward)
    convolution of ``ct`` with ``w``, grad_weight by correlating ``ct`` with the input (the roles
    of ``convolution_vjp``'s input and cotangent swapped), grad_bias the sum over batch and
    space."""
    x, w = res
    gx = P.conv(ct, w, stride, padding, dilation, groups)
    gw = P.conv_weight_grad(ct, x, w.shape[2:], stride, padding, dilation, groups, explicit_sharding(w, x, ct))
    gb = ct.sum(axis=(0, *range(2, ct.ndim)))
    return gx, gw, gb


conv_transpose_op = define_op("conv_transpose", _conv_transpose_primal, conv_transpose_jvp, conv_transpose_vjp,
                              lambda out, x, w, b, **_: (x, w))


def unfold_jvp(_, tx, *, kernel, stride, padding, dilation, spatial):
    """unfold (im2col) is linear: the unfolded tangent."""
    return P.unfold(tx, kernel, stride, padding, dilation)


def unfold_vjp(_, ct, *, kernel, stride, padding, dilation, spatial):
    """The transpose of unfold (im2col) is fold (col2im; derivatives.yaml ``im2col``:
    ``col2im(grad, ...)``)."""
    return (P.fold(ct, spatial, kernel, stride, padding, dilation),)


# unfold and fold are linear and each other's transpose: the JVP is the op, the VJP the other op.
unfold_op = define_op("unfold", lambda x, *, spatial, **static: P.unfold(x, **static), unfold_jvp, unfold_vjp,
                      lambda out, x, **_: ())


def fold_jvp(_, tx, *, kernel, stride, padding, dilation, spatial):
    """fold (col2im) is linear: the folded tangent."""
    return P.fold(tx, spatial, kernel, stride, padding, dilation)


def fold_vjp(_, ct, *, kernel, stride, padding, dilation, spatial):
    """The transpose of fold (col2im) is unfold (im2col; derivatives.yaml ``col2im``:
    ``im2col(grad, ...)``)."""
    return (P.unfold(ct, kernel, stride, padding, dilation),)


fold_op = define_op("fold", lambda x, *, spatial, **static: P.fold(x, spatial, **static), fold_jvp, fold_vjp,
                    lambda out, x, **_: ())


def _adaptive_positions(spatial, output_size):
    """Static (prod(longest window), *out) flat input positions of torch's adaptive windows
    (``partials.adaptive_windows``), row-major in the window; -1 past a shorter window's end."""
    axes = []
    for n, o in zip(spatial, output_size):
        start, end = P.adaptive_windows(n, o)
        pos = start[None, :] + np.arange(int((end - start).max(initial=1)))[:, None]
        axes.append(np.where(pos < end, pos, -1))
    return P.combine_windows(axes, spatial)


def _window_max(windows, ids, valid, axes):
    """torch's maximum and argmax (the CPU kernels' ``val > maxval || isnan(val)`` scan from the
    window's first input element) of each window over ``axes``: ``(values, element)``, the first
    maximum in the window's row-major order (``ids``), the last NaN where there is one, padding
    (``valid`` false) never chosen, not even over -inf. Two plain reductions (min and max of
    element ids), which XLA fuses with the read of the windows."""
    top = jnp.max(windows, axis=axes, keepdims=True)
    first = jnp.min(jnp.where((windows == top) & P.with_rank(valid, windows.ndim), ids, np.iinfo(np.int32).max), axis=axes)
    last_nan = jnp.max(jnp.where(jnp.isnan(windows), ids, -1), axis=axes)
    return jnp.squeeze(top, axes), jnp.where(last_nan >= 0, last_nan, first)


def _flat_positions(element, positions):
    """``positions[element]``: the flat input position of each output's chosen window element,
    as a one-hot sum over the window (elementwise: sharded like the input, no gather)."""
    shape = element.shape[:2] + positions.shape
    return P.window_select(jnp.broadcast_to(positions.astype(np.int32), shape), element)


def _max_pool_primal(x, *, kernel, stride, padding, dilation, **_):
    """``(values, element)``: each window's maximum (NaN if it holds one) and which element of
    the window (row-major, the narrowest integer type) torch's argmax is: the residual, small and
    read by the JVP and VJP as is; ``max_pool`` turns it into torch's flat indices on request.
    Windows that tile the input (stride == kernel) are a reshape of it, others strided slices."""
    if P.tiled(x, kernel, stride, dilation):
        windows = P.tiled_windows(x, kernel, padding, -np.inf)
        ids, axes = P.tiled_element_ids(windows.shape, kernel), P.tiled_axes(kernel)
        valid = P.tiled_valid(windows.shape, x.shape[2:], kernel, padding)
    else:
        positions = P.window_positions(x.shape[2:], kernel, stride, padding, dilation)
        windows = P.window_slices(x, kernel, stride, padding, dilation, -np.inf)  # strided slices, no gather
        ids, axes, valid = lax.broadcasted_iota(jnp.int32, windows.shape, 2), (2,), positions >= 0
    values, element = _window_max(windows, ids, valid, axes)
    return values, element.astype(np.int8 if math.prod(kernel) <= 127 else np.int32)


def max_pool_jvp(element, tx, *, kernel, stride, padding, dilation, shape):
    """The tangent read at the argmax (seed ``max_pool_double_backward``'s gather), as the
    tangent's windows read at the argmax's window element ``element`` (``partials.window_read``:
    no gather); the window elements have no tangent."""
    return P.window_read(tx, element, kernel, stride, padding, dilation), None


def max_pool_vjp(element, ct, *, kernel, stride, padding, dilation, shape):
    """Seed ``max_pool2d_with_indices_backward``: each cotangent added at its window's argmax
    (``element``: which element of the window), as the transpose of the window slices
    (``partials.window_place``: no scatter)."""
    g, _ = ct
    return (P.window_place(g, element, shape, kernel, stride, padding, dilation),)


max_pool_op = define_op("max_pool", _max_pool_primal, max_pool_jvp, max_pool_vjp,
                        lambda out, x, **_: out[1])


def _adaptive_max_pool_primal(x, *, output_size, shape):
    positions = _adaptive_positions(x.shape[2:], output_size)
    planes = x.reshape(x.shape[:2] + (math.prod(x.shape[2:]),))  # not -1: the batch may be empty
    padded = lax.pad(planes, np.array(-np.inf, x.dtype), ((0, 0, 0), (0, 0, 0), (0, 1, 0)))  # keeps x's sharding
    windows = padded[:, :, np.where(positions >= 0, positions, planes.shape[2])]  # (N, C, window, *out)
    element = _window_max(windows, lax.broadcasted_iota(jnp.int32, windows.shape, 2), positions >= 0, (2,))[1]
    index = _flat_positions(element, positions)
    return P.pool_flat_gather(x, index), index


def adaptive_max_pool_jvp(index, tx, *, shape, **_):
    """The tangent read at the argmax (seed ``max_pool_double_backward``'s gather; adaptive windows
    differ in size, so a gather); the indices have no tangent."""
    return P.pool_flat_gather(tx, index), None


def adaptive_max_pool_vjp(index, ct, *, shape, **_):
    """Seed ``adaptive_max_pool2d_backward``: each cotangent added at its window's argmax (a
    scatter: adaptive windows differ in size)."""
    g, _ = ct
    return (P.pool_flat_scatter(g, index, shape),)


# The gradient goes to the argmax as in max_pool (seed ``adaptive_max_pool2d_backward``).
adaptive_max_pool_op = define_op("adaptive_max_pool", _adaptive_max_pool_primal, adaptive_max_pool_jvp,
                                 adaptive_max_pool_vjp, lambda out, x, **_: out[1])


def avg_pool_jvp(_, tx, *, kernel, stride, padding, count_include_pad, divisor_override, shape):
    """Average pooling is linear: the pooled tangent (derivatives.yaml: ``result: auto_linear``)."""
    return P.avg_pool(tx, kernel, stride, padding, count_include_pad, divisor_override)


def avg_pool_vjp(_, ct, *, kernel, stride, padding, count_include_pad, divisor_override, shape):
    """Seed ``avg_pool2d_backward`` / ``avg_pool3d_backward``: each cotangent over its window's
    divisor, added to every input position of the window (``partials.window_sum_transpose``)."""
    return (P.avg_pool_transpose(ct, shape, kernel, stride, padding, count_include_pad, divisor_override),)


avg_pool_op = define_op("avg_pool", lambda x, *, shape, **static: P.avg_pool(x, **static), avg_pool_jvp,
                        avg_pool_vjp, lambda out, x, **_: ())


def adaptive_avg_pool_jvp(_, tx, *, output_size, shape):
    """Adaptive average pooling is linear: the pooled tangent (``result: auto_linear``)."""
    return P.adaptive_avg_pool(tx, output_size)


def adaptive_avg_pool_vjp(_, ct, *, output_size, shape):
    """Seed ``_adaptive_avg_pool2d_backward`` / ``_adaptive_avg_pool3d_backward``: each cotangent
    shared evenly over its window (the transposed averaging matrices)."""
    return (P.adaptive_avg_pool_transpose(ct, shape, output_size),)


adaptive_avg_pool_op = define_op("adaptive_avg_pool", lambda x, *, output_size, shape: P.adaptive_avg_pool(x, output_size),
                                 adaptive_avg_pool_jvp, adaptive_avg_pool_vjp, lambda out, x, **_: ())


# ----------------------------------------------------------------------------------------------
# Public functions
#
# Argument handling (torch's: an int or one value per spatial axis), then the functions.

def _per_axis(op, name, value, dims, minimum):
    values = (value,) * dims if isinstance(value, numbers.Integral) else tuple(value)
    if len(values) != dims or not all(isinstance(v, numbers.Integral) and v >= minimum for v in values):
        raise ValueError(f"{op}: {name} must be an int >= {minimum} or {dims} of them, got {value!r}")
    return tuple(int(v) for v in values)


def _input(op, x, dims_hint=None, complex_ok=False):
    """``(N, C, *spatial)`` input of ``op``; complex only where ``complex_ok`` (the convolution,
    linear in it; pooling compares values)."""
    x = V.array(op, "input", x)
    if jnp.iscomplexobj(x) and not complex_ok:
        raise TypeError(f"{op}: input must be real, got {x.dtype}")
    if x.ndim < 3 or x.ndim > 5 or (dims_hint is not None and x.ndim != dims_hint + 2):
        want = "(N, C, *spatial) with 1 to 3 spatial axes" if dims_hint is None else f"rank {dims_hint + 2}"
        raise ValueError(f"{op}: input must have {want}, got shape {x.shape}")
    return x


_CONV_LAYER_ARGS = """        bias: ``(O,)``, added to each output channel; None: no bias.
        stride: an int >= 1, or one per spatial axis.
        padding: zero padding on both sides: an int >= 0, one per spatial axis, ``"valid"``
            (none) or ``"same"`` (output as long as the input; needs stride 1; an odd total
            puts the extra element at the end).
        dilation: the kernel's dilation, an int >= 1, or one per spatial axis.
        groups: a positive int dividing ``O``, with ``C == weight.shape[1] * groups``."""


@exported_as("jaxrules.nn.conv")
def conv(input: ArrayLike, weight: ArrayLike, bias: ArrayLike | None = None, stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0, dilation: int | Sequence[int] = 1, groups: int = 1) -> Array:  # noqa: A002 - torch's name
    w = V.array("conv", "weight", weight)
    dims = w.ndim - 2
    if dims not in (1, 2, 3):
        raise ValueError(f"conv: weight must have shape (out, in / groups, *kernel) with 1 to 3 kernel axes, got {w.shape}")
    x = _input("conv", input, dims, complex_ok=True)
    groups = _positive_int("conv", "groups", groups)
    if x.shape[1] != w.shape[1] * groups or w.shape[0] % groups:
        raise ValueError(
            f"conv: input has {x.shape[1]} channels and weight {w.shape}: need in_channels = weight.shape[1] * groups "
            f"and out_channels divisible by groups={groups}"
        )
    if w.shape[0] == 0 or 0 in w.shape[2:]:
        raise ValueError(f"conv: weight {w.shape} needs at least one output channel and a kernel of at least one "
                         "element per axis (as torch)")
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
                          dilation=dilation, groups=groups)


conv.__doc__ = """torch.nn.functional.conv1d/2d/3d (the rank comes from ``weight``
    ``(O, C / groups, *kernel)``); ``padding`` an int, one per axis, ``'valid'`` or ``'same'`` (stride 1). JVP seed
    ``convolution_jvp``; VJP ``convolution_backward`` (transposed convolution for the input,
    correlation for the weight, sums for the bias); double backward: JAX's derivative of the VJP
    (seed ``_convolution_double_backward``). Mirrors ``torch.nn.functional.conv1d``/``2d``/``3d``.

    Args:
        input: the input ``(N, C, *spatial)``, real or complex (as torch; derivatives in JAX's
            convention, torch's conjugated), with as many spatial axes as ``weight`` has kernel
            axes (integer and boolean input is promoted to float).
        weight: the filters ``(O, C / groups, *kernel)``, 1 to 3 kernel axes.
{layer_args}

    Returns:
        The output ``(N, O, *out_spatial)`` in the result dtype of the operands, with torch's
        ``out = (n + lo + hi - dilation (k - 1) - 1) // stride + 1`` per axis.
    """.replace("{layer_args}", _CONV_LAYER_ARGS)


_SPATIAL_AXES = {1: "L", 2: "H, W", 3: "D, H, W"}


def _ranked(template: str):
    """Decorator: a 1d/2d/3d variant's docstring from its family's ``template`` (``{n}``: the
    spatial axes, ``{rank}``: the input's rank, ``{unbatched}``: torch's unbatched shape)."""

    def document(fn):
        n = int(fn.__name__[-2])
        fn.__doc__ = template.format(n=n, rank=n + 2, unbatched=f"(C, {_SPATIAL_AXES[n]})")
        return fn

    return document


_CONV_DOC = """torch.nn.functional.conv{n}d (see ``conv``): ``weight`` must have rank {rank}
    (``ValueError`` otherwise). Mirrors ``torch.nn.functional.conv{n}d``.

    Args:
        input: the input ``(N, C, *spatial)``, real or complex, with as many spatial axes as
            ``weight`` has kernel axes (integer and boolean input is promoted to float); rank {rank}.
        weight: the filters ``(O, C / groups, *kernel)``, {n} kernel axes.
{layer_args}

    Returns:
        The output ``(N, O, *out_spatial)`` in the result dtype of the operands, with torch's
        ``out = (n + lo + hi - dilation (k - 1) - 1) // stride + 1`` per axis.
    """.replace("{layer_args}", _CONV_LAYER_ARGS)


@exported_as("jaxrules.nn.conv1d")
@_ranked(_CONV_DOC)
def conv1d(input: ArrayLike, weight: ArrayLike, bias: ArrayLike | None = None, stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0, dilation: int | Sequence[int] = 1, groups: int = 1) -> Array:  # noqa: A002
    return _conv_rank("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


@exported_as("jaxrules.nn.conv2d")
@_ranked(_CONV_DOC)
def conv2d(input: ArrayLike, weight: ArrayLike, bias: ArrayLike | None = None, stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0, dilation: int | Sequence[int] = 1, groups: int = 1) -> Array:  # noqa: A002
    return _conv_rank("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


@exported_as("jaxrules.nn.conv3d")
@_ranked(_CONV_DOC)
def conv3d(input: ArrayLike, weight: ArrayLike, bias: ArrayLike | None = None, stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0, dilation: int | Sequence[int] = 1, groups: int = 1) -> Array:  # noqa: A002
    return _conv_rank("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


def _conv_rank(op, dims, input, weight, bias, stride, padding, dilation, groups):  # noqa: A002
    if np.ndim(weight) != dims + 2:
        raise ValueError(f"{op}: weight must have rank {dims + 2}, got shape {np.shape(weight)}")
    return conv(input, weight, bias, stride, padding, dilation, groups)


def _positive_int(op, name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{op}: {name} must be a positive int, got {value!r}")
    return int(value)


def _conv_transpose(op, dims, input, weight, bias, stride, padding, output_padding, groups, dilation):  # noqa: A002
    """The checks and the call of every conv_transpose variant (``dims`` None: from the weight)."""
    w = V.array(op, "weight", weight)
    if (dims is None and w.ndim not in (3, 4, 5)) or (dims is not None and w.ndim != dims + 2):
        rank = "rank 3 to 5" if dims is None else f"rank {dims + 2}"
        raise ValueError(f"{op}: weight must have shape (in, out / groups, *kernel), {rank}, got {w.shape}")
    dims = w.ndim - 2
    x, batched = _pool_input(op, input, dims, complex_ok=True)
    groups = _positive_int(op, "groups", groups)
    if 0 in w.shape:
        raise ValueError(f"{op}: weight {w.shape} is empty")
    if x.shape[1] != w.shape[0] or w.shape[0] % groups:
        raise ValueError(f"{op}: input has {x.shape[1]} channels and weight {w.shape}: need in_channels = "
                         f"weight.shape[0] divisible by groups={groups}")
    stride = _per_axis(op, "stride", stride, dims, 1)
    pad = _per_axis(op, "padding", padding, dims, 0)
    extra = _per_axis(op, "output_padding", output_padding, dims, 0)
    dilation = _per_axis(op, "dilation", dilation, dims, 1)
    if any(e >= s and e >= d for e, s, d in zip(extra, stride, dilation)):
        raise ValueError(f"{op}: output_padding {extra} must be smaller than stride {stride} or dilation "
                         f"{dilation} on each axis (as torch)")
    pads = tuple((p, p - e) for p, e in zip(pad, extra))
    size = [(n - 1) * s + d * (k - 1) + 1 - lo - hi
            for n, k, s, (lo, hi), d in zip(x.shape[2:], w.shape[2:], stride, pads, dilation)]
    if min(size) < 1:
        raise ValueError(f"{op}: the output size {tuple(size)} of input {x.shape} is not positive (padding {pad} "
                         "too large)")
    channels = w.shape[1] * groups
    b = jnp.zeros(channels, w.dtype) if bias is None else V.array(op, "bias", bias)
    if b.shape != (channels,):
        raise ValueError(f"{op}: bias must have shape ({channels},), got {b.shape}")
    dtype = jnp.result_type(x, w, b)
    out = conv_transpose_op(x.astype(dtype), w.astype(dtype), b.astype(dtype), stride=stride, padding=pads,
                            dilation=dilation, groups=groups)
    return out if batched else out[0]


_CONV_TRANSPOSE_ARGS = """        bias: ``(weight.shape[1] * groups,)``, added to each output channel; None: no bias.
        stride: the stride of the convolution this transposes, an int >= 1 or one per spatial
            axis (the input's entries are spread ``stride`` apart).
        padding: the zero padding of the convolution this transposes, an int >= 0 or one per
            spatial axis: ``padding`` entries are cut from both ends of the full transposed
            output (``(n - 1) stride + dilation (k - 1) + 1`` long).
        output_padding: extra entries at the end of each spatial axis, an int >= 0 or one per
            axis, smaller than the stride or the dilation of that axis (``ValueError`` otherwise).
        groups: a positive int dividing ``C_in``; output channels ``weight.shape[1] * groups``.
        dilation: the kernel's dilation, an int >= 1 or one per spatial axis."""


@exported_as("jaxrules.nn.conv_transpose")
def conv_transpose(input: ArrayLike, weight: ArrayLike, bias: ArrayLike | None = None, stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0, groups: int = 1, dilation: int | Sequence[int] = 1) -> Array:  # noqa: A002
    return _conv_transpose("conv_transpose", None, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


conv_transpose.__doc__ = """torch.nn.functional.conv_transpose1d/2d/3d (the rank comes from ``weight``
    ``(C_in, C_out / groups, *kernel)``): the transpose, with respect to its input, of the convolution with
    ``weight``, ``stride``, ``padding`` and ``dilation``, plus ``bias``. JVP seed
    ``convolution_jvp`` (transposed): ``conv_transpose(dx, w) + conv_transpose(x, dw) + db``;
    VJP ``convolution_backward`` (transposed: the forward convolution of the cotangent for the
    input, the cotangent correlated with the input for the weight, sums for the bias); double
    backward: JAX's derivative of the VJP. Mirrors
    ``torch.nn.functional.conv_transpose1d``/``2d``/``3d``.

    Args:
        input: ``(N, C_in, *spatial)`` or unbatched ``(C_in, *spatial)``, real or complex
            (as torch; derivatives in JAX's convention, torch's conjugated), with as many
            spatial axes as ``weight`` has kernel axes (integer and boolean input is promoted
            to float); only the batch may be empty.
        weight: the filters ``(C_in, C_out / groups, *kernel)``, 1 to 3 kernel axes.
{layer_args}

    Returns:
        ``(N, C_out, *out_spatial)`` (without ``N`` for an unbatched input) in the result dtype
        of the operands, with torch's ``out = (n - 1) stride - 2 padding + dilation (k - 1) +
        output_padding + 1`` per axis.
    """.replace("{layer_args}", _CONV_TRANSPOSE_ARGS)


_CONV_TRANSPOSE_DOC = """torch.nn.functional.conv_transpose{n}d (see ``conv_transpose``): ``weight`` must have
    rank {rank} (``ValueError`` otherwise). Mirrors ``torch.nn.functional.conv_transpose{n}d``.

    Args:
        input: ``(N, C_in, *spatial)`` with {n} spatial axis(es), or unbatched ``{unbatched}``; real
            or complex (integer and boolean input is promoted to float); only the batch may be empty.
        weight: the filters ``(C_in, C_out / groups, *kernel)``, {n} kernel axis(es).
{layer_args}

    Returns:
        ``(N, C_out, *out_spatial)`` (without ``N`` for an unbatched input), with torch's
        ``out = (n - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1`` per axis.
    """.replace("{layer_args}", _CONV_TRANSPOSE_ARGS)


@exported_as("jaxrules.nn.conv_transpose1d")
@_ranked(_CONV_TRANSPOSE_DOC)
def conv_transpose1d(input: ArrayLike, weight: ArrayLike, bias: ArrayLike | None = None, stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0, groups: int = 1, dilation: int | Sequence[int] = 1) -> Array:  # noqa: A002
    return _conv_transpose("conv_transpose1d", 1, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


@exported_as("jaxrules.nn.conv_transpose2d")
@_ranked(_CONV_TRANSPOSE_DOC)
def conv_transpose2d(input: ArrayLike, weight: ArrayLike, bias: ArrayLike | None = None, stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0, groups: int = 1, dilation: int | Sequence[int] = 1) -> Array:  # noqa: A002
    return _conv_transpose("conv_transpose2d", 2, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


@exported_as("jaxrules.nn.conv_transpose3d")
@_ranked(_CONV_TRANSPOSE_DOC)
def conv_transpose3d(input: ArrayLike, weight: ArrayLike, bias: ArrayLike | None = None, stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0, groups: int = 1, dilation: int | Sequence[int] = 1) -> Array:  # noqa: A002
    return _conv_transpose("conv_transpose3d", 3, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


def _block_args(op, kernel_size, dilation, padding, stride):
    """unfold/fold's window arguments for 2 spatial axes: (kernel, stride, ((p, p), ...), dilation)."""
    kernel = _per_axis(op, "kernel_size", kernel_size, 2, 1)
    dilation = _per_axis(op, "dilation", dilation, 2, 1)
    pad = _per_axis(op, "padding", padding, 2, 0)
    stride = _per_axis(op, "stride", stride, 2, 1)
    return kernel, stride, tuple((p, p) for p in pad), dilation


def _blocks(spatial, kernel, stride, pads, dilation):
    """The number of sliding blocks per spatial axis (torch's, may be < 1)."""
    return tuple((n + lo + hi - d * (k - 1) - 1) // s + 1
                 for n, k, s, (lo, hi), d in zip(spatial, kernel, stride, pads, dilation))


@exported_as("jaxrules.nn.unfold")
def unfold(input: ArrayLike, kernel_size: int | Sequence[int], dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, stride: int | Sequence[int] = 1) -> Array:  # noqa: A002
    x, batched = _pool_input("unfold", input, 2, complex_ok=True)
    kernel, stride, pads, dilation = _block_args("unfold", kernel_size, dilation, padding, stride)
    blocks = _blocks(x.shape[2:], kernel, stride, pads, dilation)
    if min(blocks) < 1:
        raise ValueError(f"unfold: input {x.shape} with kernel_size {kernel}, dilation {dilation}, padding "
                         f"{tuple(p for p, _ in pads)} and stride {stride} has {blocks} sliding blocks (need at "
                         "least one per axis)")
    out = unfold_op(x, kernel=kernel, stride=stride, padding=pads, dilation=dilation, spatial=x.shape[2:])
    return out if batched else out[0]


unfold.__doc__ = """torch.nn.functional.unfold (im2col): the sliding blocks of (N, C, H, W) as columns,
    ``out[n, c kh kw + j, l]`` the input under element ``j`` (row-major in the kernel) of the
    ``l``-th block (row-major over the block grid), 0 on the padding. Linear: the JVP is unfold
    of the tangent, the VJP ``fold`` of the cotangent (derivatives.yaml ``im2col``: ``col2im``).
    Mirrors ``torch.nn.functional.unfold``.

    Args:
        input: ``(N, C, H, W)`` or unbatched ``(C, H, W)``, real or complex (integer and boolean
            input is promoted to float); only the batch may be empty.
        kernel_size: the block's size, an int >= 1 or two.
        dilation: the spacing of a block's elements, an int >= 1 or two.
        padding: zero padding on both sides, an int >= 0 or two.
        stride: the step between blocks, an int >= 1 or two.

    Returns:
        ``(N, C kh kw, L)`` (without ``N`` for an unbatched input), ``L`` the number of blocks,
        at least one per axis (``ValueError`` otherwise).
    """


@exported_as("jaxrules.nn.fold")
def fold(input: ArrayLike, output_size: int | Sequence[int], kernel_size: int | Sequence[int], dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, stride: int | Sequence[int] = 1) -> Array:  # noqa: A002
    x = V.array("fold", "input", input)
    if x.ndim not in (2, 3) or 0 in x.shape[x.ndim - 2:]:
        raise ValueError(f"fold: input must have shape (N, C kh kw, L) or (C kh kw, L) with only the batch empty, "
                         f"got {x.shape}")
    batched = x.ndim == 3
    x = x if batched else x[None]
    size = _per_axis("fold", "output_size", output_size, 2, 1)
    kernel, stride, pads, dilation = _block_args("fold", kernel_size, dilation, padding, stride)
    if x.shape[1] % math.prod(kernel):
        raise ValueError(f"fold: input's axis 1 ({x.shape[1]}) must be divisible by the product of kernel_size "
                         f"{kernel}")
    blocks = _blocks(size, kernel, stride, pads, dilation)
    if min(blocks) < 1 or x.shape[2] != math.prod(blocks):
        raise ValueError(f"fold: input's axis 2 ({x.shape[2]}) must be the number of sliding blocks of "
                         f"output_size {size} with kernel_size {kernel}, dilation {dilation}, padding "
                         f"{tuple(p for p, _ in pads)} and stride {stride}: {' x '.join(map(str, blocks))}")
    out = fold_op(x, kernel=kernel, stride=stride, padding=pads, dilation=dilation, spatial=size)
    return out if batched else out[0]


fold.__doc__ = """torch.nn.functional.fold (col2im), the transpose of ``unfold``: each column entry of
    (N, C kh kw, L) added at its block position of an ``(N, C, *output_size)`` array, overlaps
    summed and padding dropped. Linear: the JVP is fold of the tangent, the VJP ``unfold`` of the
    cotangent (derivatives.yaml ``col2im``: ``im2col``). Mirrors ``torch.nn.functional.fold``.

    Args:
        input: ``(N, C kh kw, L)`` or unbatched ``(C kh kw, L)``, real or complex, ``L`` the number of
            blocks of ``output_size``; only the batch may be empty.
        output_size: the spatial size ``(H, W)`` of the output, an int >= 1 or two.
        kernel_size: the block's size, an int >= 1 or two.
        dilation: the spacing of a block's elements, an int >= 1 or two.
        padding: zero padding on both sides, an int >= 0 or two.
        stride: the step between blocks, an int >= 1 or two.

    Returns:
        ``(N, C, H, W)`` (without ``N`` for an unbatched input).
    """


def _pool_pads(op, shape, kernel, stride, padding, dilation, ceil_mode):
    """torch's window count per axis (``pooling_output_shape``: with ``ceil_mode`` a last window
    starting past the input and its left padding is dropped) as ((lo, hi), ...): ``hi`` is how
    far the last window reaches past the input (negative: trailing input no window reaches)."""
    pad = _per_axis(op, "padding", padding, len(kernel), 0)
    if any(2 * p > k for p, k in zip(pad, kernel)):
        raise ValueError(f"{op}: padding {pad} must be at most half the kernel size {kernel} (as torch)")
    pads = []
    for n, k, s, d, p in zip(shape[2:], kernel, stride, dilation, pad):
        span = d * (k - 1) + 1
        out = (n + 2 * p - span + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (out - 1) * s >= n + p:
            out -= 1
        if out < 1:
            raise ValueError(f"{op}: the (padded) input {shape} is smaller than the dilated window {kernel}")
        pads.append((p, (out - 1) * s + span - n - p))
    return tuple(pads)


_MAX_POOL_ARGS = """    Args:
        input: the input ``(N, C, *spatial)`` with {spatial} spatial axes (batched only), real
            (integer and boolean input is promoted to float).
        kernel_size: the window, an int >= 1 (every spatial axis) or one per spatial axis
            (as many as the input's spatial axes).
        stride: the window step, an int >= 1 or one per spatial axis; None (or ``()``): the
            kernel size.
        padding: implicit -inf padding on both sides, an int >= 0 or one per spatial axis, at
            most half the kernel size (``ValueError`` otherwise).
        dilation: the spacing of the window's elements, an int >= 1 or one per spatial axis.
        ceil_mode: count windows with ``ceil`` instead of ``floor`` (torch's rule: a last window
            starting past the input and its left padding is dropped).
        return_indices: also return each maximum's flat index within its ``(N, C)`` plane of
            the (unpadded) input.

    Returns:
        The pooled ``(N, C, *out_spatial)``; with ``return_indices`` the tuple
        ``(values, indices)`` (integer indices of the same shape).
    """


@exported_as("jaxrules.nn.max_pool")
def max_pool(input: ArrayLike, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False, return_indices: bool = False) -> Array | tuple[Array, Array]:  # noqa: A002
    x = _input("max_pool", input)
    dims = x.ndim - 2
    kernel = _per_axis("max_pool", "kernel_size", kernel_size, dims, 1)
    stride = kernel if stride is None or stride == () else _per_axis("max_pool", "stride", stride, dims, 1)
    dilation = _per_axis("max_pool", "dilation", dilation, dims, 1)
    pads = _pool_pads("max_pool", x.shape, kernel, stride, padding, dilation, ceil_mode)
    values, element = max_pool_op(x, kernel=kernel, stride=stride, padding=pads, dilation=dilation, shape=x.shape)
    if not return_indices:
        return values
    return values, _flat_positions(element, P.window_positions(x.shape[2:], kernel, stride, pads, dilation))


max_pool.__doc__ = """torch.nn.functional.max_pool1d/2d/3d over the trailing ``len(kernel_size)`` axes of
    ``(N, C, *spatial)`` (an int kernel_size: every spatial axis). ``return_indices``: also the flat
    index of each maximum within its (N, C) plane, as torch returns (first maximum in window
    order; NaN wins). VJP seed ``max_pool2d_with_indices_backward`` (the cotangent added at the
    argmax); JVP and double backward: the seed's ``max_pool_double_backward`` (a gather at the
    argmax). Mirrors ``torch.nn.functional.max_pool1d``/``2d``/``3d``.

""" + _MAX_POOL_ARGS.format(spatial="1 to 3")


_MAX_POOL_DOC = """torch.nn.functional.max_pool{n}d (see ``max_pool``); the input must have rank {rank}
    (unlike torch, an unbatched input is not accepted). Mirrors
    ``torch.nn.functional.max_pool{n}d``.

""" + _MAX_POOL_ARGS.format(spatial="{n}")


@exported_as("jaxrules.nn.max_pool1d")
@_ranked(_MAX_POOL_DOC)
def max_pool1d(input: ArrayLike, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False, return_indices: bool = False) -> Array | tuple[Array, Array]:  # noqa: A002
    _input("max_pool1d", input, 1)
    return max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


@exported_as("jaxrules.nn.max_pool2d")
@_ranked(_MAX_POOL_DOC)
def max_pool2d(input: ArrayLike, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False, return_indices: bool = False) -> Array | tuple[Array, Array]:  # noqa: A002
    _input("max_pool2d", input, 2)
    return max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


@exported_as("jaxrules.nn.max_pool3d")
@_ranked(_MAX_POOL_DOC)
def max_pool3d(input: ArrayLike, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False, return_indices: bool = False) -> Array | tuple[Array, Array]:  # noqa: A002
    _input("max_pool3d", input, 3)
    return max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def _pool_input(op, input, dims, empty_channels=False, complex_ok=False):  # noqa: A002
    """torch's pooling input, (N, C, *spatial) or unbatched (C, *spatial) with ``dims`` spatial
    axes (only the batch may be empty, and the channels where ``empty_channels``: torch's
    adaptive average pooling), with a batch axis; and whether it had one. Complex input only
    where ``complex_ok`` (the linear ops, which torch computes for complex: ``conv_transpose``,
    ``unfold``); pooling compares values, so complex input is a ``TypeError``."""
    x = V.array(op, "input", input)
    if jnp.iscomplexobj(x) and not complex_ok:
        raise TypeError(f"{op}: input must be real, got {x.dtype}")
    if x.ndim not in (dims + 1, dims + 2):
        raise ValueError(f"{op}: input must have shape (N, C, *spatial) or (C, *spatial) with {dims} spatial "
                         f"axes, got {x.shape}")
    batched = x.ndim == dims + 2
    if 0 in x.shape[int(batched) + int(empty_channels):]:
        may = "the batch and the channels" if empty_channels else "only the batch"
        raise ValueError(f"{op}: input {x.shape} has an empty {'spatial' if empty_channels else 'channel or spatial'} "
                         f"axis ({may} may be empty)")
    return (x if batched else x[None]), batched


def _avg_pool(op, dims, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):  # noqa: A002
    x, batched = _pool_input(op, input, dims)
    kernel = _per_axis(op, "kernel_size", kernel_size, dims, 1)
    stride = kernel if stride is None or stride == () else _per_axis(op, "stride", stride, dims, 1)
    if divisor_override is not None and (isinstance(divisor_override, bool) or divisor_override == 0
                                         or not isinstance(divisor_override, numbers.Integral)):
        raise ValueError(f"{op}: divisor_override must be a non-zero int or None, got {divisor_override!r}")
    pads = _pool_pads(op, x.shape, kernel, stride, padding, (1,) * dims, ceil_mode)
    out = avg_pool_op(x, kernel=kernel, stride=stride, padding=pads, count_include_pad=bool(count_include_pad),
                      divisor_override=None if divisor_override is None else int(divisor_override), shape=x.shape)
    return out if batched else out[0]


_AVG_POOL_WINDOW_ARGS = """        kernel_size: the window, an int >= 1 (every spatial axis) or one per spatial axis.
        stride: the window step, an int >= 1 or one per spatial axis; None (or ``()``): the
            kernel size.
        padding: implicit zero padding on both sides, an int >= 0 or one per spatial axis, at
            most half the kernel size (``ValueError`` otherwise).
        ceil_mode: count windows with ``ceil`` instead of ``floor`` (torch's rule).
        count_include_pad: divide by the window size including the zero padding (True) or by
            the number of input elements in the window (False).
        divisor_override: a non-zero int dividing every window's sum instead; None: as
            ``count_include_pad`` says."""


@exported_as("jaxrules.nn.avg_pool")
def avg_pool(input: ArrayLike, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,  # noqa: A002
             divisor_override: int | None = None) -> Array:
    x = _input("avg_pool", input)
    return _avg_pool("avg_pool", x.ndim - 2, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


avg_pool.__doc__ = """torch.nn.functional.avg_pool1d/2d/3d over the spatial axes of ``(N, C, *spatial)``: the mean
    of each window, divided by ``divisor_override``, else by the window's size counting the
    zero padding (``count_include_pad``; a ``ceil_mode`` window's part past the padding never
    counts) or not. Linear: JVP the pooled tangent; VJP seed ``avg_pool2d_backward`` (each
    cotangent over its divisor spread over its window, ``partials.window_sum_transpose``).
    Mirrors ``torch.nn.functional.avg_pool1d``/``2d``/``3d``.

    Args:
        input: the input ``(N, C, *spatial)`` with 1 to 3 spatial axes (batched only), real
            (integer and boolean input is promoted to float); only the batch may be empty.
{window}

    Returns:
        The pooled array, ``(N, C, *out_spatial)``.
    """.replace("{window}", _AVG_POOL_WINDOW_ARGS)


_AVG_POOL_DOC = """torch.nn.functional.avg_pool{n}d, also unbatched {unbatched} (see ``avg_pool``; torch's
    avg_pool1d has no ``divisor_override``: here it means what it does for 2d and 3d). Mirrors
    ``torch.nn.functional.avg_pool{n}d``.

    Args:
        input: the input ``(N, C, *spatial)`` with {n} spatial axis(es), or unbatched ``{unbatched}``; real
            (integer and boolean input is promoted to float); only the batch may be empty.
{window}

    Returns:
        The pooled array, ``(N, C, *out_spatial)`` (without ``N`` for an unbatched input).
    """.replace("{window}", _AVG_POOL_WINDOW_ARGS)


@exported_as("jaxrules.nn.avg_pool1d")
@_ranked(_AVG_POOL_DOC)
def avg_pool1d(input: ArrayLike, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,  # noqa: A002
               divisor_override: int | None = None) -> Array:
    return _avg_pool("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


@exported_as("jaxrules.nn.avg_pool2d")
@_ranked(_AVG_POOL_DOC)
def avg_pool2d(input: ArrayLike, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,  # noqa: A002
               divisor_override: int | None = None) -> Array:
    return _avg_pool("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


@exported_as("jaxrules.nn.avg_pool3d")
@_ranked(_AVG_POOL_DOC)
def avg_pool3d(input: ArrayLike, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None, padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,  # noqa: A002
               divisor_override: int | None = None) -> Array:
    return _avg_pool("avg_pool3d", 3, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


def _output_size(op, output_size, spatial):
    """torch's adaptive ``output_size``: an int or one per axis, ``None`` keeping the input's."""
    dims = len(spatial)
    values = (output_size,) * dims if isinstance(output_size, numbers.Integral) else output_size
    try:
        values = tuple(values)
    except TypeError:
        values = ()
    if len(values) != dims or not all(v is None or (isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                                    and v >= 0) for v in values):
        raise ValueError(f"{op}: output_size must be an int >= 0 or {dims} of them (None: the input's size), "
                         f"got {output_size!r}")
    return tuple(n if v is None else int(v) for v, n in zip(values, spatial))


def _adaptive_pool(op, dims, input, output_size, return_indices=None):  # noqa: A002
    """Adaptive average pooling (``return_indices`` None) or max pooling."""
    x, batched = _pool_input(op, input, dims, empty_channels=return_indices is None)
    size = _output_size(op, output_size, x.shape[2:])
    if return_indices is None:
        out = adaptive_avg_pool_op(x, output_size=size, shape=x.shape)
        return out if batched else out[0]
    values, index = adaptive_max_pool_op(x, output_size=size, shape=x.shape)
    if not batched:
        values, index = values[0], index[0]
    return (values, index) if return_indices else values


_ADAPTIVE_AVG_POOL_DOC = """torch.nn.functional.adaptive_avg_pool{n}d, also unbatched {unbatched}: the mean over
    torch's windows, along an axis of length L ``[floor(i L / out), ceil((i + 1) L / out))``
    (``None`` in ``output_size`` keeps that axis' size). Linear: JVP the pooled tangent; VJP seed
    ``_adaptive_avg_pool2d_backward`` (each cotangent shared evenly over its window). Mirrors
    ``torch.nn.functional.adaptive_avg_pool{n}d``.

    Args:
        input: the input ``(N, C, *spatial)`` or unbatched ``{unbatched}``, real (integer and boolean
            input is promoted to float); only the batch may be empty.
        output_size: the output's spatial size: an int >= 0 (every spatial axis) or one per
            spatial axis, where None keeps the input's size.

    Returns:
        The pooled ``(N, C, *output_size)`` (without ``N`` for an unbatched input).
    """


@exported_as("jaxrules.nn.adaptive_avg_pool1d")
@_ranked(_ADAPTIVE_AVG_POOL_DOC)
def adaptive_avg_pool1d(input: ArrayLike, output_size: int | Sequence[int | None]) -> Array:  # noqa: A002
    return _adaptive_pool("adaptive_avg_pool1d", 1, input, output_size)


@exported_as("jaxrules.nn.adaptive_avg_pool2d")
@_ranked(_ADAPTIVE_AVG_POOL_DOC)
def adaptive_avg_pool2d(input: ArrayLike, output_size: int | Sequence[int | None]) -> Array:  # noqa: A002
    return _adaptive_pool("adaptive_avg_pool2d", 2, input, output_size)


@exported_as("jaxrules.nn.adaptive_avg_pool3d")
@_ranked(_ADAPTIVE_AVG_POOL_DOC)
def adaptive_avg_pool3d(input: ArrayLike, output_size: int | Sequence[int | None]) -> Array:  # noqa: A002
    return _adaptive_pool("adaptive_avg_pool3d", 3, input, output_size)


_ADAPTIVE_MAX_POOL_DOC = """torch.nn.functional.adaptive_max_pool{n}d, also unbatched {unbatched}: the maximum over
    the windows of ``adaptive_avg_pool{n}d``; ``return_indices``: also its flat index within the
    (N, C) plane as torch's (the first maximum in window order, the last NaN). VJP seed
    ``adaptive_max_pool2d_backward`` (the cotangent added at the argmax), JVP a gather there.
    Mirrors ``torch.nn.functional.adaptive_max_pool{n}d``.

    Args:
        input: the input ``(N, C, *spatial)`` or unbatched ``{unbatched}``, real (integer and boolean
            input is promoted to float); only the batch may be empty.
        output_size: the output's spatial size: an int >= 0 (every spatial axis) or one per
            spatial axis, where None keeps the input's size.
        return_indices: also return each maximum's flat index within its ``(N, C)`` plane.

    Returns:
        The pooled ``(N, C, *output_size)`` (without ``N`` for an unbatched input); with
        ``return_indices`` the tuple ``(values, indices)``.
    """


@exported_as("jaxrules.nn.adaptive_max_pool1d")
@_ranked(_ADAPTIVE_MAX_POOL_DOC)
def adaptive_max_pool1d(input: ArrayLike, output_size: int | Sequence[int | None], return_indices: bool = False) -> Array | tuple[Array, Array]:  # noqa: A002
    return _adaptive_pool("adaptive_max_pool1d", 1, input, output_size, bool(return_indices))


@exported_as("jaxrules.nn.adaptive_max_pool2d")
@_ranked(_ADAPTIVE_MAX_POOL_DOC)
def adaptive_max_pool2d(input: ArrayLike, output_size: int | Sequence[int | None], return_indices: bool = False) -> Array | tuple[Array, Array]:  # noqa: A002
    return _adaptive_pool("adaptive_max_pool2d", 2, input, output_size, bool(return_indices))


@exported_as("jaxrules.nn.adaptive_max_pool3d")
@_ranked(_ADAPTIVE_MAX_POOL_DOC)
def adaptive_max_pool3d(input: ArrayLike, output_size: int | Sequence[int | None], return_indices: bool = False) -> Array | tuple[Array, Array]:  # noqa: A002
    return _adaptive_pool("adaptive_max_pool3d", 3, input, output_size, bool(return_indices))
