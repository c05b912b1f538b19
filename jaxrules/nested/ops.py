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
import numpy as np

from jaxrules import dispatch
from jaxrules import partials as P
from jaxrules.mechanism import concrete_value, define_op
from jaxrules.nested import blocks as K
from jaxrules.nested import cudnn as C
from jaxrules.nested import kernels as KN
from jaxrules.nested import rules as R
from jaxrules.nested.tensor import NestedTensor, logical_axis, same_offsets
from jaxrules.ops import activations as dense_nn
from jaxrules.ops.linalg import linear as dense_linear
from jaxrules.ops.linalg import matmul as dense_matmul
from jaxrules.ops.normalization import layer_norm as dense_layer_norm
from jaxrules.ops.reductions import mean as dense_mean
from jaxrules.ops.reductions import sum as dense_sum

__all__ = [
    "dropout", "gelu", "layer_norm", "linear", "log_softmax", "matmul", "mean", "relu", "scaled_dot_product_attention",
    "silu", "softmax", "sum", "threshold",
]

ragged_sum_op = define_op("nested_ragged_sum", R.ragged_sum_primal, R.ragged_sum_jvp, R.ragged_sum_vjp,
                          lambda out, x, seg, **_: seg)
ragged_softmax_op = define_op("nested_ragged_softmax", R.ragged_softmax_primal, R.ragged_softmax_jvp,
                              R.ragged_softmax_vjp, R.ragged_softmax_save)
ragged_log_softmax_op = define_op("nested_ragged_log_softmax", R.ragged_log_softmax_primal,
                                  R.ragged_log_softmax_jvp, R.ragged_log_softmax_vjp, R.ragged_softmax_save)
ragged_mean_op = define_op("nested_ragged_mean", R.ragged_mean_primal, R.ragged_mean_jvp, R.ragged_mean_vjp,
                           R.ragged_mean_save)
ragged_contract_op = define_op("nested_ragged_contract", R.ragged_contract_primal, R.ragged_contract_jvp,
                               R.ragged_contract_vjp, R.ragged_contract_save)
attention_op = R.attention_op
fused_attention_op = define_op("nested_attention_fused", R.fused_attention_primal, R.fused_attention_jvp,
                               R.fused_attention_vjp, R.fused_attention_save)
_IMPLS = ("xla", "cudnn", "pallas", "pallas_interpret")


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


def dropout(
    x: NestedTensor, p: float | jax.Array = 0.5, training: bool = True, *, key: jax.Array | None = None
) -> NestedTensor:
    """``jaxrules.nn.dropout`` on the packed values: each entry zeroed with probability ``p``,
    the rest scaled by ``1/(1 - p)`` (seed ``infinitely_differentiable_native_dropout_backward``:
    the gradient is ``g mask / (1 - p)``). Mirrors ``torch.nn.functional.dropout`` on a jagged
    NestedTensor, with an explicit PRNG key as ``jaxrules.nn.dropout``.

    Args:
        x: the NestedTensor (real floating dtype).
        p: the probability of zeroing an entry, in [0, 1] (a number, or a 0-d array or tracer;
            no gradient).
        training: apply dropout; when False, ``x`` is returned unchanged.
        key: a ``jax.random`` key, required when training with ``p > 0``. The mask is that of
            ``jaxrules.nn.dropout(x.values, p, key=key)``: it depends on the packed shape, not on
            the lengths.

    Returns:
        A NestedTensor with ``x``'s offsets.
    """
    return _map_values("dropout", x, lambda v: dense_nn.dropout(v, p, training, key=key))


# ----------------------------------------------------------------------------------------------
# Linear maps


def linear(x: NestedTensor, weight, bias=None) -> NestedTensor:
    """``x @ weight^T + bias`` on every row, torch's weight layout (out, in) (seed
    ``nested_linear_backward``: g_x = G W, g_W = G^T X, g_b = the sum of G's rows — the bias
    gradient torch leaves unimplemented for nested input)."""
    return _map_values("linear", x, lambda v: dense_linear(v, weight, bias))


