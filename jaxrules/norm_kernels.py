"""Fused GPU kernels (Pallas, Triton backend) for normalization, with the affine weight and
bias inside: layer norm and RMS norm over the last axis of an (M, N) array (this first part), batch
norm and group norm on (N, C, L) (the second part, "Grouped statistics"). Launch parameters come
from ``jaxrules.dispatch`` (``RowsLaunch``, ``GroupedLaunch``), a pure function of the device kind
and the shape.

* forward: one program per tile of ``launch.forward_launch().rows`` rows (or walking
  ``forward_steps`` tiles, the next one's x prefetched with ``forward_prefetch``): mean, rstd
  (float32) and ``y = x_hat w + b``;
* backward: ``launch.backward_programs(M)`` programs, each walking ``launch.steps`` consecutive tiles (with
  ``launch.prefetch``, a tile's loads issued one step ahead, carried by the loop):
  ``dx`` (the native backward with weight, plus the terms of the mean/rstd outputs' cotangents)
  and per-program partial sums of ``dw = sum g x_hat`` and ``db = sum g``, added up by XLA.
  With ``launch.split``, XLA sums ``g w x_hat`` (and, for layer norm, ``g w``) over each row
  first and each program takes one piece of the rows (grid: programs by pieces), holding no
  whole row.
* RMS norm is the same two kernels with the static ``center=False``: no mean subtracted
  (``x_hat = x rstd``, ``rstd = rsqrt(E[x^2] + eps)``), no bias, no mean output (``rms_forward``,
  ``rms_backward``).

Any M and N: a tile is ``rows`` by ``pieces`` pieces of ``width`` columns (powers of two, ``span =
pieces width >= N``; a split backward's program holds one piece), loads and stores are masked past
the last row and column, so no shape falls back to a one-program launch.

Inputs may be float32, bfloat16 or float16 (float64 in interpret mode); statistics and sums are
float32 (float64 for float64). The same kernels run on the CPU in Pallas interpret mode (the
tests), against the jnp formulas.
"""

from __future__ import annotations

import functools
import math
import operator

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from jaxrules.dispatch import GroupedLaunch, RowsLaunch
from jaxrules.mechanism import varying_struct
from jaxrules.partials import defined_mean, stat_dtype


def _compiler_params(launch):
    if launch.interpret:
        return {}
    from jax.experimental.pallas import triton as plgpu

    return {"compiler_params": plgpu.CompilerParams(num_warps=launch.num_warps, num_stages=launch.num_stages)}


def _masked(op, ref, tile, launch, n, *args, end=None, piece=0):
    """``plgpu.load`` / ``plgpu.store`` of row tile ``tile`` (``launch.rows`` rows, the columns of
    piece ``piece``: ``launch.width`` from ``piece * launch.width``) of ``ref`` (M, N) or (M,),
    masked past row M (and row ``end``, where given) and column N."""
    m = ref.shape[0]
    rows = tile * launch.rows + lax.broadcasted_iota(jnp.int32, (launch.rows, 1), 0)

    def inside(r):
        return r < m if end is None else (r < m) & (r < end)

    if len(ref.shape) == 1:
        return op(ref.at[pl.ds(tile * launch.rows, launch.rows)], *args, mask=inside(rows[:, 0]))
    columns = _columns(launch, piece)
    mask = inside(rows) & (columns < n)
    return op(ref.at[pl.ds(tile * launch.rows, launch.rows), pl.ds(jnp.int32(piece * launch.width), launch.width)],
              *args, mask=mask)


def _columns(launch, piece, shape=None):
    """The column index of each element of piece ``piece`` (shape ``(1, width)``, or ``shape``;
    ``piece`` an int or, in the split backward, the program's index)."""
    shape = shape or (1, launch.width)
    columns = lax.broadcasted_iota(jnp.int32, shape, len(shape) - 1)
    if isinstance(piece, int):  # a static piece: the traced operations of before (none added for piece 0)
        return columns + piece * launch.width if piece else columns
    return columns + piece * launch.width


def _load(ref, tile, launch, n, dtype=None, end=None, piece=0):
    """Tile ``tile`` of ``ref`` (of its piece ``piece``), zeros where masked, in ``dtype`` (None:
    the ref's)."""
    from jax.experimental.pallas import triton as plgpu

    value = _masked(functools.partial(plgpu.load, other=0), ref, tile, launch, n, end=end, piece=piece)
    return value if dtype is None else value.astype(dtype)


def _load_tile(ref, tile, launch, n, dtype=None, end=None, pieces=None):
    """``_load`` of a per-row ref (M,), or of the pieces ``pieces`` (None: every one) of a tile of
    an (M, N) ref (a tuple)."""
    if len(ref.shape) == 1:
        return _load(ref, tile, launch, n, dtype, end)
    return tuple(_load(ref, tile, launch, n, dtype, end, piece)
                 for piece in (range(launch.pieces) if pieces is None else pieces))


def _store(ref, tile, launch, n, value, piece=0):
    from jax.experimental.pallas import triton as plgpu

    _masked(plgpu.store, ref, tile, launch, n, value.astype(ref.dtype), piece=piece)


def _vector(ref, launch, n, dtype, piece=0):
    """Piece ``piece`` of a length-N vector as (width,), zeros past N."""
    from jax.experimental.pallas import triton as plgpu

    columns = _columns(launch, piece, (launch.width,))
    return plgpu.load(ref.at[pl.ds(jnp.int32(piece * launch.width), launch.width)], mask=columns < n,
                      other=0).astype(dtype)


