"""The rule mechanism: (forward, JVP formula, VJP formula) -> a JAX op.

This is the only module that touches JAX internals (``jax.extend`` and ``jax.interpreters``
carry no compatibility guarantee); a JAX upgrade should touch this file alone.

How an op works (``docs/design.md`` §2):

* The op is a ``jax.custom_jvp`` function. Its JVP rule computes the primal output and the
  *residuals* (``save``: exactly what reverse mode keeps, as a ``custom_vjp`` fwd would), and
  emits the output tangent through one generic *linear* primitive,
  ``jaxrules_rule``, bound on ``(residuals, tangents)``.
* The primitive's impl and lowering are the op's **JVP formula**; its transpose rule is the
  op's **VJP formula**; its own JVP rule is the primitive again on the new tangents plus JAX's
  derivative of the JVP formula with respect to the residuals (the formula is linear in the
  tangents); its batching rule binds the same primitive with a batched rule (the formulas under
  ``jax.vmap``; cotangents of unbatched tangents are summed over the batch, as functorch's
  ``reductify`` does).

Hence ``jax.jvp``/``jacfwd``/``linearize`` run the JVP formula and ``jax.grad``/``vjp``/
``jacrev`` run the VJP formula, and both compose with jit, vmap, hessian, checkpoint and scan.

Formula signatures (``static`` are the op's non-array keyword arguments):

* ``primal(*arrays, **static) -> out``, an array or a tuple of arrays of inexact dtype;
* ``save(out, *arrays, **static) -> residuals``, any pytree of arrays (what reverse mode keeps);
* ``jvp(residuals, *tangents, **static) -> out_tangent``; a tangent is ``None`` where it is
  zero (an input that is not being differentiated);
* ``vjp(residuals, out_cotangent, **static) -> tuple`` with one cotangent (or ``None`` for
  zero) per array argument, in JAX's complex convention (the conjugate of torch's).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

try:  # JAX internals (no compatibility promise): a release that moves them fails here, by name
    from jax._src import api_util, source_info_util
    from jax._src import core as jax_core
    from jax._src import dispatch as jax_dispatch
    from jax._src.interpreters import partial_eval as pe
    from jax._src.interpreters.batching import BatchTracer
    from jax.custom_derivatives import SymbolicZero
    from jax.extend.core import Primitive, Var, jaxprs_in_params, mapped_aval, unmapped_aval
    from jax.interpreters import ad, batching, mlir
except ImportError as err:  # pragma: no cover (only on an incompatible JAX)
    raise ImportError(
        f"jaxrules' mechanism cannot import a JAX internal it needs from jax {jax.__version__} ({err}); "
        "see docs/compatibility.md for the tested JAX versions"
    ) from err

__all__ = ["Op", "concrete_entries", "concrete_value", "define_op", "differentiated_as", "explicit_sharding",
           "formula_spy", "full_spec"]


# The loggers through which JAX reports a failed host callback (jax.debug.callback and
# pure/io callbacks): ``jaxrules.checking`` drops the records of the library's own errors.
CALLBACK_LOGGERS = ("jax._src.debugging", "jax._src.callback")


def cudnn_fused_attention():
    """JAX's cuDNN fused attention module (``jax._src.cudnn.fused_attention_stablehlo``): its
    ``dot_product_attention`` takes the packed (THD) layout and padding masks by sequence length,
    which ``jax.nn.dot_product_attention`` does not expose (``jaxrules.nested.cudnn``)."""
    from jax._src.cudnn import fused_attention_stablehlo

    return fused_attention_stablehlo


def varying_like(tree, *refs):
    """``tree`` (a scan's initial carry, built from constants) marked as varying over the manual
    mesh axes any of ``refs`` varies over: under ``jax.shard_map`` a scan's carry must keep its
    type, and the body's outputs vary with the data (``jax.lax.pcast(..., to="varying")``).
    Unchanged outside ``shard_map``."""
    axes = frozenset().union(*(_varying_axes(r) for r in refs if r is not None))
    return jax.tree.map(lambda x: _vary_over(x, axes), tree)


def varying_struct(shape, dtype, refs=()) -> jax.ShapeDtypeStruct:
    """``jax.ShapeDtypeStruct(shape, dtype)`` for a Pallas kernel's output, varying over the
    manual mesh axes any of ``refs`` (its inputs, at least one) varies over: under a user's
    ``jax.shard_map`` (``check_vma=True``, the default) ``pallas_call`` needs the type; elsewhere
    it is the plain one."""
    refs = [r for r in refs if r is not None]
    params = inspect.signature(jax.ShapeDtypeStruct).parameters
    if not in_shard_map() or "manual_axis_type" not in params:
        return jax.ShapeDtypeStruct(shape, dtype)
    varying = jax.typeof(refs[0]).manual_axis_type.update(varying=frozenset().union(*map(_varying_axes, refs)))
    return jax.ShapeDtypeStruct(shape, dtype, manual_axis_type=varying)


def in_shard_map() -> bool:
    """Whether this trace runs under ``jax.shard_map`` (the context mesh has ``Manual`` axes)."""
    return jax.sharding.AxisType.Manual in getattr(jax.sharding.get_abstract_mesh(), "axis_types", ())


def concrete_value(x):
    """The value of ``x`` as a NumPy array when it is known on the host (an array, or a tracer
    of an eager ``grad``/``jvp`` whose primal is concrete), else ``None`` (under ``jit`` or
    ``vmap``, or not an array)."""
    if isinstance(x, np.ndarray | np.generic):
        return np.asarray(x)
    if not isinstance(x, jax.Array):
        return None
    value = jax_core.to_concrete_value(x)
    return None if value is None else np.asarray(value)


def concrete_entries(x):
    """``concrete_value`` of ``x``, or under an eager ``vmap`` (``x`` a batch tracer over known
    values) the whole batch's values: every example's entries, for checks of each entry
    (an index's range, a probability's interval), never for a value whose shape matters."""
    while isinstance(x, BatchTracer):
        x = x.val
    return concrete_value(x)


def differentiated_as(reference: Callable, n_static: int = 0):
    """Decorator: the decorated function (a fused kernel, say) computes the value, and its
    derivatives are those of ``reference`` (same signature; the last ``n_static`` positional
    arguments are hashable constants). Kernels are then never differentiated: a VJP formula
    that runs a kernel gets its second derivatives from the jnp formula it implements."""

    def wrap(fn):
        n_args = len(inspect.signature(fn).parameters)
        static = tuple(range(n_args - n_static, n_args))
        wrapped = jax.custom_jvp(fn, nondiff_argnums=static)

        @wrapped.defjvp
        def _jvp(*args):
            consts, (primals, tangents) = args[:n_static], args[n_static:]
            out = wrapped(*primals, *consts)
            return out, jax.jvp(lambda *p: reference(*p, *consts), primals, tangents)[1]

        return functools.wraps(fn)(wrapped)

    return wrap


def explicit_sharding(x, *others):
    """The ``NamedSharding`` in the type of ``x`` when its mesh has ``Explicit`` axes (JAX's
    explicit sharding mode: shardings are part of array types); else replicated on the mesh of
    the first of ``others`` that has one (``x`` a constant beside sharded operands); else
    ``None``. Formulas that build an array from scratch or contract a sharded axis pass it as
    ``out_sharding``."""
    own = None if x is None else _explicit_sharding_of_aval(jax.typeof(x))
    if own is not None:
        return own
    for other in others:
        sharding = None if other is None else _explicit_sharding_of_aval(jax.typeof(other))
        if sharding is not None:
            return jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())
    return None


def unsharded_along(x, axes):
    """``x`` with the axes ``axes`` (a tuple) unsharded under an ``Explicit`` mesh (resharded:
    the formula reshapes or pairs entries along them, which an axis split over devices forbids),
    its other axes as they are; else ``x``. The mechanism reshards cotangents and tangents back
    to their primal's sharding."""
    sharding = explicit_sharding(x)
    if sharding is None:
        return x
    spec = full_spec(sharding, jnp.ndim(x))
    if all(spec[a] is None for a in axes):
        return x
    return jax.sharding.reshard(x, jax.sharding.PartitionSpec(*(None if a in axes else e for a, e in enumerate(spec))))


def _explicit_sharding_of_aval(aval):
    sharding = getattr(aval, "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if mesh is None or mesh.empty or jax.sharding.AxisType.Explicit not in tuple(mesh.axis_types):
        return None
    return sharding


def full_spec(sharding, ndim: int) -> tuple:
    """``sharding``'s partition spec as a tuple of ``ndim`` entries (trailing ``None``s added)."""
    spec = tuple(sharding.spec)
    return spec + (None,) * (ndim - len(spec))


def _reshard_like(x, aval):
    """``x`` resharded to the explicit sharding of ``aval`` where the two differ: a cotangent
    keeps its primal's sharding, an output tangent its output's."""
    want = _explicit_sharding_of_aval(aval)
    if want is None or jnp.ndim(x) != len(aval.shape):
        return x
    have = explicit_sharding(x)
    if have is not None and full_spec(have, jnp.ndim(x)) == full_spec(want, jnp.ndim(x)):
        return x
    return jax.sharding.reshard(x, want.spec)


def _batch_mesh_axis(shardings):
    """The mesh axis (or axes) sharding the vmapped axis 0: the first batched argument's that is
    sharded there (``None``: none is)."""
    return next((s.spec[0] for s in shardings if s is not None and s.spec and s.spec[0] is not None), None)


def _align_batch_axes(arrays, dims):
    """Under an ``Explicit`` mesh, ``jax.vmap`` wants every argument mapped along axis 0 to shard
    that axis alike: the batched arguments without the common sharding are resharded to it (the
    first batched argument's that is sharded)."""
    dims = [None if a is None else d for a, d in zip(arrays, dims)]  # None: a zero cotangent left out
    target = _batch_mesh_axis([explicit_sharding(a) for a, d in zip(arrays, dims) if d is not None])
    if target is None:
        return arrays
    used = set(target) if isinstance(target, tuple) else {target}
    out = []
    for a, d in zip(arrays, dims):
        s = explicit_sharding(a) if d is not None else None
        if d is not None and (s is None or not s.spec or s.spec[0] != target):
            rest = [] if s is None else list(s.spec[1:])
            rest = [None if e is not None and set(e if isinstance(e, tuple) else (e,)) & used else e for e in rest]
            rest += [None] * (a.ndim - 1 - len(rest))
            a = jax.sharding.reshard(a, jax.sharding.PartitionSpec(target, *rest))
        out.append(a)
    return out


# ----------------------------------------------------------------------------------------------
# Formula spy: records which formula ran (used by tests and by ``jaxrules.testing``).

_SPIES: list[list[tuple[str, str]]] = []


@contextlib.contextmanager
def formula_spy():
    """Record ``(kind, op_name)`` for every formula evaluation inside the block.

    ``kind`` is ``"jvp"`` when the JVP formula is evaluated (eagerly or lowered for XLA) and
    ``"vjp"`` when the VJP formula is (transposition). Abstract evaluation is not recorded.
    JAX caches compiled functions: spy on a function that has not been traced before, or call
    ``jax.clear_caches()`` first.
    """
    calls: list[tuple[str, str]] = []
    _SPIES.append(calls)
    try:
        yield calls
    finally:
        _SPIES.remove(calls)


def _spy_record(kind: str, name: str) -> None:
    for calls in _SPIES:
        calls.append((kind, name))


# ----------------------------------------------------------------------------------------------
# The linear primitive and the rule it carries.


@dataclasses.dataclass(frozen=True)
class LinearRule:
    """Everything the linear primitive needs; hashable, so jit caches hit.

    ``tangent_mask[i]`` says whether array argument ``i`` has a (nonzero) tangent bound to the
    primitive. ``batch_dims`` is ``None`` for the op's own formulas, or the vmap dimensions of
    ``(residual leaves..., tangents...)`` for a batched rule derived from ``parent``.
    """

    name: str
    jvp: Callable
    vjp: Callable
    static: tuple
    res_tree: Any
    out_tree: Any
    tangent_mask: tuple
    out_avals: tuple  # avals of the output tangents (the op's inexact outputs), per example
    diff_outputs: tuple  # which output leaves are inexact (integer outputs get no tangent)
    parent: LinearRule | None = None
    batch_dims: tuple | None = None
    batch_axis_name: Any = None  # the vmap axis's name, so collectives in the formulas see it
    none_for_zero_cotangents: bool = False  # the VJP formula gets None for a symbolic zero

    def __repr__(self) -> str:  # shown in jaxprs
        batched = "" if self.batch_dims is None else ", batched"
        return f"{self.name}{batched}"

    @property
    def n_res(self) -> int:
        return self.res_tree.num_leaves

    def _tangents_all(self, tangents):
        it = iter(tangents)
        return tuple(next(it) if present else None for present in self.tangent_mask)

    def apply_jvp(self, res_leaves, tangents):
        """Output tangent leaves from residual leaves and the present tangents."""
        if self.batch_dims is not None:
            return self._batched_jvp(res_leaves, tangents)
        res = jax.tree_util.tree_unflatten(self.res_tree, res_leaves)
        out = self.jvp(res, *self._tangents_all(tangents), **dict(self.static))
        leaves = [t for t, d in zip(self.out_tree.flatten_up_to(out), self.diff_outputs) if d]
        return [_fit_tangent(t, a) for t, a in zip(leaves, self.out_avals)]

    def apply_vjp(self, res_leaves, ct_leaves, tangent_avals):
        """Cotangents of the present tangents, cast and shaped like ``tangent_avals``."""
        if self.batch_dims is not None:
            return self._batched_vjp(res_leaves, ct_leaves, tangent_avals)
        res = jax.tree_util.tree_unflatten(self.res_tree, res_leaves)
        it = iter(ct_leaves)
        ct = jax.tree_util.tree_unflatten(self.out_tree, [next(it) if d else None for d in self.diff_outputs])
        in_cts = tuple(self.vjp(res, ct, **dict(self.static)))
        if len(in_cts) != len(self.tangent_mask):
            raise TypeError(
                f"{self.name}: VJP formula returned {len(in_cts)} cotangents for "
                f"{len(self.tangent_mask)} array arguments"
            )
        present = [c for c, m in zip(in_cts, self.tangent_mask) if m]
        return [_fit_cotangent(c, a, self.name) for c, a in zip(present, tangent_avals)]

    def _split_dims(self):
        return self.batch_dims[: self.parent.n_res], self.batch_dims[self.parent.n_res :]

    def _batched_jvp(self, res_leaves, tangents):
        res_dims, t_dims = self._split_dims()
        in_axes = (list(res_dims), list(t_dims))
        vmapped = jax.vmap(self.parent.apply_jvp, in_axes=in_axes, axis_name=self.batch_axis_name)
        args = _align_batch_axes([*res_leaves, *tangents], self.batch_dims)
        return vmapped(args[: len(res_dims)], args[len(res_dims) :])

    def _batched_vjp(self, res_leaves, ct_leaves, tangent_avals):
        res_dims, t_dims = self._split_dims()
        example_avals = [  # an example's aval keeps the manual mesh axes it varies over (shard_map)
            a if d is None else mapped_aval(a.shape[0], 0, a)
            for a, d in zip(tangent_avals, t_dims)
        ]

        def vjp_one(r, c):
            return self.parent.apply_vjp(r, c, example_avals)

        # Every cotangent comes out with the batch at 0; a tangent that was not batched gets
        # the batch summed out (functorch's reductify).
        vmapped = jax.vmap(vjp_one, in_axes=(list(res_dims), 0), axis_name=self.batch_axis_name)
        args = _align_batch_axes([*res_leaves, *ct_leaves], [*res_dims, *[0] * len(ct_leaves)])
        in_cts = vmapped(args[: len(res_dims)], args[len(res_dims) :])
        # The per-example avals above carry no sharding: each cotangent takes its primal's here.
        return [_vary_like(_reshard_like(c if d is not None else c.sum(0), a), a)
                for c, d, a in zip(in_cts, t_dims, tangent_avals)]


rule_p = Primitive("jaxrules_rule")
rule_p.multiple_results = True


def _bind(res_leaves, tangents, rule: LinearRule):
    return rule_p.bind(*res_leaves, *tangents, rule=rule)


def _split(args, rule):
    return list(args[: rule.n_res]), list(args[rule.n_res :])


def _impl(*args, rule):
    """Eager evaluation: the formula as one compiled program (``_compiled``)."""
    res, tangents = _split(args, rule)
    _spy_record("jvp", rule.name)
    return _compiled(rule.apply_jvp)(res, tangents)


def _lowering(*args, rule):
    """Inside a program: the formula traced in place (the eager path's ``jax.jit`` has nothing to
    save there)."""
    res, tangents = _split(args, rule)
    _spy_record("jvp", rule.name)
    return rule.apply_jvp(res, tangents)


def _abstract_eval(*avals, rule):
    """The output tangents are shaped like the op's outputs (plus the batch, if batched); no
    formula runs."""
    if rule.batch_dims is None:
        return list(rule.out_avals)
    size = next(a.shape[0] for a, d in zip(avals, rule.batch_dims) if d is not None)
    example = [a if d is None else mapped_aval(size, 0, a) for a, d in zip(avals, rule.batch_dims)]
    batched = [a for a, d in zip(avals, rule.batch_dims) if d is not None]
    mesh_axis = _batch_mesh_axis([_explicit_sharding_of_aval(a) for a in batched])
    return [unmapped_aval(size, 0, a, mesh_axis) for a in _abstract_eval(*example, rule=rule.parent)]


def _transpose(cts, *args, rule):
    res, tangents = _split(args, rule)
    if any(ad.is_undefined_primal(r) for r in res):
        raise TypeError(f"{rule.name}: the rule is linear in its tangents only")
    if all(type(c) is ad.Zero for c in cts):  # symbolic zero cotangents: no formula runs
        return [None] * len(args)
    out_avals = _abstract_eval(*(_aval(a) for a in args), rule=rule)
    cts = [
        (None if rule.none_for_zero_cotangents else _zeros(a)) if type(c) is ad.Zero else c
        for c, a in zip(cts, out_avals)
    ]
    _spy_record("vjp", rule.name)
    tangent_avals = tuple(_aval(t) for t in tangents)
    if _concrete(res, cts):  # an eager pullback: the formula as one compiled program
        in_cts = _compiled(rule.apply_vjp, static_argnums=2)(res, cts, tangent_avals)
    else:
        in_cts = rule.apply_vjp(res, cts, tangent_avals)
    result = [ct if ad.is_undefined_primal(t) else None for ct, t in zip(in_cts, tangents)]
    return [None] * len(res) + result


def _concrete(*trees) -> bool:
    """Whether every array in ``trees`` is a value (an eager call), not a tracer."""
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(trees))


@functools.lru_cache(maxsize=4096)
def _compiled(fn: Callable, static_argnums=()) -> Callable:
    """``jax.jit(fn)``, kept: evaluated eagerly, an op's primal or formula compiles one program per
    shape (as ``jax.numpy``'s functions do) instead of one per primitive it calls."""
    return jax.jit(fn, static_argnums=static_argnums)


def _aval(x):
    return x.aval if ad.is_undefined_primal(x) else jax.typeof(x)


def _zeros(aval):
    return _vary_like(jnp.zeros(aval.shape, aval.dtype, out_sharding=_explicit_sharding_of_aval(aval)), aval)


def _fit_tangent(t, aval):
    """Zero for ``None`` (a formula's zero output tangent: no term contributed); else broadcast
    and cast to the output's aval."""
    if t is None:
        return _zeros(aval)
    return _vary_like(_reshard_like(jnp.broadcast_to(t, aval.shape).astype(aval.dtype), aval), aval)


def _fit_cotangent(ct, aval, name):
    """Zero for ``None``; real part for a real primal (torch's ``handle_r_to_c``); summed over
    broadcast dimensions (torch's ``sum_to``) when the argument was broadcast."""
    if ct is None:
        return _zeros(aval)
    ct = jnp.asarray(ct)
    if jnp.iscomplexobj(ct) and not jnp.issubdtype(aval.dtype, jnp.complexfloating):
        ct = ct.real
    if ct.shape != aval.shape:
        ct = _sum_to_shape(ct, aval.shape, name)
    return _vary_like(_reshard_like(_sum_over_varying_axes(ct.astype(aval.dtype), aval), aval), aval)


def _sum_over_varying_axes(ct, aval):
    """Under ``shard_map``: a cotangent that varies over manual mesh axes along which its argument
    is replicated (a weight used with a sharded input: JAX inserts the ``pvary``) is summed over
    them (``psum``, the transpose of ``pvary``), as JAX's own autodiff does: in the argument's
    dtype (the caller casts first), so that a bfloat16 weight's gradient is summed with the other
    bfloat16 gradients in one all-reduce, as plain JAX's, not alone in the float32 of a formula's
    statistics."""
    extra = tuple(sorted(_varying_axes(jax.typeof(ct)) - _varying_axes(aval)))
    return jax.lax.psum(ct, extra) if extra else ct


def _varying_axes(x) -> frozenset:
    """The manual mesh axes an array or aval varies over under ``shard_map`` (``vma`` in some JAX
    versions, ``manual_axis_type.varying`` in jax 0.10); none outside it."""
    aval = x if isinstance(x, jax.core.ShapedArray) else jax.typeof(x)
    if hasattr(aval, "vma"):
        return frozenset(aval.vma)
    manual = getattr(aval, "manual_axis_type", None)
    return frozenset(getattr(manual, "varying", ()))


def _vary_like(x, aval):
    """``x`` marked as varying over the manual mesh axes ``aval`` varies over (under
    ``shard_map`` a tangent or cotangent has its primal's type; a formula's output that depends
    on no varying value, a zero or a constant, does not vary by itself)."""
    return _vary_over(x, _varying_axes(aval))


def _vary_over(x, axes: frozenset):
    """``x`` pcast to varying over those of ``axes`` it does not vary over already."""
    missing = tuple(sorted(axes - _varying_axes(x)))
    return jax.lax.pcast(x, missing, to="varying") if missing else x


def _sum_to_shape(ct, shape, name):
    lead = ct.ndim - len(shape)
    if lead < 0 or jnp.broadcast_shapes(ct.shape, shape) != ct.shape:
        raise ValueError(f"{name}: VJP formula gave shape {ct.shape}, expected {shape}")
    summed = tuple(range(lead)) + tuple(
        lead + i for i, (n, m) in enumerate(zip(shape, ct.shape[lead:])) if n == 1 and m != 1
    )
    return jnp.sum(ct, axis=summed).reshape(shape)


def _prim_jvp(primals, tangents, *, rule):
    res, ts = _split(primals, rule)
    dres, dts = _split(tangents, rule)
    out = _bind(res, ts, rule)
    terms = []
    if any(type(d) is not ad.Zero for d in dts):
        terms.append(_bind(res, [ad.instantiate_zeros(d) for d in dts], rule))
    if any(type(d) is not ad.Zero for d in dres):
        dres = [ad.instantiate_zeros(d) for d in dres]
        _, d_out = jax.jvp(lambda r: rule.apply_jvp(r, ts), (res,), (dres,))
        terms.append(d_out)
    if not terms:
        return out, [ad.Zero.from_primal_value(o) for o in out]
    return out, [functools.reduce(jnp.add, parts) for parts in zip(*terms)]


def _batch(axis_data, args, dims, *, rule):
    if all(d is None for d in dims):
        return _bind(*_split(args, rule), rule), [None] * len(rule.out_avals)
    args = [jnp.moveaxis(a, d, 0) if d is not None else a for a, d in zip(args, dims)]
    dims = tuple(None if d is None else 0 for d in dims)
    batched = _batched_rule(rule, dims, axis_data.name)
    return _bind(*_split(args, rule), batched), [0] * len(rule.out_avals)


@functools.lru_cache(maxsize=4096)
def _batched_rule(rule: LinearRule, dims: tuple, axis_name) -> LinearRule:
    return dataclasses.replace(rule, parent=rule, batch_dims=dims, batch_axis_name=axis_name)


rule_p.def_impl(_impl)
rule_p.def_abstract_eval(_abstract_eval)
mlir.register_lowering(rule_p, mlir.lower_fun(_lowering, multiple_results=True))
ad.primitive_jvps[rule_p] = _prim_jvp
ad.primitive_transposes[rule_p] = _transpose
batching.fancy_primitive_batchers[rule_p] = _batch


# ----------------------------------------------------------------------------------------------
# Ops.


def _freeze(value):
    """Make a static argument hashable (lists become tuples)."""
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.ndarray):
        return tuple(value.tolist())
    return value


