"""``jaxrules.Function``: port a ``torch.autograd.Function`` to JAX almost line for line
(functorch's ``autograd_function.py`` is the model). Built on the same mechanism as the built-in
ops: ``forward`` is the primal, ``setup_context`` picks the residuals, ``backward`` is the VJP
formula and ``jvp`` the JVP formula; ``jax.grad``/``vjp`` run ``backward``, ``jax.jvp`` runs
``jvp``, and jit, hessian and reverse-over-reverse compose.

vmap, as in the seed: with ``generate_vmap_rule = True`` forward, setup_context, backward and jvp
run under the vmap (per-example shapes) and gradients of unbatched inputs are summed over the
batch (``reductify``); with a ``vmap`` staticmethod, that rule batches ``forward``; both, or
neither while vmapped, or a malformed ``vmap`` return raise the seed's errors.

Example::

    class ScaleGradient(jaxrules.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x, scale):
            return x

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.scale = inputs[1]

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.scale, None

    jax.grad(lambda x: ScaleGradient.apply(x, 3.0).sum())(x)   # 3s
"""

from __future__ import annotations

import collections
import functools
import inspect
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from jaxrules.mechanism import define_op

__all__ = ["Function", "FunctionCtx", "VmapInfo"]

VmapInfo = collections.namedtuple("VmapInfo", ["batch_size", "randomness"])
VmapInfo.__doc__ = "What a ``vmap`` staticmethod is told: the batch size and the randomness mode."

_DOCS = "see https://pytorch.org/docs/main/notes/extending.func.html (the same rules hold here)"


class FunctionCtx:
    """torch's ``ctx``: ``save_for_backward`` / ``save_for_forward``, ``saved_tensors``,
    ``needs_input_grad``, ``mark_non_differentiable``, and any other attribute. Array attributes
    become residuals; other attributes must be hashable (they are static)."""

    def __init__(self, needs_input_grad=()):
        self.needs_input_grad = tuple(needs_input_grad)
        self._saved_backward = ()
        self._saved_forward = ()
        self._non_differentiable = ()
        self._mode = "backward"
        self._outputs = None

    def save_for_backward(self, *arrays):
        self._saved_backward = tuple(arrays)

    def save_for_forward(self, *arrays):
        self._saved_forward = tuple(arrays)

    @property
    def saved_tensors(self):
        """What ``save_for_backward`` kept (in ``jvp``: what ``save_for_forward`` kept, or else
        what ``save_for_backward`` kept)."""
        if self._mode == "forward" and self._saved_forward:
            return self._saved_forward
        return self._saved_backward

    def mark_non_differentiable(self, *outputs):
        """Outputs (the very arrays ``forward`` returned) that get no derivative."""
        leaves = self._outputs or []
        marked = set()
        for o in outputs:
            hits = [i for i, leaf in enumerate(leaves) if leaf is o]
            if not hits:
                raise ValueError("mark_non_differentiable: pass outputs of forward, as setup_context received them")
            marked.update(hits)
        self._non_differentiable = tuple(sorted(set(self._non_differentiable) | marked))


def _is_array(x) -> bool:
    return isinstance(x, jax.Array | np.ndarray)


def _ctx_flatten(ctx: FunctionCtx):
    arrays, static = {}, {}
    for name, value in vars(ctx).items():
        if name == "_outputs":
            continue
        leaves, tree = jax.tree_util.tree_flatten(value)
        if leaves and all(_is_array(v) for v in leaves):
            arrays[name] = (leaves, tree)
        else:
            try:
                hash(value)
            except TypeError:
                raise TypeError(
                    f"ctx.{name}: attributes of ctx must be arrays (or pytrees of arrays) or hashable "
                    f"values, got {type(value).__name__}"
                ) from None
            static[name] = value
    names = tuple(sorted(arrays))
    children = [leaf for n in names for leaf in arrays[n][0]]
    aux = (tuple((n, len(arrays[n][0]), arrays[n][1]) for n in names), tuple(sorted(static.items())))
    return children, aux


def _ctx_unflatten(aux, children):
    layout, static = aux
    ctx = FunctionCtx.__new__(FunctionCtx)
    ctx.__dict__.update(dict(static))
    it = iter(children)
    for name, count, tree in layout:
        ctx.__dict__[name] = jax.tree_util.tree_unflatten(tree, [next(it) for _ in range(count)])
    ctx.__dict__["_outputs"] = None
    return ctx