def _row_sum(pieces):
    """Sum over each row of a tile held as pieces ((rows, width) each): (rows,)."""
    return functools.reduce(operator.add, (p.sum(1) for p in pieces))


def _forward_kernel(*refs, eps, launch, center):
    """``launch.steps`` tiles of rows from ``program_id * steps`` (with ``launch.prefetch``, a
    tile's x loaded one step ahead, carried by the loop; one tile: no loop), each normalized by
    ``_normalize_tile``: layer norm (``center``: refs x, w, b -> y, mean, rstd) or RMS norm (x, w
    -> y, rstd)."""
    x_ref, n, stat = refs[0], refs[0].shape[1], refs[-1].dtype
    if launch.steps == 1 and not launch.prefetch:  # one tile per program: the kernel the tables measured
        tile = pl.program_id(0)
        _normalize_tile(refs, tile, _load_tile(x_ref, tile, launch, n, stat), eps=eps, launch=launch, center=center)
        return
    first = pl.program_id(0) * launch.steps
    end = (first + launch.steps) * launch.rows  # this program's rows end here (a prefetch past it loads nothing)

    def body(step, carried):
        tile = first + step
        following = _load_tile(x_ref, tile + 1, launch, n, end=end) if launch.prefetch else ()
        xs = [x.astype(stat) for x in carried] if launch.prefetch else _load_tile(x_ref, tile, launch, n, stat)
        _normalize_tile(refs, tile, xs, eps=eps, launch=launch, center=center)
        return following

    lax.fori_loop(0, launch.steps, body, _load_tile(x_ref, first, launch, n, end=end) if launch.prefetch else ())


def _normalize_tile(refs, tile, xs, *, eps, launch, center):
    """Tile ``tile`` of rows, its x loaded as ``xs`` (pieces, in the statistics' dtype): y and the
    statistics stored. Layer norm's branch keeps the fifth pass's operation order, as
    ``_backward_kernel``'s: sharing one sequence with RMS norm's made the backward 20-28% slower on
    the H100 (``benchmarks/RESULTS.md``, seventh pass). With one piece it traces the kernel those
    tables measured, operation for operation."""
    if center:
        x_ref, w_ref, b_ref, y_ref, mean_ref, rstd_ref = refs
    else:
        x_ref, w_ref, y_ref, rstd_ref = refs
    n, stat = x_ref.shape[1], rstd_ref.dtype
    if center:
        mean = _row_sum(xs) / n
        centered = [jnp.where(_columns(launch, c) < n, x - mean[:, None], 0) for c, x in enumerate(xs)]
        rstd = lax.rsqrt(_row_sum(c * c for c in centered) / n + eps)
        for c, piece in enumerate(centered):
            _store(y_ref, tile, launch, n, piece * rstd[:, None] * _vector(w_ref, launch, n, stat, c)[None, :]
                   + _vector(b_ref, launch, n, stat, c)[None, :], c)
        _store(mean_ref, tile, launch, n, mean)
    else:
        rstd = lax.rsqrt(_row_sum(x * x for x in xs) / n + eps)
        for c, x in enumerate(xs):
            _store(y_ref, tile, launch, n, x * rstd[:, None] * _vector(w_ref, launch, n, stat, c)[None, :], c)
    _store(rstd_ref, tile, launch, n, rstd)


def forward(x, w, b, *, eps, launch):
    """``(y, mean, rstd)`` of layer norm over the last axis of ``x`` (M, N), by the kernels
    ``launch`` is for (this module's, ``RowsLaunch``, or ``mosaic_kernels``', ``MosaicRowsLaunch``).
    Under ``jit`` with a sharded ``x`` the kernel runs on each device's rows
    (``jaxrules.partitioning``)."""
    from jaxrules import partitioning

    return partitioning.layer_norm_forward(x, w, b, eps=eps, launch=launch)


def rms_forward(x, w, *, eps, launch):
    """``(y, rstd)`` of RMS norm over the last axis of ``x`` (M, N): ``y = x rstd w``, ``rstd =
    rsqrt(E[x^2] + eps)``; partitioned as ``forward``."""
    from jaxrules import partitioning

    return partitioning.rms_norm_forward(x, w, eps=eps, launch=launch)


def local_forward(x, w, b, *, eps, launch: RowsLaunch):
    """``forward`` on one device's array (the kernel itself); ``b=None``: RMS norm (``rms_forward``,
    outputs ``(y, rstd)``)."""
    center = b is not None
    m, n = x.shape
    programs, launch = launch.forward_programs(m), launch.forward_launch()
    launch.check_covers(n, "layer_norm/rms_norm forward kernel")
    struct = functools.partial(varying_struct, refs=(x, w, b))
    per_row = struct((m,), stat_dtype(x.dtype))
    return pl.pallas_call(
        functools.partial(_forward_kernel, eps=eps, launch=launch, center=center),
        grid=(programs,),
        out_shape=[struct(x.shape, x.dtype)] + [per_row] * (2 if center else 1),
        interpret=launch.interpret, name=f"{'layer' if center else 'rms'}_norm_fwd", **_compiler_params(launch),
    )(x, w, *([b] if center else []))


