"""Resampling with torch.nn.functional's semantics (channels first): ``interpolate``,
``grid_sample`` and ``affine_grid``. Their formulas and registry records live here.

All three are linear in their image (or ``theta``) argument: the JVP formula is the op applied
to the tangent and the VJP formula its transpose. ``interpolate`` is separable: along each
spatial axis it is a static table of source indices and weights (torch's source-index
arithmetic, ``UpSample.h``), so the op gathers and its transpose scatter-adds (seed
``upsample_*_backward``). ``grid_sample`` gathers the corners (bilinear, trilinear, nearest,
bicubic) of each sampling point and its transpose scatter-adds; its derivative with respect to
the grid is torch's CPU kernels' (``GridSamplerKernel.cpp``), conventions at borders included."""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from jaxrules import _validate as V
from jaxrules import partials as P
from jaxrules._namespace import exported_as
from jaxrules.mechanism import define_op, explicit_sharding
from jaxrules.ops.conv import adaptive_avg_pool_op

# ----------------------------------------------------------------------------------------------
# Ops

_LINEAR_RANK = {"linear": 3, "bilinear": 4, "bicubic": 4, "trilinear": 5}
_MODES = ("nearest", "nearest-exact", "area", *_LINEAR_RANK)


# ----------------------------------------------------------------------------------------------
# Ops: interpolate: per-axis tables (static, NumPy) of torch's source indices and weights

def _scale(n_in, n_out, align_corners, scale):
    """torch's ``area_pixel_compute_scale``: the step in the input per output element."""
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else n_in / n_out


def _floor_index(real, n_in):
    """torch's ``guard_index_and_lambda``: ``min(floorf(real), n - 1)`` (floorf: the position
    rounded to float32 first) and the fraction past it, clamped to [0, 1]."""
    index = np.minimum(np.floor(real.astype(np.float32)).astype(np.int64), n_in - 1)
    return index, np.clip(real - index, 0.0, 1.0)


def _cubic_pieces(a):
    """torch's ``cubic_convolution1`` (for |x| <= 1) and ``cubic_convolution2`` (1 < |x| < 2)."""

    def near(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return near, far


def _cubic_weights(t):
    """torch's ``get_cubic_upsample_coefficients`` (cubic convolution, A = -0.75) for the
    fraction ``t``: the weights of the taps at offsets -1, 0, 1, 2."""
    near, far = _cubic_pieces(-0.75)
    return np.stack([far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)], axis=-1)


def _nearest_index(mode, n_in, n_out, scale, legacy):
    """torch's nearest source index of each output. Its CPU kernels differ by rank: 3-d and 5-d
    input (``HelperInterpNearest``/``Exact``) take ``floorf(s i)`` and ``floorf(max(s (i + 0.5) -
    0.5, 0) + 0.5)`` with a double ``s``; 4-d input (``legacy``: ``nearest_idx`` and
    ``nearest_exact_idx``) a float32 ``s``, ``floorf(s i)`` (a copy when ``out == n``, ``i // 2``
    when ``out == 2 n``) and ``floorf((i + 0.5) s)``. Clamped to ``n - 1``."""
    i = np.arange(n_out)
    if not legacy:
        step = _scale(n_in, n_out, False, scale)
        real = step * i if mode == "nearest" else np.maximum(step * (i + 0.5) - 0.5, 0.0) + 0.5
    elif mode == "nearest" and n_out in (n_in, 2 * n_in):
        return i * n_in // n_out
    else:
        step = np.float32(1.0 / scale) if scale is not None and scale > 0 else np.float32(n_in) / np.float32(n_out)
        real = i.astype(np.float32) * step if mode == "nearest" else (i + 0.5) * np.float64(step)
    return np.minimum(np.floor(np.asarray(real).astype(np.float32)).astype(np.int64), n_in - 1)