jax.tree_util.register_pytree_node(FunctionCtx, _ctx_flatten, _ctx_unflatten)


def _rebuild(layout, arrays):
    """The forward's arguments: arrays at their positions, static values elsewhere."""
    return tuple(arrays[v] if kind == "array" else v for kind, v in layout)


class Function:
    """Subclass with static methods ``forward(*args)``, ``setup_context(ctx, inputs, output)``,
    ``backward(ctx, *grads)``, optionally ``jvp(ctx, *tangents)`` and ``vmap(info, in_dims,
    *args) -> (output, out_dims)``, and the class attribute ``generate_vmap_rule``. Call it as
    ``MyFunction.apply(*args)``. Non-array arguments (numbers, shapes, ...) pass through, held
    fixed; they must be hashable."""

    generate_vmap_rule = False

    @staticmethod
    def forward(*args):
        raise NotImplementedError("Function subclasses must define the forward staticmethod")

    @staticmethod
    def setup_context(ctx, inputs, output):
        """Default: save nothing."""

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("Function subclasses must define the backward staticmethod")

    @staticmethod
    def jvp(ctx, *tangents):
        """Optional (forward mode). Never called unless a subclass overrides it. An array input
        without a tangent gets zeros of its shape, as torch passes them."""
        raise NotImplementedError("Function subclasses define jvp for forward mode")

    @staticmethod
    def vmap(info, in_dims, *args):
        """Optional (a vmap rule). Never called unless a subclass overrides it."""
        raise NotImplementedError("Function subclasses define vmap, or set generate_vmap_rule = True")

    @classmethod
    def apply(cls, *args):
        _check_forward(cls)
        layout, arrays = [], []
        for i, a in enumerate(args):
            if _is_array(a):
                layout.append(("array", len(arrays)))
                arrays.append(a)
                continue
            try:
                hash(a)
            except TypeError:
                raise TypeError(
                    f"{cls.__name__}.apply: argument {i} ({type(a).__name__}) is neither an array nor hashable"
                ) from None
            layout.append(("static", a))
        return _op_for(cls)(*arrays, layout=tuple(layout))


_NEW_STYLE = ("write it as torch 2's form: a @staticmethod forward(x, ...) without ctx, and a @staticmethod "
              "setup_context(ctx, inputs, output) that saves what backward and jvp need")


@functools.cache
def _check_forward(cls):
    """``TypeError`` saying what to write for torch's older forms of ``forward``: a method
    ``forward(self, x)`` (torch's legacy Function) or ``forward(ctx, x)`` (the ctx-taking
    staticmethod, which jaxrules does not take: it needs ``setup_context``)."""
    raw = inspect.getattr_static(cls, "forward")
    if not isinstance(raw, staticmethod):
        raise TypeError(f"{cls.__name__}.forward is not a staticmethod forward (torch's legacy Function with a "
                        f"forward(self, ...) method); {_NEW_STYLE}. {_DOCS}")
    params = list(inspect.signature(raw.__func__).parameters)
    if params and params[0] == "ctx" and not _overrides(cls, "setup_context"):
        raise TypeError(f"{cls.__name__}: a staticmethod forward(ctx, ...) takes ctx (torch's older combined form); "
                        f"{_NEW_STYLE}. {_DOCS}")


def _overrides(cls, name) -> bool:
    return getattr(cls, name) is not getattr(Function, name)


