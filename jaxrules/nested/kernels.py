"""Fused GPU kernels (Pallas, Triton backend) for attention over ragged sequences.

The layout is ``blocks``' slot layout, head-major: (heads, slots, dim) with every block of
``block`` slots inside one sequence. Program (j, h) owns block j of head h and loops over the
blocks of its own sequence only (a loop with a run-time trip count), so the work is
sum_i ceil(n_i / block)^2 tiles — no padding to the longest sequence and no dummy tiles — and
scores never leave the chip (flash attention). ``causal``: the loops stop at (forward, dq) or
start from (dk, dv) the program's own block, so the blocks above the diagonal are skipped, and
the diagonal block is masked. Per block: ``first`` (the first block of its
sequence), ``count`` (the sequence's number of blocks), ``length`` (its number of rows) and
``local`` (its index within the sequence).

The same kernels run on the CPU in Pallas interpret mode (the tests), against the XLA formulas
of ``rules``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from jaxrules import partitioning
from jaxrules.mechanism import varying_struct
from jaxrules.partials import stat_dtype

_NEG = -1e30  # masked score (finite: exp underflows to 0 without inf - inf)


def block_meta(offsets, token_slot, num_blocks: int, block: int):
    """(first, count, length, local) per block of the slot layout (int32, num_blocks + 1 each;
    the last, empty block has count 0)."""
    lengths = jnp.diff(offsets)
    count = (lengths + block - 1) // block
    first = jnp.cumsum(count) - count
    blocks = jnp.arange(num_blocks + 1, dtype=count.dtype)
    owner = jnp.searchsorted(jnp.cumsum(count), blocks, side="right")
    real = owner < lengths.shape[0]
    owner = jnp.minimum(owner, lengths.shape[0] - 1)
    pick = lambda x: jnp.where(real, x[owner], 0).astype(jnp.int32)  # noqa: E731
    local = jnp.where(real, blocks - first[owner], 0).astype(jnp.int32)
    return pick(first), pick(count), pick(lengths), local


def _rows(local, length, block):
    """Which rows of a block lie inside its sequence."""
    return local * block + jnp.arange(block, dtype=local.dtype) < length


def _keep(q_block, k_block, length, block, causal):
    """(query rows, key rows) of blocks ``q_block`` and ``k_block`` of one sequence: the key row
    lies inside the sequence (and, ``causal``, at or before the query row)."""
    keys = k_block * block + jnp.arange(block, dtype=jnp.result_type(k_block))
    keep = (keys < length)[None, :]
    if causal:
        keep = keep & (keys[None, :] <= (q_block * block + jnp.arange(block, dtype=jnp.result_type(q_block)))[:, None])
    return keep


def _mm(a, b):
    """``a @ b``, accumulated in float32 or wider."""
    return jnp.dot(a, b, preferred_element_type=stat_dtype(a.dtype))


def _mm_nt(a, b):
    """``a @ b^T``, accumulated in float32 or wider."""
    return jax.lax.dot_general(a, b, (((1,), (1,)), ((), ())), preferred_element_type=stat_dtype(a.dtype))


def _mm_tn(a, b):
    """``a^T @ b``, accumulated in float32 or wider."""
    return jax.lax.dot_general(a, b, (((0,), (0,)), ((), ())), preferred_element_type=stat_dtype(a.dtype))


def _forward_kernel(first_ref, count_ref, length_ref, local_ref, q_ref, k_ref, v_ref, o_ref, lse_ref, *, scale, block,
                    causal):
    j = pl.program_id(0)
    first, count, length, local = first_ref[j], count_ref[j], length_ref[j], local_ref[j]
    q = q_ref[...]
    dim = q.shape[-1]

    def body(i, carry):
        acc, m, norm = carry
        rows = pl.ds((first + i) * block, block)
        s = scale * _mm_nt(q, k_ref[rows, :])
        keep = _keep(local, i, length, block, causal)
        s = jnp.where(keep, s, _NEG)
        m_new = jnp.maximum(m, s.max(-1))
        rescale = jnp.exp(m - m_new)
        p = jnp.exp(s - m_new[:, None])
        acc = acc * rescale[:, None] + _mm(p.astype(v_ref.dtype), v_ref[rows, :])
        return acc, m_new, norm * rescale + p.sum(-1)

    acc_dtype = stat_dtype(q.dtype)
    stats = jnp.zeros((block,), acc_dtype)
    init = (jnp.zeros((block, dim), acc_dtype), stats + _NEG, stats)
    acc, m, norm = jax.lax.fori_loop(0, local + 1 if causal else count, body, init)
    # Only the rows outside the sequence are masked: a NaN normalizer (a NaN or +inf score) gives
    # NaN, as torch's softmax and the XLA formulas. A row whose every score is -inf kept the max at
    # _NEG, where the masked keys weighed exp(0) = 1: it is 0 / 0 = NaN (lse -inf), as the nested XLA
    # formulas (decided here, per row, not per score in the loop).
    inside = _rows(local, length, block)
    dead = m <= _NEG
    safe = jnp.where(inside & ~dead, norm, jnp.nan)
    o_ref[...] = jnp.where(inside[:, None], acc / safe[:, None], 0).astype(o_ref.dtype)
    lse_ref[...] = jnp.where(inside, jnp.where(dead, -jnp.inf, m + jnp.log(safe)), 0).astype(lse_ref.dtype)


def _dq_kernel(first_ref, count_ref, length_ref, local_ref, q_ref, do_ref, lse_ref, delta_ref, k_ref, v_ref, dq_ref,
               *, scale, block, causal):
    """dq = scale sum_k P (dO v^T - delta) k over the key blocks of the sequence."""
    j = pl.program_id(0)
    first, count, length, local = first_ref[j], count_ref[j], length_ref[j], local_ref[j]
    q, do, lse, delta = q_ref[...], do_ref[...], lse_ref[...], delta_ref[...]
    inside = _rows(local, length, block)

    def body(i, dq):
        rows = pl.ds((first + i) * block, block)
        k = k_ref[rows, :]
        keep = inside[:, None] & _keep(local, i, length, block, causal)
        p = jnp.where(keep, jnp.exp(scale * _mm_nt(q, k) - lse[:, None]), 0)
        dp = _mm_nt(do, v_ref[rows, :])
        ds = p * (dp - delta[:, None])
        return dq + _mm(ds.astype(k.dtype), k)

    dq = jax.lax.fori_loop(0, local + 1 if causal else count, body, jnp.zeros(q.shape, stat_dtype(q.dtype)))
    dq_ref[...] = (scale * dq).astype(dq_ref.dtype)


def _dkv_kernel(first_ref, count_ref, length_ref, local_ref, k_ref, v_ref, q_ref, do_ref, lse_ref, delta_ref, dk_ref,
                dv_ref, *, scale, block, causal):
    """dv = sum_q P^T dO, dk = scale sum_q dS^T q over the query blocks of the sequence."""
    j = pl.program_id(0)
    first, count, length, local = first_ref[j], count_ref[j], length_ref[j], local_ref[j]
    k, v = k_ref[...], v_ref[...]
    inside = _rows(local, length, block)

    def body(i, carry):
        dk, dv = carry
        rows = pl.ds((first + i) * block, block)
        q, do = q_ref[rows, :], do_ref[rows, :]
        lse, delta = lse_ref[rows], delta_ref[rows]
        keep = _rows(i, length, block)[:, None] & inside[None, :]
        if causal:
            keep = keep & _keep(i, local, length, block, causal)
        p = jnp.where(keep, jnp.exp(scale * _mm_nt(q, k) - lse[:, None]), 0)  # (q rows, k rows)
        dv = dv + _mm_tn(p.astype(do.dtype), do)
        dp = _mm_nt(do, v)
        ds = p * (dp - delta[:, None])
        dk = dk + _mm_tn(ds.astype(q.dtype), q)
        return dk, dv

    zeros = jnp.zeros(k.shape, stat_dtype(k.dtype))
    dk, dv = jax.lax.fori_loop(local if causal else 0, count, body, (zeros, zeros))
    dk_ref[...] = (scale * dk).astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)


def _call(kernel, meta, tiled, whole, outs, *, block, interpret, name):
    """``kernel`` over the grid (blocks, heads): ``meta`` per-block int32 arrays (read whole),
    ``tiled`` arrays (heads, slots, ...) split into this program's block, ``whole`` arrays
    (heads, slots, ...) of this head; outputs tiled like ``tiled``."""
    heads, slots = (tiled or whole)[0].shape[:2]
    grid = (slots // block, heads)

    def spec(x, tile):
        rest = x.shape[2:]
        rows = block if tile else slots
        index = (lambda j, h: (h, j) + (0,) * len(rest)) if tile else (lambda j, h: (h, 0) + (0,) * len(rest))
        return pl.BlockSpec((None, rows, *rest), index)

    in_specs = [pl.no_block_spec] * len(meta) + [spec(x, True) for x in tiled] + [spec(x, False) for x in whole]
    out_specs = [spec(o, True) for o in outs]
    params = {}
    if not interpret:
        from jax.experimental.pallas import triton as plgpu

        params = {"compiler_params": plgpu.CompilerParams(num_warps=4, num_stages=2)}
    return pl.pallas_call(
        kernel, grid=grid, in_specs=in_specs, out_specs=out_specs, out_shape=outs, interpret=interpret, name=name,
        **params,
    )(*meta, *tiled, *whole)


def forward(meta, qs, ks, vs, *, scale, block, interpret, causal=False):
    """(out, lse) in the slot layout, heads first: (heads, slots, dim) and (heads, slots); lse in
    float32 (float64 for float64 input)."""
    heads, slots, _ = qs.shape
    outs = [
        varying_struct(qs.shape[:2] + vs.shape[2:], vs.dtype, refs=(*meta, qs, ks, vs)),
        varying_struct((heads, slots), stat_dtype(qs.dtype), refs=(*meta, qs, ks, vs)),
    ]
    kernel = functools.partial(_forward_kernel, scale=scale, block=block, causal=causal)
    return _call(kernel, meta, [qs], [ks, vs], outs, block=block, interpret=interpret, name="ragged_attention_fwd")


def backward(meta, qs, ks, vs, dos, lse, delta, *, scale, block, interpret, causal=False):
    """(dq, dk, dv) in the slot layout; ``delta = rowsum(dO out) - g_lse`` per query."""
    like = lambda x: varying_struct(x.shape, x.dtype, refs=(*meta, qs, ks, vs, dos, lse, delta))  # noqa: E731
    dq_kernel = functools.partial(_dq_kernel, scale=scale, block=block, causal=causal)
    (dq,) = _call(dq_kernel, meta, [qs, dos, lse, delta], [ks, vs], [like(qs)], block=block, interpret=interpret,
                  name="ragged_attention_dq")
    dkv_kernel = functools.partial(_dkv_kernel, scale=scale, block=block, causal=causal)
    dk, dv = _call(dkv_kernel, meta, [ks, vs], [qs, dos, lse, delta], [like(ks), like(vs)], block=block,
                   interpret=interpret, name="ragged_attention_dkv")
    return dq, dk, dv


# ----------------------------------------------------------------------------------------------
# Partitioned under ``jit`` (``jaxrules.partitioning``): heads independent, the slot layout (heads, slots, ...)
# sharded over heads; the per-block integer metadata replicated.


def _ragged_forward_impl(first, count, length, local, qs, ks, vs, scale, block, interpret, causal):
    return forward((first, count, length, local), qs, ks, vs, scale=scale, block=block,
                           interpret=interpret, causal=causal)


def _ragged_backward_impl(first, count, length, local, qs, ks, vs, dos, lse, delta, scale, block, interpret, causal):
    return backward((first, count, length, local), qs, ks, vs, dos, lse, delta, scale=scale, block=block,
                            interpret=interpret, causal=causal)


def _over_heads(impl, meta, arrays, statics):
    arrays = (*meta, *arrays)
    leading = (False,) * len(meta) + (True,) * (len(arrays) - len(meta))
    return tuple(partitioning.leading_axis_op(impl, statics, leading, tuple(a.ndim for a in arrays))(*arrays))


def ragged_attention_forward(meta, qs, ks, vs, *, scale, block, interpret, causal=False):
    """``forward``, partitioned over heads (and over vmap's examples under vmap):
    ``(out, lse)``."""
    return _over_heads(_ragged_forward_impl, meta, (qs, ks, vs), (scale, block, interpret, causal))


def ragged_attention_backward(meta, qs, ks, vs, dos, lse, delta, *, scale, block, interpret, causal=False):
    """``backward``, partitioned over heads (and over vmap's examples under vmap):
    ``(dq, dk, dv)``."""
    return _over_heads(_ragged_backward_impl, meta, (qs, ks, vs, dos, lse, delta), (scale, block, interpret, causal))
