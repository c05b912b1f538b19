"""How the fused kernels run under ``jit`` with sharded arrays.

A ``pallas_call`` is opaque to XLA's partitioner: left alone, it gathers a batch-sharded
activation onto every device and runs the whole kernel on each. Each kernel entry point is
therefore a ``jax.experimental.custom_partitioning`` function (``kernel_op``, ``leading_axis_op``;
the kernels' modules build theirs, so this module imports no kernel): a Shardy ``sharding_rule`` for
propagation, and a ``partition`` callback (run when XLA compiles) that picks the shardings the
kernel can honour and lowers the kernel on each device's shard, with the collectives the math
needs:

* layer norm and RMS norm (``norm_kernels``, x (M, N)): rows sharded over any mesh axes, the
  normalized axis N replicated (gathered if it came sharded); the weight and bias replicated
  (gathered if sharded, FSDP style); the backward sums ``dw`` (and ``db``) over the row axes (one
  all-reduce, float32). The launch is the rule's for the shard's rows (``dispatch.relaunch``).
* ragged attention (``nested.kernels``): heads independent, sharded over heads.

A dimension sharded unevenly (its size not a multiple of the shards) is replicated, since
padded rows would enter the sums. In a process with one device the kernels are called directly;
on one device of several, under ``shard_map`` (every mesh axis manual) or with no sharding at
all, JAX lowers the kernel as it is. (``custom_partitioning``'s lowering needs the program's
devices, which ``jit`` provides only when its jaxpr shows such a primitive: the ops' primals bind
``mechanism.primal_on_devices_p`` for it.) Under ``vmap`` (``custom_vmap``) the vmapped kernel
is an op of its own, partitioned along the vmapped axis: the examples are independent, each
device runs its slice. Under an ``Explicit`` mesh the shardings are known when tracing: the same
``partition`` callbacks decide then and the kernels run under ``jax.shard_map``.
"""

from __future__ import annotations

import functools
import inspect
import math

import jax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as PSpec

from jaxrules.mechanism import in_shard_map


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


def kernel_op(impl, n_arrays: int, rule, partition, n_static: int | None = None):
    """``impl(*arrays, *statics)`` as a partitioned op: ``rule(*statics, mesh, value_types,
    result_types)`` its Shardy rule (an einsum-like string, or one with a dict of its keywords),
    ``partition(*statics, mesh, arg_shapes, result_shape) -> (lower_fn, result_shardings,
    arg_shardings)`` its per-device lowering (``n_static``: the number of statics, by default
    read from ``impl``'s signature); under ``vmap`` the vmapped ``impl`` is partitioned along the
    batch (``leading_axis_op``)."""
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
            op = leading_axis_op(impl, tuple(statics), tuple(in_batched), tuple(a.ndim for a in arrays), vmapped=True)
            out = op(*arrays)
            return out, jax.tree_util.tree_map(lambda _: True, out)

        return run(*arrays)

    return call


@functools.lru_cache(maxsize=256)
def leading_axis_op(impl, statics: tuple, leading: tuple, ndims: tuple, vmapped: bool = False):
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

    return kernel_op(fn, len(leading), rule, partition, n_static=0)


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


__all__ = ["dim_axes", "even_axes", "explicit_mesh", "kernel_op", "leading_axis_op", "local_shape", "named",
           "replicated", "shards"]