@functools.lru_cache(maxsize=512)
def _axis_table(mode, n_in, n_out, align_corners, scale, legacy=False):
    """``(index, weight)``, both (n_out, taps): output ``i`` along the axis is
    ``sum_k weight[i, k] * x[index[i, k]]`` (torch's CPU upsample kernels; ``legacy``: 4-d
    input's nearest kernels, see ``_nearest_index``)."""
    i = np.arange(n_out)
    if n_out == 0:  # area's empty output (the other modes refuse it, as torch)
        return np.zeros((0, 1), np.int64), np.zeros((0, 1))
    if mode in ("nearest", "nearest-exact"):
        return _nearest_index(mode, n_in, n_out, scale, legacy)[:, None], np.ones((n_out, 1))
    step = _scale(n_in, n_out, align_corners, scale)
    real = step * i if align_corners else step * (i + 0.5) - 0.5
    if mode == "bicubic":
        index, t = _floor_index(real, n_in)
        taps = np.clip(index[:, None] + np.arange(-1, 3), 0, n_in - 1)
        return taps, _cubic_weights(t)
    if n_out == n_in:  # torch's compute_source_index_and_lambda: a plain copy
        return i[:, None], np.ones((n_out, 1))
    index, lam = _floor_index(np.maximum(real, 0.0), n_in)
    return np.stack([index, np.minimum(index + 1, n_in - 1)], 1), np.stack([1.0 - lam, lam], 1)


def _antialias_filter(mode, x):
    """torch's ``aa_filter``: the triangle (bilinear) or Pillow's cubic with A = -0.5 (bicubic)."""
    x = np.abs(x)
    if mode == "bilinear":
        return np.maximum(1.0 - x, 0.0)
    near, far = _cubic_pieces(-0.5)
    return np.where(x < 1.0, near(x), np.where(x < 2.0, far(x), 0.0))


@functools.lru_cache(maxsize=512)
def _antialias_table(mode, n_in, n_out, align_corners, scale):
    """torch's antialiased weights (``_compute_indices_min_size_weights_aa``): output ``i``
    averages the inputs within ``support`` of its centre ``s (i + 0.5)``, the filter stretched by
    ``s`` when downsampling (``s >= 1``), normalized to sum 1."""
    step = _scale(n_in, n_out, align_corners, scale)
    half = 1.0 if mode == "bilinear" else 2.0
    support = half * step if step >= 1.0 else half
    taps = int(math.ceil(support)) * 2 + 1
    centre = step * (np.arange(n_out) + 0.5)
    first = np.maximum(np.trunc(centre - support + 0.5), 0).astype(np.int64)
    count = np.clip(np.minimum(np.trunc(centre + support + 0.5).astype(np.int64), n_in) - first, 0, taps)
    j = np.arange(taps)
    weight = _antialias_filter(mode, (j + first[:, None] - centre[:, None] + 0.5) / max(step, 1.0))
    weight = np.where(j < count[:, None], weight, 0.0)
    total = weight.sum(axis=1, keepdims=True)
    weight = np.where(total != 0, weight / np.where(total != 0, total, 1.0), 0.0)
    return np.minimum(first[:, None] + j, n_in - 1), weight


def _tables(mode, spatial, out_size, align_corners, scales, antialias=False):
    if antialias:
        return [_antialias_table(mode, n, o, align_corners, s) for n, o, s in zip(spatial, out_size, scales)]
    legacy = len(spatial) == 2
    return [_axis_table(mode, n, o, align_corners, s, legacy) for n, o, s in zip(spatial, out_size, scales)]


def _resample(x, tables):
    """Apply the per-axis tables to the trailing spatial axes of ``x`` (gather, weigh, sum)."""
    dims = len(tables)
    for axis, (index, weight) in zip(range(-dims, 0), tables):
        moved = jnp.moveaxis(x, axis, -1)
        gathered = moved[..., index]
        moved = jnp.sum(gathered * P.with_rank(jnp.asarray(weight, x.dtype), gathered.ndim), axis=-1)
        x = jnp.moveaxis(moved, -1, axis)
    return x


def _resample_transpose(g, tables, spatial):
    """The transpose of ``_resample``: each output's cotangent times its weights, scatter-added
    at its source indices (seed ``upsample_*_backward``), axis by axis in reverse order."""
    dims = len(tables)
    for axis, (index, weight), n in reversed(list(zip(range(-dims, 0), tables, spatial))):
        moved = jnp.moveaxis(g, axis, -1)
        spread = moved[..., None] * P.with_rank(jnp.asarray(weight, g.dtype), moved.ndim + 1)
        zeros = P.zeros_sharded_like(moved.shape[:-1] + (n,), g.dtype, moved)  # an Explicit mesh: as g
        moved = zeros.at[..., index].add(spread, out_sharding=explicit_sharding(zeros))
        g = jnp.moveaxis(moved, -1, axis)
    return g


def _interpolate_primal(x, *, mode, size, align_corners, scales, antialias, shape):
    return _resample(x, _tables(mode, shape[2:], size, align_corners, scales, antialias))