@functools.cache
def _op_for(cls):
    name = cls.__name__

    def primal(*arrays, layout):
        return cls.forward(*_rebuild(layout, arrays))

    def save(out, *arrays, layout, needs_input_grad):
        needs = tuple(kind == "array" and needs_input_grad[v] for kind, v in layout)
        ctx = FunctionCtx(needs)
        ctx._outputs = jax.tree_util.tree_leaves(out)
        cls.setup_context(ctx, _rebuild(layout, arrays), out)
        ctx._outputs = None
        ctx._input_types = tuple((tuple(a.shape), jnp.dtype(a.dtype).name) for a in arrays)  # for jvp's zeros
        return ctx

    def jvp(ctx, *tangents, layout):
        if not _overrides(cls, "jvp"):
            raise TypeError(
                f"{name}: forward mode (jax.jvp, jacfwd, hessian) needs the jvp staticmethod; {_DOCS}"
            )
        ctx._mode = "forward"
        # an input without a tangent gets zeros, as torch passes them (a port's jvp reads them all)
        tangents = tuple(jnp.zeros(shape, dtype) if t is None and jnp.issubdtype(dtype, jnp.inexact) else t
                         for t, (shape, dtype) in zip(tangents, ctx._input_types))
        out = cls.jvp(ctx, *_rebuild(layout, tangents))
        leaves, tree = jax.tree_util.tree_flatten(out, is_leaf=lambda x: x is None)
        leaves = [0.0 if (i in ctx._non_differentiable or t is None) else t for i, t in enumerate(leaves)]
        return jax.tree_util.tree_unflatten(tree, leaves)

    def vjp(ctx, ct, layout):
        leaves, tree = jax.tree_util.tree_flatten(ct, is_leaf=lambda x: x is None)
        leaves = [
            None if c is None else (jnp.zeros_like(c) if i in ctx._non_differentiable else c)
            for i, c in enumerate(leaves)
        ]
        ct = jax.tree_util.tree_unflatten(tree, leaves)
        grads = cls.backward(ctx, *(ct if isinstance(ct, tuple) else (ct,)))
        grads = grads if isinstance(grads, tuple) else (grads,)
        if len(grads) != len(layout):
            raise TypeError(
                f"{name}.backward returned an incorrect number of gradients (expected {len(layout)}, got {len(grads)})"
            )
        return tuple(g for g, (kind, _) in zip(grads, layout) if kind == "array")

    return define_op(f"Function:{name}", primal, jvp, vjp, save, _vmap_rule(cls))


def _vmap_rule(cls):
    """The primal's vmap rule: None (generated: vmap of forward) or the vmap staticmethod."""
    name = cls.__name__
    if cls.generate_vmap_rule and not _overrides(cls, "vmap"):
        return None

    def rule(args, dims, *, vmap_axis_name, layout):
        if cls.generate_vmap_rule:
            raise RuntimeError(
                f"You tried to vmap over {name}, but it has both generate_vmap_rule=True and an overriden "
                f"vmap staticmethod. Please set generate_vmap_rule=False or delete the overriden vmap "
                f"staticmethod to avoid ambiguity; {_DOCS}"
            )
        if not _overrides(cls, "vmap"):
            raise RuntimeError(
                f"You tried to vmap over {name}, but it does not have vmap support. Please override and "
                f"implement the vmap staticmethod or set generate_vmap_rule=True; {_DOCS}"
            )
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        in_dims = tuple(None if kind == "static" else dims[v] for kind, v in layout)
        result = cls.vmap(VmapInfo(size, "error"), in_dims, *_rebuild(layout, args))
        output, out_dims = _validate_vmap_return(name, result)
        return output, _broadcast_out_dims(name, output, out_dims)

    return rule


def _validate_vmap_return(name, result):
    base = (
        f"{name}: expected the vmap staticmethod to have two returns, an output and out_dims with pytree "
        "structure compatible with the output. "
    )
    if not isinstance(result, tuple):
        raise RuntimeError(base + f"Got a {type(result).__name__} instead")
    if len(result) != 2:
        raise RuntimeError(base + f"Got {len(result)} returns instead")
    return result


def _broadcast_out_dims(name, output, out_dims):
    """``out_dims`` broadcast to the output's structure (a prefix is allowed, as in the seed)."""
    prefix = jax.tree_util.tree_structure(out_dims, is_leaf=lambda x: x is None)
    try:
        subtrees = prefix.flatten_up_to(output)
    except (ValueError, TypeError):
        subtrees = None
    dims = jax.tree_util.tree_leaves(out_dims, is_leaf=lambda x: x is None)
    if subtrees is None or any(d is not None and not isinstance(d, numbers.Integral) for d in dims):
        raise RuntimeError(
            f"{name}: the vmap staticmethod returned an incompatible (output, out_dims) tuple. Expected "
            f"out_dims={out_dims} to be compatible with the structure of `output`: out_dims has structure "
            f"{prefix} but output has structure {jax.tree_util.tree_structure(output)}"
        )
    flat = []
    for sub, d in zip(subtrees, dims):
        flat += [d] * len(jax.tree_util.tree_leaves(sub))
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(output), flat)