def _save_arguments(out, *arrays, **static):
    """Default residuals: the array argument (one) or the tuple of them (several)."""
    return arrays[0] if len(arrays) == 1 else arrays


@dataclasses.dataclass(frozen=True, eq=False)
class Op:
    """An op with hand-written derivative formulas. Call it with arrays and static keywords.

    ``primal(*arrays, **static)`` computes the output; ``save(out, *arrays, **static)`` picks
    the residuals (default: the array argument, or the tuple of them), as torch's
    ``derivatives.yaml`` names what a formula reads (``self``, ``result``, ...). ``out`` handed
    to ``save`` is the op's own output, so a second derivative through a saved output goes
    through this op's rule again.

    ``batch`` (optional) is the primal's vmap rule, as functorch's batch rules are:
    ``batch(args, dims, *, vmap_axis_name, **static) -> (out, out_dims)`` with ``dims[i]`` the
    batch axis of ``args[i]`` (``None``: not batched) and ``vmap_axis_name`` the name of the
    axis being vmapped (for rules whose collectives may name it). Without it the primal is batched by ``jax.vmap``. The
    formulas are always batched by ``jax.vmap`` (see ``LinearRule``).
    """

    name: str
    primal: Callable
    jvp: Callable
    vjp: Callable
    save: Callable = _save_arguments
    batch: Callable | None = None
    none_for_zero_cotangents: bool = False

    @functools.cached_property
    def save_wants_mask(self) -> bool:
        """Whether ``save`` takes ``needs_input_grad`` (which arrays carry a tangent)."""
        return "needs_input_grad" in inspect.signature(self.save).parameters

    def __call__(self, *arrays, **static):
        static_items = tuple(sorted((k, _freeze(v)) for k, v in static.items()))
        arrays = tuple(_batched_over_a_jax_array(a) for a in arrays)
        if custom_jvp3_enabled():
            arrays = tuple(_resharded_to_itself(a) for a in arrays)
        return _custom_jvp_function(self, static_items)(*arrays)

    def __repr__(self) -> str:
        return f"<jaxrules op {self.name}>"