def interpolate_jvp(res, t, *, mode, size, align_corners, scales, antialias, shape):
    """JVP formula: the op is linear in ``x``, so the output tangent is the op on ``t``."""
    return _resample(t, _tables(mode, shape[2:], size, align_corners, scales, antialias))


def interpolate_vjp(res, g, *, mode, size, align_corners, scales, antialias, shape):
    """VJP formula (seed ``upsample_bilinear2d_backward`` and its siblings): the transpose."""
    return (_resample_transpose(g, _tables(mode, shape[2:], size, align_corners, scales, antialias), shape[2:]),)


interpolate_op = define_op("interpolate", _interpolate_primal, interpolate_jvp, interpolate_vjp,
                           lambda out, x, **_: ())


# ----------------------------------------------------------------------------------------------
# Ops: grid_sample: the corners of each sampling point (torch's CPU kernels, GridSamplerKernel.cpp)

_PADDING_MODES = ("zeros", "border", "reflection")


def _clip(pos, size):
    """torch's ``clip_coordinates_get_grad``: ``pos`` clamped to ``[0, size - 1]`` (NaN to 0, as
    its forward) and the multiplier 1 strictly inside, 0 at and past either border."""
    low = jnp.where(pos > 0, pos, 0)
    clipped = jnp.minimum(low, size - 1)
    return clipped, ((low != 0) & (clipped != size - 1)).astype(pos.dtype)


def _reflect(pos, size, align_corners):
    """torch's ``reflect_coordinates_get_grad``: ``pos`` reflected into ``[low, low + span]``
    (``[0, size - 1]`` with ``align_corners``, else ``[-0.5, size - 0.5]``) and the multiplier
    -1 where an odd number of reflections flipped it, else 1 (0 when ``size <= 1`` with
    ``align_corners``)."""
    if align_corners and size <= 1:
        return jnp.zeros_like(pos), jnp.zeros_like(pos)
    low, twice_span = (0.0, 2.0 * (size - 1)) if align_corners else (-0.5, 2.0 * size)
    shifted = pos - low
    magnitude = jnp.abs(shifted)
    extra = magnitude - jnp.trunc(magnitude / twice_span) * twice_span
    flip = extra > twice_span - extra
    sign = jnp.where(flip ^ (shifted < 0), -1, 1).astype(pos.dtype)
    return jnp.where(flip, twice_span - extra, extra) + low, sign


def _locate(coord, size, padding_mode, align_corners):
    """torch's source position (in pixels) of a normalized coordinate in [-1, 1] along an axis of
    ``size`` pixels, and its derivative with respect to the coordinate (``apply_get_grad``)."""
    factor = (size - 1) / 2 if align_corners else size / 2
    pos = (coord + 1) * factor - (0 if align_corners else 0.5)
    mult = jnp.full_like(coord, factor)
    if padding_mode == "reflection":
        pos, sign = _reflect(pos, size, align_corners)
        mult = mult * sign
    if padding_mode != "zeros":
        pos, inside = _clip(pos, size)
        mult = mult * inside
    return pos, mult


def _column(values, like):
    """``values`` as a (1, T, 1) column in ``like``'s (N, P) dtype, to broadcast against (N, T, P)."""
    return P.with_rank(jnp.asarray(values, like.dtype)[:, None], like.ndim + 1)


