"""Convolution and pooling (channels first). Part of ``jaxrules.partials``."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec

from jaxrules.mechanism import define_op, explicit_sharding, full_spec
from jaxrules.partials.elementwise import with_rank
from jaxrules.partials.indexing import zeros_sharded_like
from jaxrules.partials.normalization import stat_dtype

__all__ = [  # the helpers jaxrules.partials re-exports (formulas write P.<name>)
    "adaptive_avg_pool", "adaptive_avg_pool_transpose", "adaptive_windows", "avg_pool", "avg_pool_divisor",
    "avg_pool_transpose", "bias_view", "combine_windows", "conv", "conv_input_grad", "conv_transpose",
    "conv_weight_grad", "fold", "pool_flat_gather", "pool_flat_scatter", "tiled", "tiled_axes",
    "tiled_element_ids", "tiled_valid", "tiled_windows", "unfold", "window_place", "window_positions",
    "window_read", "window_select", "window_slices", "window_slices_transpose", "window_sum",
    "window_sum_transpose"
]

# ----------------------------------------------------------------------------------------------
# Convolution (channels first: x (N, C, *spatial), weight (O, C / groups, *kernel)) and pooling


def _conv_numbers(ndim, lhs, rhs, out):
    return lax.ConvDimensionNumbers(lhs_spec=lhs + tuple(range(2, ndim)), rhs_spec=rhs + tuple(range(2, ndim)),
                                    out_spec=out + tuple(range(2, ndim)))


def _conv_out_sharding(lhs, rhs, numbers, batch_groups=1):
    """The output sharding to pass as ``lax.conv_general_dilated``'s ``out_sharding``, or ``None``
    where JAX's own rule decides. Under an ``Explicit`` mesh JAX's rule refuses a sharded ``rhs``
    or a sharded ``lhs`` feature axis (the contracted one); there the output's batch axis takes
    ``lhs``' batch sharding (when ``batch_groups`` leaves its size unchanged), its feature axis
    ``rhs``' output-feature sharding (when that mesh axis is not the batch's already), its spatial
    axes none: no output axis is split where its operand's is not, and the contraction over a
    sharded channel axis is a sum across devices that the partitioner inserts."""
    lhs_sharding, rhs_sharding = explicit_sharding(lhs, rhs), explicit_sharding(rhs, lhs)
    if lhs_sharding is None:
        return None
    lhs_spec = full_spec(lhs_sharding, lhs.ndim)
    rhs_spec = full_spec(rhs_sharding, rhs.ndim)
    if all(e is None for e in rhs_spec) and lhs_spec[numbers.lhs_spec[1]] is None:
        return None  # JAX's rule accepts it
    batch = lhs_spec[numbers.lhs_spec[0]] if batch_groups == 1 else None
    feature = rhs_spec[numbers.rhs_spec[0]]
    if feature is not None and batch is not None and set(_mesh_axes(feature)) & set(_mesh_axes(batch)):
        feature = None
    spec = [None] * lhs.ndim
    spec[numbers.out_spec[0]], spec[numbers.out_spec[1]] = batch, feature
    return jax.sharding.NamedSharding(lhs_sharding.mesh, PartitionSpec(*spec))


def _mesh_axes(entry):
    """The mesh axis names of one partition-spec entry (a name or a tuple of names)."""
    return entry if isinstance(entry, tuple) else (entry,)


def _conv(x, w, stride, padding, dilation, groups):
    numbers = _conv_numbers(x.ndim, (0, 1), (0, 1), (0, 1))
    return lax.conv_general_dilated(
        x, w, window_strides=stride, padding=padding, rhs_dilation=dilation, feature_group_count=groups,
        dimension_numbers=numbers, out_sharding=_conv_out_sharding(x, w, numbers),
    )


def _conv_input_grad(g, w, in_spatial, stride, padding, dilation, groups):
    o, i_g, *kernel = w.shape
    swapped = w.reshape(groups, o // groups, i_g, *kernel).swapaxes(1, 2).reshape(groups * i_g, o // groups, *kernel)
    flipped = jnp.flip(swapped, axis=tuple(range(2, w.ndim)))
    pads = []
    for n, k, s, (lo, _), d, out in zip(in_spatial, kernel, stride, padding, dilation, g.shape[2:]):
        span = d * (k - 1) + 1
        pads.append((span - 1 - lo, n - 1 - (out - 1) * s + lo))
    numbers = _conv_numbers(g.ndim, (0, 1), (0, 1), (0, 1))
    return lax.conv_general_dilated(
        g, flipped, window_strides=(1,) * len(kernel), padding=pads, lhs_dilation=stride, rhs_dilation=dilation,
        feature_group_count=groups, dimension_numbers=numbers, out_sharding=_conv_out_sharding(g, flipped, numbers),
    )


def _conv_weight_grad(x, g, kernel, stride, padding, dilation, groups, out_sharding=None):
    pads = []
    for n, k, s, (lo, _), d, out in zip(x.shape[2:], kernel, stride, padding, dilation, g.shape[2:]):
        pads.append((lo, (k - 1) * d + (out - 1) * s + 1 - n - lo))
    numbers = _conv_numbers(x.ndim, (1, 0), (1, 0), (1, 0))
    if out_sharding is None:
        out_sharding = _conv_out_sharding(x, g, numbers, batch_groups=groups)
    return lax.conv_general_dilated(
        x, g, window_strides=dilation, padding=pads, rhs_dilation=stride, batch_group_count=groups,
        dimension_numbers=numbers, out_sharding=out_sharding,
    )


# The three bilinear maps of a convolution are the gradients of the trilinear form
# T(x, w, g) = <conv(x, w), g> in each argument: "out" conv(x, w) (T's gradient in g), "input"
# conv_input_grad(g, w) (in x), "weight" conv_weight_grad(x, g) (in w). One op of two arguments
# ``(a, b)`` computes each, so the formulas of the convolution ops are calls of it, and vmapping
# them uses its batching rule, not JAX's: under an ``Explicit`` mesh jax 0.10.2's rule for
# ``lax.conv_general_dilated`` folds a sharded vmapped axis into the channels with a reshape it
# refuses ("This reshape is not supported"). Its derivatives are calls of itself: its JVP is
# ``op(da, b) + op(a, db)``; its transpose in either argument is T's gradient in the third.


def _bilinear_primal(a, b, *, which, shape, out_sharding, stride, padding, dilation, groups):
    """``conv(a, b)`` (``which="out"``: a = x, b = w), ``conv_input_grad(a, b, shape)``
    (``"input"``: a = g, b = w, ``shape`` x's spatial) or ``conv_weight_grad(a, b, shape,
    out_sharding=...)`` (``"weight"``: a = x, b = g, ``shape`` the kernel)."""
    conv = (stride, padding, dilation, groups)
    if which == "out":
        return _conv(a, b, *conv)
    if which == "input":
        return _conv_input_grad(a, b, shape, *conv)
    return _conv_weight_grad(a, b, shape, *conv, out_sharding)


def _bilinear(which, a, b, shape, stride, padding, dilation, groups, out_sharding=None):
    """The op ``_bilinear_primal`` of ``a`` and ``b``, differentiable and batched by its rules."""
    return _conv_bilinear_op(a, b, which=which, shape=tuple(shape), out_sharding=out_sharding, stride=stride,
                             padding=padding, dilation=dilation, groups=groups)


def _bilinear_jvp(res, ta, tb, *, which, **static):
    """``op(ta, b) + op(a, tb)`` (bilinear)."""
    a, b = res
    pairs = [(t, u) for t, u in ((ta, b), (a, tb)) if t is not None and u is not None]
    return functools.reduce(jnp.add, [_conv_bilinear_op(t, u, which=which, **static) for t, u in pairs])


def _bilinear_vjp(res, ct, *, which, shape, out_sharding, **conv):
    """The transposes of ``op(., b)`` and ``op(a, .)``: the gradients of T in the third argument
    (``out``: x's by ``input``, w's by ``weight``; ``input``: g's by ``out``, w's by ``weight``;
    ``weight``: x's by ``input``, g's by ``out``), as seed ``_convolution_double_backward``'s
    terms are convolutions of the same three kinds."""
    a, b = res
    if which == "out":  # a = x, b = w
        return (_bilinear("input", ct, b, a.shape[2:], **conv),
                _bilinear("weight", a, ct, b.shape[2:], **conv, out_sharding=explicit_sharding(b, a, ct)))
    if which == "input":  # a = g, b = w, ct x-shaped
        return (_bilinear("out", ct, b, (), **conv),
                _bilinear("weight", ct, a, b.shape[2:], **conv, out_sharding=explicit_sharding(b, a, ct)))
    # weight: a = x, b = g, ct w-shaped
    return _bilinear("input", b, ct, a.shape[2:], **conv), _bilinear("out", a, ct, (), **conv)


def _bilinear_batch(args, dims, *, vmap_axis_name, **static):
    """``jax.vmap`` of the primal (JAX's batching rule of the convolution), except where a
    batched argument's vmapped axis is sharded under an ``Explicit`` mesh: then the vmapped
    primal runs per device in a ``shard_map`` (each device convolves its own samples; JAX's rule
    folds the local batch into the channels). The arguments' other axes are gathered there: a
    batch sharded over a mesh axis, the rest replicated, needs no communication. The result is
    then resharded to the per-example output's sharding beside the batch axis (the type JAX
    checks the op's outputs against when it traces the op on one example)."""
    args = [x if d is None else jnp.moveaxis(x, d, 0) for x, d in zip(args, dims)]
    in_axes = tuple(None if d is None else 0 for d in dims)
    primal = functools.partial(_bilinear_primal, **static)
    shardings = [explicit_sharding(x) for x, d in zip(args, in_axes) if d is not None]
    sharded = next((s for s in shardings if s is not None and s.spec and s.spec[0] is not None), None)
    if sharded is None:
        return jax.vmap(primal, in_axes=in_axes)(*args), 0
    axis = sharded.spec[0]
    per_device = functools.partial(_bilinear_primal, **{**static, "out_sharding": None})
    specs = tuple(PartitionSpec() if d is None else PartitionSpec(axis) for d in in_axes)
    example = _example_out_sharding(primal, args, in_axes)
    args = [jax.sharding.reshard(x, spec) if explicit_sharding(x) is not None else x for x, spec in zip(args, specs)]
    mapped = jax.shard_map(jax.vmap(per_device, in_axes=in_axes), mesh=sharded.mesh, in_specs=specs,
                           out_specs=PartitionSpec(axis))
    out = mapped(*args)
    if example is None:
        return out, 0
    return jax.sharding.reshard(out, PartitionSpec(axis, *full_spec(example, out.ndim - 1))), 0


def _example_out_sharding(primal, args, in_axes):
    """The explicit sharding of ``primal``'s output on one example of ``args`` (batched at 0 where
    ``in_axes`` says), each example keeping its argument's sharding of the other axes: the batched
    output must have the type of the per-example output beside the batch axis (JAX traces an op
    on one example and checks its rules' outputs against that type). Evaluated abstractly."""
    def one(*batched):
        examples = []
        for x, d in zip(batched, in_axes):
            if d is not None:
                sharding = explicit_sharding(x)
                if sharding is not None:  # unshard the batch axis only, so that one example can be cut
                    x = jax.sharding.reshard(x, PartitionSpec(None, *full_spec(sharding, x.ndim)[1:]))
                x = x[0]
            examples.append(x)
        return primal(*examples)

    sharding = getattr(jax.eval_shape(one, *args), "sharding", None)
    return sharding if isinstance(sharding, jax.sharding.NamedSharding) else None


_conv_bilinear_op = define_op("conv_bilinear", _bilinear_primal, _bilinear_jvp, _bilinear_vjp, batch=_bilinear_batch)


def conv(x, w, stride, padding, dilation, groups):
    """torch's convolution without bias: ``padding`` is ((lo, hi), ...) per spatial axis."""
    return _bilinear("out", x, w, (), stride, padding, dilation, groups)


def conv_input_grad(g, w, in_spatial, stride, padding, dilation, groups):
    """The transposed convolution (seed ``convolution_backward``'s grad_input): ``g`` (strides
    become input dilation) against the flipped kernel with in/out channels swapped per group."""
    return _bilinear("input", g, w, in_spatial, stride, padding, dilation, groups)


def conv_weight_grad(x, g, kernel, stride, padding, dilation, groups, out_sharding=None):
    """seed ``convolution_backward``'s grad_weight: ``x`` (channels as the batch) correlated with
    ``g`` (strides become kernel dilation), one group per batch group; ``out_sharding`` the
    weight's (an ``Explicit`` mesh asks for it: the batch contracted may be sharded)."""
    return _bilinear("weight", x, g, kernel, stride, padding, dilation, groups, out_sharding)


def conv_transpose(x, w, stride, padding, dilation, groups):
    """torch's transposed convolution without bias, ``x`` (N, C_in, *spatial) and ``w`` (C_in,
    C_out / groups, *kernel): the transpose of ``conv(., w)`` with ``padding`` ((lo, hi), ...)
    whose output ``x`` would be (``conv_input_grad``); torch's ``padding``/``output_padding``
    are ``lo = padding``, ``hi = padding - output_padding``, so each output axis has
    ``(n - 1) stride + dilation (k - 1) + 1 - lo - hi`` entries."""
    spatial = tuple((n - 1) * s + d * (k - 1) + 1 - lo - hi
                    for n, k, s, (lo, hi), d in zip(x.shape[2:], w.shape[2:], stride, padding, dilation))
    return conv_input_grad(x, w, spatial, stride, padding, dilation, groups)


def bias_view(b, ndim):
    """A per-channel vector shaped to broadcast against (N, C, *spatial)."""
    return b.reshape((1, -1) + (1,) * (ndim - 2))


def window_positions(spatial, kernel, stride, padding, dilation):
    """Static (prod(kernel), *out) flat input positions of every window element, row-major in
    the window; -1 where the window covers padding (``padding`` ((lo, hi), ...) per axis)."""
    axes = []
    for n, k, s, (lo, hi), d in zip(spatial, kernel, stride, padding, dilation):
        out = (n + lo + hi - d * (k - 1) - 1) // s + 1
        pos = np.arange(out)[None, :] * s + np.arange(k)[:, None] * d - lo  # (k, out)
        axes.append(np.where((pos >= 0) & (pos < n), pos, -1))
    return combine_windows(axes, spatial)


def combine_windows(axes, spatial):
    """Per-axis (k, out) input positions (-1: none) -> (prod(k), *out) flat positions, row-major
    in the window; -1 where any axis has none."""
    grids = np.meshgrid(*[np.arange(a.shape[0]) for a in axes], *[np.arange(a.shape[1]) for a in axes], indexing="ij")
    dims = len(axes)
    coords = [axes[i][grids[i], grids[dims + i]] for i in range(dims)]
    inside = np.all([c >= 0 for c in coords], axis=0)
    flat = np.ravel_multi_index([np.maximum(c, 0) for c in coords], spatial)
    flat = np.where(inside, flat, -1)
    return flat.reshape(math.prod(a.shape[0] for a in axes), *flat.shape[dims:])


def _block_index(spatial, kernel, stride, padding, dilation):
    """``(index, size)``: the (prod(kernel), L) flat positions of ``window_positions`` with the
    blocks flattened (row-major) and padding sent to ``size``, one past the plane."""
    pos = window_positions(spatial, kernel, stride, padding, dilation)
    size = math.prod(spatial)
    return np.where(pos >= 0, pos, size).reshape(pos.shape[0], math.prod(pos.shape[1:])), size


def unfold(x, kernel, stride, padding, dilation):
    """torch's ``im2col``: (N, C, *spatial) -> (N, C prod(kernel), L), entry ``(c, j)`` of block
    ``l`` the input under element ``j`` (row-major) of the ``l``-th window (row-major), 0 on the
    ``padding`` ((lo, hi), ...). A gather: exact in every dtype."""
    n, c = x.shape[:2]
    index, size = _block_index(x.shape[2:], kernel, stride, padding, dilation)
    planes = x.reshape(n, c, size)  # not -1: the batch may be empty
    cols = jnp.take(planes, index, axis=2, mode="fill", fill_value=0)  # (N, C, K, L)
    return cols.reshape(n, c * index.shape[0], index.shape[1])


def fold(cols, spatial, kernel, stride, padding, dilation):
    """torch's ``col2im``, the transpose of ``unfold`` for an input of ``spatial`` size: each
    entry of (N, C prod(kernel), L) added at its window position (padding dropped), summed in
    float32 for half precision."""
    index, size = _block_index(spatial, kernel, stride, padding, dilation)
    n, ck, blocks = cols.shape
    c = ck // index.shape[0]
    acc = stat_dtype(cols.dtype)
    planes = zeros_sharded_like((n, c, size), acc, cols).at[:, :, index].add(
        cols.astype(acc).reshape(n, c, *index.shape), mode="drop")
    return planes.reshape(n, c, *spatial).astype(cols.dtype)


def pool_flat_gather(x, flat_index):
    """``x`` (N, C, *spatial) read at per-plane flat spatial indices (N, C, *out)."""
    planes = x.reshape(x.shape[:2] + (math.prod(x.shape[2:]),))  # not -1: the batch may be empty
    picked = jnp.take_along_axis(planes, flat_index.reshape(flat_index.shape[:2] + (math.prod(flat_index.shape[2:]),)),
                                 axis=2)
    return picked.reshape(flat_index.shape)


def pool_flat_scatter(g, flat_index, shape):
    """The transpose of ``pool_flat_gather``: ``g`` scatter-added into zeros of ``shape``."""
    idx = flat_index.reshape(flat_index.shape[:2] + (math.prod(flat_index.shape[2:]),))

    def plane(values, index):  # one (sample, channel): vmapped, the scatter has batching dims,
        return jnp.zeros((math.prod(shape[2:]),), values.dtype).at[index].add(values)  # which shard

    return jax.vmap(jax.vmap(plane))(g.reshape(idx.shape), idx).reshape(shape)


def _spatial_pads(pads):
    return ((0, 0, 0), (0, 0, 0), *pads)


def _window_grid(spatial, kernel, stride, padding, dilation):
    """Per spatial axis ``(out, padded length)`` of the windows over an input padded by
    ``padding`` ((lo, hi), ...; ``hi`` negative where trailing input lies in no window)."""
    return [((n + lo + hi - d * (k - 1) - 1) // s + 1, n + lo + hi)
            for n, k, s, (lo, hi), d in zip(spatial, kernel, stride, padding, dilation)]


def _window_offsets(kernel):
    """Every element of a window, row-major (``window_positions``' order), as per-axis offsets."""
    return [np.unravel_index(j, kernel) for j in range(math.prod(kernel))]


def window_slices(x, kernel, stride, padding, dilation, fill):
    """(N, C, prod(kernel), *out): element ``j`` (row-major) of every window of ``x`` (N, C,
    *spatial) padded with ``fill``, as one strided slice per window element: no gather, so XLA
    fuses it and a batch-sharded ``x`` stays sharded (the windows of ``window_positions``)."""
    padded = lax.pad(x, np.array(fill, x.dtype), _spatial_pads((lo, hi, 0) for lo, hi in padding))
    grid = _window_grid(x.shape[2:], kernel, stride, padding, dilation)
    slices = []
    for offset in _window_offsets(kernel):
        start = [o * d for o, d in zip(offset, dilation)]
        limit = [b + (m - 1) * s + 1 for b, (m, _), s in zip(start, grid, stride)]
        slices.append(lax.slice(padded, (0, 0, *start), (*x.shape[:2], *limit), (1, 1, *stride)))
    return jnp.stack(slices, axis=2)


def window_slices_transpose(windows, shape, kernel, stride, padding, dilation):
    """The transpose of ``window_slices`` for an input of ``shape``: element ``j`` of every window
    (``windows`` (N, C, prod(kernel), *out)) added back at its input position, each as the
    slice's transpose (the slice spread out with ``stride - 1`` zeros between entries); the
    padding dropped. No scatter (seed ``max_pool2d_with_indices_backward``'s scatter-add)."""
    zero = np.zeros((), windows.dtype)
    grid = _window_grid(shape[2:], kernel, stride, padding, dilation)
    total = None
    for j, offset in enumerate(_window_offsets(kernel)):
        pads = []
        for o, d, (m, length), s in zip(offset, dilation, grid, stride):
            lo = o * d
            pads.append((lo, length - lo - (m - 1) * s - 1, s - 1))
        piece = lax.pad(windows[:, :, j], zero, _spatial_pads(pads))
        total = piece if total is None else total + piece
    return lax.pad(total, zero, _spatial_pads((-lo, -hi, 0) for lo, hi in padding))


def window_select(windows, element):
    """``windows`` (N, C, K, *out) read at window element ``element`` (N, C, *out): a masked
    sum over the window (elementwise; the unselected entries, NaN or not, do not enter)."""
    chosen = element[:, :, None].astype(jnp.int32) == lax.broadcasted_iota(jnp.int32, windows.shape, 2)
    return jnp.sum(jnp.where(chosen, windows, 0), axis=2).astype(windows.dtype)


def tiled(x, kernel, stride, dilation):
    """Whether the windows tile the (padded) input ``x``: stride == kernel, no dilation, and
    (under an ``Explicit`` mesh) no sharded spatial axis. Then they are a reshape of it
    (``tiled_windows``), which XLA reads and reduces in one pass."""
    sharding = explicit_sharding(x)
    spatial_sharded = sharding is not None and any(e is not None for e in tuple(sharding.spec)[2:])
    return tuple(stride) == tuple(kernel) and set(dilation) == {1} and not spatial_sharded


def _reshape_spatial(v, shape):
    """``v`` (N, C, ...) reshaped to ``shape`` (N, C, ...), only its spatial axes regrouped: an
    ``Explicit`` mesh keeps the batch and channel axes' sharding (the spatial ones unsharded)."""
    sharding = explicit_sharding(v)
    if sharding is None:
        return v.reshape(shape)
    spec = (tuple(sharding.spec) + (None, None))[:2]
    return jnp.reshape(v, shape, out_sharding=jax.sharding.PartitionSpec(*spec, *(None,) * (len(shape) - 2)))


def _tiled_pads(spatial, kernel, padding):
    """Per axis ``(lo, hi)``: the padding that makes each spatial axis ``out k`` long (``hi``
    negative where trailing input lies in no window), and the outputs ``out``."""
    grid = _window_grid(spatial, kernel, kernel, padding, (1,) * len(kernel))
    pads = [(lo, m * k - n - lo) for (m, _), k, n, (lo, _) in zip(grid, kernel, spatial, padding)]
    return pads, [m for m, _ in grid]


def _tiled_shape(lead, out, kernel):
    """``lead`` (N, C) then ``(out_i, k_i)`` per spatial axis: the tiled windows' shape."""
    return (*lead, *(v for m, k in zip(out, kernel) for v in (m, k)))


def tiled_windows(x, kernel, padding, fill):
    """(N, C, out_1, k_1, out_2, k_2, ...): the windows of ``x`` (N, C, *spatial) when they
    tile it (``tiled``), as ``x`` padded with ``fill`` (or cut) to ``out k`` per axis, reshaped."""
    pads, out = _tiled_pads(x.shape[2:], kernel, padding)
    padded = lax.pad(x, np.array(fill, x.dtype), _spatial_pads((lo, hi, 0) for lo, hi in pads))
    return _reshape_spatial(padded, _tiled_shape(x.shape[:2], out, kernel))


def tiled_axes(kernel):
    """The window axes of ``tiled_windows``' layout."""
    return tuple(3 + 2 * i for i in range(len(kernel)))


def tiled_element_ids(shape, kernel):
    """int32 of ``tiled_windows``' ``shape``: each entry's element (row-major) in its window."""
    ids = jnp.zeros(shape, jnp.int32)
    for axis, k in zip(tiled_axes(kernel), kernel):
        ids = ids * k + lax.broadcasted_iota(jnp.int32, shape, axis)
    return ids


def tiled_valid(shape, spatial, kernel, padding):
    """bool of ``tiled_windows``' ``shape``: the entry is input, not padding."""
    valid = jnp.ones(shape, bool)
    for axis, n, k, (lo, _) in zip(tiled_axes(kernel), spatial, kernel, padding):
        position = lax.broadcasted_iota(jnp.int32, shape, axis - 1) * k + lax.broadcasted_iota(jnp.int32, shape, axis)
        valid = valid & (position >= lo) & (position < lo + n)
    return valid


def _tiled_expand(v, kernel):
    """(N, C, *out) -> (N, C, out_1, 1, out_2, 1, ...): broadcastable against the tiled windows."""
    return _reshape_spatial(v, (*v.shape[:2], *(d for m in v.shape[2:] for d in (m, 1))))


def window_read(x, element, kernel, stride, padding, dilation):
    """``x`` (N, C, *spatial), zero-padded, read at window element ``element`` (N, C, *out) of
    each window: the tiled windows' masked sum, or ``window_select`` of the window slices."""
    if not tiled(x, kernel, stride, dilation):
        return window_select(window_slices(x, kernel, stride, padding, dilation, 0), element)
    windows = tiled_windows(x, kernel, padding, 0)
    chosen = tiled_element_ids(windows.shape, kernel) == _tiled_expand(element.astype(jnp.int32), kernel)
    return jnp.sum(jnp.where(chosen, windows, 0), axis=tiled_axes(kernel)).astype(x.dtype)


def window_place(g, element, shape, kernel, stride, padding, dilation):
    """The transpose of ``window_read``: ``g`` (N, C, *out) added at window element ``element``
    of each window of an input of ``shape`` (tiled windows: a reshape and the padding cut off;
    otherwise the transpose of the window slices)."""
    if tiled(g, kernel, stride, dilation):
        pads, out = _tiled_pads(shape[2:], kernel, padding)
        ids = tiled_element_ids(_tiled_shape(shape[:2], out, kernel), kernel)
        chosen = ids == _tiled_expand(element.astype(jnp.int32), kernel)
        spread = jnp.where(chosen, _tiled_expand(g, kernel), 0)
        spread = _reshape_spatial(spread, (*shape[:2], *(m * k for m, k in zip(out, kernel))))
        return lax.pad(spread, np.zeros((), g.dtype), _spatial_pads((-lo, -hi, 0) for lo, hi in pads))
    k = math.prod(kernel)
    ids = lax.broadcasted_iota(jnp.int32, (*g.shape[:2], k, *g.shape[2:]), 2)
    chosen = element[:, :, None].astype(jnp.int32) == ids
    return window_slices_transpose(jnp.where(chosen, g[:, :, None], 0), shape, kernel, stride, padding, dilation)


def window_sum(x, kernel, stride, padding):
    """The sum over every window of (N, C, *spatial) (no dilation); ``padding`` ((lo, hi), ...)
    per spatial axis of zeros, ``hi`` negative where trailing input lies in no window."""
    zero = np.zeros((), x.dtype)
    padded = lax.pad(x, zero, _spatial_pads((lo, hi, 0) for lo, hi in padding))
    return lax.reduce_window(padded, zero, lax.add, (1, 1, *kernel), (1, 1, *stride), "VALID")


def window_sum_transpose(g, kernel, stride, padding):
    """The transpose of ``window_sum``: each input position gets the sum of ``g`` over the windows
    that cover it. ``g`` spread out with ``stride - 1`` zeros between entries and ``kernel - 1``
    around, summed over windows of ``kernel`` at stride 1 (the padded input's length
    ``(out - 1) stride + kernel``), the padding cut off again (seed ``avg_pool2d_backward``'s
    scatter, as a gather)."""
    zero = np.zeros((), g.dtype)
    spread = lax.pad(g, zero, _spatial_pads((k - 1, k - 1, s - 1) for k, s in zip(kernel, stride)))
    full = lax.reduce_window(spread, zero, lax.add, (1, 1, *kernel), (1,) * g.ndim, "VALID")
    return lax.pad(full, zero, _spatial_pads((-lo, -hi, 0) for lo, hi in padding))


def avg_pool_divisor(spatial, kernel, stride, padding, count_include_pad, divisor_override):
    """torch's avg_pool divisor per output position (static): ``divisor_override``, else the
    window's size clipped to the padded input (``count_include_pad``) or to the input itself;
    both are products of one length per axis."""
    lengths = []
    for n, k, s, (lo, hi) in zip(spatial, kernel, stride, padding):
        out = (n + lo + hi - k) // s + 1
        start = np.arange(out) * s - lo
        end = np.minimum(start + k, n + lo)  # torch clips a ceil_mode window to the padding
        if not count_include_pad:
            start, end = np.maximum(start, 0), np.minimum(end, n)
        lengths.append(end - start)
    if divisor_override is not None:
        return np.full([len(v) for v in lengths], float(divisor_override))
    return functools.reduce(np.multiply.outer, lengths).astype(float)


def avg_pool(x, kernel, stride, padding, count_include_pad, divisor_override):
    """torch's avg_pool: the window sums over the divisor, summed in float32 for half precision."""
    divisor = avg_pool_divisor(x.shape[2:], kernel, stride, padding, count_include_pad, divisor_override)
    acc = stat_dtype(x.dtype)
    sums = window_sum(x.astype(acc), kernel, stride, padding)
    return (sums / with_rank(divisor.astype(acc), sums.ndim)).astype(x.dtype)


def avg_pool_transpose(g, shape, kernel, stride, padding, count_include_pad, divisor_override):
    """The transpose of ``avg_pool`` for an input of ``shape``: ``g`` over the divisor, spread
    back over the windows (``window_sum_transpose``)."""
    divisor = avg_pool_divisor(shape[2:], kernel, stride, padding, count_include_pad, divisor_override)
    acc = stat_dtype(g.dtype)
    shares = g.astype(acc) / with_rank(divisor.astype(acc), g.ndim)
    return window_sum_transpose(shares, kernel, stride, padding).astype(g.dtype)


def adaptive_windows(n, out):
    """torch's adaptive pooling windows of an axis of length ``n``: ``[floor(i n / out),
    ceil((i + 1) n / out))`` for i < out (static)."""
    i = np.arange(out)
    return (i * n) // out, -((-(i + 1) * n) // out)


def _adaptive_window_index(n, out):
    """``(index, valid, length)`` of the adaptive windows of an axis of length ``n``: ``index``
    (out, width) the positions of each window (padded with the last position), ``valid`` which
    of them belong to it, ``length`` its length."""
    start, end = adaptive_windows(n, out)
    length = end - start
    k = np.arange(int(length.max(initial=0)))
    return np.minimum(start[:, None] + k, max(n - 1, 0)), k < length[:, None], length


def _window_means(y, axis, n, out):
    """The mean of each adaptive window along ``axis``: a sum per window (no product with a
    dense averaging matrix, whose zeros would turn an inf elsewhere on the axis into NaN)."""
    index, valid, length = _adaptive_window_index(n, out)
    windows = jnp.take(jnp.moveaxis(y, axis, -1), index, axis=-1)  # (..., out, width)
    valid, length = with_rank(valid, windows.ndim), with_rank(length.astype(y.dtype), windows.ndim - 1)
    means = jnp.where(valid, windows, 0).sum(-1) / length
    return jnp.moveaxis(means, -1, axis)


def _window_means_transpose(g, axis, n, out):
    """The transpose of ``_window_means``: each window's cotangent shared evenly over it."""
    index, valid, length = _adaptive_window_index(n, out)
    g = jnp.moveaxis(g, axis, -1)
    valid, length = with_rank(valid, g.ndim + 1), with_rank(length.astype(g.dtype), g.ndim)
    shares = jnp.where(valid, (g / length)[..., None], 0)  # (..., out, width)
    spread = zeros_sharded_like(g.shape[:-1] + (n,), g.dtype, g).at[..., index].add(shares)
    return jnp.moveaxis(spread, -1, axis)


def _along_spatial_axes(x, step, sizes, output_size):
    """``step`` applied to each spatial axis of x (N, C, *spatial) in turn, accumulated in
    float32 for half precision."""
    y = x.astype(stat_dtype(x.dtype))
    for axis, (n, out) in enumerate(zip(sizes, output_size), start=2):
        y = step(y, axis, n, out)
    return y.astype(x.dtype)


def adaptive_avg_pool(x, output_size):
    """torch's adaptive_avg_pool: the mean of each adaptive window, axis by axis (it is separable:
    the window's size is the product of its lengths)."""
    return _along_spatial_axes(x, _window_means, x.shape[2:], output_size)


def adaptive_avg_pool_transpose(g, shape, output_size):
    """The transpose of ``adaptive_avg_pool`` (seed ``_adaptive_avg_pool2d_backward``: each
    cotangent shared evenly over its window)."""
    return _along_spatial_axes(g, _window_means_transpose, shape[2:], output_size)
