"""Ops on NestedTensors. Logical axes are (B, ragged, *inner); axis 1 is the ragged one.

Ops over inner axes apply the dense jaxrules op to ``values`` (whose formulas are then the
seed's: ``nested_linear_backward`` is linear's backward on the packed rows, and so on). Ops
over the ragged axis and attention have their own formulas (``rules``).
"""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp

from jaxrules import nn as dense_nn
from jaxrules import partials as P
from jaxrules.mechanism import define_op
from jaxrules.nested import blocks as K
from jaxrules.nested import kernels as KN
from jaxrules.nested import rules as R
from jaxrules.nested.tensor import NestedTensor, logical_axis, same_offsets
from jaxrules.ops.linalg import matmul as dense_matmul
from jaxrules.ops.reductions import sum as dense_sum

__all__ = [
    "gelu", "layer_norm", "linear", "matmul", "relu", "scaled_dot_product_attention", "silu", "softmax", "sum",
    "threshold",
]

ragged_sum_op = define_op("nested_ragged_sum", R.ragged_sum_primal, R.ragged_sum_jvp, R.ragged_sum_vjp,
                          lambda out, x, seg, **_: seg)
ragged_softmax_op = define_op("nested_ragged_softmax", R.ragged_softmax_primal, R.ragged_softmax_jvp,
                              R.ragged_softmax_vjp, R.ragged_softmax_save)
attention_op = define_op("nested_attention", R.attention_primal, R.attention_jvp, R.attention_vjp, R.attention_save)
fused_attention_op = define_op("nested_attention_fused", R.fused_attention_primal, R.fused_attention_jvp,
                               R.fused_attention_vjp, R.fused_attention_save)
_IMPLS = ("xla", "pallas", "pallas_interpret")