def matmul(a: NestedTensor, b: NestedTensor | jax.Array, *, transpose_a: bool = False) -> NestedTensor | jax.Array:
    """Per component ``a_i @ b`` (b dense) or ``a_i @ b_i`` (b a NestedTensor). Seed
    ``matmul_backward_nested``: g_a = g b^T, g_b = a^T g per component. Mirrors
    ``torch.matmul`` on jagged NestedTensors.

    Args:
        a: the left NestedTensor (real floating dtype).
        b: a dense array broadcast over the inner batch axes of ``a``, or a NestedTensor with
            ``a``'s offsets (the matmul runs over the last two inner axes of each row; torch's
            (B, j, D, E) @ (B, j, E, F)).
        transpose_a: contract the ragged axis: ``a`` and ``b`` are NestedTensors of logical
            shapes (B, ragged, D) and (B, ragged, E) with the same offsets and the result is
            the dense (B, D, E) array of ``a_i^T b_i`` (torch's jagged
            ``a.transpose(1, 2) @ b``, (B, D, j) @ (B, j, E)); an empty component gives zeros.

    Returns:
        A NestedTensor with ``a``'s offsets, or the dense (B, D, E) array with ``transpose_a``.
    """
    a = _nested("matmul", "a", a)
    if transpose_a:
        b = _nested("matmul", "b", b)
        same_offsets("nested.matmul", a, b)
        if len(a.inner_shape) != 1 or len(b.inner_shape) != 1:
            raise ValueError(
                "nested.matmul: with transpose_a, a and b must have logical shapes (B, ragged, D) and (B, ragged, E) "
                f"(one inner axis each), got inner shapes {a.inner_shape} and {b.inner_shape}"
            )
        dtype = jnp.result_type(a.values, b.values)
        return ragged_contract_op(a.values.astype(dtype), b.values.astype(dtype), a.segment_ids(),
                                  num_segments=a.batch_size)
    if isinstance(b, NestedTensor):
        same_offsets("nested.matmul", a, b)
        if len(a.inner_shape) < 2 or len(b.inner_shape) < 2:
            raise ValueError(
                "nested.matmul: NestedTensor @ NestedTensor multiplies the last two inner axes, so both need "
                f"at least two inner axes; got inner shapes {a.inner_shape} and {b.inner_shape} (to contract the "
                "ragged axis into a dense result, pass transpose_a=True)"
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


# ``a @ b`` of a NestedTensor: the op above (this module defines the ops on the type; the type's
# module imports none).
NestedTensor.__matmul__ = matmul


def sum(x: NestedTensor, axis):  # noqa: A001 - the numpy name
    """Sum over ``axis``: the ragged axis 1 gives a dense ``(B, *inner)`` array (seed
    ``_nested_sum_backward``: the cotangent is broadcast over each component); inner axes give a
    NestedTensor. A tuple may mix them.

    Example:
        >>> import jax.numpy as jnp, jaxrules.nested as nested
        >>> x = nested.nested_tensor([jnp.ones((3, 2)), jnp.ones((1, 2))])
        >>> print(nested.sum(x, axis=1))  # over the ragged axis: dense (B, 2)
        [[3. 3.]
         [1. 1.]]
    """
    return _reduce("sum", x, axis, dense_sum, ragged_sum_op)


def _reduce(name, x, axis, dense_reduce, ragged_op):
    """``name`` over ``axis`` (an int or a tuple; the ragged axis 1 and inner axes >= 2): the
    inner axes by ``dense_reduce`` on the values, then the ragged axis by ``ragged_op``."""
    x = _nested(name, "x", x)
    axes = sorted({_logical_axis(name, x, a) for a in (axis if isinstance(axis, tuple | list) else (axis,))})
    inner = tuple(a - 1 for a in axes if a >= 2)
    values = dense_reduce(x.values, axis=inner) if inner else x.values
    if 1 not in axes:
        return x.with_values(values)
    return ragged_op(values, x.segment_ids(), num_segments=x.batch_size)


def softmax(x: NestedTensor, axis: int = -1) -> NestedTensor:
    """Softmax over ``axis``: over each component's rows for the ragged axis 1 (segment max and
    sum), else the dense op on ``values``. Seed ``nested_softmax_backward``.

    Example:
        >>> import jax.numpy as jnp, jaxrules.nested as nested
        >>> x = nested.nested_tensor([jnp.zeros((2, 1)), jnp.zeros((1, 1))])  # lengths 2 and 1
        >>> print([c.ravel().tolist() for c in nested.softmax(x, axis=1).unbind()])  # within each sequence
        [[0.5, 0.5], [1.0]]
    """
    x = _nested("softmax", "x", x)
    ax = _logical_axis("softmax", x, axis)
    if ax == 1:
        return x.with_values(ragged_softmax_op(x.values, x.segment_ids(), num_segments=x.batch_size))
    return x.with_values(dense_nn.softmax(x.values, axis=ax - 1))


def log_softmax(x: NestedTensor, axis: int = -1) -> NestedTensor:
    """``x - logsumexp(x)`` over ``axis``: over each component's rows for the ragged axis 1
    (segment max and sum; torch's jagged layout refuses this axis), else
    ``jaxrules.nn.log_softmax`` on the values. Seed ``nested_softmax_backward`` (per component
    ``_log_softmax_backward_data``: ``g - exp(y) sum(g)``). Mirrors ``torch.log_softmax``.

    Args:
        x: the NestedTensor (real floating dtype).
        axis: the logical axis of ``(B, ragged, *inner)``: 1 (the ragged axis) or an inner axis;
            axis 0 (across components) is refused.

    Returns:
        A NestedTensor with ``x``'s offsets.
    """
    x = _nested("log_softmax", "x", x)
    ax = _logical_axis("log_softmax", x, axis)
    if ax == 1:
        return x.with_values(ragged_log_softmax_op(x.values, x.segment_ids(), num_segments=x.batch_size))
    return x.with_values(dense_nn.log_softmax(x.values, axis=ax - 1))


def mean(x: NestedTensor, axis: int | tuple[int, ...]) -> jax.Array | NestedTensor:
    """Mean over ``axis`` (the axes ``sum`` takes): the ragged axis 1 gives a dense ``(B, *inner)``
    array, each component's sum over its length (NaN for an empty component, as torch); inner
    axes give a NestedTensor (``jaxrules.numpy.mean`` on the values, seed ``mean_backward``); a
    tuple may mix them (torch's jagged layout refuses the mix), the mean over all the entries
    of each component. Derivative over the ragged axis: ``g_i / n_i`` on the rows of component
    ``i`` (torch's mean backward per component). Mirrors ``torch.mean``.

    Args:
        x: the NestedTensor (real floating dtype).
        axis: a logical axis of ``(B, ragged, *inner)`` other than 0, or a tuple of them.

    Returns:
        A dense ``(B, *remaining inner)`` array when the ragged axis is reduced, else a
        NestedTensor with ``x``'s offsets.
    """
    return _reduce("mean", x, axis, dense_mean, ragged_mean_op)


def layer_norm(x: NestedTensor, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> NestedTensor:
    """``jaxrules.nn.layer_norm`` over trailing inner axes of every row (seed
    ``layer_norm_backward_nested``; weight and bias optional, unlike torch's strided layout).

    Example:
        >>> import jax.numpy as jnp, jaxrules.nested as nested
        >>> x = nested.nested_tensor([jnp.array([[1.0, 2.0, 3.0]]), jnp.array([[2.0, 2.0, 2.0], [0.0, 0.0, 6.0]])])
        >>> print(nested.layer_norm(x, 3).values.round(4))
        [[-1.2247  0.      1.2247]
         [ 0.      0.      0.    ]
         [-0.7071 -0.7071  1.4142]]
    """
    x = _nested("layer_norm", "x", x)
    shape = (normalized_shape,) if isinstance(normalized_shape, numbers.Integral) else tuple(normalized_shape)
    if len(shape) > len(x.inner_shape):
        raise ValueError(
            f"nested.layer_norm: normalized_shape {shape} would include the ragged axis; it must match trailing "
            f"inner axes of {x.inner_shape}"
        )
    return x.with_values(dense_layer_norm(x.values, shape, weight, bias, eps))


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


def _flag(name, value) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"nested.scaled_dot_product_attention: {name} must be a bool, got {value!r}")
    return bool(value)


def _positive(name, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"nested.scaled_dot_product_attention: {name} must be a positive int, got {value!r}")
    return int(value)


def _attention_impl(impl, dtype, dim: int, value_dim: int, block: int, heads: int = 1, cudnn: bool = False) -> str:
    """The attention's implementation: ``impl`` if given, else cuDNN's packed attention where it
    applies (``cudnn``: ``jaxrules.nested.cudnn.static_applies`` and ``accepts``, decided by the
    caller), else the Pallas kernels on a GPU for the dtypes and head dims they take (values as
    wide as queries); the XLA formulas for zero-size heads and wherever the kernels cannot run
    (``dispatch.triton_backend_missing``; a kernel ``impl`` then falls back too, warned once).
    ``impl="cudnn"`` where cuDNN does not apply raises a ``ValueError`` (as the dense attention's)."""
    if impl is not None and impl not in _IMPLS:
        raise ValueError(f"nested.scaled_dot_product_attention: impl must be one of {_IMPLS}, got {impl!r}")
    if impl in (None, "cudnn") and cudnn:
        return "cudnn"
    if impl == "cudnn":
        raise ValueError(
            "nested.scaled_dot_product_attention: impl='cudnn' needs a GPU (compute capability 9.0 for cuDNN's "
            "packed row), float16 or bfloat16, one head dim (q's and v's) that is a multiple of 8 up to "
            f"{C.CUDNN_MAX_HEAD_DIM}, no with_lse, and a call JAX's cuDNN attention accepts; got {jnp.dtype(dtype)}, "
            f"head dims {dim} and {value_dim}, {heads} heads on {jax.default_backend()}"
        )
    if 0 in (dim, value_dim, heads):
        return "xla"  # zero-size heads, or none: nothing for the kernels to do (the XLA formulas give the result)
    if impl not in (None, "xla") and value_dim != dim:
        raise ValueError(f"nested.scaled_dot_product_attention: impl={impl!r} needs v's head dim ({value_dim}) equal "
                         f"to q's ({dim}); impl='xla' takes any")
    if impl != "xla" and (impl is not None or jax.default_backend() == "gpu") and dispatch.triton_backend_missing():
        return "xla"
    if impl is not None:
        return impl
    kernel_ok = (
        jax.default_backend() == "gpu"
        and value_dim == dim
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
    q, k, v, *, scale=None, is_causal=False, max_seqlen=None, block=None, pairs_per_step=None, with_lse=False,
    impl=None
):
    """``softmax(scale q_i k_i^T) v_i`` for each sequence ``i`` (no attention across sequences,
    no padding in the math). q, k, v: NestedTensors with the same offsets, of logical shape
    (B, ragged, heads, dim) or (B, ragged, dim); ``scale`` defaults to 1/sqrt(dim).
    ``is_causal``: within each sequence, row ``r`` attends to rows ``<= r`` only (torch's
    ``is_causal``, top-left aligned; the blocks above the diagonal are skipped, not masked).

    Work and memory grow with sum_i ceil(n_i / block)^2 blocks of ``block`` x ``block`` scores
    (``blocks``), bounded statically through ``max_seqlen`` (the argument, else ``q.max_seqlen``,
    else the longest sequence when the offsets are concrete; under jit without a bound, every
    row may be one sequence). A sequence longer than ``max_seqlen`` raises a ``ValueError`` where the
    offsets are known on the host, and makes the result and its derivatives NaN under ``jit``
    (no host round trip: a run-time raise would stall the GPU every step). The pairs
    are visited ``pairs_per_step`` at a time (default: about 2**25 scores per step). The
    softmax is computed in float32 or wider; ``with_lse`` also returns each query's log-sum-exp
    (B, ragged, heads) as a NestedTensor. Formulas: flash attention's per-block backward
    (causal: over the causal pairs, the diagonal blocks masked).

    ``impl``: ``"cudnn"`` (cuDNN's flash attention, ``jaxrules.nested.cudnn``: one call, on the
    values as one packed row of B segments where that costs cuDNN no more than padding them to
    (B, ``max_len``), else on the padded copy with the lengths as its padding mask; forward and
    backward cuDNN's, the JVP and second derivatives the XLA formulas'; the default on a GPU for
    float16/bfloat16 with one head dim, a multiple of 8 up to 256, without ``with_lse``, where
    JAX's cuDNN attention accepts the call (the packed row needs compute capability 9.0);
    elsewhere ``impl="cudnn"`` raises a ``ValueError``), ``"pallas"`` (fused kernels; the GPU
    default where cuDNN does not apply, for float32/bfloat16/float16 with a power-of-two head dim
    >= 16; inputs stay in their dtype, statistics in float32), ``"xla"`` (the block-pair formulas
    in float32 or wider; the default elsewhere), or ``"pallas_interpret"`` (the kernels in Pallas
    interpret mode, for tests on the CPU). Without rows (every sequence empty) the result is empty whatever ``impl``.

    Example:
        >>> import jax.numpy as jnp, jaxrules.nested as nested
        >>> q = k = nested.nested_tensor([jnp.zeros((2, 2)), jnp.zeros((1, 2))])
        >>> v = nested.nested_tensor([jnp.array([[0.0, 0.0], [2.0, 2.0]]), jnp.array([[5.0, 5.0]])])
        >>> print([c[:, 0].tolist() for c in nested.scaled_dot_product_attention(q, k, v).unbind()])  # per sequence
        [[1.0, 1.0], [5.0]]
    """
    _attention_inputs(q, k, v)
    causal = _flag("is_causal", is_causal)
    max_len = _max_len(q, max_seqlen)
    block = K.default_block(max_len) if block is None else _positive("block", block)
    heads_axis = len(q.inner_shape) == 2
    dim = q.inner_shape[-1]
    scale = (1.0 / math.sqrt(dim) if dim else 1.0) if scale is None else float(scale)  # dim 0: every score 0
    offsets = q.offsets
    total = q.values.shape[0]
    over_bound = _over_bound(q, max_len)
    heads = q.inner_shape[0] if heads_axis else 1
    if total == 0:  # no rows (no sequences, or all empty): an empty result, nothing to plan
        result = q.with_values(jnp.zeros(v.values.shape, v.dtype))
        return (result, q.with_values(jnp.zeros(q.values.shape[:-1], P.stat_dtype(q.dtype)))) if with_lse else result
    chunk = K.chunk_size(K.plan_sizes(total, q.batch_size, block, max_len, 1, causal)[1], heads, block)
    if pairs_per_step is not None:
        chunk = _positive("pairs_per_step", pairs_per_step)
    dtype = jnp.result_type(q.values, k.values, v.values)
    layout = None  # cuDNN's: the cheaper one (``C.layout_for``), else the padded one if JAX refuses it
    if impl in (None, "cudnn") and C.static_applies(jax.default_backend(), dtype, dim, v.inner_shape[-1], heads, total,
                                                    bool(with_lse)):
        layout = next((lay for lay in dict.fromkeys((C.layout_for(q.batch_size, total, max_len), "padded"))
                       if C.accepts(total, q.batch_size, heads, dim, dtype, scale, causal, lay, max_len)), None)
    cudnn = layout is not None
    impl = _attention_impl(impl, q.dtype, dim, v.inner_shape[-1], block, heads, cudnn)
    qv, kv, vv = _nan_derivatives_if(over_bound, *((t.values if heads_axis else t.values[:, None]) for t in (q, k, v)))
    if impl == "cudnn":  # the plan (of the XLA formulas' JVP) is built inside, where used
        qv, kv, vv = (x.astype(dtype) for x in (qv, kv, vv))
        out, lse = C.attention(qv, kv, vv, offsets, scale=scale, causal=causal, layout=layout, block=block,
                               chunk=chunk, max_len=max_len), None
    elif impl == "xla":
        plan = K.attention_plan(offsets, total, block, max_len, chunk, causal)
        work = P.promoted_dtype(q.dtype, jnp.float32)
        out, lse = attention_op(
            qv.astype(work), kv.astype(work), vv.astype(work), *plan, scale=scale, block=block, chunk=chunk,
            causal=causal,
        )
    else:
        plan = K.attention_plan(offsets, total, block, max_len, chunk, causal)
        meta = KN.block_meta(offsets, plan.token_slot, K.num_blocks_of(plan.slot_token, block) - 1, block)
        out, lse = fused_attention_op(qv.astype(dtype), kv.astype(dtype), vv.astype(dtype), *plan, *meta, scale=scale,
                                      block=block, chunk=chunk, interpret=impl == "pallas_interpret", causal=causal)
    out = (out if heads_axis else out[:, 0]).astype(v.dtype)
    result = q.with_values(_nan_if(over_bound, out))
    if with_lse:
        return result, q.with_values(_nan_if(over_bound, lse if heads_axis else lse[:, 0]))
    return result


def _over_bound(q: NestedTensor, max_len: int):
    """Whether a sequence is longer than ``max_len``: ``ValueError`` at once where the offsets
    are known on the host; else a traced boolean, which makes the result NaN (``_nan_if``): a
    check that raises from inside ``jit`` needs a host callback, which stalls the GPU's queue
    at every step."""
    if concrete_value(q.offsets) is not None:
        longest = int(np.diff(q.host_offsets("scaled_dot_product_attention")).max(initial=0))
        if longest > max_len:
            raise ValueError(f"nested.scaled_dot_product_attention: a sequence is longer than max_seqlen={max_len} "
                             f"(its length: {longest})")
        return None
    return jnp.any(jnp.diff(q.offsets) > max_len)


def _nan_if(flag, x):
    """``x`` times NaN where ``flag`` (its derivatives then NaN too), else ``x``; ``flag`` None: ``x``."""
    return x if flag is None else x * P.nan_factor(flag, x.dtype)


@jax.custom_jvp
def _nan_derivative_if(flag, x):
    """``x``, whose derivatives are NaN where ``flag`` (a traced boolean): the inputs' side of
    ``_nan_if`` (a token a too-short plan leaves out gets no gradient otherwise), free in the
    forward pass."""
    return x


@_nan_derivative_if.defjvp
def _nan_derivative_if_jvp(primals, tangents):
    flag, x = primals
    return x, _nan_if(flag, tangents[1])


def _nan_derivatives_if(flag, *xs):
    """``_nan_derivative_if`` of each of ``xs``; ``flag`` None: ``xs``."""
    return xs if flag is None else tuple(_nan_derivative_if(flag, x) for x in xs)

