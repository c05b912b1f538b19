"""Prototype: jaxrules' ``define_op`` contract on ``jax.experimental.hijax``.

NOT imported by the package; ``tests/test_hijax_prototype.py`` drives it and ``docs/hijax.md``
records what it showed. It answers one question: can an op with a hand-written JVP formula
and a hand-written VJP formula be one public ``VJPHiPrimitive`` instead of the private
``custom_jvp`` + linear ``Primitive`` of ``jaxrules/mechanism.py``?

``hijax_op(name, primal, jvp, vjp, save, batch)`` takes the same formulas as ``define_op``
(same signatures, ``None`` for a zero tangent or cotangent, ``needs_input_grad`` for ``save``)
and returns a callable. Each call builds a ``RuleOp`` (a ``VJPHiPrimitive`` at the call's
input types) and binds it. The hijax hooks map onto the formulas as:

* ``expand`` (eager, ``jit`` lowering): the primal;
* ``jvp`` (``jax.jvp``, ``jacfwd``) and ``lin``/``linearized`` (``jax.linearize``): the primal,
  ``save``, then the output tangent through ``_LinearRuleOp``, the mechanism's linear
  ``jaxrules_rule`` as a ``VJPHiPrimitive``: ``expand`` = JVP formula, ``transpose`` = VJP
  formula. (``linear=False`` computes the JVP formula inline instead, hijax's direct mapping:
  ``jax.checkpoint`` then transposes the JVP formula and the VJP formula never runs.)
* ``vjp_fwd`` / ``vjp_bwd_retval`` (``grad``, ``vjp``, ``jacrev``): ``save``, then the VJP
  formula; hijax's symbolic zeros (``hijax.Zero``) reach the formulas as ``None``;
* ``batch`` (vmap): ``RuleOp`` again at the batched types (``_BatchedSpec``: the op's own
  ``batch`` rule for the primal if it has one, else ``jax.vmap``; the formulas under
  ``jax.vmap``). hijax's default (``VmapOf``) is not used: it fails under nested vmap.

``formula_spy`` records like ``jaxrules.mechanism.formula_spy``: ``"jvp"`` when the JVP formula is
expanded (evaluated or lowered), ``"vjp"`` when the VJP formula runs (transposition, or
``vjp_bwd_retval``).

``Ragged`` / ``RaggedTy`` is the NestedTensor question in miniature: a ``HiType`` whose
``offsets`` are an int32 array that is part of the *type's value* but has no tangent (the
tangent type carries only ``values``), instead of a float pytree leaf.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.experimental import hijax

__all__ = ["Ragged", "RaggedTy", "RuleOp", "formula_spy", "hijax_op", "make_ragged", "ragged_parts", "ragged_scale"]

_SPIES: list[list[tuple[str, str]]] = []


@contextlib.contextmanager
def formula_spy():
    """Record ``(kind, name)`` for each formula evaluation (``"jvp"``/``"vjp"``) in the block."""
    calls: list[tuple[str, str]] = []
    _SPIES.append(calls)
    try:
        yield calls
    finally:
        _SPIES.remove(calls)


def _spy_record(kind: str, name: str) -> None:
    for calls in _SPIES:
        calls.append((kind, name))


def _zero(t) -> bool:
    return isinstance(t, hijax.Zero)


def _none_for_zero(ts) -> tuple:
    return tuple(None if _zero(t) else t for t in ts)


def _fit(t, aval):
    """A formula's ``None`` (no term) as zeros; otherwise cast and broadcast to ``aval``."""
    if t is None:
        return jnp.zeros(aval.shape, aval.dtype)
    return jnp.broadcast_to(jnp.asarray(t), aval.shape).astype(aval.dtype)


def _fit_tangent(t, aval):
    """An output tangent: float0 symbolic zero for an integer output, else ``_fit``."""
    if not jnp.issubdtype(aval.dtype, jnp.inexact):
        return hijax.Zero(aval.to_tangent_aval())
    return _fit(t, aval)