def define_op(
    name: str,
    primal: Callable,
    jvp: Callable,
    vjp: Callable,
    save: Callable | None = None,
    batch: Callable | None = None,
    none_for_zero_cotangents: bool = False,
) -> Op:
    """Turn a primal, a JVP formula and a VJP formula (and what to save, and optionally the
    primal's vmap rule) into an op. ``none_for_zero_cotangents``: the VJP formula of an op with
    several outputs receives ``None`` for an output whose cotangent is a symbolic zero (an unused
    output), instead of an array of zeros, so it can leave that output's terms out."""
    return Op(name, primal, jvp, vjp, save or _save_arguments, batch, none_for_zero_cotangents)


# The primal of an op with its own vmap rule is bound through one of these primitives, whose
# batching rule is the op's. They are never differentiated: the op's custom_jvp rule stands in
# front of them. The second is for a primal that lowers a primitive which needs the program's
# devices (``custom_partitioning``: the fused kernels on several devices). JAX finds those by
# walking the jaxpr, where a primal hidden in ``primal_p`` is invisible, so ``jit`` would lower
# it with no device assignment and ``custom_partitioning`` fails (docs/hijax.md).
primal_p = Primitive("jaxrules_primal")
primal_on_devices_p = Primitive("jaxrules_primal_on_devices")


