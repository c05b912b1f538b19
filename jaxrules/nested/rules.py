"""Primal, JVP and VJP formulas of the ops that need ragged logic (seed
``NestedTensorBackward.cpp``). Ops on the inner dims reuse the dense ops and their formulas.

Arguments are packed ``values`` plus integer arrays (segment ids, the attention plan); their
tangent/cotangent slots are ``None``. ``num_segments`` is the batch size B (static).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrules.nested import blocks as K


def _expand(stat, seg):
    """A per-component statistic (B, *inner) back to the rows (total, *inner)."""
    return stat[seg]


# ----------------------------------------------------------------------------------------------
# Sum over the ragged axis (seed ``_nested_sum_backward``: the gradient is broadcast over each
# component)


def ragged_sum_primal(x, seg, *, num_segments):
    return jax.ops.segment_sum(x, seg, num_segments=num_segments)


def ragged_sum_jvp(seg, tx, _, *, num_segments):
    """``segment_sum(dx)``."""
    return jax.ops.segment_sum(tx, seg, num_segments=num_segments)


def ragged_sum_vjp(seg, g, *, num_segments):
    """``g[segment_ids]``: each component's cotangent broadcast over its rows."""
    return _expand(g, seg), None


# ----------------------------------------------------------------------------------------------
# Softmax over the ragged axis (seed ``nested_softmax_backward``: per component
# ``_softmax_backward_data``, y (g - sum(g y)))


def ragged_softmax_primal(x, seg, *, num_segments):
    m = jax.ops.segment_max(x, seg, num_segments=num_segments)
    e = jnp.exp(x - jnp.where(jnp.isfinite(m), m, 0)[seg])
    return e / _expand(jax.ops.segment_sum(e, seg, num_segments=num_segments), seg)


def ragged_softmax_save(y, x, seg, **_):
    return y, seg


def ragged_softmax_jvp(res, tx, _, *, num_segments):
    """``y (dx - sum_component(y dx))``."""
    y, seg = res
    return y * (tx - _expand(jax.ops.segment_sum(y * tx, seg, num_segments=num_segments), seg))


def ragged_softmax_vjp(res, g, *, num_segments):
    """``y (g - sum_component(g y))`` (torch's ``_softmax_backward_data`` per component)."""
    y, seg = res
    return y * (g - _expand(jax.ops.segment_sum(g * y, seg, num_segments=num_segments), seg)), None


# ----------------------------------------------------------------------------------------------
# Attention within each sequence: out = softmax(scale q k^T) v per component, plus the
# log-sum-exp of each query's scores (an output, as flash attention's forward returns it).
# Arrays are (total, heads, dim); see ``blocks`` for the pair layout.


def _blocks(x, plan_slot_token, block):
    return K.to_blocks(x, plan_slot_token, block)


def attention_primal(q, k, v, token_slot, slot_token, pair_q, pair_k, *, scale, block):
    total, nb = q.shape[0], K.num_blocks_of(slot_token, block)
    qb, kb, vb = (_blocks(x, slot_token, block) for x in (q, k, v))
    valid = K.slot_valid(slot_token, total, block)
    s = jnp.where(K.pair_mask(valid, pair_q, pair_k), scale * K.scores(qb, kb, pair_q, pair_k), -jnp.inf)
    m = jax.ops.segment_max(s.max(-1), pair_q, num_segments=nb)  # (nb, heads, block)
    m = jnp.where(jnp.isfinite(m), m, 0)
    e = jnp.exp(s - m[pair_q][..., None])
    norm = K.combine(e.sum(-1), pair_q, nb)  # (nb, heads, block)
    num = K.combine(jnp.einsum("phqk,pkhd->pqhd", e, vb[pair_k]), pair_q, nb)
    norm_t = jnp.swapaxes(norm, 1, 2)  # (nb, block, heads)
    out_b = num / jnp.where(norm_t > 0, norm_t, 1)[..., None]
    lse_b = jnp.swapaxes(m, 1, 2) + jnp.log(norm_t)
    return K.from_blocks(out_b, token_slot), K.from_blocks(lse_b, token_slot)