def _fit_cotangent(ct, aval):
    """A cotangent summed over the axes its argument was broadcast along (torch's ``sum_to``)."""
    if ct is None:
        return jnp.zeros(aval.shape, aval.dtype)
    ct = jnp.asarray(ct)
    lead = ct.ndim - len(aval.shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, (n, m) in enumerate(zip(aval.shape, ct.shape[lead:])) if n == 1 and m != 1)
    ct = jnp.sum(ct, axis=axes).reshape(aval.shape) if axes else ct
    return _psum_varying(ct.astype(aval.dtype), aval)


def _varying_axes(aval) -> frozenset:
    if hasattr(aval, "vma"):
        return frozenset(aval.vma)
    return frozenset(getattr(getattr(aval, "manual_axis_type", None), "varying", ()))


def _psum_varying(ct, aval):
    """Under ``shard_map``, a cotangent varying over manual axes along which its argument is
    replicated is summed over them (the transpose of the implicit ``pvary``): hijax checks the
    cotangent's type against the argument's and raises otherwise."""
    extra = tuple(sorted(_varying_axes(jax.typeof(ct)) - _varying_axes(aval)))
    return jax.lax.psum(ct, extra) if extra else ct


class RuleOp(hijax.VJPHiPrimitive):
    """One application of an op at fixed input avals; ``spec`` holds the op's formulas."""

    def __init__(self, spec: _Spec, in_avals: tuple, static: tuple):
        self.in_avals = in_avals
        kw = dict(static)
        # Traced at the avals themselves, so types beyond shape and dtype (shard_map's varying
        # manual axes) come out as the primal makes them.
        self.out_aval = jax.jit(lambda *a: spec.primal(*a, **kw)).trace(*in_avals).out_avals
        self.params = {"spec": spec, "static": static}
        super().__init__()

    # The op's formulas and static keywords (``self.spec``, ``self.static`` come from params).
    @property
    def _kw(self) -> dict:
        return dict(self.static)

    def expand(self, *args):
        return self.spec.primal(*args, **self._kw)

    def _out_tangent(self, res, tangents):
        """The output tangent: through ``_LinearRuleOp`` (``spec.linear``) or the JVP formula inline."""
        if self.spec.linear:
            res_leaves, res_tree = jax.tree.flatten(res)
            mask = tuple(not _zero(t) for t in tangents)
            present = tuple(t for t in tangents if not _zero(t))
            lin = _LinearRuleOp(self.spec, self.static, res_tree, mask, self.out_aval,
                                tuple(map(jax.typeof, res_leaves)), tuple(map(jax.typeof, present)))
            it = iter(lin(tuple(res_leaves), present))
            return jax.tree.map(lambda a: next(it) if _inexact(a) else hijax.Zero(a.to_tangent_aval()),
                                self.out_aval)
        _spy_record("jvp", self.spec.name)
        return _tangent_tree(self.spec.jvp(res, *_none_for_zero(tangents), **self._kw), self.out_aval)

    # forward mode: jax.jvp, jacfwd
    def jvp(self, primals, tangents):
        out = self(*primals)
        if all(_zero(t) for t in tangents):
            return out, jax.tree.map(lambda a: hijax.Zero(a.to_tangent_aval()), self.out_aval)
        res = self._save(out, primals, tuple(not _zero(t) for t in tangents))
        return out, self._out_tangent(res, tangents)

    # jax.linearize
    def lin(self, nzs_in, *primals):
        out = self(*primals)
        return out, self._save(out, primals, nzs_in)

    def linearized(self, res, *tangents):
        return self._out_tangent(res, tangents)

    # reverse mode: grad, vjp, jacrev
    def vjp_fwd(self, nzs_in, *primals):
        out = self(*primals)
        return out, self._save(out, primals, nzs_in)

    def _save(self, out, primals, mask):
        """``save``, given ``needs_input_grad`` when it asks (hijax hands ``lin``/``vjp_fwd`` the
        mask of inputs with a nonzero tangent: ``nzs_in``)."""
        extra = {"needs_input_grad": tuple(mask)} if self.spec.save_wants_mask else {}
        return self.spec.save(out, *primals, **self._kw, **extra)

    def vjp_bwd_retval(self, res, ct):
        _spy_record("vjp", self.spec.name)
        if isinstance(ct, tuple):
            ct = tuple(None if _zero(c) else c for c in ct)
        cts = self.spec.vjp(res, ct, **self._kw)
        return tuple(_fit_cotangent(c, a) for c, a in zip(cts, self.in_avals))

    # vmap. hijax's default (``VJPHiPrimitive.batch`` -> ``VmapOf``) crashes under nested vmap
    # when an inner application is unbatched (see docs/hijax.md), so every batched application
    # is this class again, with formulas vmapped once more (``_BatchedSpec``).
    def batch(self, axis_data, args, dims):
        if all(d is None for d in dims):  # hijax calls batchers for unbatched arguments too
            return self(*args), jax.tree.map(lambda _: None, self.out_aval)
        args = tuple(a if d is None else jnp.moveaxis(a, d, 0) for a, d in zip(args, dims))
        dims = tuple(None if d is None else 0 for d in dims)
        spec = _BatchedSpec(self.spec, dims, axis_data.name, axis_data.size)
        out = RuleOp(spec, tuple(jax.typeof(a) for a in args), self.static)(*args)
        return out, jax.tree.map(lambda _: 0, out)


