"""How the fused normalization kernels run under ``jit`` with sharded arrays (issue 19).

A ``pallas_call`` is opaque to XLA's partitioner: left alone, it gathers a batch-sharded
activation onto every device and runs the whole kernel on each. Each kernel entry point of
``jaxrules.norm_kernels`` is therefore a ``jax.experimental.custom_partitioning`` function: a
Shardy ``sharding_rule`` for propagation, and a ``partition`` callback (run when XLA compiles)
that picks the shardings the kernel can honour and lowers the kernel on each device's shard,
with the collectives the math needs:

* layer norm and RMS norm (x (M, N)): rows sharded over any mesh axes, the normalized axis N
  replicated (gathered if it came sharded); the weight and bias replicated (gathered if sharded,
  FSDP style); the backward sums ``dw`` (and ``db``) over the row axes (one all-reduce, float32).
  The same partitioning runs the Triton kernels (``norm_kernels``) or the Mosaic GPU ones
  (``mosaic_kernels``), whichever the launch is for (``_row_kernels``). Where the choice waits for
  the shard (``dispatch.ShardPlan``: an ``Auto`` mesh), ``partition`` decides it on the shard's rows,
  the XLA formulas included (``_XlaRows``).
* group norm (x (N, G, K, L)): samples and groups sharded, K and L replicated; no collective
  (each group's statistics are local; XLA adds up ``dw``/``db`` over the samples).
* under an ``Auto`` mesh the op cannot see the split when tracing: where the plans of the splits
  XLA may choose differ, the launch is a ``dispatch.ShardPlan`` and each device's kernel (or the
  kernels' math in jnp, ``_XlaRows`` / ``_XlaGrouped``) is decided on its shard, here.
* batch norm, training (x (N, C, L)): samples and channels sharded, L replicated. The statistics
  are the global batch's: each device's per-channel ``(mean, m2)`` all-gathered (one collective
  of 2 C floats a device) and merged as Chan et al. on every device; the backward runs the
  kernel's two passes as two kernels around one all-reduce of the per-channel ``sum w g``,
  ``sum w g x_hat`` (the fused kernel cannot wait for other devices between its passes). A step
  thus waits on two collectives, one after the other (``tests/test_partitioning.py``).

A dimension sharded unevenly (its size not a multiple of the shards) is replicated, since
padded rows would enter the sums. The launch parameters are recomputed for the shard's shape.
In a process with one device the kernels are called directly; on one device of several, under
``shard_map`` (every mesh axis manual) or with no sharding at all, JAX lowers the kernel as it
is. (``custom_partitioning``'s lowering needs the program's devices, which ``jit`` provides only
when its jaxpr shows such a primitive: the ops' primals bind ``mechanism.primal_on_devices_p``
for it.) Under ``vmap`` (``custom_vmap``) the vmapped kernel is an op of its own, partitioned
along the vmapped axis: the examples are independent, each device runs its slice. Under an
``Explicit`` mesh the shardings are known when tracing: the same ``partition`` callbacks decide
then and the kernels run under ``jax.shard_map``.
"""

from __future__ import annotations

import functools
import inspect
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as PSpec

from jaxrules import dispatch
from jaxrules.mechanism import in_shard_map
from jaxrules.partials.normalization import (
    affine_norm_backward,
    defined_mean,
    groups_first,
    norm_stats,
    rms_projection,
    rms_rstd,
    stat_dtype,
)


def _axes(entry) -> tuple:
    """A PartitionSpec entry as a tuple of mesh axis names."""
    if entry is None or entry is PSpec.UNCONSTRAINED:
        return ()
    return tuple(entry) if isinstance(entry, tuple | list) else (entry,)


def _entry(axes: tuple):
    return None if not axes else axes[0] if len(axes) == 1 else tuple(axes)


def dim_axes(arg: jax.ShapeDtypeStruct) -> list[tuple]:
    """The mesh axes sharding each dimension of ``arg`` (a ``ShapeDtypeStruct`` with a
    sharding); all replicated for a sharding that is not a ``NamedSharding``."""
    sharding = getattr(arg, "sharding", None)
    if not isinstance(sharding, NamedSharding):
        return [()] * len(arg.shape)
    spec = tuple(sharding.spec) + (None,) * (len(arg.shape) - len(sharding.spec))
    return [_axes(e) for e in spec]


def shards(mesh: jax.sharding.Mesh, axes: tuple) -> int:
    """The number of shards the mesh ``axes`` cut a dimension into."""
    return math.prod(mesh.shape[a] for a in axes)