def _axis_taps(coord, size, mode, padding_mode, align_corners):
    """The taps along one axis of each sampling point ``coord`` (N, P), stacked on axis 1:
    ``(index, weight, d weight / d coord)``, each (N, T, P) (the slope None for ``nearest``, T =
    1). Bilinear (T = 2): the pixels ``floor(pos) + (0, 1)`` around the padded position, weights
    ``(1 - f, f)``, slopes ``(-m, m)`` (m: ``_locate``'s multiplier). Bicubic (torch's, T = 4):
    the taps ``floor(pos) + (-1, 0, 1, 2)`` of the A = -0.75 cubic convolution around the
    unpadded position at distances ``x = (t + 1, t, 1 - t, 2 - t)``, each tap's index padded on
    its own, the slope ``+-d w / d x`` times the unnormalizing factor alone (no padding
    multiplier, as torch)."""
    if mode != "bicubic":
        pos, mult = _locate(coord, size, padding_mode, align_corners)
        if mode == "nearest":
            index = jnp.round(pos)[:, None]
            return index, jnp.ones_like(index), None
        first = jnp.floor(pos)
        frac = (pos - first)[:, None]
        return (first[:, None] + _column((0, 1), pos), jnp.concatenate([1 - frac, frac], axis=1),
                mult[:, None] * _column((-1, 1), pos))
    pos, factor = _locate(coord, size, "zeros", align_corners)
    first = jnp.floor(pos)
    t = (pos - first)[:, None]
    index = first[:, None] + _column((-1, 0, 1, 2), pos)
    if padding_mode == "reflection":
        index = _reflect(index, size, align_corners)[0]
    if padding_mode != "zeros":
        index = _clip(index, size)[0]
    a = -0.75
    near, far = _cubic_pieces(a)
    sign = _column((1, 1, -1, -1), pos)
    x = sign * t + _column((1, 0, 1, 2), pos)  # the distance to each tap
    inner = P.with_rank(jnp.array([False, True, True, False])[:, None], x.ndim)  # |x| <= 1: near, else far
    weight = jnp.where(inner, near(x), far(x))
    slope = jnp.where(inner, (3 * (a + 2) * x - 2 * (a + 3)) * x, (3 * a * x - 10 * a) * x + 8 * a)
    return index, weight, sign * slope * factor[:, None]


def _corners(grid, spatial, mode, padding_mode, align_corners):
    """The K = prod(T_d) corners each sampling point reads, the product of the axes' taps stacked
    on one axis: ``(flat, inside, weight, slope)``, (N, K, P) each and (N, K, P, dims) (None for
    ``nearest``, whose weights are constant), with ``flat`` the row-major index ``(i_z H + i_y) W
    + i_x`` (clamped), ``weight = prod_d w_d`` and ``slope[..., d] = w_d' prod_{e != d} w_e``; a
    corner outside the input reads 0 (torch's zero padding: its value, not its weight, is masked,
    so a non-finite position gives NaN as torch)."""
    dims = len(spatial)
    n, p = grid.shape[0], math.prod(grid.shape[1:-1])
    coords = grid.reshape(n, p, dims)  # not -1: N may be 0
    sizes = spatial[::-1]  # the grid's last axis is x (W) first
    taps = [_axis_taps(coords[..., d], size, mode, padding_mode, align_corners) for d, size in enumerate(sizes)]
    counts = [index.shape[1] for index, _, _ in taps]
    full = (n, *counts, p)  # the product grid: axis 1 + d holds axis d's taps (x outermost)

    def spread(d, a):  # (N, T_d, P) -> broadcastable to ``full`` (expand_dims, not a reshape: N may be sharded)
        return jnp.expand_dims(a, [1 + e for e in range(dims) if e != d])

    def stacked(a):  # ``full`` -> (N, K, P)
        return jnp.broadcast_to(a, full).reshape(n, math.prod(counts), p)

    inside, flat = True, 0
    for d in reversed(range(dims)):  # row-major: D, H, W
        index = spread(d, taps[d][0])
        inside = inside & (index >= 0) & (index <= sizes[d] - 1)
        flat = flat * sizes[d] + jnp.clip(index, 0, sizes[d] - 1).astype(jnp.int32)
    weights = [spread(d, w) for d, (_, w, _) in enumerate(taps)]
    slope = None
    if mode != "nearest":
        slope = jnp.stack([stacked(functools.reduce(jnp.multiply, [
            spread(e, taps[e][2]) if e == d else weights[e] for e in range(dims)])) for d in range(dims)], axis=-1)
    weight = stacked(functools.reduce(jnp.multiply, weights)).astype(grid.dtype)
    return stacked(flat), stacked(inside), weight, slope


def _positions(flat):
    """(N, K, P) -> (N, 1, K P): the K P positions read per sampling point's row (the channel
    axis inserted apart: one reshape doing both is refused for a sharded N under an Explicit
    mesh)."""
    n, k, p = flat.shape
    return flat.reshape(n, k * p)[:, None]


def _gather(planes, flat, inside):
    """``planes`` (N, C, S) read at ``flat`` (N, K, P), 0 where not ``inside``: (N, C, K, P) (one
    gather of the K P positions)."""
    n, k, p = flat.shape
    values = jnp.take_along_axis(planes, _positions(flat), axis=2)
    return jnp.where(inside[:, None], values.reshape(n, planes.shape[1], k, p), 0)