def attention_save(outs, q, k, v, token_slot, slot_token, pair_q, pair_k, **_):
    out, lse = outs
    return q, k, v, out, lse, token_slot, slot_token, pair_q, pair_k


def _probabilities(res, block, scale):
    q, k, v, out, lse, token_slot, slot_token, pair_q, pair_k = res
    qb, kb, vb = (_blocks(x, slot_token, block) for x in (q, k, v))
    lse_b = _blocks(lse, slot_token, block)
    valid = K.slot_valid(slot_token, q.shape[0], block)
    p = K.probabilities(qb, kb, jnp.where(jnp.isfinite(lse_b), lse_b, 0), valid, pair_q, pair_k, scale)
    return p, qb, kb, vb


def attention_jvp(res, tq, tk, tv, *_, scale, block):
    """With ``P`` the softmax weights and ``dS = scale (dq k^T + q dk^T)``:
    ``d lse = sum_k P dS`` and ``d out = sum_k P (dS - d lse) v + P dv``, summed over the key
    blocks of each query block."""
    out, token_slot, slot_token, pair_q, pair_k = res[3], res[5], res[6], res[7], res[8]
    nb = K.num_blocks_of(slot_token, block)
    p, qb, kb, vb = _probabilities(res, block, scale)
    ds = 0
    if tq is not None:
        ds = ds + K.scores(_blocks(tq, slot_token, block), kb, pair_q, pair_k)
    if tk is not None:
        ds = ds + K.scores(qb, _blocks(tk, slot_token, block), pair_q, pair_k)
    p_ds = p * (scale * ds)
    dlse_b = jnp.swapaxes(K.combine(p_ds.sum(-1), pair_q, nb), 1, 2)  # (nb, block, heads)
    num = jnp.einsum("phqk,pkhd->pqhd", p_ds, vb[pair_k])
    if tv is not None:
        num = num + jnp.einsum("phqk,pkhd->pqhd", p, _blocks(tv, slot_token, block)[pair_k])
    dout_b = K.combine(num, pair_q, nb) - _blocks(out, slot_token, block) * dlse_b[..., None]
    return K.from_blocks(dout_b, token_slot), K.from_blocks(dlse_b, token_slot)


def attention_vjp(res, ct, *, scale, block):
    """Flash attention's backward per block pair: ``dv = P^T g``, ``dS = P (g v^T - D + g_lse)``
    with ``D = rowsum(g out)``, ``dq = scale dS k``, ``dk = scale dS^T q``; contributions are
    summed into the blocks they belong to."""
    out, token_slot, slot_token, pair_q, pair_k = res[3], res[5], res[6], res[7], res[8]
    g, g_lse = ct
    nb = K.num_blocks_of(slot_token, block)
    p, qb, kb, vb = _probabilities(res, block, scale)
    shift = 0
    dv = None
    if g is not None:
        gb = _blocks(g, slot_token, block)
        d_b = _blocks(jnp.sum(g * out, -1), slot_token, block)  # (nb, block, heads)
        dp = jnp.einsum("pqhd,pkhd->phqk", gb[pair_q], vb[pair_k])
        shift = dp - K.per_pair(d_b, pair_q)
        dv = K.from_blocks(K.combine(jnp.einsum("phqk,pqhd->pkhd", p, gb[pair_q]), pair_k, nb), token_slot)
    if g_lse is not None:
        shift = shift + K.per_pair(_blocks(g_lse, slot_token, block), pair_q)
    ds = scale * p * shift
    dq = K.from_blocks(K.combine(jnp.einsum("phqk,pkhd->pqhd", ds, kb[pair_k]), pair_q, nb), token_slot)
    dk = K.from_blocks(K.combine(jnp.einsum("phqk,pqhd->pkhd", ds, qb[pair_q]), pair_k, nb), token_slot)
    return dq, dk, dv, None, None, None, None
