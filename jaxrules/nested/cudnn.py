"""Ragged attention on cuDNN's flash attention: one packed row ("THD") or padded rows.

A NestedTensor's values (total, heads, dim) with offsets (B + 1,) are already a packed layout:
JAX's cuDNN fused attention (``dot_product_attention`` of ``mechanism.cudnn_fused_attention()``,
the function behind ``jax.nn.dot_product_attention(implementation="cudnn")``, which does not
expose packing) can run them as ONE batch row ``values[None]`` (1, T = total, N, H) holding the B
sequences as segments: attention within each segment, no copy. Or, where that costs cuDNN more
(see Cost), each sequence is copied into its own row of ``max_len`` (the padded layout).

JAX's conventions (``dot_product_attention``'s docstring, ``_fix_seqlen_offsets``, and the
packed-layout test ``test_sdpa_packed_layout`` in tests/fused_attention_stablehlo_multigpu_test.py,
jax 0.10 and 0.11 alike):

* ``q_offsets``/``kv_offsets`` (B_rows, M + 1) int32: each segment's START, in tokens from the
  start of its batch row; unused entries -1 (the last entry is -1 in a full row: offsets are
  starts, not cumulative lengths). ``q_seqlen``/``kv_seqlen`` (B_rows, M) int32: each segment's
  length, -1 for unused ones. M > 1 selects the packed layout (``get_max_seg_per_batch``).
* JAX then drops the -1 entries and appends filler segments (length 0, start B_rows * T), adds
  ``row * T`` to the starts and multiplies them by the token stride N * H: cuDNN's ragged
  offsets in elements (``_fix_seqlen_offsets``).
* The causal mask (``PADDING_CAUSAL``, as JAX's test) is per segment, top-left aligned when the
  query and key segments coincide (JAX's test compares with "global causal restricted to the
  segment"). Packed layout needs compute capability 9.0 (``check_is_flash_attention``).
* The forward's softmax statistics are (B_rows * M, N, T) float32: here B * N * total floats
  (kept between forward and backward, as any flash attention keeps its log-sum-exp).

Cost. XLA hands cuDNN ``b = B_rows * M`` segment slots of ``s_q = T`` rows each
(``FixDimsForRaggedOffset`` in XLA's cuda_dnn.cc) and sets no ``max_total_seq_len``: cuDNN's
grid and its backward workspace (the float32 dQ accumulator, ``b * heads * s_q * dim``, zeroed)
grow with ``b * s_q``. One row of all B sequences is ``max(B, 2) * total`` slot rows; the padded
layout (each sequence in its own row of ``max_len``, JAX's non-packed cuDNN call with the
lengths as a padding mask: what padded cuDNN attention does, after a copy) is ``B * max_len``,
the fewest any layout has (a slot is at least the longest sequence). ``layout_for`` picks the
packed layout where it has no more slot rows than the padded one (no copies), else the padded.

Derivatives as the dense cuDNN attention (``jaxrules.ops.attention``): forward and VJP are
cuDNN's (``jax.vjp`` of its call); the JVP and second derivatives are those of the XLA formulas
(``jaxrules.nested.rules.attention_op``, via ``differentiated_as``): cuDNN is never differentiated.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxrules import partials as P
from jaxrules.dispatch import CUDNN_DTYPES
from jaxrules.mechanism import cudnn_fused_attention, define_op, differentiated_as
from jaxrules.nested import blocks as K
from jaxrules.nested.rules import attention_op

_fused = cudnn_fused_attention()  # JAX's cuDNN attention with the packed layout (a JAX internal: mechanism)

__all__ = ["CUDNN_MAX_HEAD_DIM", "accepts", "attention", "layout_for", "packed_segments", "static_applies"]

CUDNN_MAX_HEAD_DIM = 256  # JAX's bound on Hopper (``check_is_flash_attention``), which packing needs
_MIN_SEGMENTS = 2  # JAX's packed layout needs two segment slots per row (one sequence: one empty filler)


def packed_segments(offsets) -> tuple[jax.Array, jax.Array]:
    """``(seqlen (1, M), starts (1, M + 1))``: JAX's packed-layout ``q_seqlen`` and
    ``q_offsets`` for the sequences ``values[offsets[i]:offsets[i + 1]]`` in one batch row,
    ``M = max(B, 2)`` segment slots. Slot ``i < B`` is sequence ``i`` (start ``offsets[i]``,
    length ``n_i``); an empty sequence, the filler slot of a single sequence and the last start
    entry are -1 (JAX drops them, as the unused slots of a row with fewer segments).

    Args:
        offsets: int (B + 1,) cumulative offsets of the NestedTensor (traceable).
    """
    offsets = jnp.asarray(offsets, jnp.int32)
    lengths = jnp.diff(offsets)
    filler = jnp.full((max(_MIN_SEGMENTS - lengths.shape[0], 0),), -1, jnp.int32)
    seqlen = jnp.concatenate([jnp.where(lengths > 0, lengths, -1), filler])
    starts = jnp.concatenate([jnp.where(lengths > 0, offsets[:-1], -1), filler, jnp.full((1,), -1, jnp.int32)])
    return seqlen[None], starts[None]


def layout_for(batch: int, total: int, max_len: int) -> str:
    """``"packed"`` (one row, no copies) where its ``max(B, 2) * total`` slot rows are no more
    than the padded layout's ``B * max_len``, else ``"padded"`` (see the module docstring)."""
    return "packed" if max(batch, _MIN_SEGMENTS) * total <= batch * max_len else "padded"