def _inexact(aval) -> bool:
    return jnp.issubdtype(aval.dtype, jnp.inexact)


def _tangent_tree(out, out_aval):
    """A JVP formula's output (``None`` for no term) as tangents shaped like ``out_aval``."""
    out_tree = jax.tree.structure(out_aval)
    leaves = out_tree.flatten_up_to(out)
    return out_tree.unflatten([_fit_tangent(t, a) for t, a in zip(leaves, jax.tree.leaves(out_aval))])


class _LinearRuleOp(hijax.VJPHiPrimitive):
    """``(residual leaves, present tangents) -> inexact output tangents``, linear in the
    tangents: ``jaxrules_rule`` of ``mechanism.py`` as a ``VJPHiPrimitive``.

    ``expand`` is the JVP formula and ``transpose`` the VJP formula, so reverse mode reached by
    transposing forward mode (``jax.checkpoint``, ``jax.linear_transpose`` of ``linearize``)
    still runs the VJP formula; its own derivative is itself on the new tangents plus JAX's
    derivative of the JVP formula with respect to the residuals; under vmap it is itself with
    ``parent``'s formulas vmapped (``dims``: batch axes of residual leaves and tangents).
    """

    def __init__(self, spec, static, res_tree, mask, op_out_aval, res_avals, t_avals, parent=None, dims=None):
        self.in_avals = (res_avals, t_avals)
        self.params = {"spec": spec, "static": static, "res_tree": res_tree, "mask": mask,
                       "op_out_aval": op_out_aval, "parent": parent, "dims": dims}
        if parent is None:  # the op's output types (no formula traced for the types)
            self.out_aval = tuple(a.to_tangent_aval() for a in jax.tree.leaves(op_out_aval) if _inexact(a))
        else:
            self.out_aval = jax.jit(self._formula).trace(res_avals, t_avals).out_avals
        super().__init__()

    def _formula(self, res_leaves, ts):
        if self.params["parent"] is not None:
            rdims, tdims = self.params["dims"]
            return jax.vmap(self.params["parent"]._formula, in_axes=(rdims, tdims))(res_leaves, ts)
        spec, kw = self.params["spec"], dict(self.params["static"])
        it = iter(ts)
        full = [next(it) if m else None for m in self.params["mask"]]
        out = spec.jvp(self.params["res_tree"].unflatten(res_leaves), *full, **kw)
        out_aval = self.params["op_out_aval"]
        out_tree = jax.tree.structure(out_aval)
        pairs = zip(out_tree.flatten_up_to(out), jax.tree.leaves(out_aval))
        return tuple(_fit(t, a) for t, a in pairs if _inexact(a))

    def _vjp_present(self, res_leaves, ct):
        """Cotangents of the present tangents (``ct``: one per inexact output, ``None`` for zero)."""
        if self.params["parent"] is not None:
            rdims, tdims = self.params["dims"]
            cts = jax.vmap(self.params["parent"]._vjp_present, in_axes=(rdims, 0))(res_leaves, ct)
            return tuple(c if d is not None else c.sum(0) for c, d in zip(cts, tdims))
        spec, kw = self.params["spec"], dict(self.params["static"])
        out_aval = self.params["op_out_aval"]
        it = iter(ct)
        full = jax.tree.structure(out_aval).unflatten(
            [next(it) if _inexact(a) else None for a in jax.tree.leaves(out_aval)])
        cts = spec.vjp(self.params["res_tree"].unflatten(res_leaves), full, **kw)
        present = [c for c, m in zip(cts, self.params["mask"]) if m]
        return tuple(_fit_cotangent(c, a) for c, a in zip(present, self._example_t_avals()))

    def _example_t_avals(self):
        return self.in_avals[1]

    def expand(self, res_leaves, ts):
        _spy_record("jvp", self.params["spec"].name)
        return self._formula(res_leaves, ts)

    def transpose(self, ct, res_leaves, t_accums):
        if any(_is_accum(r) for r in res_leaves):
            raise TypeError(f"{self.params['spec'].name}: the rule is linear in its tangents only")
        if all(_zero(c) for c in ct):
            return
        _spy_record("vjp", self.params["spec"].name)
        ct = tuple(_instantiate(c, a) for c, a in zip(ct, self.out_aval))
        for c, acc in zip(self._vjp_present(res_leaves, ct), t_accums):
            if _is_accum(acc):
                acc.accum(c)

    def _derivative(self, res_leaves, ts, dres, dts):
        terms = []
        if any(not _zero(d) for d in dts):
            terms.append(self(res_leaves, tuple(_instantiate(d, a) for d, a in zip(dts, self.in_avals[1]))))
        if any(not _zero(d) for d in dres):
            dres = tuple(_instantiate(d, a) for d, a in zip(dres, self.in_avals[0]))
            terms.append(jax.jvp(lambda r: self._formula(r, ts), (res_leaves,), (dres,))[1])
        if not terms:
            return tuple(hijax.Zero(a.to_tangent_aval()) for a in self.out_aval)
        return tuple(functools.reduce(jnp.add, parts) for parts in zip(*terms))

    def jvp(self, primals, tangents):
        (res_leaves, ts), (dres, dts) = primals, tangents
        return self(res_leaves, ts), self._derivative(res_leaves, ts, dres, dts)

    def lin(self, nzs_in, res_leaves, ts):
        return self(res_leaves, ts), (res_leaves, ts)

    def linearized(self, saved, dres, dts):
        return self._derivative(*saved, dres, dts)

    def vjp_fwd(self, nzs_in, res_leaves, ts):
        return self(res_leaves, ts), (res_leaves, ts)

    def vjp_bwd_retval(self, saved, ct):
        res_leaves, ts = saved
        ct = tuple(_instantiate(c, a) for c, a in zip(ct, self.out_aval))
        _spy_record("vjp", self.params["spec"].name)
        t_cts = self._vjp_present(res_leaves, ct)
        res_cts = jax.vjp(lambda r: self._formula(r, ts), res_leaves)[1](ct)[0]
        return tuple(res_cts), t_cts

    def batch(self, axis_data, args, dims):
        (res_leaves, ts), (rdims, tdims) = args, dims
        if all(d is None for d in (*rdims, *tdims)):
            return self(res_leaves, ts), tuple(None for _ in self.out_aval)
        move = lambda xs, ds: tuple(x if d is None else jnp.moveaxis(x, d, 0) for x, d in zip(xs, ds))  # noqa: E731
        zero = lambda ds: tuple(None if d is None else 0 for d in ds)  # noqa: E731
        res_leaves, ts, rdims, tdims = move(res_leaves, rdims), move(ts, tdims), zero(rdims), zero(tdims)
        p = self.params
        batched = _LinearRuleOp(p["spec"], p["static"], p["res_tree"], p["mask"], p["op_out_aval"],
                                tuple(map(jax.typeof, res_leaves)), tuple(map(jax.typeof, ts)),
                                parent=self, dims=(rdims, tdims))
        return batched(res_leaves, ts), tuple(0 for _ in self.out_aval)