def _scatter(values, flat, inside, size):
    """The transpose of ``_gather``: ``values`` (N, C, K, P) added at ``flat`` (N, K, P) into
    (N, C, size) where ``inside`` (one scatter-add)."""
    n, c, k, p = values.shape
    rows = (np.arange(n)[:, None, None], np.arange(c)[None, :, None], _positions(flat))
    values = jnp.where(inside[:, None], values, 0).reshape(n, c, k * p)
    return jnp.zeros((n, c, size), values.dtype).at[rows].add(values)


def _planes(x):
    return x.reshape(x.shape[:2] + (math.prod(x.shape[2:]),))


def _sample(x, corners, out_spatial):
    """``out[n, c, p] = sum_k weight[n, k, p] x[n, c, flat[n, k, p]]`` (0 outside)."""
    flat, inside, weight, _ = corners
    out = jnp.sum(weight[:, None] * _gather(_planes(x), flat, inside), axis=2)
    return out.reshape(x.shape[:2] + out_spatial)


def _grid_slope(x, corners):
    """d out / d grid, ``sum_k x[n, c, flat[n, k, p]] slope[n, k, p, d]``: (N, C, P, dims)
    (torch's ``gx``, ``gy``, ``gz`` before the cotangent)."""
    flat, inside, _, slope = corners
    return jnp.sum(_gather(_planes(x), flat, inside)[..., None] * slope[:, None], axis=2)


def _grid_sample_primal(x, grid, *, mode, padding_mode, align_corners):
    corners = _corners(grid, x.shape[2:], mode, padding_mode, align_corners)
    return _sample(x, corners, grid.shape[1:-1])


def grid_sample_jvp(res, tx, tgrid, *, mode, padding_mode, align_corners):
    """JVP formula: ``grid_sample(tx, grid)`` plus (bilinear, bicubic) ``sum_d d out / d grid_d
    tgrid_d``, ``d out / d grid_d = sum_k x[flat_k] slope_k[d]`` (``_grid_slope``: each corner's
    value times its weight's slope, which carries torch's ``gx_mult``)."""
    x, grid = res
    corners = _corners(grid, x.shape[2:], mode, padding_mode, align_corners)
    out = None if tx is None else _sample(tx, corners, grid.shape[1:-1])
    if tgrid is None or mode == "nearest":
        return out
    # (N, P, dims) then the channel axis: one reshape inserting it too is refused for a sharded N
    # under an Explicit mesh
    t = tgrid.reshape(tgrid.shape[0], math.prod(tgrid.shape[1:-1]), tgrid.shape[-1])[:, None]
    d_grid = jnp.sum(_grid_slope(x, corners) * t, axis=-1).reshape(x.shape[:2] + grid.shape[1:-1])
    return d_grid if out is None else out + d_grid


def grid_sample_vjp(res, g, *, mode, padding_mode, align_corners):
    """VJP formula (seed ``grid_sampler_2d_backward`` / ``grid_sampler_3d_backward``, CPU): the
    cotangent times each corner's weight scatter-added into the input, ``gx[n, c, flat[n, k, p]]
    += weight[n, k, p] g[n, c, p]`` (one scatter-add over the K corners); for the grid, ``sum_c
    g[n, c, p] d out[n, c, p] / d grid[n, p, d]`` (zero for nearest)."""
    x, grid = res
    corners = _corners(grid, x.shape[2:], mode, padding_mode, align_corners)
    flat, inside, weight, _ = corners
    g = _planes(g)
    gx = _scatter(g[:, :, None] * weight[:, None], flat, inside, math.prod(x.shape[2:])).reshape(x.shape)
    if mode == "nearest":
        return gx, None
    ggrid = jnp.sum(_grid_slope(x, corners) * g[..., None], axis=1)
    return gx, ggrid.reshape(grid.shape)


grid_sample_op = define_op("grid_sample", _grid_sample_primal, grid_sample_jvp, grid_sample_vjp)


# ----------------------------------------------------------------------------------------------
# Ops: affine_grid

def _base_grid(spatial, align_corners, dtype):
    """torch's base grid (*spatial, dims + 1): the normalized x, y[, z] of each output pixel
    (``linspace(-1, 1, n)``, times ``(n - 1) / n`` unless ``align_corners``; 0 for n = 1) and a
    column of ones."""
    lines = []
    for n in reversed(spatial):  # x (the last axis) first
        line = np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(n)
        lines.append(line if align_corners or n <= 1 else line * (n - 1) / n)
    mesh = np.meshgrid(*reversed(lines), indexing="ij")  # (D,) H, W
    return jnp.asarray(np.stack([*reversed(mesh), np.ones(tuple(spatial))], axis=-1), dtype)


