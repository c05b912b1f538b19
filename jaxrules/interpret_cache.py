"""Interpret-mode kernels traced once per shape.

A ``pallas_call`` traces its kernel on every call, so a program that runs one kernel several
times (a function and its derivatives, as the checks compile them) lowers as many copies of the
interpreted kernel. ``traced_once_when_interpreted`` routes an interpreted kernel entry point
through a cached ``jax.jit``: JAX traces it once per shape and static arguments and lowers it
once per program (one function, called at each use). The compiled path (``interpret`` false)
calls the entry point as it is. (Not used by ``norm_kernels``: there the cached jit made XLA's
compile of group_norm[pallas]'s sharded check hang in the CLI, WhileLoopSimplifier -> CallInliner
-> PropagateCallMetadata; not understood yet.)
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import jax


def traced_once_when_interpreted(interpreted: Callable[[dict], bool]):
    """Decorator for ``fn(*arrays, **statics)`` (arrays positional, hashable statics keyword-only):
    under ``jax.jit`` with the statics static when ``interpreted(statics)``."""

    def wrap(fn):
        params = inspect.signature(fn).parameters.values()
        statics = tuple(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)
        jitted = jax.jit(fn, static_argnames=statics)

        @functools.wraps(fn)
        def call(*arrays, **kwargs):
            return (jitted if interpreted(kwargs) else fn)(*arrays, **kwargs)

        return call

    return wrap
