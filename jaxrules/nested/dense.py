"""Dense attention on the ragged attention kernels: a dense batch of equal-length sequences is a
NestedTensor whose offsets are static multiples of the length, so the fused Pallas kernels of
``nested.scaled_dot_product_attention`` (flash attention: the scores never stored; the backward
from the saved log-sum-exp) serve ``jaxrules.nn.scaled_dot_product_attention`` without padding.
Its formulas are the nested op's (the fused kernels' forward and backward; their XLA reference
is the nested block-pair formulas), checked by the record ``scaled_dot_product_attention[pallas]``.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from jaxrules.nested.ops import scaled_dot_product_attention as nested_attention
from jaxrules.nested.tensor import from_jagged

KERNEL_IMPLS = ("pallas", "pallas_interpret")


def kernel_applies(query, key, value, attn_mask, dropout_p, enable_gqa) -> bool:
    """Whether the dense call fits the ragged kernels: no mask (``is_causal`` is fine), no
    dropout, query, key and value of rank >= 3 with the same batch and head axes (no
    broadcasting, no grouped-query heads), as many keys as queries and one power-of-two head dim
    of at least 16 for all three."""
    if attn_mask is not None or dropout_p != 0 or enable_gqa:
        return False
    if min(query.ndim, key.ndim, value.ndim) < 3 or not query.shape[:-2] == key.shape[:-2] == value.shape[:-2]:
        return False
    length, dim = query.shape[-2:]
    return key.shape[-2:] == value.shape[-2:] == (length, dim) and dim >= 16 and dim & (dim - 1) == 0


def dense_attention(query, key, value, *, scale: float, is_causal: bool, impl: str):
    """``softmax(scale q k^T) v`` of dense ``(..., H, L, E)`` arrays (``kernel_applies``) through
    ``nested.scaled_dot_product_attention(impl=impl)``: the sequences (the product of the batch
    axes) become the ragged batch, each of ``L`` tokens with ``H`` heads."""
    *batch, heads, length, _ = query.shape
    count = math.prod(batch)
    offsets = np.arange(count + 1, dtype=np.int64) * length  # static: no sequence is longer than L

    def tokens(x):  # (..., H, L, E) -> (count L, H, E)
        return jnp.moveaxis(x.reshape(count, heads, length, x.shape[-1]), 1, 2).reshape(count * length, heads, -1)

    q, k, v = (from_jagged(tokens(x), offsets, max_seqlen=max(length, 1)) for x in (query, key, value))
    out = nested_attention(q, k, v, scale=scale, is_causal=is_causal, impl=impl).values
    return jnp.moveaxis(out.reshape(count, length, heads, -1), 2, 1).reshape(*batch, heads, length, -1)