class _Spec:
    """The formulas of one op, hashable by identity (jit caches key on the ``RuleOp`` params).
    ``linear``: route output tangents through ``_LinearRuleOp`` (else the JVP formula inline)."""

    def __init__(self, name, primal, jvp, vjp, save, batch, linear=True):
        self.name, self.primal, self.jvp, self.vjp, self.save, self.batch = name, primal, jvp, vjp, save, batch
        self.linear = linear
        self.save_wants_mask = "needs_input_grad" in inspect.signature(save).parameters

    def __repr__(self) -> str:
        return self.name


class _BatchedSpec(_Spec):
    """``parent``'s formulas under one more vmap (batch at axis 0 of the arguments with a dim).

    The primal is the op's own ``batch`` rule if it has one (as functorch's batch rules), else
    ``jax.vmap`` of its primal; ``save``, ``jvp`` and ``vjp`` are the parent's under ``jax.vmap``,
    and a cotangent of an unbatched argument is summed over the batch (functorch's reductify).
    Residuals come out batched at 0 (broadcast where unbatched: a cost the mechanism avoids).
    """

    def __init__(self, parent: _Spec, dims: tuple, axis_name, axis_size: int):
        self.parent, self.dims, self.axis_name, self.axis_size = parent, dims, axis_name, axis_size
        super().__init__(parent.name, self._primal, self._jvp, self._vjp, self._save, None, parent.linear)
        self.save_wants_mask = parent.save_wants_mask

    def _vmap(self, f, in_axes):
        return jax.vmap(f, in_axes=in_axes, axis_name=self.axis_name, axis_size=self.axis_size)

    def _primal(self, *args, **kw):
        if self.parent.batch is not None:
            out, out_dims = self.parent.batch(list(args), self.dims, vmap_axis_name=self.axis_name, **kw)
            return jax.tree.map(lambda o, d: jnp.moveaxis(o, d, 0), out, out_dims)
        return self._vmap(functools.partial(self.parent.primal, **kw), self.dims)(*args)

    def _save(self, out, *args, **kw):
        return self._vmap(lambda o, *a: self.parent.save(o, *a, **kw), (0, *self.dims))(out, *args)

    def _jvp(self, res, *tangents, **kw):
        present = [i for i, t in enumerate(tangents) if t is not None]

        def one(r, *ts):
            full = [None] * len(tangents)
            for i, t in zip(present, ts):
                full[i] = t
            return self.parent.jvp(r, *full, **kw)

        out = self._vmap(one, (0, *(self.dims[i] for i in present)))(res, *(tangents[i] for i in present))
        return out

    def _vjp(self, res, ct, **kw):
        cts = self._vmap(lambda r, c: tuple(self.parent.vjp(r, c, **kw)), (0, 0))(res, ct)
        return tuple(c if d is not None or c is None else c.sum(0) for c, d in zip(cts, self.dims))