def _padded_row(max_len: int) -> int:
    """The padded layout's row length: ``max_len`` rounded up to even (JAX's cuDNN attention
    refuses odd sequence lengths)."""
    return max_len + max_len % 2


def _padded_index(offsets, total: int, row: int):
    """The slot of each token in the padded (B * row) layout: ``b * row + position``."""
    lengths = jnp.diff(offsets)
    seq = jnp.repeat(jnp.arange(lengths.shape[0], dtype=jnp.int32), lengths, total_repeat_length=total)
    return seq * row + jnp.arange(total, dtype=jnp.int32) - offsets[seq]


def _padded_source(offsets, row: int):
    """``(token, valid)`` of each slot of the padded (B * row) layout: the token it holds (0 where
    none) and whether it holds one."""
    position = jnp.arange(row, dtype=jnp.int32)
    valid = position[None, :] < jnp.diff(offsets)[:, None]
    return jnp.where(valid, offsets[:-1, None] + position[None, :], 0).reshape(-1), valid.reshape(-1)


def _packed_forward(q, k, v, offsets, scale, causal):
    """JAX's cuDNN attention on one row, one segment per non-empty sequence (``packed_segments``)."""
    seqlen, starts = packed_segments(offsets)
    mask = _fused.MaskType.PADDING_CAUSAL if causal else _fused.MaskType.NO_MASK

    def call(q, k, v):
        return _fused.dot_product_attention(q[None], k[None], v[None], q_seqlen=seqlen, kv_seqlen=seqlen,
                                            q_offsets=starts, kv_offsets=starts, scale=scale, mask_type=mask,
                                            qkv_layout="BTNH")[0]

    return jax.vjp(call, q, k, v)


def _padded_forward(q, k, v, offsets, scale, causal, max_len):
    """JAX's cuDNN attention with each sequence in its own row (zeros after it; an empty sequence
    gets length 1, a row of zeros no token reads), the lengths as cuDNN's padding mask. Into and
    out of the rows by gathers only, in both directions (the pullback pads the cotangent and
    gathers the gradients itself: JAX would transpose a gather into a scatter-add)."""
    total, batch, row = q.shape[0], offsets.shape[0] - 1, _padded_row(max_len)
    source, valid = _padded_source(offsets, row)
    slots = _padded_index(offsets, total, row)

    def pad(x):
        rows = jnp.where(valid.reshape(-1, *[1] * (x.ndim - 1)), jnp.take(x, source, axis=0), 0)
        return rows.reshape(batch, row, *x.shape[1:])

    def unpad(x):
        return x.reshape(batch * row, *x.shape[2:]).at[slots].get(indices_are_sorted=True, unique_indices=True)

    seqlen = jnp.maximum(jnp.diff(offsets), 1)
    mask = _fused.MaskType.PADDING_CAUSAL if causal else _fused.MaskType.PADDING
    out, pullback = jax.vjp(lambda q, k, v: _fused.dot_product_attention(
        q, k, v, q_seqlen=seqlen, kv_seqlen=seqlen, scale=scale, mask_type=mask, qkv_layout="BTNH"),
        pad(q), pad(k), pad(v))
    return unpad(out), lambda g: tuple(unpad(d) for d in pullback(pad(g)))


def _forward(q, k, v, offsets, scale, causal, layout, max_len):
    """``(out, pullback)`` of cuDNN's training forward on the packed values (total, N, H) in
    ``layout`` (``"packed"``: ``_packed_forward``; ``"padded"``: ``_padded_forward``): the primal
    and the backward call the same forward, which XLA merges into one (as the dense cuDNN op)."""
    offsets = jnp.asarray(offsets, jnp.int32)
    if layout == "packed":
        return _packed_forward(q, k, v, offsets, scale, causal)
    return _padded_forward(q, k, v, offsets, scale, causal, max_len)


def _reference(q, k, v, offsets, scale, causal, layout, block, chunk, max_len):
    """The XLA formulas' output ``softmax(scale q_i k_i^T) v_i`` per sequence
    (``jaxrules.nested.rules.attention_op`` in float32, cast back to ``v``'s dtype); ``layout``
    (cuDNN's) is unused: the signature is ``_backward``'s."""
    plan = K.attention_plan(offsets, q.shape[0], block, max_len, chunk, causal)
    work = P.promoted_dtype(q.dtype, jnp.float32)
    out, _ = attention_op(q.astype(work), k.astype(work), v.astype(work), *plan, scale=scale, block=block,
                          chunk=chunk, causal=causal)
    return out.astype(v.dtype)