def _backward_kernel(*refs, launch, center):
    """``launch.steps`` tiles of rows: ``dx`` and this program's partial sums of ``dw`` (and
    ``db``). Layer norm (``center``): refs x, g, w, mean, rstd, g_mean, g_rstd -> dx, dw, db;
    RMS norm: x, g, w, rstd, g_rstd -> dx, dw. A row is ``launch.pieces`` pieces (lists of
    them below); with one piece the operations are traced in the order the tables measured.
    ``launch.split``: the program's piece is its second index, and the row sums come in as refs
    after the statistics (``_xla_row_sums``: ``S1 = sum g w``, for layer norm, and ``S2 = sum g w
    x_hat``), so ``dx = rstd (g w - S1 / N - x_hat S2 / N) + (g_mean - g_rstd rstd^2 x_hat) / N``
    (RMS norm: no ``S1`` nor ``g_mean`` term) needs no reduction across the row."""
    n_row_sums = (2 if center else 1) if launch.split else 0
    if center:
        x_ref, g_ref, w_ref, mean_ref, rstd_ref, gmean_ref, grstd_ref, *rest = refs
    else:
        x_ref, g_ref, w_ref, rstd_ref, grstd_ref, *rest = refs
    row_sum_refs, (dx_ref, *sum_refs) = rest[:n_row_sums], rest[n_row_sums:]
    n, stat = x_ref.shape[1], rstd_ref.dtype
    pieces = [pl.program_id(1)] if launch.split else list(range(launch.pieces))
    ws = [_vector(w_ref, launch, n, stat, c) for c in pieces]
    valid = [_columns(launch, c) < n for c in pieces]
    first = pl.program_id(0) * launch.steps
    row_sums = dict(zip(("sum_gw", "sum_gw_xhat") if center else ("sum_gw_xhat",), row_sum_refs))  # split only
    tile_refs = dict(x=x_ref, g=g_ref, rstd=rstd_ref, grstd=grstd_ref, **(dict(mean=mean_ref, gmean=gmean_ref)
                                                                         if center else {}), **row_sums)
    end = (first + launch.steps) * launch.rows  # this program's rows end here (a prefetch past it loads nothing)

    def fetch(tile):  # every load of a tile, in the refs' dtypes: the next step's, carried by the loop
        return {k: _load_tile(ref, tile, launch, n, end=end, pieces=pieces) for k, ref in tile_refs.items()}

    def body(step, carry):
        tile = first + step
        sums, carried = carry
        following = fetch(tile + 1) if launch.prefetch else {}

        def get(k):  # without the prefetch each load is traced where it is first used: that order was measured
            if launch.prefetch:
                return jax.tree.map(lambda v: v.astype(stat), carried[k])
            return _load_tile(tile_refs[k], tile, launch, n, stat, pieces=pieces)

        x, g = get("x"), get("g")
        rstd = get("rstd")
        gw = [gc * w[None, :] for gc, w in zip(g, ws)]

        @functools.cache
        def row_gw_xhat():  # sum g w x_hat over the row, traced at its first use (the one-piece kernel's place)
            return get("sum_gw_xhat") if launch.split else _row_sum(a * b for a, b in zip(gw, xhat))

        if center:
            mean = get("mean")
            xhat = [jnp.where(v, (xc - mean[:, None]) * rstd[:, None], 0) for v, xc in zip(valid, x)]
            mean_gw = defined_mean((get("sum_gw") if launch.split else _row_sum(gw)) / n)
            dx = [rstd[:, None] * (a - mean_gw[:, None] - b * row_gw_xhat()[:, None] / n) for a, b in zip(gw, xhat)]
            gmean, grstd = get("gmean"), get("grstd")
            dx = [d + (gmean[:, None] - (grstd * rstd * rstd)[:, None] * b) / n for d, b in zip(dx, xhat)]
            terms = ([(gc * b).sum(0) for gc, b in zip(g, xhat)], [gc.sum(0) for gc in g])
        else:
            xhat = [xc * rstd[:, None] for xc in x]
            grstd = get("grstd")
            dx = [rstd[:, None] * (a - b * row_gw_xhat()[:, None] / n) - (grstd * rstd * rstd)[:, None] * b / n
                  for a, b in zip(gw, xhat)]
            terms = ([(gc * b).sum(0) for gc, b in zip(g, xhat)],)
        for c, piece in zip(pieces, dx):
            _store(dx_ref, tile, launch, n, piece, c)
        return jax.tree.map(operator.add, sums, terms), following

    zeros = [jnp.zeros((launch.width,), stat)] * len(pieces)
    sums, _ = lax.fori_loop(0, launch.steps, body, ((zeros,) * len(sum_refs), fetch(first) if launch.prefetch else {}))
    for ref, totals in zip(sum_refs, sums):
        if len(pieces) == 1:
            ref[...] = totals[0]  # the measured kernel's store (split: the program's block of its piece)
        else:
            for c, total in enumerate(totals):
                ref[pl.ds(c * launch.width, launch.width)] = total


def backward(x, g, w, mean, rstd, g_mean, g_rstd, *, launch):
    """``(dx, dw, db)``: the VJP of ``forward`` for cotangents ``g`` (of y), ``g_mean``,
    ``g_rstd``. Under ``jit`` with sharded rows the kernel runs on each device's rows and ``dw``,
    ``db`` are summed over the devices (``jaxrules.partitioning``)."""
    from jaxrules import partitioning

    dx, dw, db = partitioning.layer_norm_backward(x, g, w, mean, rstd, g_mean, g_rstd, launch=launch)
    return dx, dw.astype(w.dtype), db.astype(w.dtype)