def _save_arguments(out, *arrays, **static):
    return arrays[0] if len(arrays) == 1 else arrays


def hijax_op(
    name: str,
    primal: Callable,
    jvp: Callable,
    vjp: Callable,
    save: Callable | None = None,
    batch: Callable | None = None,
    linear: bool = True,
) -> Callable:
    """``define_op``'s signature on a ``VJPHiPrimitive`` (see the module docstring).

    Args:
        name: the op's name (for the spy and jaxprs).
        primal: ``primal(*arrays, **static) -> out``.
        jvp: ``jvp(residuals, *tangents, **static) -> out_tangent`` (``None`` tangent: zero).
        vjp: ``vjp(residuals, out_cotangent, **static) -> tuple`` of cotangents.
        save: ``save(out, *arrays, **static) -> residuals`` (default: the arguments).
        batch: optional ``batch(args, dims, *, vmap_axis_name, **static) -> (out, out_dims)``.
        linear: output tangents through the linear hi-primitive ``_LinearRuleOp`` (whose
            transpose is the VJP formula); ``False``: the JVP formula inline in ``jvp``.

    Returns:
        A function of the arrays (and static keywords) that binds the op.
    """
    spec = _Spec(name, primal, jvp, vjp, save or _save_arguments, batch, linear)

    def op(*arrays, **static):
        arrays = tuple(jnp.asarray(a) if not isinstance(a, jax.Array) else a for a in arrays)
        in_avals = tuple(jax.typeof(a) for a in arrays)
        return RuleOp(spec, in_avals, tuple(sorted(static.items())))(*arrays)

    op.__name__ = name
    return op