def _reference_vjp(q, k, v, offsets, g, *static):
    """``(dq, dk, dv)`` by the XLA formulas (what cuDNN's backward computes)."""
    return jax.vjp(lambda q, k, v: _reference(q, k, v, offsets, *static), q, k, v)[1](g)


@differentiated_as(_reference_vjp, n_static=6)
def _backward(q, k, v, offsets, g, scale, causal, layout, block, chunk, max_len):
    """cuDNN's backward; its derivatives (second order) those of ``_reference_vjp``."""
    return _forward(q, k, v, offsets, scale, causal, layout, max_len)[1](g)


def _primal(q, k, v, offsets, *, scale, causal, layout, block, chunk, max_len):
    return _forward(q, k, v, offsets, scale, causal, layout, max_len)[0]


def _jvp(res, tq, tk, tv, _, *, scale, causal, layout, block, chunk, max_len):
    """The XLA formulas' JVP (``attention_op``'s, through ``_reference``) on the tangents given."""
    q, k, v, offsets = res
    given = [i for i, t in enumerate((tq, tk, tv)) if t is not None]

    def f(*xs):
        args = [q, k, v]
        for i, x in zip(given, xs):
            args[i] = x
        return _reference(*args, offsets, scale, causal, layout, block, chunk, max_len)

    return jax.jvp(f, [res[i] for i in given], [(tq, tk, tv)[i] for i in given])[1]


def _vjp(res, g, *, scale, causal, layout, block, chunk, max_len):
    return (*_backward(*res, g, scale, causal, layout, block, chunk, max_len), None)


cudnn_attention_op = define_op("nested_attention_cudnn", _primal, _jvp, _vjp)


def attention(q, k, v, offsets, *, scale, causal, layout, block, chunk, max_len):
    """``softmax(scale q_i k_i^T) v_i`` per sequence (``is_causal``: top-left aligned within
    each sequence) by cuDNN's flash attention; mirrors torch's ``scaled_dot_product_attention``
    on jagged NestedTensors (its cuDNN/flash varlen backends).

    Args:
        q, k, v: the packed values (total, heads, dim), float16 or bfloat16, one dtype.
        offsets: int (B + 1,) offsets of the sequences.
        scale: the logits' factor; causal: the causal mask.
        layout: ``"packed"`` or ``"padded"`` (``_forward``, ``layout_for``).
        block, chunk, max_len: the static plan of the XLA formulas that give the JVP and the
            second derivatives (``jaxrules.nested.blocks.attention_plan``); ``max_len`` (a
            bound of the lengths) is also the padded layout's row.
    """
    return cudnn_attention_op(q, k, v, offsets, scale=scale, causal=causal, layout=layout, block=block, chunk=chunk,
                              max_len=max_len)


def static_applies(backend: str, dtype, dim: int, value_dim: int, heads: int, total: int, with_lse: bool) -> bool:
    """Whether cuDNN's attention may run (before asking JAX, ``accepts``): a GPU,
    float16/bfloat16, one head dim (``dim == value_dim``) that is a multiple of 8 up to
    ``CUDNN_MAX_HEAD_DIM``, at least one head and one row, element offsets within int32 (JAX
    computes the packed layout's in int32), and no ``with_lse`` (JAX's cuDNN backward drops the
    cotangent of the statistics it returns, and the packed layout's are per segment slot)."""
    return (backend == "gpu" and jnp.dtype(dtype).name in CUDNN_DTYPES and not with_lse and dim == value_dim
            and 0 < dim <= CUDNN_MAX_HEAD_DIM and dim % 8 == 0 and heads > 0 and total > 0
            and total * heads * dim < 2**31)


@functools.lru_cache(maxsize=256)
def accepts(total: int, batch: int, heads: int, dim: int, dtype, scale: float, causal: bool, layout: str,
            max_len: int) -> bool:
    """Whether JAX's cuDNN attention takes this call (its training forward traced once per
    shape: its rules on head dims and the GPU, e.g. compute capability 9.0 for the packed
    layout, vary with the cuDNN version and the device)."""
    x = jax.ShapeDtypeStruct((total, heads, dim), jnp.dtype(dtype))
    offsets = jax.ShapeDtypeStruct((batch + 1,), jnp.int32)
    try:
        jax.eval_shape(lambda q, k, v, o: _forward(q, k, v, o, scale, causal, layout, max_len)[0], x, x, x, offsets)
    except (NotImplementedError, ValueError, RuntimeError):  # JAX's refusals: shapes, layouts, GPU, no cuDNN
        return False
    return True