def _primal_call(op: Op, static_items, out_tree, arrays):
    return out_tree.flatten_up_to(op.primal(*arrays, **dict(static_items)))


def _primal_impl(*arrays, op, static_items, out_tree):
    return _compiled_primal_call(op, static_items, out_tree)(arrays)


def _primal_lowering(*arrays, op, static_items, out_tree):
    return _primal_call(op, static_items, out_tree, arrays)  # inlined, as ``_lowering``


@functools.lru_cache(maxsize=4096)
def _compiled_primal_call(op: Op, static_items, out_tree) -> Callable:
    """``_primal_call`` compiled (an eager primal bound through ``primal_p``; see ``_compiled``)."""
    return jax.jit(lambda arrays: _primal_call(op, static_items, out_tree, arrays))


def _primal_abstract_eval(*avals, op, static_items, out_tree):
    # Traced with the avals themselves, so types beyond shape and dtype (shard_map's varying
    # manual axes) propagate as they would through the primal.
    fun = lambda *a: _primal_call(op, static_items, out_tree, a)  # noqa: E731
    return pe.abstract_eval_fun(fun, *avals, debug_info=api_util.debug_info(op.name, fun, avals, {}))


def _primal_batch(prim, axis_data, args, dims, *, op, static_items, out_tree):
    if all(d is None for d in dims):
        return prim.bind(*args, op=op, static_items=static_items, out_tree=out_tree), [None] * out_tree.num_leaves
    out, out_dims = op.batch(list(args), tuple(dims), vmap_axis_name=axis_data.name, **dict(static_items))
    return out_tree.flatten_up_to(out), out_tree.flatten_up_to(out_dims)