def _nested(op: str, name: str, x) -> NestedTensor:
    if not isinstance(x, NestedTensor):
        raise TypeError(f"nested.{op}: argument {name!r} must be a NestedTensor, got {type(x).__name__}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"nested.{op}: argument {name!r} must have a real floating dtype, got {x.dtype}")
    return x


def _map_values(op: str, x, fn) -> NestedTensor:
    """``fn`` applied to the packed values of the NestedTensor ``x`` (same offsets)."""
    x = _nested(op, "x", x)
    return x.with_values(fn(x.values))


def _logical_axis(op: str, x: NestedTensor, axis) -> int:
    return logical_axis(f"nested.{op}", x, axis)


# ----------------------------------------------------------------------------------------------
# Pointwise (seed gelu_backwards_nested, threshold_backwards_nested, silu_backward_nested: the
# dense backward mapped over the packed values)


def gelu(x: NestedTensor, approximate: bool = True) -> NestedTensor:
    """``jaxrules.nn.gelu`` on every row (seed ``gelu_backwards_nested``)."""
    return _map_values("gelu", x, lambda v: dense_nn.gelu(v, approximate))


def relu(x: NestedTensor) -> NestedTensor:
    """``max(x, 0)`` on every row; derivative ``[x > 0]`` (seed ``threshold_backwards_nested``)."""
    return _map_values("relu", x, dense_nn.relu)


def threshold(x: NestedTensor, threshold: float, value: float) -> NestedTensor:
    """torch's threshold on every row (seed ``threshold_backwards_nested``)."""
    return _map_values("threshold", x, lambda v: dense_nn.threshold(v, threshold, value))


def silu(x: NestedTensor) -> NestedTensor:
    """``x sigmoid(x)`` on every row (seed ``silu_backward_nested``)."""
    return _map_values("silu", x, dense_nn.silu)


# ----------------------------------------------------------------------------------------------
# Linear maps


def linear(x: NestedTensor, weight, bias=None) -> NestedTensor:
    """``x @ weight^T + bias`` on every row, torch's weight layout (out, in) (seed
    ``nested_linear_backward``: g_x = G W, g_W = G^T X, g_b = the sum of G's rows — the bias
    gradient torch leaves unimplemented for nested input)."""
    return _map_values("linear", x, lambda v: dense_nn.linear(v, weight, bias))


def matmul(a: NestedTensor, b) -> NestedTensor:
    """Per component ``a_i @ b`` (b dense, broadcast over the inner batch axes of ``a``) or
    ``a_i @ b_i`` (b a NestedTensor with the same offsets; the matmul runs over the last two
    inner axes). Seed ``matmul_backward_nested``: g_a = g b^T, g_b = a^T g per component."""
    a = _nested("matmul", "a", a)
    if isinstance(b, NestedTensor):
        same_offsets("nested.matmul", a, b)
        if len(a.inner_shape) < 2 or len(b.inner_shape) < 2:
            raise ValueError(
                "nested.matmul: NestedTensor @ NestedTensor multiplies the last two inner axes, so both need "
                f"at least two inner axes; got inner shapes {a.inner_shape} and {b.inner_shape} (the ragged axis "
                "cannot be contracted into a jagged result)"
            )
        return a.with_values(dense_matmul(a.values, b.values))
    b = jnp.asarray(b)
    if b.ndim < 1 or b.ndim - 1 > len(a.inner_shape):
        raise ValueError(
            f"nested.matmul: a dense right operand must have rank 1 to {len(a.inner_shape) + 1} (it broadcasts "
            f"over the inner axes {a.inner_shape}, not over the components), got shape {b.shape}"
        )
    return a.with_values(dense_matmul(a.values, b))


# ----------------------------------------------------------------------------------------------
# Reductions and softmax


def sum(x: NestedTensor, axis):  # noqa: A001 - the numpy name
    """Sum over ``axis``: the ragged axis 1 gives a dense (B, *inner) array (seed
    ``_nested_sum_backward``: the cotangent is broadcast over each component); inner axes give a
    NestedTensor. A tuple may mix them."""
    x = _nested("sum", "x", x)
    axes = sorted({_logical_axis("sum", x, a) for a in (axis if isinstance(axis, tuple | list) else (axis,))})
    inner = tuple(a - 1 for a in axes if a >= 2)
    values = dense_sum(x.values, axis=inner) if inner else x.values
    if 1 not in axes:
        return x.with_values(values)
    return ragged_sum_op(values, x.segment_ids(), num_segments=x.batch_size)


def softmax(x: NestedTensor, axis: int = -1) -> NestedTensor:
    """Softmax over ``axis``: over each component's rows for the ragged axis 1 (segment max and
    sum), else the dense op on ``values``. Seed ``nested_softmax_backward``."""
    x = _nested("softmax", "x", x)
    ax = _logical_axis("softmax", x, axis)
    if ax == 1:
        return x.with_values(ragged_softmax_op(x.values, x.segment_ids(), num_segments=x.batch_size))
    return x.with_values(dense_nn.softmax(x.values, axis=ax - 1))


def layer_norm(x: NestedTensor, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> NestedTensor:
    """``jaxrules.nn.layer_norm`` over trailing inner axes of every row (seed
    ``layer_norm_backward_nested``; weight and bias optional, unlike torch's strided layout)."""
    x = _nested("layer_norm", "x", x)
    shape = (normalized_shape,) if isinstance(normalized_shape, numbers.Integral) else tuple(normalized_shape)
    if len(shape) > len(x.inner_shape):
        raise ValueError(
            f"nested.layer_norm: normalized_shape {shape} would include the ragged axis; it must match trailing "
            f"inner axes of {x.inner_shape}"
        )
    return x.with_values(dense_nn.layer_norm(x.values, shape, weight, bias, eps))


# ----------------------------------------------------------------------------------------------
# Attention


def _attention_inputs(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        _nested("scaled_dot_product_attention", name, t)
    same_offsets("nested.scaled_dot_product_attention", q, k)
    same_offsets("nested.scaled_dot_product_attention", q, v)
    if len(q.inner_shape) not in (1, 2):
        raise ValueError(
            "nested.scaled_dot_product_attention: q, k, v must have shape (B, ragged, heads, dim) or "
            f"(B, ragged, dim), got inner shape {q.inner_shape}"
        )
    same_heads = len(v.inner_shape) == len(q.inner_shape) and q.inner_shape[:-1] == v.inner_shape[:-1]
    if q.inner_shape != k.inner_shape or not same_heads:
        raise ValueError(
            "nested.scaled_dot_product_attention: q and k need the same inner shape and v the same heads, got "
            f"{q.inner_shape}, {k.inner_shape}, {v.inner_shape}"
        )


def _positive(name, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"nested.scaled_dot_product_attention: {name} must be a positive int, got {value!r}")
    return int(value)


def _attention_impl(impl, dtype, dim: int, block: int) -> str:
    if impl is not None:
        if impl not in _IMPLS:
            raise ValueError(f"nested.scaled_dot_product_attention: impl must be one of {_IMPLS}, got {impl!r}")
        return impl
    kernel_ok = (
        jax.default_backend() == "gpu"
        and jnp.dtype(dtype) in (jnp.float32, jnp.bfloat16, jnp.float16)
        and dim >= 16 and dim & (dim - 1) == 0 and block >= 16
    )
    return "pallas" if kernel_ok else "xla"


def _max_len(q: NestedTensor, max_seqlen) -> int:
    if max_seqlen is not None:
        return _positive("max_seqlen", max_seqlen)
    try:
        return max(q.max_length("scaled_dot_product_attention"), 1)
    except ValueError:
        return max(q.values.shape[0], 1)  # traced lengths and no bound: one sequence may hold every row


def scaled_dot_product_attention(
    q, k, v, *, scale=None, max_seqlen=None, block=None, pairs_per_step=None, with_lse=False, impl=None
):
    """``softmax(scale q_i k_i^T) v_i`` for each sequence ``i`` (no attention across sequences,
    no padding in the math). q, k, v: NestedTensors with the same offsets, of logical shape
    (B, ragged, heads, dim) or (B, ragged, dim); ``scale`` defaults to 1/sqrt(dim).

    Work and memory grow with sum_i ceil(n_i / block)^2 blocks of ``block`` x ``block`` scores
    (``blocks``), bounded statically through ``max_seqlen`` (the argument, else ``q.max_seqlen``,
    else the longest sequence when the offsets are concrete; under jit without a bound, every
    row may be one sequence). A sequence longer than ``max_seqlen`` raises at run time. The pairs
    are visited ``pairs_per_step`` at a time (default: about 2**25 scores per step). The
    softmax is computed in float32 or wider; ``with_lse`` also returns each query's log-sum-exp
    (B, ragged, heads) as a NestedTensor. Formulas: flash attention's per-block backward.

    ``impl``: ``"pallas"`` (fused kernels; the default on GPU for float32/bfloat16/float16 with a
    power-of-two head dim >= 16; inputs stay in their dtype, statistics in float32), ``"xla"``
    (the block-pair formulas in float32 or wider; the default elsewhere), or
    ``"pallas_interpret"`` (the kernels in Pallas interpret mode, for tests on the CPU)."""
    _attention_inputs(q, k, v)
    max_len = _max_len(q, max_seqlen)
    block = K.default_block(max_len) if block is None else _positive("block", block)
    heads_axis = len(q.inner_shape) == 2
    dim = q.inner_shape[-1]
    scale = 1.0 / math.sqrt(dim) if scale is None else float(scale)
    offsets = q.offsets
    total = q.values.shape[0]
    lengths = jnp.diff(offsets)
    P.runtime_check(
        jnp.any(lengths > max_len),
        f"nested.scaled_dot_product_attention: a sequence is longer than max_seqlen={max_len}",
    )
    heads = q.inner_shape[0] if heads_axis else 1
    chunk = K.chunk_size(K.plan_sizes(total, q.batch_size, block, max_len, 1)[1], heads, block)
    if pairs_per_step is not None:
        chunk = _positive("pairs_per_step", pairs_per_step)
    plan = K.attention_plan(offsets, total, block, max_len, chunk)
    impl = _attention_impl(impl, q.dtype, dim, block)
    qv, kv, vv = ((t.values if heads_axis else t.values[:, None]) for t in (q, k, v))
    if impl == "xla":
        work = jnp.promote_types(q.dtype, jnp.float32)
        out, lse = attention_op(
            qv.astype(work), kv.astype(work), vv.astype(work), *plan, scale=scale, block=block, chunk=chunk
        )
    else:
        dtype = jnp.result_type(qv, kv, vv)
        meta = KN.block_meta(offsets, plan.token_slot, K.num_blocks_of(plan.slot_token, block) - 1, block)
        out, lse = fused_attention_op(qv.astype(dtype), kv.astype(dtype), vv.astype(dtype), *plan, *meta, scale=scale,
                                      block=block, chunk=chunk, interpret=impl == "pallas_interpret")
    out = (out if heads_axis else out[:, 0]).astype(v.dtype)
    result = q.with_values(out)
    if with_lse:
        return result, q.with_values(lse if heads_axis else lse[:, 0])
    return result