def rms_backward(x, g, w, rstd, g_rstd, *, launch):
    """``(dx, dw)``: the VJP of ``rms_forward`` for cotangents ``g`` (of y) and ``g_rstd``, ``dx =
    rstd (g w - x_hat E[g w x_hat]) - g_rstd rstd^2 x_hat / N``, ``dw = sum g x_hat``; partitioned
    as ``backward``."""
    from jaxrules import partitioning

    dx, dw = partitioning.rms_norm_backward(x, g, w, rstd, g_rstd, launch=launch)
    return dx, dw.astype(w.dtype)


def local_backward(x, g, w, mean, rstd, g_mean, g_rstd, *, launch: RowsLaunch):
    """``backward`` on one device's rows (the kernel itself), with ``dw``, ``db`` in the
    statistics' dtype (summed over devices before the cast to the weight's). ``mean=None`` (and
    ``g_mean=None``): RMS norm's (``rms_backward``), ``(dx, dw)``. With ``launch.split`` an XLA
    fusion sums each row first (``_xla_row_sums``) and the kernel's grid is programs by pieces
    (``launch.backward_grid``)."""
    center = mean is not None
    m, n = x.shape
    launch.check_covers(n, "layer_norm/rms_norm backward kernel")
    stat = rstd.dtype
    programs = launch.backward_programs(m)
    stats = (mean, rstd, g_mean, g_rstd) if center else (rstd, g_rstd)
    row_sums = _xla_row_sums(x, g, w, mean, rstd) if launch.split else ()
    n_sums = 2 if center else 1
    if launch.split:  # a program per row-tile walk and piece: its block of the partial sums
        partial_spec = pl.BlockSpec((None, launch.width), lambda i, j: (i, j))
    else:
        partial_spec = pl.BlockSpec((None, launch.span), lambda i: (i, 0))
    struct = functools.partial(varying_struct, refs=(x, g, w, *stats))
    partial_shape = struct((programs, launch.span), stat)
    dx, *sums = pl.pallas_call(
        functools.partial(_backward_kernel, launch=launch, center=center),
        grid=launch.backward_grid(m),
        in_specs=[pl.no_block_spec] * (3 + len(stats) + len(row_sums)),  # whole arrays: the kernel indexes its tiles
        out_specs=[pl.no_block_spec] + [partial_spec] * n_sums,
        out_shape=[struct(x.shape, x.dtype)] + [partial_shape] * n_sums,
        interpret=launch.interpret, name=f"{'layer' if center else 'rms'}_norm_bwd", **_compiler_params(launch),
    )(x, g, w, *[v.astype(stat) for v in stats], *row_sums)
    return (dx, *(s.sum(0)[:n] for s in sums))


def _xla_row_sums(x, g, w, mean, rstd):
    """The split backward's first half, by XLA (one fusion reading x and g): per row ``sum g w``
    (layer norm's; not for RMS norm, ``mean=None``) and ``sum g w x_hat``, in the statistics'
    dtype, ``x_hat = (x - mean) rstd`` (RMS norm: ``x rstd``)."""
    stat = rstd.dtype
    xs, gw = x.astype(stat), g.astype(stat) * w.astype(stat)
    xhat = (xs if mean is None else xs - mean.astype(stat)[:, None]) * rstd[:, None]
    return ((gw.sum(1),) if mean is not None else ()) + ((gw * xhat).sum(1),)


# ----------------------------------------------------------------------------------------------
# Grouped statistics: batch norm and group norm on x of shape (N, C, L).
#
# Both normalize groups of rows ``x[n, c, :]``: group norm the ``C / G`` consecutive channels of
# one sample (a contiguous block), batch norm one channel over every sample (rows ``C L``
# apart). A program owns one group (its ``K`` rows of ``L``) and walks it in masked tiles of
# ``tile_rows`` rows by ``chunk`` columns, so ``L`` need not be a power of two. Sums build up in
# tile-shaped accumulators and are reduced across the program once per tile row, not per load.
#
# * statistics: per group (or per ``splits`` slice of it) sums of ``x - shift`` and its square,
#   ``shift`` the mean of the slice's first tile (so the variance does not cancel); XLA merges
#   the slices (Chan et al.);
# * backward: pass 1 sums ``g`` and ``g x_hat`` per row (kept: they are the weight's and bias's
#   gradients before the sum over samples), pass 2 writes ``dx``. (Programs looping over groups,
#   few enough for pass 2 to find the group in L2, measured slower on the H100: the memory
#   parallelism lost costs more than the reads saved; benchmarks/RESULTS.md.)
#
# Launch parameters: ``dispatch.GroupedLaunch`` (benchmarks/grouped_norm_tuning.py sweeps them).