def _primal_jvp(primals, tangents, *, op, **_):
    raise TypeError(f"{op.name}: the primal was differentiated directly; call the op, not its primal")


for _prim in (primal_p, primal_on_devices_p):
    _prim.multiple_results = True
    _prim.def_impl(_primal_impl)
    _prim.def_abstract_eval(_primal_abstract_eval)
    mlir.register_lowering(_prim, mlir.lower_fun(_primal_lowering, multiple_results=True))
    batching.fancy_primitive_batchers[_prim] = functools.partial(_primal_batch, _prim)
    ad.primitive_jvps[_prim] = _primal_jvp
jax_dispatch.prim_requires_devices_during_lowering.add(primal_on_devices_p)


def _primal_primitive(op: Op, static: dict, arrays) -> tuple[Primitive, Any]:
    """The primitive binding ``op``'s primal on ``arrays``, and the primal's output tree: the
    primal traced once to see whether it lowers a primitive that needs the devices."""
    # under an Explicit mesh the probe sees the arrays' shardings, as the primal's real trace does
    shapes = [jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a), sharding=_explicit_sharding_of_aval(jax.typeof(a)))
              for a in arrays]
    jaxpr, out_shape = jax.make_jaxpr(lambda *a: op.primal(*a, **static), return_shape=True)(*shapes)
    prim = primal_on_devices_p if jax_dispatch.jaxpr_has_prim_requiring_devices(jaxpr.jaxpr) else primal_p
    return prim, jax.tree_util.tree_structure(out_shape)