# ----------------------------------------------------------------------------------------------
# A NestedTensor-like HiType: values (float, differentiable) + offsets (int32, no tangent).


class Ragged:
    """B rows packed as ``values`` (N,) with ``offsets`` (B + 1,) int32 (a NestedTensor in small);
    under vmap both carry the same leading batch axes. A tangent has ``offsets=None``."""

    def __init__(self, values, offsets):
        self.values, self.offsets = values, offsets

    @property
    def shape(self) -> tuple:
        """``lead + (N,)``: ``jax.vmap`` reads an argument's batch size from its ``shape``."""
        return tuple(self.values.shape)


class RaggedTy(hijax.HiType):
    """Type of a ``Ragged`` (``tangent=False``) or of its tangent (``tangent=True``: values only).
    ``lead``: the leading (vmap) axes of both parts."""

    def __init__(self, n: int, b: int, dtype, tangent: bool = False, lead: tuple = ()):
        self.n, self.b, self.dtype, self.tangent, self.lead = n, b, jnp.dtype(dtype), tangent, tuple(lead)

    def _key(self):
        return (self.n, self.b, self.dtype, self.tangent, self.lead)

    @property
    def shape(self) -> tuple:
        """``lead + (n,)``: a ``BatchTracer`` with an int batch axis reads the size from it."""
        return (*self.lead, self.n)

    def __hash__(self):
        return hash(self._key())

    def __eq__(self, other):
        return isinstance(other, RaggedTy) and self._key() == other._key()

    def str_short(self, short_dtypes=False, **_) -> str:
        return f"Ragged{'T' if self.tangent else ''}[{self.lead}{self.n};{self.b}]"

    def lo_ty(self):
        vals = hijax.ShapedArray((*self.lead, self.n), self.dtype)
        return [vals] if self.tangent else [vals, hijax.ShapedArray((*self.lead, self.b + 1), jnp.dtype("int32"))]

    def lower_val(self, hi_val):
        return [hi_val.values] if self.tangent else [hi_val.values, hi_val.offsets]

    def raise_val(self, *lo_vals):
        return Ragged(lo_vals[0], None if self.tangent else lo_vals[1])

    def to_tangent_aval(self):
        return RaggedTy(self.n, 0, self.dtype, True, self.lead)  # no offsets: ``b`` is not known

    def vspace_zero(self):
        return make_ragged(jnp.zeros((*self.lead, self.n), self.dtype))

    def vspace_add(self, x, y):
        return make_ragged(ragged_parts(x)[0] + ragged_parts(y)[0])

    # vmap: a batch axis is a new leading axis of both parts (only axis 0 is supported here).
    def dec_rank(self, size, spec):
        if spec != 0:
            raise NotImplementedError(f"Ragged is batched along axis 0 only, not {spec}")
        return RaggedTy(self.n, self.b, self.dtype, self.tangent, self.lead[1:])

    def inc_rank(self, size, spec):
        if spec != 0:
            raise NotImplementedError(f"Ragged is batched along axis 0 only, not {spec}")
        return RaggedTy(self.n, self.b, self.dtype, self.tangent, (size, *self.lead))


