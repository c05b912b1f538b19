"""vmap rules for ops whose batching logic matters, mirroring functorch's BatchRulesNorm.cpp.

Every other op is batched by the mechanism (its primal and formulas under ``jax.vmap``).

The normalization kernel ``x -> x_hat`` (``ops.normalization.normalize``) reduces over ``axes``.
functorch folds the vmap dimension B0 into a dimension the kernel does *not* reduce, so that the
batched computation is one call of the unbatched kernel with per-example statistics:

* batch norm (reduces all but the channel axis 1): B0 is folded into the channels,
  ``[B0, N, C, *] -> [N, B0*C, *]`` (``batch_norm_batch_rule``);
* group norm (the kernel sees ``[N, G, D]`` and reduces D): B0 is folded into N,
  ``[B0, N, G, D] -> [B0*N, G, D]`` (``native_group_norm_plumbing``);
* layer norm (reduces trailing axes): B0 becomes one more leading axis, i.e. folded into the first
  one (``native_layer_norm_batch_rule``).

All three are "fold B0 into the first axis that is not reduced" (or prepend it when every axis is
reduced). Weight and bias never reach the kernel: they are applied after it by broadcasting,
so batched or unbatched weights work as in functorch.
"""

from __future__ import annotations

import jax.numpy as jnp


def fold_into_kept_axis(kernel):
    """The vmap rule of a kernel ``kernel(x, *, axes, **static)`` that reduces over ``axes``."""

    def rule(args, dims, *, axes, **static):
        (x,), (bdim,) = args, dims
        x = jnp.moveaxis(x, bdim, 0)
        kept = [a for a in range(x.ndim - 1) if a not in axes]
        if not kept:  # every axis is reduced: B0 becomes a leading, kept axis
            return kernel(x, axes=tuple(a + 1 for a in axes), **static), 0
        into = kept[0]
        moved = jnp.moveaxis(x, 0, into)  # B0 just before the axis it folds into
        shape = moved.shape
        folded = moved.reshape(shape[:into] + (shape[into] * shape[into + 1],) + shape[into + 2 :])
        out = kernel(folded, axes=axes, **static).reshape(shape)
        return jnp.moveaxis(out, into, 0), 0

    return rule
