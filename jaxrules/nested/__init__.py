"""Ragged (nested, jagged) tensors with derivatives: ``NestedTensor`` and its ops.

A NestedTensor holds B arrays of shapes (n_i, *inner) as packed ``values`` plus ``offsets``
(torch's jagged layout); it is a JAX pytree that works with grad, jvp, jit (no recompilation
when only the lengths change), checkpoint, and vmap over dense arguments. Ops take logical axes
of (B, ragged, *inner). Seed: ``NestedTensorBackward.cpp``.
"""

from jaxrules.nested.ops import (
    dropout,
    gelu,
    layer_norm,
    linear,
    log_softmax,
    matmul,
    mean,
    relu,
    scaled_dot_product_attention,
    silu,
    softmax,
    sum,
    threshold,
)
from jaxrules.nested.tensor import NestedTensor, from_jagged, from_lengths, from_padded, nested_tensor


def unbind(x: NestedTensor) -> list:
    """The components of ``x`` (``x.unbind()``)."""
    return x.unbind()


def to_padded(x: NestedTensor, padding_value=0.0, max_len=None):
    """``x.to_padded(padding_value, max_len)``."""
    return x.to_padded(padding_value, max_len)


def split_with_sizes(x: NestedTensor, sizes, axis=-1) -> list:
    """``x.split_with_sizes(sizes, axis)``."""
    return x.split_with_sizes(sizes, axis)


__all__ = [
    "NestedTensor", "dropout", "from_jagged", "from_lengths", "from_padded", "gelu", "layer_norm", "linear",
    "log_softmax", "matmul", "mean", "nested_tensor", "relu", "scaled_dot_product_attention", "silu", "softmax",
    "split_with_sizes", "sum", "threshold", "to_padded", "unbind",
]