def _typeof_ragged(r: Ragged) -> RaggedTy:
    *lead, n = r.values.shape
    if r.offsets is None:  # a tangent
        return RaggedTy(n, 0, r.values.dtype, True, tuple(lead))
    return RaggedTy(n, r.offsets.shape[-1] - 1, r.values.dtype, False, tuple(lead))


hijax.register_hitype(Ragged, _typeof_ragged)


def _is_accum(x) -> bool:
    """A linear input's cotangent accumulator in ``transpose`` (``ad.GradAccum``, exported by
    ``jax.experimental.hijax`` only from jax 0.11)."""
    return hasattr(x, "accum")


def _broadcast_batch(args, dims, size):
    """Every argument batched along axis 0 (unbatched ones broadcast): the Ragged primitives'
    vmap rules bind themselves again at the batched types."""
    out = []
    for a, d in zip(args, dims):
        if isinstance(jax.typeof(a), RaggedTy):
            parts = ragged_parts(a)
            if d is None:
                parts = tuple(jnp.broadcast_to(p, (size, *p.shape)) for p in parts)
            out.append(make_ragged(*parts))
        elif d is None:
            out.append(jnp.broadcast_to(a, (size, *jnp.shape(a))))
        else:
            out.append(jnp.moveaxis(a, d, 0))
    return out


class RaggedParts(hijax.VJPHiPrimitive):
    """Projection ``Ragged -> (values, offsets)`` (a tangent Ragged -> ``(values,)``).

    Under tracing a hi value is opaque: reading a field is a primitive, with its own jvp,
    transpose, vjp and batching (as ``GetTupElt`` in jax's tests/hijax_test.py)."""

    def __init__(self, rty: RaggedTy):
        self.in_avals = (rty,)
        self.out_aval = tuple(rty.lo_ty())
        self.params = {}
        super().__init__()

    def expand(self, r):
        return (r.values,) if self.in_avals[0].tangent else (r.values, r.offsets)

    def jvp(self, primals, tangents):
        (r,), (dr,) = primals, tangents
        out = self(r)
        dv = hijax.Zero(self.out_aval[0].to_tangent_aval()) if _zero(dr) else ragged_parts(dr)[0]
        return out, (dv, *(hijax.Zero(a.to_tangent_aval()) for a in self.out_aval[1:]))

    def vjp_fwd(self, nzs_in, r):
        return self(r), None

    def vjp_bwd_retval(self, res, ct):
        return (make_ragged(_instantiate(ct[0], self.out_aval[0])),)

    def transpose(self, ct, accum):
        if _is_accum(accum):
            accum.accum(make_ragged(_instantiate(ct[0], self.out_aval[0])))

    def batch(self, axis_data, args, dims):
        if dims[0] is None:
            return self(*args), tuple(None for _ in self.out_aval)
        return ragged_parts(args[0]), tuple(0 for _ in self.out_aval)  # the batched type's parts


class MakeRagged(hijax.VJPHiPrimitive):
    """``(values, offsets) -> Ragged``; ``(values,) -> `` a tangent Ragged."""

    def __init__(self, in_avals: tuple):
        self.in_avals = in_avals
        *lead, n = in_avals[0].shape
        b = in_avals[1].shape[-1] - 1 if len(in_avals) == 2 else 0
        self.out_aval = RaggedTy(n, b, in_avals[0].dtype, len(in_avals) == 1, tuple(lead))
        self.params = {}
        super().__init__()

    def expand(self, values, offsets=None):
        return Ragged(values, offsets)

    def jvp(self, primals, tangents):
        return self(*primals), make_ragged(_instantiate(tangents[0], self.in_avals[0]))

    def vjp_fwd(self, nzs_in, *args):
        return self(*args), None

    def vjp_bwd_retval(self, res, ct):
        values_ct = ragged_parts(ct)[0] if not _zero(ct) else None
        return (values_ct, *(hijax.Zero(a.to_ct_aval()) for a in self.in_avals[1:]))

    def transpose(self, ct, *accums):
        if _is_accum(accums[0]):
            accums[0].accum(ragged_parts(ct)[0])

    def batch(self, axis_data, args, dims):
        if all(d is None for d in dims):
            return self(*args), None
        return make_ragged(*_broadcast_batch(args, dims, axis_data.size)), 0