@functools.lru_cache(maxsize=4096)
def _custom_jvp_function(op: Op, static_items: tuple):
    static = dict(static_items)

    def primal(*arrays):
        if op.batch is None:
            return op.primal(*arrays, **static)
        prim, out_tree = _primal_primitive(op, static, arrays)
        outs = prim.bind(*arrays, op=op, static_items=static_items, out_tree=out_tree)
        return jax.tree_util.tree_unflatten(out_tree, outs)

    def jvp_rule(primals, tangents):
        # Calling ``fn`` (not ``primal``) keeps the output differentiable by this rule at the
        # next order up: under nested transforms it is bound at the outer trace.
        out = fn(*primals)
        # Zero-size arguments and outputs are handled here, for every op: a zero-size argument
        # has no tangent (the map from an empty space is zero), and when every differentiable
        # output is zero-size there is nothing to compute; no residual or formula runs then, so
        # formulas never see an empty reduction (and the VJP follows by transposition).
        mask = tuple(not isinstance(t, SymbolicZero) and _size(p) > 0 for p, t in zip(primals, tangents))
        out_leaves, out_tree = jax.tree_util.tree_flatten(out)
        diff = tuple(bool(jnp.issubdtype(jnp.result_type(o), jnp.inexact)) for o in out_leaves)
        if not any(mask) or all(_size(o) == 0 for o, d in zip(out_leaves, diff) if d):
            return out, jax.tree_util.tree_map(_zero_tangent, out)
        extra = {"needs_input_grad": mask} if op.save_wants_mask else {}
        res = op.save(out, *primals, **static, **extra)
        res_leaves, res_tree = jax.tree_util.tree_flatten(res)
        out_avals = tuple(jax.typeof(o) for o, d in zip(out_leaves, diff) if d)
        rule = _linear_rule(op, static_items, res_tree, out_tree, mask, out_avals, diff)
        present = [t for t, m in zip(tangents, mask) if m]
        it = iter(_bind(res_leaves, present, rule))
        out_tangents = [next(it) if d else _zero_tangent(o) for o, d in zip(out_leaves, diff)]
        if custom_jvp3_enabled():
            # JAX infers the application's batching from the primal alone: an output the primal
            # computes without any input that has a tangent is unbatched, and its tangent is
            # zero; the formula's (batched with the tangents under vmap) is replaced by that zero.
            moved = _outputs_moved_by(primal, primals, mask)
            out_tangents = [t if m else _zero_tangent(o) for t, o, m in zip(out_tangents, out_leaves, moved)]
        return out, jax.tree_util.tree_unflatten(out_tree, out_tangents)

    def primal_or_compiled(*arrays):  # eager: one compiled program per shape
        # Under ``jax_custom_jvp3`` JAX traces the function before it runs (``arrays`` are always
        # tracers here), and an eager call then runs that trace primitive by primitive: the
        # primal is kept as one compiled program (an inner ``jit``) there.
        return primal(*arrays) if not (_concrete(arrays) or custom_jvp3_enabled()) else _compiled(primal)(*arrays)

    fn = jax.custom_jvp(primal_or_compiled)
    fn.defjvp(jvp_rule, symbolic_zeros=True)
    functools.update_wrapper(fn, primal)
    fn.__name__ = op.name
    return fn