def _affine_grid_primal(theta, *, spatial, align_corners):
    base = _base_grid(spatial, align_corners, theta.dtype)
    return jnp.einsum("...k,njk->n...j", base, theta)


def affine_grid_jvp(res, t, *, spatial, align_corners):
    """JVP formula: linear in ``theta``, the op on the tangent."""
    return _affine_grid_primal(t, spatial=spatial, align_corners=align_corners)


def affine_grid_vjp(res, g, *, spatial, align_corners):
    """VJP formula (seed ``affine_grid_generator_backward``): ``theta``'s cotangent is the
    cotangent contracted with the base grid, ``sum_p g[n, p, j] base[p, k]``."""
    base = _base_grid(spatial, align_corners, g.dtype)
    return (jnp.einsum("...k,n...j->njk", base, g),)


affine_grid_op = define_op("affine_grid", _affine_grid_primal, affine_grid_jvp, affine_grid_vjp,
                           lambda out, theta, **_: ())


# ----------------------------------------------------------------------------------------------
# Public functions: interpolate

def _sizes(op, name, value, dims, kind):
    """An int/float or one per spatial axis, as a tuple of ``dims`` positive numbers."""
    values = value if isinstance(value, Sequence) and not isinstance(value, str) else (value,) * dims
    values = tuple(values)
    ok = len(values) == dims and all(
        isinstance(v, kind) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in values
    )
    if not ok:
        what = "int" if kind is numbers.Integral else "number"
        raise ValueError(f"{op}: {name} must be a positive {what} or {dims} of them (one per spatial axis), "
                         f"got {value!r}")
    return values


