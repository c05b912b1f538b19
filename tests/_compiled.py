"""Derivatives of a test case from one compiled program: run eagerly, ``jax.vjp`` and ``jax.jvp``
compile every primitive of the derivative separately, which made the slowest tests slow."""

from __future__ import annotations

import jax


def value_vjp_jvp(f, args, ct, tangents):
    """``(f(*args), vjp of ct, jvp along tangents)`` at ``args``, from one jitted program."""
    args, tangents = tuple(args), tuple(tangents)

    def program():
        value, pullback = jax.vjp(f, *args)
        return value, pullback(ct), jax.jvp(f, args, tangents)[1]

    return jax.jit(program)()