def even_axes(mesh: jax.sharding.Mesh, arg: jax.ShapeDtypeStruct, dim: int) -> tuple:
    """The mesh axes of ``arg``'s dimension ``dim`` if they split it evenly, else ``()`` (the
    dimension is then replicated: padded rows would enter the sums)."""
    axes = dim_axes(arg)[dim]
    count = shards(mesh, axes)
    return axes if count > 1 and arg.shape[dim] % count == 0 else ()


def named(mesh: jax.sharding.Mesh, *entries: tuple) -> NamedSharding:
    """The ``NamedSharding`` with one tuple of mesh axes (``()``: replicated) per dimension."""
    return NamedSharding(mesh, PSpec(*(_entry(e) for e in entries)))


def local_shape(x: jax.Array) -> tuple:
    """The shape of each device's shard of ``x`` where its sharding is known when tracing (an
    ``Explicit`` mesh axis, a concrete sharded array), else the global shape."""
    sharding = getattr(jax.typeof(x), "sharding", None)
    spec = getattr(sharding, "spec", None)
    mesh = getattr(sharding, "mesh", None)
    if spec is None or mesh is None or not getattr(mesh, "shape", None):
        return tuple(x.shape)
    spec = tuple(spec) + (None,) * (x.ndim - len(spec))
    out = []
    for size, entry in zip(x.shape, spec):
        count = math.prod(mesh.shape[a] for a in _axes(entry))
        out.append(size // count if size % count == 0 else size)
    return tuple(out)


def auto_mesh_sizes(x: jax.Array) -> tuple | None:
    """The axis sizes of the mesh in x's type when XLA will choose x's split (an ``Auto`` axis of
    a mesh of several devices, and no split known when tracing: ``local_shape`` is then the
    whole shape), else None."""
    sharding = getattr(jax.typeof(x), "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if mesh is None or getattr(mesh, "size", 1) <= 1 or any(e is not None for e in getattr(sharding, "spec", ())):
        return None
    if all(t == jax.sharding.AxisType.Explicit for t in mesh.axis_types):
        return None
    return tuple(mesh.shape.values())


def _kernel_op(impl, n_arrays: int, rule, partition, n_static: int | None = None):
    """``impl(*arrays, *statics)`` as a partitioned op: ``rule(*statics, mesh, value_types,
    result_types)`` its Shardy rule (an einsum-like string, or one with a dict of its keywords),
    ``partition(*statics, mesh, arg_shapes, result_shape) -> (lower_fn, result_shardings,
    arg_shardings)`` its per-device lowering (``n_static``: the number of statics, by default
    read from ``impl``'s signature); under ``vmap`` the vmapped ``impl`` is partitioned along the
    batch (``_leading_axis_op``)."""
    if n_static is None:
        n_static = len(inspect.signature(impl).parameters) - n_arrays
    op = custom_partitioning(impl, static_argnums=tuple(range(n_arrays, n_arrays + n_static)))

    def _partition(*args):
        *statics, mesh, arg_shapes, result_shape = args
        lower, results, arguments = partition(*statics, mesh, arg_shapes, result_shape)
        return mesh, lower, results, arguments

    op.def_partition(partition=_partition, sharding_rule=rule)

    def call(*args):
        arrays, statics = args[:n_arrays], args[n_arrays:]
        if jax.device_count() == 1 or in_shard_map():  # nothing to partition: the arrays are one device's
            return impl(*args)

        @jax.custom_batching.custom_vmap
        def run(*arrays):  # the mesh is read here, where the arrays are whole (not vmap's examples)
            mesh = explicit_mesh(arrays)
            if mesh is not None:
                return _explicit_call(partition, impl, mesh, arrays, statics)
            return op(*arrays, *statics)

        @run.def_vmap
        def _vmap_rule(axis_size, in_batched, *arrays):
            op = _leading_axis_op(impl, tuple(statics), tuple(in_batched), tuple(a.ndim for a in arrays), vmapped=True)
            out = op(*arrays)
            return out, jax.tree_util.tree_map(lambda _: True, out)

        return run(*arrays)

    return call


@functools.lru_cache(maxsize=256)
def _leading_axis_op(impl, statics: tuple, leading: tuple, ndims: tuple, vmapped: bool = False):
    """``impl(*arrays, *statics)`` as a partitioned op when the leading axis of the arrays
    ``leading`` and of every output indexes independent problems (attention heads, or vmap's
    examples with ``vmapped``: ``impl`` under ``jax.vmap`` over that axis): each device runs its
    slice (sharded as the first such array's leading axis, where it splits evenly); the other
    arrays and every other dimension replicated. ``ndims``: the arrays' ranks."""

    def fn(*arrays):
        if vmapped:
            return jax.vmap(lambda *a: impl(*a, *statics), in_axes=[0 if b else None for b in leading])(*arrays)
        return impl(*arrays, *statics)

    def rule(mesh, value_types, result_types):
        factors = []

        def dims(split, ndim):
            names = [f"d{len(factors) + i}" for i in range(ndim - split)]
            factors.extend(names)
            return " ".join((["b"] if split else []) + names)

        args = [dims(b, n) for b, n in zip(leading, ndims)]
        results = [dims(True, len(t.shape)) for t in result_types]
        return f"{', '.join(args)} -> {', '.join(results)}", {"need_replication_factors": tuple(factors)}

    def partition(mesh, arg_shapes, result_shape):
        axes = even_axes(mesh, next(a for a, b in zip(arg_shapes, leading) if b), 0)

        def sharding(shape, split):
            return named(mesh, *([axes] if split else []), *[()] * (len(shape) - split))

        results = jax.tree_util.tree_map(lambda r: sharding(r.shape, True), result_shape)
        return fn, results, tuple(sharding(a.shape, b) for a, b in zip(arg_shapes, leading))

    return _kernel_op(fn, len(leading), rule, partition, n_static=0)


def explicit_mesh(arrays) -> jax.sharding.Mesh | None:
    """The mesh of the arrays' types when every axis of it is ``Explicit`` (the shardings are then
    part of the types, known when tracing), else None."""
    for a in arrays:
        mesh = getattr(getattr(jax.typeof(a), "sharding", None), "mesh", None)
        types = getattr(mesh, "axis_types", ())
        if types and mesh.size > 1 and all(t == jax.sharding.AxisType.Explicit for t in types):
            return mesh
    return None


def replicated(v: jax.Array) -> jax.Array:
    """``v`` resharded to replicated where its type is sharded over an ``Explicit`` mesh (FSDP-style
    weights: gathered for the normalization, their gradients sharded back by the transpose);
    else ``v``."""
    sharding = getattr(jax.typeof(v), "sharding", None)
    if explicit_mesh([v]) is None or all(e is None for e in getattr(sharding, "spec", ())):
        return v
    return jax.sharding.reshard(v, PSpec())


def _explicit_call(partition, impl, mesh, arrays, statics):
    """Under an ``Explicit`` mesh the same ``partition`` decides, at trace time: the arguments are
    resharded as it asks and its lowering runs under ``jax.shard_map``, so the outputs' types carry
    its shardings (``custom_partitioning`` would trace the kernel on sharded types, which Pallas
    refuses)."""
    shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(mesh, jax.typeof(a).sharding.spec))
              for a in arrays]
    out_shapes = jax.eval_shape(lambda *a: impl(*a, *statics), *[jax.ShapeDtypeStruct(a.shape, a.dtype)
                                                                  for a in arrays])
    lower, results, arguments = partition(*statics, mesh, shapes, out_shapes)
    arrays = [jax.sharding.reshard(a, s.spec) for a, s in zip(arrays, arguments)]
    run = jax.shard_map(lower, mesh=mesh, in_specs=tuple(s.spec for s in arguments),
                        out_specs=tuple(s.spec for s in results), check_vma=False)
    return run(*arrays)