@exported_as("jaxrules.nn.interpolate")
def interpolate(x: ArrayLike, size: int | Sequence[int] | None = None, scale_factor: float | Sequence[float] | None = None,
                mode: str = "nearest", align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Array:
    """torch.nn.functional.interpolate over the spatial axes of ``(N, C, *spatial)``.

    Along each axis output ``i`` reads torch's CPU source position, with the step ``s`` equal
    to ``1 / scale_factor`` when ``scale_factor`` is given and ``recompute_scale_factor`` is not
    True, else ``n / out`` (``(n - 1) / (out - 1)`` with ``align_corners``): ``nearest``
    ``floor(s i)`` and ``nearest-exact`` ``floor(s (i + 0.5))`` (4-d input: torch's float32
    ``nearest_idx``, with its copy and halving shortcuts), clamped to ``n - 1``;
    ``linear``/``bilinear``/``trilinear`` two taps around ``s i`` (``align_corners``) or
    ``max(s (i + 0.5) - 0.5, 0)``, weighted by the fraction; ``bicubic`` four taps of the A =
    -0.75 cubic convolution, clamped at the border; ``antialias`` Pillow's filters (below);
    ``area`` is ``adaptive_avg_pool``. Linear in ``x``: JVP the op on the tangent, VJP its
    transpose, a scatter-add per axis (seed ``upsample_nearest2d_backward``,
    ``upsample_bilinear2d_backward``, ``upsample_bicubic2d_backward``, ...; where torch's backward
    is not the transpose of its forward, the record's deviations say so). Mirrors
    ``torch.nn.functional.interpolate``.

    Args:
        x: the input ``(N, C, *spatial)`` with 1 to 3 spatial axes (rank 3 for ``linear``, 4
            for ``bilinear``/``bicubic``, 5 for ``trilinear``), real; only the batch (and for
            ``area`` the channels: torch's) may be empty.
        size: the output's spatial size, an int or one per spatial axis (exactly one of
            ``size`` and ``scale_factor``).
        scale_factor: the multiplier of each spatial size, a number or one per spatial axis;
            the output size is ``floor(n * scale_factor)``.
        mode: ``"nearest"``, ``"nearest-exact"``, ``"linear"``, ``"bilinear"``, ``"bicubic"``,
            ``"trilinear"`` or ``"area"``.
        align_corners: for the linear and cubic modes, whether the corner pixels' centres of
            input and output coincide (None: False); must be None for the other modes.
        recompute_scale_factor: True: with ``scale_factor``, sample at ``n / out`` instead of
            ``1 / scale_factor`` (not meaningful with ``size``).
        antialias: for ``bilinear`` and ``bicubic``, torch's antialiased resampling (Pillow's):
            output ``i`` averages the inputs within the filter's support around ``s (i + 0.5)``,
            the triangle (or the A = -0.5 cubic) stretched by ``s`` when downsampling,
            normalized to sum 1.

    Returns:
        The resampled ``(N, C, *out_spatial)``.
    """
    op = "interpolate"
    x = V.array(op, "x", x)
    if jnp.iscomplexobj(x):
        raise TypeError(f"{op}: x must be real, got {x.dtype}")
    if not isinstance(mode, str) or mode not in _MODES:
        raise ValueError(f"{op}: mode must be one of {_MODES}, got {mode!r}")
    if x.ndim not in (3, 4, 5) or _LINEAR_RANK.get(mode, x.ndim) != x.ndim:
        want = f"rank {_LINEAR_RANK[mode]}" if mode in _LINEAR_RANK else "rank 3, 4 or 5"
        raise ValueError(f"{op}: mode={mode!r} needs x of {want} ((N, C, *spatial)), got shape {x.shape}")
    dims = x.ndim - 2
    if (size is None) == (scale_factor is None):
        raise ValueError(f"{op}: exactly one of size and scale_factor must be given, got size={size!r} and "
                         f"scale_factor={scale_factor!r}")
    if align_corners is not None and mode not in _LINEAR_RANK:
        raise ValueError(f"{op}: align_corners must be None for mode={mode!r} (only the linear and cubic modes "
                         f"take it), got {align_corners!r}")
    if antialias and mode not in ("bilinear", "bicubic"):
        raise ValueError(f"{op}: antialias=True needs mode 'bilinear' or 'bicubic' (4-d input), got mode={mode!r}")
    if recompute_scale_factor and size is not None:
        raise ValueError(f"{op}: recompute_scale_factor is not meaningful with an explicit size")
    if any(n == 0 for n in x.shape[1 if mode != "area" else 2:]):  # area: torch's adaptive pool takes C = 0
        raise ValueError(f"{op}: x must have non-empty channel and spatial axes (only the batch, and for 'area' "
                         f"the channels, may be empty), got shape {x.shape}")
    if size is not None:
        out = tuple(int(v) for v in _sizes(op, "size", size, dims, numbers.Integral))
        scales = (None,) * dims
    else:
        factors = tuple(float(v) for v in _sizes(op, "scale_factor", scale_factor, dims, numbers.Real))
        out = tuple(math.floor(n * f) for n, f in zip(x.shape[2:], factors))
        if any(o < 1 for o in out) and mode != "area":
            raise ValueError(f"{op}: scale_factor={scale_factor!r} gives an empty output for spatial size "
                             f"{x.shape[2:]}")
        scales = (None,) * dims if recompute_scale_factor else factors
    if mode == "area":
        return adaptive_avg_pool_op(x, output_size=out, shape=x.shape)
    return interpolate_op(x, mode=mode, size=out, align_corners=bool(align_corners), scales=scales,
                          antialias=bool(antialias), shape=x.shape)


# ----------------------------------------------------------------------------------------------
# Public functions: grid_sample

def _choice(op, name, value, options):
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{op}: {name} must be one of {options}, got {value!r}")
    return value


@exported_as("jaxrules.nn.grid_sample")
def grid_sample(x: ArrayLike, grid: ArrayLike, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: bool | None = False) -> Array:
    """torch.nn.functional.grid_sample (CPU semantics) for 4-d and 5-d input: ``out[n, c, *p]``
    is ``x[n, c]`` sampled at the normalized position ``grid[n, *p]`` (x, y[, z] in [-1, 1]),
    unnormalized as ``(g + 1) (size - 1) / 2`` with ``align_corners`` else ``((g + 1) size - 1)
    / 2``, then reflected and/or clipped by ``padding_mode``; bilinear/trilinear weights of the
    neighbouring pixels, or the nearest one (round half to even). Derivatives (seed
    ``grid_sampler_2d_backward``): linear in ``x`` (JVP the op on the tangent, VJP the weights'
    scatter-add); for the grid, each corner's value times its weight's slope times torch's
    multiplier, which is 0 at and past a clipped border and -1 under an odd reflection; nearest's
    grid derivative is zero. Mirrors ``torch.nn.functional.grid_sample``.

    Args:
        x: the input ``(N, C, H, W)`` or ``(N, C, D, H, W)``, real; the batch and the channels may
            be empty (as torch), and so may ``grid``'s points.
        grid: the sampling positions ``(N, H_out, W_out, 2)`` or ``(N, D_out, H_out, W_out, 3)``
            (last axis x, y[, z]: width first), same batch as ``x``.
        mode: ``"bilinear"`` (trilinear for 5-d input), ``"nearest"`` or ``"bicubic"`` (4-d input
            only).
        padding_mode: ``"zeros"`` (points outside read 0), ``"border"`` (clipped to the edge)
            or ``"reflection"`` (reflected at the borders, then clipped).
        align_corners: -1 and 1 are the corner pixels' centres (True) or edges (False; None
            too, as torch's default).

    Returns:
        The sampled ``(N, C, H_out, W_out)`` or ``(N, C, D_out, H_out, W_out)``.
    """
    op = "grid_sample"
    x = V.array(op, "x", x)
    grid = V.array(op, "grid", grid)
    if jnp.iscomplexobj(x) or jnp.iscomplexobj(grid):
        raise TypeError(f"{op}: x and grid must be real, got {x.dtype} and {grid.dtype}")
    _choice(op, "mode", mode, ("bilinear", "nearest", "bicubic"))
    _choice(op, "padding_mode", padding_mode, _PADDING_MODES)
    if x.ndim not in (4, 5):
        raise ValueError(f"{op}: x must be (N, C, H, W) or (N, C, D, H, W), got shape {x.shape}")
    if mode == "bicubic" and x.ndim != 4:
        raise ValueError(f"{op}: mode='bicubic' needs 4-d x (N, C, H, W), got shape {x.shape}")
    dims = x.ndim - 2
    if grid.ndim != x.ndim or grid.shape[0] != x.shape[0] or grid.shape[-1] != dims:
        raise ValueError(f"{op}: grid must have shape (N, *out_spatial, {dims}) with x's batch N={x.shape[0]}, "
                         f"got {grid.shape}")
    if any(n == 0 for n in x.shape[2:]):
        raise ValueError(f"{op}: x must have non-empty spatial axes, got shape {x.shape}")
    dtype = jnp.result_type(x, grid)
    return grid_sample_op(x.astype(dtype), grid.astype(dtype), mode=mode, padding_mode=padding_mode,
                          align_corners=bool(align_corners))


# ----------------------------------------------------------------------------------------------
# Public functions: affine_grid

@exported_as("jaxrules.nn.affine_grid")
def affine_grid(theta: ArrayLike, size: Sequence[int], align_corners: bool | None = False) -> Array:
    """torch.nn.functional.affine_grid: the sampling grid of the affine maps ``theta``,
    ``grid[n, *p] = theta[n] @ (x_p, y_p[, z_p], 1)`` over the normalized output positions of
    ``size`` (torch's base grid, see ``align_corners``). Linear in ``theta``: JVP the op on the
    tangent, VJP its transpose (seed ``affine_grid_generator_backward``). Mirrors
    ``torch.nn.functional.affine_grid``.

    Args:
        theta: the affine maps ``(N, 2, 3)`` (2-d) or ``(N, 3, 4)`` (3-d), real.
        size: the output image size ``(N, C, H, W)`` or ``(N, C, D, H, W)`` with theta's N.
        align_corners: -1 and 1 are the corner pixels' centres (True) or edges (False; None
            too, as torch's default).

    Returns:
        The grid ``(N, H, W, 2)`` or ``(N, D, H, W, 3)``, for ``grid_sample``.
    """
    op = "affine_grid"
    theta = V.array(op, "theta", theta)
    if jnp.iscomplexobj(theta):
        raise TypeError(f"{op}: theta must be real, got {theta.dtype}")
    try:
        size = tuple(int(s) for s in size)
    except TypeError:
        raise TypeError(f"{op}: size must be a sequence of ints, got {size!r}") from None
    if len(size) not in (4, 5) or min(size) <= 0:
        raise ValueError(f"{op}: size must be (N, C, H, W) or (N, C, D, H, W) of positive ints (as torch), "
                         f"got {size!r}")
    dims = len(size) - 2
    if theta.shape != (size[0], dims, dims + 1):
        raise ValueError(f"{op}: theta must have shape ({size[0]}, {dims}, {dims + 1}) for size {size}, got "
                         f"{theta.shape}")
    return affine_grid_op(theta, spatial=size[2:], align_corners=bool(align_corners))
