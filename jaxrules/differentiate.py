"""``jaxrules.differentiate``: a graph-level view of reverse-mode differentiation, as
TorchScript's ``autodiff.cpp`` gives one (``differentiate``, ``Gradient``, ``isDifferentiable``).

``d = differentiate(fn, *example_args)`` splits ``fn`` into a jit-compiled forward that returns the
outputs and the residuals (the values reverse mode captures: autodiff.cpp's ``df_input_captured``)
and a jit-compiled backward that maps residuals and output cotangents to input cotangents. The
residuals are exactly what JAX saves (``jax.ad_checkpoint.print_saved_residuals``): each is listed
in ``d.captured`` with its shape, dtype, bytes and the equation that produced it. ``d.report``
lists the equations that are not differentiable (integer outputs, ``stop_gradient``, primitives
with no differentiation rule), as ``isDifferentiable`` decides for a graph's nodes.

Forward and backward can run at different steps or on different devices: the residuals are
ordinary arrays.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import numpy as np

from jaxrules.mechanism import describe_equation, has_jvp_rule, is_jaxpr_var, sub_jaxprs

__all__ = ["Captured", "Differentiated", "NonDifferentiable", "differentiate", "nondifferentiable"]


@dataclasses.dataclass(frozen=True)
class Captured:
    """One residual: what reverse mode keeps from the forward pass."""

    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int
    source: str  # "the argument k" or "<primitive> from <file>:<line> (<function>)"


@dataclasses.dataclass(frozen=True)
class NonDifferentiable:
    """An equation through which no derivative flows, and why."""

    equation: str
    reason: str


class Differentiated:
    """The result of ``differentiate``: ``forward``, ``backward``, ``captured``, ``report``."""

    def __init__(self, fn: Callable, *example_args):
        self._fn = fn
        self.report = nondifferentiable(fn, *example_args)

        def vjp_flat(*args):
            return jax.vjp(fn, *args)

        try:
            closed, (out_shape, pullback_shape) = jax.make_jaxpr(vjp_flat, return_shape=True)(*example_args)
        except NotImplementedError as err:
            missing = [r for r in self.report if r.reason.startswith("no differentiation rule")]
            listing = "; ".join(r.equation for r in missing) or str(err)
            raise ValueError(f"differentiate: fn cannot be differentiated: {listing}") from err
        jaxpr = closed.jaxpr
        n_out = len(jax.tree.leaves(out_shape))
        residual_vars = jaxpr.outvars[n_out:]
        first: dict = {}
        self._leaf_to_residual = []
        for position, var in enumerate(residual_vars):
            key = var if is_jaxpr_var(var) else ("literal", position)
            if key not in first:
                first[key] = len(first)
            self._leaf_to_residual.append(first[key])
        self._residual_leaves = [self._leaf_to_residual.index(k) for k in range(len(first))]
        self._pullback_tree = jax.tree_util.tree_structure(pullback_shape)
        self.captured = [self._describe(jaxpr, residual_vars[i]) for i in self._residual_leaves]
        self.forward = jax.jit(self._forward)
        self.backward = jax.jit(self._backward)

    def _forward(self, *args):
        """``(outputs, residuals)``: residuals is a list of arrays, one per ``captured`` entry."""
        out, pullback = jax.vjp(self._fn, *args)
        leaves = jax.tree.leaves(pullback)
        return out, [leaves[i] for i in self._residual_leaves]

    def _backward(self, residuals, output_cotangents):
        """Input cotangents (a tuple, one per input) from residuals and output cotangents."""
        leaves = [residuals[k] for k in self._leaf_to_residual]
        pullback = jax.tree_util.tree_unflatten(self._pullback_tree, leaves)
        return pullback(output_cotangents)

    @property
    def residual_bytes(self) -> int:
        """Bytes kept between forward and backward."""
        return sum(c.nbytes for c in self.captured)

    @staticmethod
    def _describe(jaxpr, var) -> Captured:
        aval = var.aval
        nbytes = int(np.prod(aval.shape, dtype=np.int64)) * np.dtype(aval.dtype).itemsize
        if not is_jaxpr_var(var):
            source = "a literal"
        elif var in jaxpr.invars:
            source = f"the argument {jaxpr.invars.index(var)}"
        elif var in jaxpr.constvars:
            source = "a constant"
        else:
            source = next(describe_equation(e) for e in jaxpr.eqns if var in e.outvars)
        return Captured(tuple(aval.shape), np.dtype(aval.dtype), nbytes, source)

    def __repr__(self) -> str:
        lines = [f"differentiate({getattr(self._fn, '__name__', 'fn')}): {len(self.captured)} residuals, "
                 f"{self.residual_bytes} bytes"]
        lines += [f"  {c.dtype}{list(c.shape)} {c.nbytes} B  {c.source}" for c in self.captured]
        lines += [f"  not differentiable: {r.equation}: {r.reason}" for r in self.report]
        return "\n".join(lines)


def differentiate(fn: Callable, *example_args) -> Differentiated:
    """Split ``fn`` into forward (outputs and residuals) and backward (input cotangents), as
    autodiff.cpp's ``differentiate`` does for a TorchScript graph."""
    return Differentiated(fn, *example_args)


def nondifferentiable(fn: Callable, *example_args) -> list[NonDifferentiable]:
    """The equations of ``fn`` (traced at ``example_args``) through which no derivative flows."""
    return _non_differentiable(jax.make_jaxpr(fn)(*example_args).jaxpr)


def _non_differentiable(jaxpr) -> list[NonDifferentiable]:
    """autodiff.cpp's ``isDifferentiable``, for every equation (nested jaxprs included)."""
    found = []
    for eqn in jaxpr.eqns:
        inner = sub_jaxprs(eqn)
        outs_exact = eqn.outvars and all(not jax.numpy.issubdtype(v.aval.dtype, jax.numpy.inexact) for v in eqn.outvars)
        if eqn.primitive.name == "stop_gradient":
            found.append(NonDifferentiable(describe_equation(eqn), "stop_gradient: derivatives stop here"))
        elif outs_exact:
            found.append(NonDifferentiable(describe_equation(eqn), "integer or boolean output: no derivative"))
        elif not inner and not has_jvp_rule(eqn.primitive):
            found.append(NonDifferentiable(describe_equation(eqn), "no differentiation rule for this primitive"))
        if eqn.primitive.name.startswith("custom_"):
            continue  # a custom rule differentiates it; its primal's insides do not matter
        for sub in inner:
            found += _non_differentiable(getattr(sub, "jaxpr", sub))
    return found