def _outputs_moved_by(primal: Callable, primals, mask) -> tuple[bool, ...]:
    """For each output leaf of ``primal(*primals)``, whether its value depends, in the traced
    program, on an argument leaf ``i`` with ``mask[i]`` (a tangent; ``mask`` None: any leaf):
    the inputs live after removing the program's code that does not reach that output. A primal
    bound as one primitive (``primal_p``) depends on all of its arguments."""
    closed = jax.make_jaxpr(primal)(*primals)
    mask = list(mask) if mask is not None else [True] * len(closed.jaxpr.invars)
    moved = []
    for k in range(len(closed.jaxpr.outvars)):
        used = [j == k for j in range(len(closed.jaxpr.outvars))]
        _, used_inputs = pe.dce_jaxpr(closed.jaxpr, used, instantiate=False)
        moved.append(any(u and m for u, m in zip(used_inputs, mask)))
    return tuple(moved)


def ignores_its_arguments(fn: Callable, *args) -> bool:
    """Whether every output leaf of ``fn(*args)`` is computed, in the traced program, without any
    of the argument leaves (a constant of them: its derivative is structurally zero)."""
    return not any(_outputs_moved_by(fn, args, None))


def _batched_over_a_jax_array(x):
    """``x``, or, for a ``jax.vmap`` tracer that holds a NumPy array (``vmap`` of a NumPy
    argument), the same tracer holding it as a ``jax.Array`` (each level of nested vmaps). JAX's
    batching of a ``custom_jvp`` call hands the held values to the trace below unchanged, and a
    ``jit`` trace there refuses a NumPy constant ("non-canonical constant of type ndarray"): JAX's
    own ``custom_jvp`` fails so under ``jit(vmap(f))(..., numpy_array)`` (jax 0.10.2 to 0.12.0.1),
    where every other primitive canonicalizes its operands first."""
    if not isinstance(x, BatchTracer):
        return x
    val = _batched_over_a_jax_array(x.val)
    if isinstance(val, (np.ndarray, np.generic)):
        with jax_core.set_current_trace(x._trace.parent_trace):
            val = jnp.asarray(val)
    return x if val is x.val else BatchTracer(x._trace, val, x.batch_dim, x.source_info)


