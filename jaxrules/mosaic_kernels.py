"""Layer norm and RMS norm row kernels for Pallas' Mosaic GPU backend (Hopper), issue 21: the
same contract as ``jaxrules.norm_kernels.local_forward`` / ``local_backward`` (written for the
Triton backend, which JAX 0.11 deprecated).

* ``local_forward(x, w, b, *, eps, launch)`` -> ``(y, mean, rstd)``, or ``(y, rstd)`` when ``b``
  is None (RMS norm);
* ``local_backward(x, g, w, mean, rstd, g_mean, g_rstd, *, launch)`` -> ``(dx, dw, db)``, or
  ``(dx, dw)`` when ``mean`` is None; ``dw``/``db`` in float32 for half inputs (the statistics'
  dtype), summed over the programs' partial sums by XLA.

The kernels work as the Triton ones do: every operand stays in GMEM (no TMA staging through
SMEM: a block of whole rows does not fit SMEM with double buffering at the wide widths, and the
TMA box is limited to 256 elements a dimension), a program's one warpgroup loads its block of
``launch.rows`` rows straight into registers, chunk by chunk (``launch.chunk`` columns: the four
warps side by side, each lane ``launch.vector`` consecutive elements), reduces each row across
the warps, and writes the outputs from registers.

* forward: one program per block of rows;
* backward: ``launch.programs`` programs, program ``i`` walking the blocks ``i, i + P, i + 2P,
  ...``; its ``dw``/``db`` partial sums stay in registers (the rows of a chunk are in the same
  thread) and are written once, as row ``i`` of a (P, N) array.

Any row count: the last block starts at ``M - rows`` (it overlaps the one before; the overlapping
rows are written twice with the same values and left out of the backward's sums). Widths: a
multiple of 128 up to ``MAX_WIDTH`` (``mosaic_supports`` says why a shape is not supported).
Blocks have at least 2 rows up to ``BLOCKS_WIDTH``; wider rows (and a single row) run the
one-row kernels (``launch.rows == 1``, ``_row_forward_kernel`` / ``_row_backward_kernel``): the
row indexed rather than sliced (Mosaic GPU cannot reshape a 1-row slice of a wider array), the
backward in two passes over the row (the second reads it again, from L1/L2) with ``dw``/``db``
summed in SMEM.

Measured on an H100 (jax 0.11.2, ``benchmarks/mosaic_vs_triton.py``): 0.71-1.03x the Triton
kernels' time at 16384x4096, 65535x4096, 66850x768 and 21844x12288 bfloat16 (about 2.6-2.8 TB/s at
65535x4096), but 21844x12288 float32 0.97-1.10x (forward) and 1.33x (backward: the one-row second
pass misses L1), and the small launches (1000x5120, 8192x768) 0.75-1.25x, varying run to run; let
the dispatch pick per measurement.

Register layouts are Mosaic GPU ``TiledLayout``s set with ``plgpu.layout_cast``. With
``launch.interpret`` the casts are left out and the same kernel bodies run in Pallas' (generic)
interpret mode on the CPU, for the tests.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect

import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from jaxrules.mechanism import varying_like, varying_struct
from jaxrules.partials import defined_mean, stat_dtype

SUPPORTED_DTYPES = ("float32", "bfloat16", "float16")
WARPGROUP = 128  # Mosaic GPU runs one warpgroup (4 warps of 32 lanes) per program
MAX_WIDTH = 16384  # as the Triton kernels' (dispatch.MAX_WIDTH)
# Up to this width blocks of >= 2 rows stay in registers (2x5120: 80 values a thread, faster than
# Triton on an H100); wider: one row a block (2-row blocks of 8192, 128 values a thread, ran 2-2.5x
# Triton's time there: benchmarks/RESULTS.md, stop 23).
BLOCKS_WIDTH = 5120
SMEM_BYTES = 200 * 1024  # for the one-row backward's dw/db sums (float32, 8 N bytes a program)
SMS = 132  # H100 SXM
BLOCK_ELEMENTS = 4096  # about this many elements per block of rows (32 a thread)
MAX_ROWS = 16
BACKWARD_PROGRAMS = 528  # 4 per H100 SM: 16 warps an SM
MIN_BACKWARD_STEPS = 8  # each backward program walks at least this many blocks when there are enough


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclasses.dataclass(frozen=True)
class MosaicRowsLaunch:
    """Launch of the Mosaic GPU row kernels on (M, N): blocks of ``rows`` rows, read in chunks of
    ``chunk`` columns (``4 * 32 * vector``); the backward runs ``programs`` programs."""

    rows: int
    chunk: int
    vector: int
    programs: int
    interpret: bool = False

    def blocks(self, m: int) -> int:
        """The blocks of rows of (m, N): the forward's programs, walked by the backward's."""
        return _cdiv(m, self.rows)

    forward_programs = blocks  # as dispatch.RowsLaunch names it

    def backward_steps(self, m: int) -> int:
        return _cdiv(self.blocks(m), self.programs)


def mosaic_supports(m: int, n: int, dtype, *, interpret: bool = False) -> str | None:
    """None when the Mosaic GPU kernels take an (m, n) array of ``dtype``, else the reason
    (``interpret``: in Pallas' interpret mode, which also takes float64, as the Triton kernels')."""
    import numpy as np

    name = np.dtype(dtype).name
    if name not in SUPPORTED_DTYPES + (("float64",) if interpret else ()):
        return f"dtype {name} (the Mosaic GPU kernels take {', '.join(SUPPORTED_DTYPES)})"
    if m < 1:
        return "no rows"
    if n < 128 or n % 128:
        return f"width {n} is not a multiple of 128"
    if n > MAX_WIDTH:
        return f"width {n} > {MAX_WIDTH} (a row would not fit the registers)"
    return None


def mosaic_rows_launch(m: int, n: int, dtype=jnp.float32, *, interpret: bool = False) -> MosaicRowsLaunch:
    """The launch for ``m`` rows of ``n`` (a pure function of the shape; ``dtype`` is checked by
    ``mosaic_supports`` and kept for per-dtype tuning)."""
    reason = mosaic_supports(m, n, dtype, interpret=interpret)
    if reason is not None:
        raise ValueError(f"the Mosaic GPU row kernels do not support {m}x{n} {jnp.dtype(dtype).name}: {reason}")
    vector = next(v for v in (4, 2, 1) if n % (WARPGROUP * v) == 0)
    if n > BLOCKS_WIDTH or m == 1:
        # One row a block (``_Layouts.rows == 1``: Mosaic GPU cannot reshape a 1-row slice of a
        # wider array, so these kernels index the row); the backward's programs keep their dw/db
        # sums in SMEM, as many as fit an SM.
        programs = max(1, min(m, SMS * max(1, SMEM_BYTES // (8 * n))))
        return MosaicRowsLaunch(1, WARPGROUP * vector, vector, programs, interpret)
    rows = max(2, min(m, MAX_ROWS, BLOCK_ELEMENTS // n))
    blocks = _cdiv(m, rows)
    programs = max(1, min(blocks, BACKWARD_PROGRAMS, max(132, blocks // MIN_BACKWARD_STEPS)))
    return MosaicRowsLaunch(rows, WARPGROUP * vector, vector, programs, interpret)


class _Layouts:
    """The register layouts of a (rows, chunk) block chunk: each warp ``chunk / 4`` consecutive
    columns, each lane ``vector`` consecutive elements of them, the rows in each thread's
    registers; ``row`` (rows,) the per-row values (every thread holds them all), ``column``
    (chunk,) the per-column values (weight, dw sums)."""

    def __init__(self, launch: MosaicRowsLaunch):
        self.launch = launch
        if launch.interpret:
            self.block = self.row = self.column = None
            return
        from jax.experimental.mosaic.gpu import fragmented_array as fa

        v = launch.vector
        tiled = fa.TiledLayout(fa.Tiling(((1, WARPGROUP * v), (1, 32 * v), (1, v))), warp_dims=(-5,),
                               lane_dims=(-3,), vector_dim=-1, _check_canonical=False).canonicalize()
        self.block, self.row, self.column = (_pallas_layout(t) for t in (tiled, tiled.reduce([1]), tiled.reduce([0])))

    def cast(self, value, layout):
        if self.launch.interpret:
            return value
        from jax.experimental.pallas import mosaic_gpu as plgpu

        return plgpu.layout_cast(value, layout)

    def load(self, ref, idx, layout, dtype):
        """``ref[idx]`` (in GMEM) in ``layout``, as ``dtype``."""
        if self.launch.interpret:
            return ref[idx].astype(dtype)
        from jax.experimental.pallas import mosaic_gpu as plgpu

        # jax >= 0.11 takes the index in the reference (a separate one is deprecated); 0.10.2 needs one
        separate = inspect.signature(plgpu.load).parameters["idx"].default is inspect.Parameter.empty
        view = ref.at[idx]
        loaded = plgpu.load(view, None, layout=layout, optimized=False) if separate else \
            plgpu.load(view, layout=layout, optimized=False)  # optimized: SMEM only
        return loaded.astype(dtype)

    def rows_of(self, value, rows, chunk):
        """(rows,) per-row values as a (rows, chunk) block."""
        return self.cast(lax.broadcast_in_dim(value, (rows, chunk), (0,)), self.block)

    def columns_of(self, value, rows, chunk):
        """(chunk,) per-column values as a (rows, chunk) block."""
        return self.cast(lax.broadcast_in_dim(value, (rows, chunk), (1,)), self.block)

    def splat(self, value, chunk):
        """A per-row scalar as a (chunk,) row chunk (one-row blocks)."""
        return self.cast(lax.broadcast_in_dim(value, (chunk,), ()), self.column)

    def fill(self, shape, value, dtype, layout):
        return self.cast(jnp.full(shape, value, dtype), layout)

    def row_index(self, rows, chunk):
        return self.cast(lax.broadcasted_iota(jnp.int32, (rows, chunk), 0), self.block)


def _pallas_layout(tiled):
    from jax.experimental.pallas import mosaic_gpu as plgpu

    return plgpu.Layout.TILED(tiled.tiling, warp_dims=tiled.warp_dims, lane_dims=tiled.lane_dims,
                              vector_dim=tiled.vector_dim)


GRID_AXIS = "blocks"


def _call(kernel, launch, programs, out_shape, name, scratch=()):
    """``kernel`` (refs: inputs, then outputs, all in GMEM) on a grid of ``programs`` programs:
    ``plgpu.kernel`` on the GPU (JAX 0.11 dropped ``pallas_call`` for Mosaic GPU), ``pallas_call``
    in (generic) interpret mode. ``scratch``: (shape, dtype) of SMEM scratch refs, after the
    outputs."""
    from jax.experimental.pallas import mosaic_gpu as plgpu

    smem = [plgpu.SMEM(shape, dtype) for shape, dtype in scratch]
    if launch.interpret:
        any_space = pl.BlockSpec(memory_space=pl.ANY)
        return lambda *args: pl.pallas_call(kernel, grid=(programs,), in_specs=[any_space] * len(args),
                                            out_specs=[any_space] * len(out_shape), out_shape=out_shape,
                                            scratch_shapes=smem, interpret=True, name=name)(*args)

    # No automatic barriers around each load and store: no thread reads memory another writes
    # (the cross-warp reductions synchronize their scratch themselves).
    params = plgpu.CompilerParams(unsafe_no_auto_barriers=True)
    new_names = "out_type" in inspect.signature(plgpu.kernel).parameters  # jax 0.10.2: out_shape
    types = {"out_type": list(out_shape)} if new_names else {"out_shape": list(out_shape)}
    if smem:
        types["scratch_types" if new_names else "scratch_shapes"] = smem
    named = {"kernel_name": name} if "kernel_name" in {f.name for f in dataclasses.fields(plgpu.Mesh)} else {}
    call = plgpu.kernel(kernel, **types, grid=(programs,), grid_names=(GRID_AXIS,), compiler_params=params, **named)
    # under jax.shard_map its outputs do not carry the inputs' varying mesh axes (their types say so)
    return lambda *args: varying_like(call(*args), *args)


def _program_id(launch):
    return pl.program_id(0) if launch.interpret else lax.axis_index(GRID_AXIS)


def _block_start(block, m, rows):
    """First row of block ``block``: the last block is moved back to end at row ``m``."""
    return jnp.minimum(block * rows, m - rows)


def _forward_kernel(*refs, eps, launch, center):
    """One block of rows: layer norm (``center``: refs x, w, b -> y, mean, rstd) or RMS norm
    (x, w -> y, rstd), the statistics in float32 (rstd's dtype)."""
    if center:
        x_ref, w_ref, b_ref, y_ref, mean_ref, rstd_ref = refs
    else:
        x_ref, w_ref, y_ref, rstd_ref = refs
    (m, n), stat = x_ref.shape, rstd_ref.dtype
    rows, chunk = launch.rows, launch.chunk
    lay = _Layouts(launch)
    start = _block_start(_program_id(launch), m, rows)
    row_ix = pl.ds(start, rows)
    columns = [pl.ds(j * chunk, chunk) for j in range(n // chunk)]
    xs = [lay.load(x_ref, (row_ix, c), lay.block, stat) for c in columns]

    def row_sum(chunks):
        return functools.reduce(lambda a, b: a + b, chunks).sum(1)

    if center:
        mean = row_sum(xs) / n
        xs = [x - lay.rows_of(mean, rows, chunk) for x in xs]
    rstd = lax.rsqrt(row_sum([x * x for x in xs]) / n + eps)
    rstd_block = lay.rows_of(rstd, rows, chunk)
    for x, c in zip(xs, columns):
        y = x * rstd_block * lay.columns_of(lay.load(w_ref, (c,), lay.column, stat), rows, chunk)
        if center:
            y = y + lay.columns_of(lay.load(b_ref, (c,), lay.column, stat), rows, chunk)
        y_ref[row_ix, c] = y.astype(y_ref.dtype)
    if center:
        mean_ref[row_ix] = mean
    rstd_ref[row_ix] = rstd


def local_forward(x, w, b, *, eps, launch: MosaicRowsLaunch):
    """``(y, mean, rstd)`` of layer norm over the last axis of ``x`` (M, N) on one device (the
    kernel itself); ``b=None``: RMS norm, ``(y, rstd)``. As ``norm_kernels.local_forward``."""
    center = b is not None
    m, n = x.shape
    struct = functools.partial(varying_struct, refs=(x, w, b))
    per_row = struct((m,), stat_dtype(x.dtype))
    n_out = 3 if center else 2
    out_shape = [struct(x.shape, x.dtype)] + [per_row] * (n_out - 1)
    kernel = _row_forward_kernel if launch.rows == 1 else _forward_kernel
    call = _call(functools.partial(kernel, eps=eps, launch=launch, center=center), launch,
                 launch.forward_programs(m), out_shape, f"{'layer' if center else 'rms'}_norm_fwd_mgpu")
    return tuple(call(x, w, *([b] if center else [])))


def _dx_and_terms(g, gw, xhat, rstd, mean_gwxhat, grstd_term, n, centered):
    """One chunk's ``dx`` and its terms of the weight's (and bias's) gradient, as
    ``norm_kernels._backward_kernel``: layer norm (``centered = (E[g w], g_mean)``) ``rstd (g w -
    E[g w] - x_hat E[g w x_hat]) + (g_mean - g_rstd rstd^2 x_hat) / N``, terms ``(g x_hat, g)``;
    RMS norm (``centered`` None) ``rstd (g w - x_hat E[g w x_hat]) - g_rstd rstd^2 x_hat / N``,
    ``(g x_hat,)``. ``grstd_term`` is ``g_rstd rstd^2``."""
    if centered is not None:
        mean_gw, gmean = centered
        return rstd * (gw - mean_gw - xhat * mean_gwxhat) + (gmean - grstd_term * xhat) / n, (g * xhat, g)
    return rstd * (gw - xhat * mean_gwxhat) - grstd_term * xhat / n, (g * xhat,)


def _backward_kernel(*refs, launch, center, steps):
    """Program ``i``'s blocks ``i + s P`` (s < ``steps``): ``dx``, and row ``i`` of the partial
    sums of ``dw`` (and ``db``). Layer norm (``center``): refs x, g, w, mean, rstd, g_mean,
    g_rstd -> dx, dw, db; RMS norm: x, g, w, rstd, g_rstd -> dx, dw."""
    if center:
        x_ref, g_ref, w_ref, mean_ref, rstd_ref, gmean_ref, grstd_ref, dx_ref, *sum_refs = refs
    else:
        x_ref, g_ref, w_ref, rstd_ref, grstd_ref, dx_ref, *sum_refs = refs
    (m, n), stat = x_ref.shape, rstd_ref.dtype
    rows, chunk, programs = launch.rows, launch.chunk, launch.programs
    lay = _Layouts(launch)
    blocks = launch.blocks(m)
    program = _program_id(launch)
    columns = [pl.ds(j * chunk, chunk) for j in range(n // chunk)]

    def row_sum(chunks):
        return functools.reduce(lambda a, b: a + b, chunks).sum(1)

    def step(s, sums):
        block = s * programs + program
        first = jnp.where(block < blocks, block * rows, m)  # rows before this are another block's
        start = _block_start(jnp.minimum(block, blocks - 1), m, rows)
        row_ix = pl.ds(start, rows)
        keep = lay.row_index(rows, chunk) + start >= first
        per_row = lambda ref: lay.rows_of(lay.load(ref, (row_ix,), lay.row, stat), rows, chunk)
        rstd = per_row(rstd_ref)
        xs = [lay.load(x_ref, (row_ix, c), lay.block, stat) for c in columns]
        gs = [lay.load(g_ref, (row_ix, c), lay.block, stat) for c in columns]
        gws = [g * lay.columns_of(lay.load(w_ref, (c,), lay.column, stat), rows, chunk) for g, c in zip(gs, columns)]
        if center:
            mean = per_row(mean_ref)
            xhats = [(x - mean) * rstd for x in xs]
            mean_gw = lay.rows_of(defined_mean(row_sum(gws) / n), rows, chunk)
        else:
            xhats = [x * rstd for x in xs]
        mean_gwxhat = lay.rows_of(row_sum([gw * xhat for gw, xhat in zip(gws, xhats)]) / n, rows, chunk)
        grstd_term = per_row(grstd_ref) * rstd * rstd
        if center:
            gmean = per_row(gmean_ref)
        new_sums = []
        for j, (c, g, gw, xhat) in enumerate(zip(columns, gs, gws, xhats)):
            dx, terms = _dx_and_terms(g, gw, xhat, rstd, mean_gwxhat, grstd_term, n,
                                      (mean_gw, gmean) if center else None)
            dx_ref[row_ix, c] = dx.astype(dx_ref.dtype)
            zero = lay.fill((rows, chunk), 0, stat, lay.block)
            new_sums.append(tuple(acc + jnp.where(keep, t, zero).sum(0) for acc, t in zip(sums[j], terms)))
        return tuple(new_sums)

    zeros = tuple(tuple(lay.fill((chunk,), 0, stat, lay.column) for _ in sum_refs) for _ in columns)
    sums = lax.fori_loop(0, steps, step, zeros)
    for c, chunk_sums in zip(columns, sums):
        for ref, total in zip(sum_refs, chunk_sums):
            ref[program, c] = total


def _row_forward_kernel(*refs, eps, launch, center):
    """``_forward_kernel`` for one-row blocks (``launch.rows == 1``): program ``i`` normalizes row
    ``i``, held in registers as (chunk,) pieces; the statistics are scalars."""
    if center:
        x_ref, w_ref, b_ref, y_ref, mean_ref, rstd_ref = refs
    else:
        x_ref, w_ref, y_ref, rstd_ref = refs
    n, stat, chunk = x_ref.shape[1], rstd_ref.dtype, launch.chunk
    lay = _Layouts(launch)
    row = _program_id(launch)
    columns = [pl.ds(j * chunk, chunk) for j in range(n // chunk)]
    xs = [lay.load(x_ref, (row, c), lay.column, stat) for c in columns]

    def total(chunks):
        return functools.reduce(lambda a, b: a + b, chunks).sum()

    if center:
        mean = total(xs) / n
        xs = [x - lay.splat(mean, chunk) for x in xs]
    rstd = lax.rsqrt(total([x * x for x in xs]) / n + eps)
    rstd_chunk = lay.splat(rstd, chunk)
    for x, c in zip(xs, columns):
        y = x * rstd_chunk * lay.load(w_ref, (c,), lay.column, stat)
        if center:
            y = y + lay.load(b_ref, (c,), lay.column, stat)
        y_ref[row, c] = y.astype(y_ref.dtype)
    if center:
        mean_ref[row] = mean
    rstd_ref[row] = rstd


def _row_backward_kernel(*refs, launch, center):
    """``_backward_kernel`` for one-row blocks: program ``i`` walks rows ``i, i + P, ...``, each in
    two passes over its chunks (the row sums, then ``dx``: a wide row and its gradient do not
    fit the registers, the second pass reads them again, from L1/L2), ``dw`` (and ``db``) summed
    in SMEM scratch refs (after the outputs) and written once as row ``i`` of a (P, N) array."""
    n_sums = 2 if center else 1
    refs, acc_refs = refs[:-n_sums], refs[-n_sums:]
    if center:
        x_ref, g_ref, w_ref, mean_ref, rstd_ref, gmean_ref, grstd_ref, dx_ref, *sum_refs = refs
    else:
        x_ref, g_ref, w_ref, rstd_ref, grstd_ref, dx_ref, *sum_refs = refs
    (m, n), stat, chunk, programs = x_ref.shape, rstd_ref.dtype, launch.chunk, launch.programs
    lay = _Layouts(launch)
    program = _program_id(launch)
    columns = [pl.ds(j * chunk, chunk) for j in range(n // chunk)]
    for ref in acc_refs:
        for c in columns:
            ref[c] = lay.fill((chunk,), 0, stat, lay.column)

    def total(chunks):
        return functools.reduce(lambda a, b: a + b, chunks).sum()

    def step(s, carry):
        row = s * programs + program
        rstd = rstd_ref[row]
        mean = mean_ref[row] if center else None

        def chunk_terms(c):
            x, g = lay.load(x_ref, (row, c), lay.column, stat), lay.load(g_ref, (row, c), lay.column, stat)
            xhat = ((x - lay.splat(mean, chunk)) if center else x) * lay.splat(rstd, chunk)
            return g, g * lay.load(w_ref, (c,), lay.column, stat), xhat

        terms = [chunk_terms(c) for c in columns]
        mean_gwxhat = lay.splat(total([gw * xhat for _, gw, xhat in terms]) / n, chunk)
        if center:
            mean_gw = lay.splat(defined_mean(total([gw for _, gw, _ in terms]) / n), chunk)
            gmean = lay.splat(gmean_ref[row], chunk)
        grstd_term = lay.splat(grstd_ref[row] * rstd * rstd, chunk)
        rstd_chunk = lay.splat(rstd, chunk)
        for c in columns:
            g, gw, xhat = chunk_terms(c)
            dx, new = _dx_and_terms(g, gw, xhat, rstd_chunk, mean_gwxhat, grstd_term, n,
                                    (mean_gw, gmean) if center else None)
            dx_ref[row, c] = dx.astype(dx_ref.dtype)
            for ref, t in zip(acc_refs, new):
                ref[c] = lay.load(ref, (c,), lay.column, stat) + t
        return carry

    lax.fori_loop(0, (m - 1 - program) // programs + 1, step, 0)  # this program's rows
    for ref, out in zip(acc_refs, sum_refs):
        for c in columns:
            out[program, c] = lay.load(ref, (c,), lay.column, stat)


def local_backward(x, g, w, mean, rstd, g_mean, g_rstd, *, launch: MosaicRowsLaunch):
    """``(dx, dw, db)`` on one device's rows (the kernel itself), ``dw``, ``db`` in the statistics'
    dtype; ``mean=None`` (and ``g_mean=None``): RMS norm's ``(dx, dw)``. As
    ``norm_kernels.local_backward``."""
    center = mean is not None
    m, n = x.shape
    stat = rstd.dtype
    stats = (mean, rstd, g_mean, g_rstd) if center else (rstd, g_rstd)
    n_sums = 2 if center else 1
    programs = min(launch.programs, launch.blocks(m))
    launch = dataclasses.replace(launch, programs=programs)
    struct = functools.partial(varying_struct, refs=(x, g, w, *stats))
    out_shape = [struct(x.shape, x.dtype)] + [struct((programs, n), stat)] * n_sums
    name = f"{'layer' if center else 'rms'}_norm_bwd_mgpu"
    if launch.rows == 1:
        kernel = functools.partial(_row_backward_kernel, launch=launch, center=center)
        call = _call(kernel, launch, programs, out_shape, name, scratch=[((n,), stat)] * n_sums)
    else:
        kernel = functools.partial(_backward_kernel, launch=launch, center=center, steps=launch.backward_steps(m))
        call = _call(kernel, launch, programs, out_shape, name)
    dx, *sums = call(x, g, w, *[v.astype(stat) for v in stats])
    return (dx, *(s.sum(0) for s in sums))