# ----------------------------------------------------------------------------------------------
# Layer norm and RMS norm: x (M, N), rows sharded.


class _XlaRows:
    """The rows kernels' math in jnp, with their arguments and outputs (``local_forward`` /
    ``local_backward`` of ``norm_kernels``): what a ``dispatch.ShardPlan`` runs on a shard whose
    plan is the XLA formulas. Layer norm: ``mean, rstd`` by ``partials.norm_stats`` (the XLA
    formulas' statistics), ``y = x_hat w + b``, backward ``partials.affine_norm_backward`` and the row sums of
    ``g x_hat`` and ``g``; RMS norm (``b``, ``mean`` None): ``rstd = rsqrt(E[x^2] + eps)``, ``y =
    x_hat w`` (``rms_rstd``), ``dx = rms_projection(g w) - g_rstd rstd^2 x_hat / N``; statistics and sums in
    ``stat_dtype``."""

    @staticmethod
    def local_forward(x, w, b, *, eps, launch=None):
        stat = stat_dtype(x.dtype)
        xs, ws = x.astype(stat), w.astype(stat)
        if b is None:
            rstd = rms_rstd(xs, (1,), eps)
            return (xs * rstd * ws).astype(x.dtype), rstd[:, 0]
        mean, rstd = norm_stats(x, (1,), eps, None)  # x as stored: its bytes pick the statistics' form
        return ((xs - mean) * rstd * ws + b.astype(stat)).astype(x.dtype), mean[:, 0], rstd[:, 0]

    @staticmethod
    def local_backward(x, g, w, mean, rstd, g_mean, g_rstd, *, launch=None):
        stat = rstd.dtype
        xs, gs, ws, r, gr = x.astype(stat), g.astype(stat), w.astype(stat), rstd[:, None], g_rstd.astype(stat)[:, None]
        if mean is None:
            xhat = xs * r
            dx = rms_projection(xs, r, gs * ws, (1,)) - gr * r * r * xhat / x.shape[1]
            return dx.astype(x.dtype), (gs * xhat).sum(0)
        xhat = (xs - mean[:, None]) * r
        dx = affine_norm_backward(xhat, r, gs, ws, g_mean.astype(stat)[:, None], gr, (1,))
        return dx.astype(x.dtype), (gs * xhat).sum(0), gs.sum(0)