class _Tiling:
    """How a program walks its ``rows`` rows of ``length``: tiles of ``tile_rows`` (a power of
    two dividing ``rows``) by ``chunk`` (a power of two) elements, ``chunks`` tiles per row, of
    a block of (rows, length)."""

    def __init__(self, rows: int, length: int, launch: GroupedLaunch):
        self.rows, self.length, self.reverse = rows, length, launch.reverse
        self.chunk = min(launch.chunk, pl.next_power_of_2(length))
        self.chunks = -(-length // self.chunk)
        tile_rows = max(1, launch.tile_elements // self.chunk)
        while rows % tile_rows:
            tile_rows //= 2
        self.tile_rows = tile_rows

    def load(self, ref, r, j, dtype):
        """Tile ``(r, j)`` of ``ref`` (zeros past ``length``) in ``dtype``, and its mask."""
        from jax.experimental.pallas import triton as plgpu

        columns = j * self.chunk + lax.broadcasted_iota(jnp.int32, (self.tile_rows, self.chunk), 1)
        mask = columns < self.length
        return plgpu.load(self._tile(ref, r, j), mask=mask, other=0).astype(dtype), mask

    def store(self, ref, r, j, value, mask):
        from jax.experimental.pallas import triton as plgpu

        plgpu.store(self._tile(ref, r, j), value.astype(ref.dtype), mask=mask)

    def _tile(self, ref, r, j):
        return ref.at[pl.ds(r * self.tile_rows, self.tile_rows), pl.ds(j * self.chunk, self.chunk)]

    def rows_of(self, ref, r):
        """The per-row values of ``ref`` at tile row ``r`` (tile_rows,)."""
        return ref.at[pl.ds(r * self.tile_rows, self.tile_rows)]


    def for_each(self, tile_row_step, carry):
        """``carry = tile_row_step(r, carry)`` for every tile row ``r``, first to last."""
        return lax.fori_loop(0, self.rows // self.tile_rows, tile_row_step, carry)

    def for_each_tile_again(self, per_row, tile_step):
        """``tile_step(r, j, per_row(r))`` for every tile ``(r, j)`` of the block (``per_row``: the
        tile row's values, computed once): a second pass, last tile first with ``launch.reverse``
        (the first pass's latest loads are the likeliest still in L2)."""
        last_row, last_chunk = self.rows // self.tile_rows - 1, self.chunks - 1

        def tile_row(r, carry):
            r = last_row - r if self.reverse else r
            values = per_row(r)

            def tile(j, carry):
                tile_step(r, last_chunk - j if self.reverse else j, values)
                return carry

            return lax.fori_loop(0, self.chunks, tile, carry)

        lax.fori_loop(0, last_row + 1, tile_row, 0)

    def sum_row(self, r, terms, n_terms, dtype):
        """Per-row sums (tile_rows,) of ``terms(r, j)`` (a tuple of ``n_terms`` tiles) over the
        chunks."""

        def step(j, acc):
            return tuple(a + t for a, t in zip(acc, terms(r, j)))

        zeros = jnp.zeros((self.tile_rows, self.chunk), dtype)
        acc = lax.fori_loop(0, self.chunks, step, (zeros,) * n_terms)
        return tuple(a.sum(1) for a in acc)


def grouped_view(x3, layout: str, groups: int):
    """``(view, P, K)``: ``x3`` (N, C, L) as the array the kernels index, with P groups of K
    rows. ``layout`` is ``"group"`` (P = N G, K = C / G) or ``"batch"`` (P = C, K = N)."""
    n, c, length = x3.shape
    if layout == "group":
        return x3.reshape(n * groups, c // groups, length), n * groups, c // groups
    return x3, c, n


def _group_block(layout, rows, length, split_axis=False):
    """BlockSpec of one group's ``rows`` rows (of one split slice when ``split_axis``)."""
    if layout == "group":
        return pl.BlockSpec((None, rows, length), (lambda p, s: (p, s, 0)) if split_axis else (lambda p: (p, 0, 0)))
    return pl.BlockSpec((rows, None, length), (lambda p, s: (s, p, 0)) if split_axis else (lambda p: (0, p, 0)))


def _stats_kernel(x_ref, mean_ref, m2_ref, *, rows, length, launch):
    shift, s1, s2 = _shifted_sums(_Tiling(rows, length, launch), x_ref, mean_ref.dtype)
    count = rows * length
    mean_ref[...] = shift + s1 / count
    m2_ref[...] = s2 - s1 * s1 / count


def _shifted_sums(tiling, x_ref, stat):
    """``(shift, sum (x - shift), sum (x - shift)^2)`` over the block, ``shift`` the mean of its
    first tile (so the variance does not cancel)."""
    first, mask = tiling.load(x_ref, 0, 0, stat)
    shift = first.sum() / jnp.sum(mask.astype(stat))

    def centered(r, j):
        x, mask = tiling.load(x_ref, r, j, stat)
        d = jnp.where(mask, x - shift, 0)
        return d, d * d

    def tile_row(r, sums):
        s1, s2 = tiling.sum_row(r, centered, 2, stat)
        return sums[0] + s1.sum(), sums[1] + s2.sum()

    zero = jnp.zeros((), stat)
    return (shift, *tiling.for_each(tile_row, (zero, zero)))


def _forward_grouped_kernel(x_ref, w_ref, b_ref, y_ref, mean_ref, rstd_ref, *, rows, length, eps, launch):
    """One group: its statistics (``_shifted_sums``), then ``y = (x - mean) rstd w + b`` (per-row w, b),
    the second pass over x as ``_Tiling.for_each_tile_again``."""
    stat = mean_ref.dtype
    tiling = _Tiling(rows, length, launch)
    shift, s1, s2 = _shifted_sums(tiling, x_ref, stat)
    count = rows * length
    mean, rstd = shift + s1 / count, lax.rsqrt((s2 - s1 * s1 / count) / count + eps)

    def scale_and_bias(r):  # y = (x - mean) scale + b per row (an infinite w: +-inf, as the XLA formulas')
        return ((tiling.rows_of(w_ref, r)[...].astype(stat) * rstd)[:, None],
                tiling.rows_of(b_ref, r)[...].astype(stat)[:, None])

    def tile_y(r, j, scale_bias):
        x, mask = tiling.load(x_ref, r, j, stat)
        tiling.store(y_ref, r, j, (x - mean) * scale_bias[0] + scale_bias[1], mask)

    tiling.for_each_tile_again(scale_and_bias, tile_y)
    mean_ref[...], rstd_ref[...] = mean, rstd


def grouped_stats(x3, *, layout, groups, eps, launch: GroupedLaunch):
    """``(mean, rstd)`` of each group (shape (P,), ``stat_dtype``), biased variance. Under ``jit``
    with a sharded batch the kernel runs on each device's samples; batch norm's statistics are
    then merged over the devices (Chan et al.), so they are the global batch's
    (``jaxrules.partitioning``)."""
    from jaxrules import partitioning

    return partitioning.grouped_stats(x3, layout=layout, groups=groups, eps=eps, launch=launch)


def grouped_forward(x3, row_weight, row_bias, *, groups, eps, launch: GroupedLaunch):
    """``(y, mean, rstd)`` of group norm (x3 (N, C, L), ``groups`` groups) in one kernel per device
    (``local_forward_grouped``), ``row_weight``/``row_bias`` (N G, C / G) each row's weight and
    bias; partitioned as ``grouped_stats``."""
    from jaxrules import partitioning

    return partitioning.grouped_forward(x3, row_weight, row_bias, groups=groups, eps=eps, launch=launch)


def local_moments(x3, *, layout, groups, launch: GroupedLaunch):
    """``(mean, m2)`` of each group (P,) on one device's array: the kernel's per-slice moments
    merged (Chan et al.); ``m2`` the sum of squared deviations."""
    view, p, k = grouped_view(x3, layout, groups)
    length = x3.shape[-1]
    stat = stat_dtype(x3.dtype)
    splits = _splits(layout, p, k, launch.stat_programs)
    rows = k // splits
    out_spec = pl.BlockSpec((None, None), lambda i, s: (i, s))
    means, m2s = pl.pallas_call(
        functools.partial(_stats_kernel, rows=rows, length=length, launch=launch),
        grid=(p, splits),
        in_specs=[_group_block(layout, rows, length, split_axis=True)],
        out_specs=[out_spec, out_spec],
        out_shape=[varying_struct((p, splits), stat, refs=(x3,))] * 2,
        interpret=launch.interpret, name=f"{layout}_norm_stats", **_compiler_params(launch),
    )(view)
    mean = means.mean(1)  # equal counts per slice
    return mean, m2s.sum(1) + rows * length * jnp.square(means - mean[:, None]).sum(1)


def _splits(layout, p, k, programs):
    """Slices of a batch-norm channel's ``k`` rows (dividing ``k``) so that about ``programs`` run
    over its ``p`` channels; a group norm group is never split (1)."""
    return math.gcd(k, max(1, programs // p)) if layout == "batch" and programs else 1


def _backward_splits(x3, layout, groups, launch):
    """``_splits`` of the backward's row sums and dx kernels on x3 (N, C, L)."""
    n, c, _ = x3.shape
    p, k = (n * groups, c // groups) if layout == "group" else (c, n)
    return _splits(layout, p, k, launch.backward_programs)


def local_stats(x3, *, layout, groups, eps, launch: GroupedLaunch):
    """``grouped_stats`` on one device's array."""
    mean, m2 = local_moments(x3, layout=layout, groups=groups, launch=launch)
    _, _, k = grouped_view(x3, layout, groups)
    return mean, lax.rsqrt(m2 / (k * x3.shape[-1]) + eps)


def _xhat_and_g(tiling, x_ref, g_ref, mean, rstd, r, j):
    x, mask = tiling.load(x_ref, r, j, mean.dtype)
    g, _ = tiling.load(g_ref, r, j, mean.dtype)
    return (x - mean) * rstd, g, mask


def _row_sums(tiling, x_ref, g_ref, w_ref, mean, rstd, sum_g_ref, sum_gxhat_ref, weighted):
    """Writes each row's ``sum g`` and ``sum g x_hat``; returns the group's ``sum w g`` and
    ``sum w g x_hat`` (``sum g``, ``sum g x_hat`` unless ``weighted``)."""
    stat = mean.dtype

    def g_terms(r, j):
        xhat, g, _ = _xhat_and_g(tiling, x_ref, g_ref, mean, rstd, r, j)
        return g, g * xhat

    def tile_row_sums(r, carry):
        sum_g, sum_gxhat = tiling.sum_row(r, g_terms, 2, stat)
        tiling.rows_of(sum_g_ref, r)[...] = sum_g
        tiling.rows_of(sum_gxhat_ref, r)[...] = sum_gxhat
        w = tiling.rows_of(w_ref, r)[...].astype(stat) if weighted else 1
        return carry[0] + (w * sum_g).sum(), carry[1] + (w * sum_gxhat).sum()

    zero = jnp.zeros((), stat)
    return tiling.for_each(tile_row_sums, (zero, zero))


def _write_dx(tiling, x_ref, g_ref, w_ref, mean, rstd, gmean, grstd, mean_gw, mean_gwxhat, count, dx_ref, weighted):
    """``dx = rstd (w g - E[w g] - x_hat E[w g x_hat]) + (g_mean - g_rstd rstd^2 x_hat) / count``
    for every row of the group, the means given; unless ``weighted`` (one weight per group,
    batch norm) ``w B(g)``, ``dx = w rstd (g - E[g] - x_hat E[g x_hat]) + ...`` (an infinite w:
    +-inf, as torch's)."""
    mean_gw = defined_mean(mean_gw)
    stat = mean.dtype

    def tile_dx(r, j, w):
        xhat, g, mask = _xhat_and_g(tiling, x_ref, g_ref, mean, rstd, r, j)
        projected = rstd * ((w * g if weighted else g) - mean_gw - xhat * mean_gwxhat)
        dx = (projected if weighted else w * projected) + (gmean - grstd * rstd * rstd * xhat) / count
        tiling.store(dx_ref, r, j, dx, mask)

    tiling.for_each_tile_again(lambda r: tiling.rows_of(w_ref, r)[...].astype(stat)[:, None], tile_dx)


def _grouped_backward_kernel(x_ref, g_ref, w_ref, mean_ref, rstd_ref, gmean_ref, grstd_ref, dx_ref, sum_g_ref,
                             sum_gxhat_ref, *, rows, length, launch, weighted):
    tiling = _Tiling(rows, length, launch)
    count = rows * length
    mean, rstd = mean_ref[...], rstd_ref[...]
    sum_gw, sum_gwxhat = _row_sums(tiling, x_ref, g_ref, w_ref, mean, rstd, sum_g_ref, sum_gxhat_ref, weighted)
    _write_dx(tiling, x_ref, g_ref, w_ref, mean, rstd, gmean_ref[...], grstd_ref[...], sum_gw / count,
              sum_gwxhat / count, count, dx_ref, weighted)


def _grouped_sums_kernel(x_ref, g_ref, w_ref, mean_ref, rstd_ref, sum_g_ref, sum_gxhat_ref, *, rows, length,
                         launch, weighted):
    _row_sums(_Tiling(rows, length, launch), x_ref, g_ref, w_ref, mean_ref[...], rstd_ref[...], sum_g_ref,
              sum_gxhat_ref, weighted)


def _grouped_dx_kernel(x_ref, g_ref, w_ref, mean_ref, rstd_ref, gmean_ref, grstd_ref, mean_gw_ref, mean_gwxhat_ref,
                       dx_ref, *, rows, length, count, launch, weighted):
    _write_dx(_Tiling(rows, length, launch), x_ref, g_ref, w_ref, mean_ref[...], rstd_ref[...], gmean_ref[...],
              grstd_ref[...], mean_gw_ref[...], mean_gwxhat_ref[...], count, dx_ref, weighted)


def grouped_backward(x3, g3, row_weight, mean, rstd, g_mean, g_rstd, *, layout, groups, launch: GroupedLaunch):
    """``(dx, sum_g, sum_g_xhat)``: the VJP of the grouped normalization ``x_hat w + b`` (weight
    per row, ``row_weight`` of shape (P, K)) for cotangents ``g3`` of y, ``g_mean``/``g_rstd`` of
    the statistics; ``sum_g``/``sum_g_xhat`` (P, K) are the per-row sums that give db and dw.
    Under ``jit`` with a sharded batch the kernels run on each device's samples (batch norm: the
    group sums of the sums pass all-reduced before the ``dx`` pass, ``jaxrules.partitioning``)."""
    from jaxrules import partitioning

    return partitioning.grouped_backward(x3, g3, row_weight, mean, rstd, g_mean, g_rstd, layout=layout,
                                         groups=groups, launch=launch)


def _grouped_call(kernel, x3, layout, groups, launch, views, rows, scalars, outputs, name, splits=1, **params):
    """``pallas_call`` of a grouped kernel, one program per group (``splits``: per slice of a
    group's rows, the grid (P, splits)), on arrays ``views`` shaped as ``x3`` (the kernels' view of
    them), ``rows`` per-row (P, K) and ``scalars`` per-group (P,) ones (cast to ``stat_dtype``);
    ``outputs`` names "view" (shaped as x3, in its dtype), "rows" or "group" (in ``stat_dtype``)
    for each output."""
    _, p, k = grouped_view(x3, layout, groups)
    length, stat = x3.shape[-1], stat_dtype(x3.dtype)
    if splits > 1:
        block = _group_block(layout, k // splits, length, split_axis=True)
        scalar = pl.BlockSpec((None,), lambda i, s: (i,))
        per_row = pl.BlockSpec((None, k // splits), lambda i, s: (i, s))
    else:  # the grid and blocks the tables measured
        block = _group_block(layout, k, length)
        scalar = pl.BlockSpec((None,), lambda i: (i,))
        per_row = pl.BlockSpec((None, k), lambda i: (i, 0))
    viewed = [grouped_view(a, layout, groups)[0] for a in views]
    struct = functools.partial(varying_struct, refs=(x3, *views, *rows, *scalars))
    kinds = {"view": (block, struct(viewed[0].shape, x3.dtype)), "rows": (per_row, struct((p, k), stat)),
             "group": (scalar, struct((p,), stat))}
    outs = pl.pallas_call(
        functools.partial(kernel, rows=k // splits, length=length, launch=launch, **params),
        grid=(p, splits) if splits > 1 else (p,),
        in_specs=[block] * len(views) + [per_row] * len(rows) + [scalar] * len(scalars),
        out_specs=[kinds[o][0] for o in outputs],
        out_shape=[kinds[o][1] for o in outputs],
        interpret=launch.interpret, name=f"{layout}_norm_{name}", **_compiler_params(launch),
    )(*viewed, *rows, *[v.astype(stat) for v in scalars])
    return [o.reshape(x3.shape) if kind == "view" else o for o, kind in zip(outs, outputs)]


def local_forward_grouped(x3, row_weight, row_bias, *, layout, groups, eps, launch: GroupedLaunch):
    """``(y, mean, rstd)`` of group norm on one device's array in one kernel (a
    ``launch.writes_y`` launch): per group the statistics, then ``y = (x - mean) rstd w + b``
    (``row_weight``, ``row_bias`` (P, K): each row's weight and bias)."""
    if layout != "group":
        raise ValueError(f"norm_kernels.local_forward_grouped: layout must be 'group' (batch norm's statistics span "
                         f"programs), got {layout!r}")
    return tuple(_grouped_call(_forward_grouped_kernel, x3, layout, groups, launch, (x3,), (row_weight, row_bias), (),
                               ("view", "group", "group"), "fwd", eps=eps))


def _backward_call(kernel, x3, g3, row_weight, scalars, outputs, name, *, layout, groups, launch, **params):
    """``_grouped_call`` of a backward kernel: x, the cotangent, the per-row weight, ``scalars``;
    the row sums' and the dx kernels (not the fused one) split batch norm's channels as
    ``launch.backward_programs`` asks."""
    splits = 1 if kernel is _grouped_backward_kernel else _backward_splits(x3, layout, groups, launch)
    return _grouped_call(kernel, x3, layout, groups, launch, (x3, g3), (row_weight,), scalars, outputs, name,
                         splits=splits, weighted=layout != "batch", **params)


def local_backward_grouped(x3, g3, row_weight, mean, rstd, g_mean, g_rstd, *, layout, groups,
                           launch: GroupedLaunch):
    """``grouped_backward`` on one device's array: one fused kernel (sums, then dx), or, for batch
    norm with ``launch.backward_programs``, the row sums' kernel and the dx kernel over slices of
    each channel's samples, the channel's means of ``g`` and ``g x_hat`` summed by XLA between."""
    if _backward_splits(x3, layout, groups, launch) > 1:  # batch norm only
        return row_sums_then_dx(local_row_sums, local_dx, x3, g3, row_weight, mean, rstd, g_mean, g_rstd,
                                launch=launch, count=x3.shape[0] * x3.shape[-1])
    return tuple(_backward_call(_grouped_backward_kernel, x3, g3, row_weight, (mean, rstd, g_mean, g_rstd),
                                ("view", "rows", "rows"), "bwd", layout=layout, groups=groups, launch=launch))


def row_sums_then_dx(row_sums, dx_of, x3, g3, row_weight, mean, rstd, g_mean, g_rstd, *, launch, count, total=None):
    """Batch norm's backward as two kernels, ``row_sums`` and ``dx_of`` (``local_row_sums`` and
    ``local_dx``, this module's or ``partitioning._XlaGrouped``'s): the per-row sums of ``g`` and
    ``g x_hat``, then ``dx`` from each channel's ``E[g]``, ``E[g x_hat]`` (the weight factored out)
    over ``count`` elements, the channel's sums first summed by ``total`` (over the devices, a
    psum; None: this device's rows are the whole channel)."""
    params = dict(layout="batch", groups=1, launch=launch)
    sum_g, sum_gxhat = row_sums(x3, g3, row_weight, mean, rstd, **params)
    totals = (sum_g.sum(1), sum_gxhat.sum(1))
    totals = totals if total is None else total(totals)
    dx = dx_of(x3, g3, row_weight, mean, rstd, g_mean, g_rstd, totals[0] / count, totals[1] / count, count=count,
               **params)
    return dx, sum_g, sum_gxhat


def local_row_sums(x3, g3, row_weight, mean, rstd, *, layout, groups, launch: GroupedLaunch):
    """``(sum_g, sum_g_xhat)`` per row (P, K) on one device's array: the first pass of
    ``grouped_backward`` alone."""
    return tuple(_backward_call(_grouped_sums_kernel, x3, g3, row_weight, (mean, rstd), ("rows", "rows"), "bwd_sums",
                                layout=layout, groups=groups, launch=launch))


def local_dx(x3, g3, row_weight, mean, rstd, g_mean, g_rstd, mean_gw, mean_gwxhat, *, layout, groups, count,
             launch: GroupedLaunch):
    """The second pass of ``grouped_backward`` alone: ``dx`` given each group's ``E[w g]``,
    ``E[w g x_hat]`` (batch norm: ``E[g]``, ``E[g x_hat]``, the weight factored out) and element
    ``count`` (of the whole batch when it is sharded)."""
    (dx,) = _backward_call(_grouped_dx_kernel, x3, g3, row_weight,
                           (mean, rstd, g_mean, g_rstd, mean_gw, mean_gwxhat), ("view",), "bwd_dx", layout=layout,
                           groups=groups, launch=launch, count=count)
    return dx