def _instantiate(t, aval):
    return jnp.zeros(aval.shape, aval.dtype) if _zero(t) else t


def ragged_parts(r) -> tuple:
    """``(values, offsets)`` of a Ragged (``(values,)`` of a tangent one), traceable."""
    return RaggedParts(jax.typeof(r))(r)


def make_ragged(values, offsets=None):
    """A Ragged from ``values`` and int32 ``offsets`` (a tangent Ragged without offsets)."""
    args = (values,) if offsets is None else (values, offsets)
    return MakeRagged(tuple(jax.typeof(a) for a in args))(*args)


def _over_lead(fn, nlead: int):
    """``fn`` (written for one Ragged) mapped over ``nlead`` leading batch axes of every argument."""
    for _ in range(nlead):
        fn = jax.vmap(fn)
    return fn


def _segment_ids(offsets, n):
    return jnp.searchsorted(offsets[1:], jnp.arange(n), side="right")


def _scale(values, offsets, w):
    return values * w[_segment_ids(offsets, values.shape[0])]


def _scale_vjp(values, offsets, w, ct):
    seg = _segment_ids(offsets, values.shape[0])
    return ct * w[seg], jax.ops.segment_sum(ct * values, seg, num_segments=w.shape[0])


class RaggedScale(hijax.VJPHiPrimitive):
    """``values * w[row]``: a Ragged and a per-row weight ``w`` (B,) -> a Ragged (same offsets),
    with a JVP formula and a VJP formula of its own; under vmap, itself at the batched types."""

    def __init__(self, rty: RaggedTy, w_aval):
        self.in_avals = (rty, w_aval)
        self.out_aval = rty
        self.params = {}
        super().__init__()

    @property
    def _nlead(self) -> int:
        return len(self.in_avals[0].lead)

    def expand(self, r, w):
        return Ragged(_over_lead(_scale, self._nlead)(r.values, r.offsets, w), r.offsets)

    def jvp(self, primals, tangents):
        (r, w), (dr, dw) = primals, tangents
        _spy_record("jvp", "ragged_scale")
        values, offsets = ragged_parts(r)
        scale = _over_lead(_scale, self._nlead)
        dv = jnp.zeros_like(values)
        if not _zero(dr):
            dv = dv + scale(ragged_parts(dr)[0], offsets, w)
        if not _zero(dw):
            dv = dv + scale(values, offsets, dw)
        return self(r, w), make_ragged(dv)

    def vjp_fwd(self, nzs_in, r, w):
        return self(r, w), (*ragged_parts(r), w)

    def vjp_bwd_retval(self, res, ct):
        _spy_record("vjp", "ragged_scale")
        ct_values, dw = _over_lead(_scale_vjp, self._nlead)(*res, ragged_parts(ct)[0])
        return make_ragged(ct_values), dw

    def batch(self, axis_data, args, dims):
        if all(d is None for d in dims):
            return self(*args), None
        return ragged_scale(*_broadcast_batch(args, dims, axis_data.size)), 0


def ragged_scale(r: Ragged, w: jax.Array) -> Ragged:
    """``values * w[row]`` on a ``Ragged`` (bound as the ``RaggedScale`` hi-primitive)."""
    return RaggedScale(jax.typeof(r), jax.typeof(w))(r, w)