def _row_kernels(launch, x):
    """``(module, launch)`` of the rows kernels for ``x``, one device's rows: ``mosaic_kernels``
    (Mosaic GPU), ``norm_kernels`` (Triton) or ``_XlaRows`` (launch None), a
    ``dispatch.ShardPlan`` decided on x's shape first; each has ``local_forward`` /
    ``local_backward``."""
    from jaxrules import mosaic_kernels, norm_kernels

    if isinstance(launch, dispatch.ShardPlan):
        launch = dispatch.shard_launch(launch, x.shape, x.dtype)
    if launch is None:
        return _XlaRows, None
    return (mosaic_kernels if isinstance(launch, mosaic_kernels.MosaicRowsLaunch) else norm_kernels), launch


def _ln_forward_impl(x, w, b, eps, launch):
    kernels, launch = _row_kernels(launch, x)
    return kernels.local_forward(x, w, b, eps=eps, launch=launch)


def _rms_forward_impl(x, w, eps, launch):
    kernels, launch = _row_kernels(launch, x)
    return kernels.local_forward(x, w, None, eps=eps, launch=launch)


def _rows_forward_partition(impl, n_stats: int):
    """The ``partition`` of a rows forward (``impl``, ``n_stats`` per-row outputs after y): rows
    sharded, N and the weight (and bias) replicated."""

    def partition(eps, launch, mesh, arg_shapes, result_shape):
        x = arg_shapes[0]
        rows = even_axes(mesh, x, 0)
        local = dispatch.shard_launch(launch, (x.shape[0] // shards(mesh, rows), x.shape[1]), x.dtype)
        lower = functools.partial(impl, eps=eps, launch=local)
        matrix = named(mesh, rows, ())
        return lower, (matrix,) + (named(mesh, rows),) * n_stats, (matrix,) + (named(mesh, ()),) * (
            len(arg_shapes) - 1)

    return partition


_ln_forward = _kernel_op(
    _ln_forward_impl, 3, lambda *_: ("m n, n, n -> m n, m, m", {"need_replication_factors": ("n",)}),
    _rows_forward_partition(_ln_forward_impl, 2))
_rms_forward = _kernel_op(
    _rms_forward_impl, 2, lambda *_: ("m n, n -> m n, m", {"need_replication_factors": ("n",)}),
    _rows_forward_partition(_rms_forward_impl, 1))


def layer_norm_forward(x, w, b, *, eps: float, launch):
    """``norm_kernels.forward``, partitioned: ``(y, mean, rstd)``."""
    return tuple(_ln_forward(x, w, b, eps, launch))


def rms_norm_forward(x, w, *, eps: float, launch):
    """``norm_kernels.rms_forward``, partitioned: ``(y, rstd)``."""
    return tuple(_rms_forward(x, w, eps, launch))


def _ln_backward_impl(x, g, w, mean, rstd, g_mean, g_rstd, launch):
    kernels, launch = _row_kernels(launch, x)
    return kernels.local_backward(x, g, w, mean, rstd, g_mean, g_rstd, launch=launch)


def _rms_backward_impl(x, g, w, rstd, g_rstd, launch):
    kernels, launch = _row_kernels(launch, x)
    return kernels.local_backward(x, g, w, None, rstd, None, g_rstd, launch=launch)


def _rows_backward_partition(impl, n_stats: int, n_sums: int):
    """The ``partition`` of a rows backward (``impl``: x, g, w, then ``n_stats`` per-row arrays ->
    dx and ``n_sums`` weight gradients): rows sharded, the weight gradients summed over the row
    axes (one all-reduce)."""

    def partition(launch, mesh, arg_shapes, result_shape):
        x = arg_shapes[0]
        rows = even_axes(mesh, x, 0)
        local = dispatch.shard_launch(launch, (x.shape[0] // shards(mesh, rows), x.shape[1]), x.dtype)

        def lower(*args):
            dx, *sums = impl(*args, local)
            if rows:  # the weight's gradient sums over every row: one all-reduce of the sums
                sums = lax.psum(tuple(sums), rows)
            return (dx, *sums)

        matrix, vector, per_row = named(mesh, rows, ()), named(mesh, ()), named(mesh, rows)
        return lower, (matrix,) + (vector,) * n_sums, (matrix, matrix, vector) + (per_row,) * n_stats

    return partition


_ln_backward = _kernel_op(
    _ln_backward_impl, 7,
    lambda *_: ("m n, m n, n, m, m, m, m -> m n, n, n", {"need_replication_factors": ("n",)}),
    _rows_backward_partition(_ln_backward_impl, 4, 2))
_rms_backward = _kernel_op(
    _rms_backward_impl, 5, lambda *_: ("m n, m n, n, m, m -> m n, n", {"need_replication_factors": ("n",)}),
    _rows_backward_partition(_rms_backward_impl, 2, 1))


def layer_norm_backward(x, g, w, mean, rstd, g_mean, g_rstd, *, launch):
    """``norm_kernels.local_backward``, partitioned: ``(dx, dw, db)``, the weight's gradients in
    the statistics' dtype, summed over the devices."""
    stat = mean.dtype
    return tuple(_ln_backward(x, g, w, mean, rstd, g_mean.astype(stat), g_rstd.astype(stat), launch))


def rms_norm_backward(x, g, w, rstd, g_rstd, *, launch):
    """``norm_kernels.local_backward`` of RMS norm, partitioned: ``(dx, dw)``, ``dw`` in the
    statistics' dtype, summed over the devices."""
    return tuple(_rms_backward(x, g, w, rstd, g_rstd.astype(rstd.dtype), launch))


# ----------------------------------------------------------------------------------------------
# Batch and group norm: the kernels of a launch, or their math in jnp


class _XlaGrouped:
    """The grouped kernels' math in jnp, with their arguments and outputs (``norm_kernels``'
    ``local_moments``, ``local_stats``, ``local_forward_grouped``, ``local_row_sums``,
    ``local_dx``, ``local_backward_grouped``): what a ``dispatch.ShardPlan`` runs on a shard whose plan is the
    XLA formulas. On the (P, K, L) view (``groups_first``): ``mean``, ``m2`` (sum of squared
    deviations) per group; per row ``sum g``, ``sum g x_hat``; ``dx = rstd (w g - E[w g] - x_hat
    E[w g x_hat]) + (g_mean - g_rstd rstd^2 x_hat) / count`` (batch norm, one weight per group:
    ``w rstd (g - E[g] - x_hat E[g x_hat]) + ...``), as ``norm_kernels._write_dx``."""

    @staticmethod
    def _view(a, layout, groups, stat):
        return groups_first(a.astype(stat), layout, groups)

    @staticmethod
    def local_moments(x3, *, layout, groups, launch=None):
        v = _XlaGrouped._view(x3, layout, groups, stat_dtype(x3.dtype))
        mean = v.mean((1, 2))
        return mean, jnp.square(v - mean[:, None, None]).sum((1, 2))

    @staticmethod
    def local_stats(x3, *, layout, groups, eps, launch=None):
        mean, rstd = norm_stats(_XlaGrouped._view(x3, layout, groups, x3.dtype), (1, 2), eps, None)
        return mean[:, 0, 0], rstd[:, 0, 0]

    @staticmethod
    def local_forward_grouped(x3, row_weight, row_bias, *, layout, groups, eps, launch=None):
        mean, rstd = _XlaGrouped.local_stats(x3, layout=layout, groups=groups, eps=eps)
        stat = mean.dtype
        xhat = (_XlaGrouped._view(x3, layout, groups, stat) - mean[:, None, None]) * rstd[:, None, None]
        y = xhat * row_weight.astype(stat)[..., None] + row_bias.astype(stat)[..., None]
        return y.reshape(x3.shape).astype(x3.dtype), mean, rstd

    @staticmethod
    def _xhat_and_g(x3, g3, mean, rstd, layout, groups):
        stat = mean.dtype
        xhat = (_XlaGrouped._view(x3, layout, groups, stat) - mean[:, None, None]) * rstd[:, None, None]
        return xhat, _XlaGrouped._view(g3, layout, groups, stat)

    @staticmethod
    def local_row_sums(x3, g3, row_weight, mean, rstd, *, layout, groups, launch=None):
        xhat, g = _XlaGrouped._xhat_and_g(x3, g3, mean, rstd, layout, groups)
        return g.sum(2), (g * xhat).sum(2)

    @staticmethod
    def local_dx(x3, g3, row_weight, mean, rstd, g_mean, g_rstd, mean_gw, mean_gwxhat, *, layout, groups, count,
                 launch=None):
        xhat, g = _XlaGrouped._xhat_and_g(x3, g3, mean, rstd, layout, groups)
        stat = mean.dtype
        w = row_weight.astype(stat)[:, :, None]
        r, per_group = rstd[:, None, None], (lambda v: v.astype(stat)[:, None, None])  # noqa: E731
        weighted = layout != "batch"
        projected = r * ((w * g if weighted else g) - per_group(defined_mean(mean_gw)) - xhat * per_group(mean_gwxhat))
        dx = (projected if weighted else w * projected) + (per_group(g_mean) - per_group(g_rstd) * r * r * xhat) / count
        if layout == "group":
            return dx.reshape(x3.shape).astype(x3.dtype)
        return jnp.swapaxes(dx, 0, 1).astype(x3.dtype)

    @staticmethod
    def local_backward_grouped(x3, g3, row_weight, mean, rstd, g_mean, g_rstd, *, layout, groups, launch=None):
        sum_g, sum_gxhat = _XlaGrouped.local_row_sums(x3, g3, row_weight, mean, rstd, layout=layout, groups=groups)
        _, k, length = groups_first(x3, layout, groups).shape
        w = row_weight.astype(mean.dtype) if layout != "batch" else 1
        count = k * length
        dx = _XlaGrouped.local_dx(x3, g3, row_weight, mean, rstd, g_mean, g_rstd, (w * sum_g).sum(1) / count,
                                  (w * sum_gxhat).sum(1) / count, layout=layout, groups=groups, count=count)
        return dx, sum_g, sum_gxhat


def _grouped_kernels(launch, x3, layout: str, groups: int):
    """``(module, launch)`` of the batch/group-norm kernels for ``x3`` (N, C, L), one device's
    array: ``norm_kernels``, or ``_XlaGrouped`` where a ``dispatch.ShardPlan`` decides, on x3's
    shape, for the XLA formulas."""
    from jaxrules import norm_kernels

    if isinstance(launch, dispatch.ShardPlan):
        n, c, length = x3.shape
        features = (c, n, length) if layout == "batch" else (n * groups, c // groups, length)
        launch = dispatch.shard_launch(launch, features, x3.dtype)
    return (_XlaGrouped, None) if launch is None else (norm_kernels, launch)


# ----------------------------------------------------------------------------------------------
# Group norm: x (N, G, K, L) (the kernels' (N G, K, L) view), samples and groups sharded.


def _flat(x4):
    n, groups, k, length = x4.shape
    return x4.reshape(n, groups * k, length), groups


def _gn_stats_impl(x4, eps, launch):

    x3, groups = _flat(x4)
    kernels, launch = _grouped_kernels(launch, x3, "group", groups)
    mean, rstd = kernels.local_stats(x3, layout="group", groups=groups, eps=eps, launch=launch)
    return mean.reshape(x4.shape[:2]), rstd.reshape(x4.shape[:2])


def _group_axes(mesh, x4):
    return even_axes(mesh, x4, 0), even_axes(mesh, x4, 1)


def _group_shardings(mesh, x4):
    """The shardings of an (N, G, K, L) array, an (N, G, K) per-row one and an (N, G) per-group one:
    samples and groups split as x's, rows and their elements whole."""
    samples, groups = _group_axes(mesh, x4)
    return (named(mesh, samples, groups, (), ()), named(mesh, samples, groups, ()), named(mesh, samples, groups))


def _gn_stats_partition(eps, launch, mesh, arg_shapes, result_shape):
    samples, groups = _group_axes(mesh, arg_shapes[0])
    stats = named(mesh, samples, groups)
    return functools.partial(_gn_stats_impl, eps=eps, launch=launch), (stats, stats), (
        named(mesh, samples, groups, (), ()),)


_GROUP_RULE = {"need_replication_factors": ("k", "l")}
_gn_stats = _kernel_op(_gn_stats_impl, 1, lambda *_: ("n g k l -> n g, n g", _GROUP_RULE), _gn_stats_partition)


def _gn_forward_impl(x4, w3, b3, eps, launch):

    x3, groups = _flat(x4)
    kernels, launch = _grouped_kernels(launch, x3, "group", groups)
    y, mean, rstd = kernels.local_forward_grouped(x3, *[v.reshape(-1, v.shape[-1]) for v in (w3, b3)], layout="group",
                                                  groups=groups, eps=eps, launch=launch)
    return y.reshape(x4.shape), mean.reshape(x4.shape[:2]), rstd.reshape(x4.shape[:2])


def _gn_forward_partition(eps, launch, mesh, arg_shapes, result_shape):
    x, rows, stats = _group_shardings(mesh, arg_shapes[0])
    return functools.partial(_gn_forward_impl, eps=eps, launch=launch), (x, stats, stats), (x, rows, rows)


_gn_forward = _kernel_op(_gn_forward_impl, 3,
                         lambda *_: ("n g k l, n g k, n g k -> n g k l, n g, n g", _GROUP_RULE), _gn_forward_partition)


def _gn_backward_impl(x4, g4, w3, mean, rstd, g_mean, g_rstd, launch):

    x3, groups = _flat(x4)
    flat = [v.reshape(-1) for v in (mean, rstd, g_mean, g_rstd)]
    kernels, launch = _grouped_kernels(launch, x3, "group", groups)
    dx, sum_g, sum_gxhat = kernels.local_backward_grouped(
        x3, g4.reshape(x3.shape), w3.reshape(-1, w3.shape[-1]), *flat, layout="group", groups=groups, launch=launch)
    return dx.reshape(x4.shape), sum_g.reshape(w3.shape), sum_gxhat.reshape(w3.shape)


def _gn_backward_partition(launch, mesh, arg_shapes, result_shape):
    x, rows, stats = _group_shardings(mesh, arg_shapes[0])
    return functools.partial(_gn_backward_impl, launch=launch), (x, rows, rows), (x, x, rows) + (stats,) * 4


_gn_backward = _kernel_op(
    _gn_backward_impl, 7,
    lambda *_: ("n g k l, n g k l, n g k, n g, n g, n g, n g -> n g k l, n g k, n g k", _GROUP_RULE),
    _gn_backward_partition)


# ----------------------------------------------------------------------------------------------
# Batch norm: x (N, C, L), samples and channels sharded; statistics over the sharded samples.


def _bn_stats_impl(x3, eps, launch):

    kernels, launch = _grouped_kernels(launch, x3, "batch", 1)
    return kernels.local_stats(x3, layout="batch", groups=1, eps=eps, launch=launch)


def _bn_axes(mesh, x3):
    return even_axes(mesh, x3, 0), even_axes(mesh, x3, 1)


def _bn_stats_partition(eps, launch, mesh, arg_shapes, result_shape):
    samples, channels = _bn_axes(mesh, arg_shapes[0])

    def lower(x3):

        if not samples:
            return _bn_stats_impl(x3, eps, launch)
        kernels, local = _grouped_kernels(launch, x3, "batch", 1)
        mean, m2 = kernels.local_moments(x3, layout="batch", groups=1, launch=local)
        # One collective: every device's (mean_d, m2_d) gathered (2 C floats each), merged as
        # Chan et al. (equal counts n_d): var = (sum_d m2_d + n_d sum_d (mean_d - mean)^2) / (D n_d).
        gathered = lax.all_gather(jnp.stack([mean, m2]), samples)  # (D, 2, C)
        means, m2s = gathered[:, 0], gathered[:, 1]
        global_mean = means.mean(0)
        count = x3.shape[0] * x3.shape[2]
        var = (m2s.sum(0) + count * jnp.square(means - global_mean).sum(0)) / (count * means.shape[0])
        return global_mean, lax.rsqrt(var + eps)

    stats = named(mesh, channels)
    return lower, (stats, stats), (named(mesh, samples, channels, ()),)


_BATCH_RULE = {"need_replication_factors": ("l",)}
_bn_stats = _kernel_op(_bn_stats_impl, 1, lambda *_: ("n c l -> c, c", _BATCH_RULE), _bn_stats_partition)


def _bn_backward_impl(x3, g3, w2, mean, rstd, g_mean, g_rstd, launch):

    kernels, launch = _grouped_kernels(launch, x3, "batch", 1)
    return kernels.local_backward_grouped(x3, g3, w2, mean, rstd, g_mean, g_rstd, layout="batch", groups=1,
                                          launch=launch)


def _bn_backward_partition(launch, mesh, arg_shapes, result_shape):
    samples, channels = _bn_axes(mesh, arg_shapes[0])

    def lower(x3, g3, w2, mean, rstd, g_mean, g_rstd):

        if not samples:
            return _bn_backward_impl(x3, g3, w2, mean, rstd, g_mean, g_rstd, launch)
        from jaxrules import norm_kernels

        kernels, local = _grouped_kernels(launch, x3, "batch", 1)
        return norm_kernels.row_sums_then_dx(kernels.local_row_sums, kernels.local_dx, x3, g3, w2, mean, rstd,
                                             g_mean, g_rstd, launch=local,
                                             count=x3.shape[0] * shards(mesh, samples) * x3.shape[2],
                                             total=lambda sums: lax.psum(sums, samples))

    x, rows, stats = named(mesh, samples, channels, ()), named(mesh, channels, samples), named(mesh, channels)
    return lower, (x, rows, rows), (x, x, rows) + (stats,) * 4


_bn_backward = _kernel_op(
    _bn_backward_impl, 7, lambda *_: ("n c l, n c l, c n, c, c, c, c -> n c l, c n, c n", _BATCH_RULE),
    _bn_backward_partition)


# ----------------------------------------------------------------------------------------------
# Entry points (``norm_kernels.grouped_stats`` / ``grouped_forward`` / ``grouped_backward``)


def _groups_view(x3, groups):
    n, c, length = x3.shape
    return x3.reshape(n, groups, c // groups, length)


def grouped_stats(x3, *, layout: str, groups: int, eps: float, launch):
    """``norm_kernels.grouped_stats``, partitioned: ``(mean, rstd)`` per group (P,)."""
    if layout == "batch":
        return tuple(_bn_stats(x3, eps, launch))
    mean, rstd = _gn_stats(_groups_view(x3, groups), eps, launch)
    return mean.reshape(-1), rstd.reshape(-1)


def grouped_forward(x3, row_weight, row_bias, *, groups: int, eps: float, launch):
    """``norm_kernels.grouped_forward``, partitioned: ``(y, mean, rstd)`` of group norm."""
    n, c, length = x3.shape
    rows = [v.reshape(n, groups, c // groups) for v in (row_weight, row_bias)]
    y, mean, rstd = _gn_forward(_groups_view(x3, groups), *rows, eps, launch)
    return y.reshape(x3.shape), mean.reshape(-1), rstd.reshape(-1)


def grouped_backward(x3, g3, row_weight, mean, rstd, g_mean, g_rstd, *, layout: str, groups: int, launch):
    """``norm_kernels.grouped_backward``, partitioned: ``(dx, sum_g, sum_g_xhat)``."""
    stat = mean.dtype
    cts = (g_mean.astype(stat), g_rstd.astype(stat))
    if layout == "batch":
        return tuple(_bn_backward(x3, g3, row_weight, mean, rstd, *cts, launch))
    n, c, length = x3.shape
    per_group = [v.reshape(n, groups) for v in (mean, rstd, *cts)]
    dx, sum_g, sum_gxhat = _gn_backward(_groups_view(x3, groups), _groups_view(g3, groups),
                                        row_weight.reshape(n, groups, c // groups), *per_group, launch)
    return dx.reshape(x3.shape), sum_g.reshape(row_weight.shape), sum_gxhat.reshape(row_weight.shape)


# ----------------------------------------------------------------------------------------------
# Ragged attention (``nested.kernels``): heads independent, the slot layout (heads, slots, ...)
# sharded over heads; the per-block integer metadata replicated.


def _ragged_forward_impl(first, count, length, local, qs, ks, vs, scale, block, interpret, causal):
    from jaxrules.nested import kernels

    return kernels.forward((first, count, length, local), qs, ks, vs, scale=scale, block=block,
                           interpret=interpret, causal=causal)


def _ragged_backward_impl(first, count, length, local, qs, ks, vs, dos, lse, delta, scale, block, interpret, causal):
    from jaxrules.nested import kernels

    return kernels.backward((first, count, length, local), qs, ks, vs, dos, lse, delta, scale=scale, block=block,
                            interpret=interpret, causal=causal)


def _over_heads(impl, meta, arrays, statics):
    arrays = (*meta, *arrays)
    leading = (False,) * len(meta) + (True,) * (len(arrays) - len(meta))
    return tuple(_leading_axis_op(impl, statics, leading, tuple(a.ndim for a in arrays))(*arrays))


def ragged_attention_forward(meta, qs, ks, vs, *, scale, block, interpret, causal=False):
    """``nested.kernels.forward``, partitioned over heads (and over vmap's examples under vmap):
    ``(out, lse)``."""
    return _over_heads(_ragged_forward_impl, meta, (qs, ks, vs), (scale, block, interpret, causal))


def ragged_attention_backward(meta, qs, ks, vs, dos, lse, delta, *, scale, block, interpret, causal=False):
    """``nested.kernels.backward``, partitioned over heads (and over vmap's examples under vmap):
    ``(dq, dk, dv)``."""
    return _over_heads(_ragged_backward_impl, meta, (qs, ks, vs, dos, lse, delta), (scale, block, interpret, causal))


__all__ = ["dim_axes", "even_axes", "explicit_mesh", "grouped_backward", "grouped_forward", "grouped_stats",
           "layer_norm_backward", "layer_norm_forward", "local_shape", "named", "ragged_attention_backward",
           "ragged_attention_forward", "replicated", "rms_norm_backward", "rms_norm_forward", "shards"]