def _resharded_to_itself(x):
    """``x`` resharded to its own explicit sharding (the same array), so that its tangent, by
    ``reshard``'s JVP, has the primal's sharding. Under ``jax_custom_jvp3`` JAX batches an op's
    JVP by vmapping it over the primals and the tangents together, and ``vmap`` refuses a batch
    axis sharded over a mesh axis in one and not in the other (a batch-sharded primal beside a
    replicated tangent: a constant direction). Anything else (no ``Explicit`` mesh, not an
    array) is returned as it is."""
    if not isinstance(x, jax.Array):
        return x
    sharding = _explicit_sharding_of_aval(jax.typeof(x))
    return x if sharding is None else jax.sharding.reshard(x, sharding.spec)


def custom_jvp3_enabled() -> bool:
    """Whether ``jax.custom_jvp`` runs on JAX's hijax implementation (the ``jax_custom_jvp3``
    flag, jax 0.11 and later, read at each call; jax 0.10.2 has no such flag)."""
    return bool(getattr(jax.config, "jax_custom_jvp3", False))


def _size(x) -> int:
    return math.prod(jnp.shape(x))


def _zero_tangent(x):
    if jnp.issubdtype(jnp.result_type(x), jnp.inexact):
        return _vary_like(jnp.zeros_like(x), x)
    return _vary_like(np.zeros(jnp.shape(x), jax.dtypes.float0), x)


@functools.lru_cache(maxsize=4096)
def _linear_rule(op: Op, static_items, res_tree, out_tree, mask, out_avals, diff) -> LinearRule:
    return LinearRule(op.name, op.jvp, op.vjp, static_items, res_tree, out_tree, mask, out_avals, diff,
                      none_for_zero_cotangents=op.none_for_zero_cotangents)


# ----------------------------------------------------------------------------------------------
# Jaxpr inspection (for ``jaxrules.differentiate``), kept here with the other JAX internals.


def describe_equation(eqn) -> str:
    """``"<primitive> from <file>:<line> (<function>)"`` for a jaxpr equation."""
    return f"{eqn.primitive.name} from {source_info_util.summarize(eqn.source_info)}"


def is_jaxpr_var(x) -> bool:
    """Whether ``x`` is a jaxpr variable (not a literal)."""
    return isinstance(x, Var)


def has_jvp_rule(primitive) -> bool:
    """Whether JAX can differentiate ``primitive`` in forward mode (so in reverse mode too)."""
    return primitive in ad.primitive_jvps


def sub_jaxprs(eqn) -> list:
    """The jaxprs inside an equation's parameters (jit, scan, cond, custom_jvp_call, ...)."""
    return list(jaxprs_in_params(eqn.params))
