"""Primal, JVP and VJP formulas of the ops that need ragged logic (seed
``NestedTensorBackward.cpp``). Ops on the inner dims reuse the dense ops and their formulas.

Arguments are packed ``values`` plus integer arrays (segment ids, the attention plan); their
tangent/cotangent slots are ``None``. ``num_segments`` is the batch size B (static).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrules import partials as P
from jaxrules.mechanism import define_op, differentiated_as, varying_like
from jaxrules.nested import blocks as K
from jaxrules.nested import kernels as KN


def _expand(stat, seg):
    """A per-component statistic (B, *inner) back to the rows (total, *inner)."""
    return stat[seg]


def _segment_sum(x, seg, num_segments, divisor=None):
    """The sum of each component's rows (divided by ``divisor``), accumulated in float32 for
    float16/bfloat16 (a scatter-add in bfloat16 stops counting at 256), in ``x``'s dtype."""
    s = jax.ops.segment_sum(x.astype(P.stat_dtype(x.dtype)), seg, num_segments=num_segments)
    return (s if divisor is None else s / divisor).astype(x.dtype)


# ----------------------------------------------------------------------------------------------
# Sum over the ragged axis (seed ``_nested_sum_backward``: the gradient is broadcast over each
# component)


def ragged_sum_primal(x, seg, *, num_segments):
    return _segment_sum(x, seg, num_segments)


def ragged_sum_jvp(seg, tx, _, *, num_segments):
    """``segment_sum(dx)``."""
    return _segment_sum(tx, seg, num_segments)


def ragged_sum_vjp(seg, g, *, num_segments):
    """``g[segment_ids]``: each component's cotangent broadcast over its rows."""
    return _expand(g, seg), None


# ----------------------------------------------------------------------------------------------
# Softmax over the ragged axis (seed ``nested_softmax_backward``: per component
# ``_softmax_backward_data``, y (g - sum(g y)))


def ragged_softmax_primal(x, seg, *, num_segments):
    """``exp(x - m) / sum_component exp(x - m)``, ``m`` the component's maximum: a +inf logit
    makes the component NaN, as the dense softmax and torch (inf - inf); only an all -inf (or
    empty) component is not shifted (0 / 0 = NaN there too, as torch)."""
    m = jax.ops.segment_max(x, seg, num_segments=num_segments)
    e = jnp.exp(x - jnp.where(m == -jnp.inf, 0, m)[seg])
    return e / _expand(_segment_sum(e, seg, num_segments), seg)


def ragged_softmax_save(y, x, seg, **_):
    return y, seg


def ragged_softmax_jvp(res, tx, _, *, num_segments):
    """``y (dx - sum_component(y dx))``."""
    y, seg = res
    return y * (tx - _expand(_segment_sum(y * tx, seg, num_segments), seg))


def ragged_softmax_vjp(res, g, *, num_segments):
    """``y (g - sum_component(g y))`` (torch's ``_softmax_backward_data`` per component)."""
    y, seg = res
    return y * (g - _expand(_segment_sum(g * y, seg, num_segments), seg)), None


# ----------------------------------------------------------------------------------------------
# Mean over the ragged axis (torch's mean backward per component: the cotangent over n_i,
# broadcast over the component's rows). An empty component's mean is 0/0 = NaN, as torch's; it
# has no rows, so no gradient reads it.


def _counts(seg, num_segments, like):
    """The length of each component, shaped to broadcast against (B, *inner) ``like``."""
    n = jax.ops.segment_sum(jnp.ones(seg.shape, jnp.int32), seg, num_segments=num_segments)  # exact counts
    return n.astype(P.stat_dtype(like.dtype)).reshape(n.shape + (1,) * (like.ndim - 1))


def ragged_mean_primal(x, seg, *, num_segments):
    return _segment_sum(x, seg, num_segments, _counts(seg, num_segments, x))


def ragged_mean_save(out, x, seg, **_):
    return seg, _counts(seg, num_segments=out.shape[0], like=out)


def ragged_mean_jvp(res, tx, _, *, num_segments):
    """``segment_sum(dx) / n``."""
    seg, n = res
    return _segment_sum(tx, seg, num_segments, n)


def ragged_mean_vjp(res, g, *, num_segments):
    """``(g / n)[segment_ids]``: each component's cotangent over its length, on its rows."""
    seg, n = res
    return _expand((g / n).astype(g.dtype), seg), None


# ----------------------------------------------------------------------------------------------
# Log-softmax over the ragged axis (seed ``nested_softmax_backward`` for log_softmax: per
# component ``_log_softmax_backward_data``, g - exp(y) sum(g))


def ragged_log_softmax_primal(x, seg, *, num_segments):
    """``x - m - log(sum(exp(x - m)))`` per component, ``m`` its max, unguarded: a component
    with a +inf or only -inf logits is NaN throughout, as torch's dense log_softmax (an empty
    component's max, -inf, is never read)."""
    m = jax.ops.segment_max(x, seg, num_segments=num_segments)
    shifted = x - m[seg]
    return shifted - jnp.log(_expand(_segment_sum(jnp.exp(shifted), seg, num_segments), seg))


def ragged_log_softmax_jvp(res, tx, _, *, num_segments):
    """``dx - sum_component(exp(y) dx)``."""
    y, seg = res
    return tx - _expand(_segment_sum(jnp.exp(y) * tx, seg, num_segments), seg)


def ragged_log_softmax_vjp(res, g, *, num_segments):
    """``g - exp(y) sum_component(g)`` (torch's ``_log_softmax_backward_data`` per component)."""
    y, seg = res
    return g - jnp.exp(y) * _expand(_segment_sum(g, seg, num_segments), seg), None


# ----------------------------------------------------------------------------------------------
# Ragged x ragged matmul contracting the ragged axis: C_i = A_i^T B_i for components A_i (n_i, D)
# and B_i (n_i, E), a dense (B, D, E) (torch's NJT (B, D, j1) @ (B, j1, E)). Seed
# ``matmul_backward_nested`` with self = A_i^T: g_self = g B_i^T, so g_A_i = B_i g^T; g_B_i =
# A_i g. Per row r of component i: g_A[r] = g_i B[r], g_B[r] = g_i^T A[r].


def ragged_contract_primal(a, b, seg, *, num_segments):
    return _segment_sum(jnp.einsum("rd,re->rde", a, b), seg, num_segments)


def ragged_contract_save(out, a, b, seg, **_):
    return a, b, seg


def ragged_contract_jvp(res, ta, tb, _, *, num_segments):
    """``segment_sum(dA^T B + A^T dB)`` row by row."""
    a, b, seg = res
    terms = 0
    if ta is not None:
        terms = terms + jnp.einsum("rd,re->rde", ta, b)
    if tb is not None:
        terms = terms + jnp.einsum("rd,re->rde", a, tb)
    return _segment_sum(terms, seg, num_segments)


def ragged_contract_vjp(res, g, *, num_segments):
    """``g_A[r] = g_i B[r]``, ``g_B[r] = g_i^T A[r]`` with ``i`` the component of row ``r``."""
    a, b, seg = res
    gr = _expand(g, seg)  # (total, D, E)
    return jnp.einsum("rde,re->rd", gr, b), jnp.einsum("rde,rd->re", gr, a), None


# ----------------------------------------------------------------------------------------------
# Attention within each sequence: out = softmax(scale q k^T) v per component, plus the
# log-sum-exp of each query's scores (an output, as flash attention's forward returns it).
# Arrays are (total, heads, dim); see ``blocks`` for the pair layout. The pairs are visited in
# chunks of ``chunk`` (a scan), so memory holds one chunk of scores, never all of them.


def _layout(x, slot_token, block):
    return K.to_blocks(x, slot_token, block)


def attention_primal(q, k, v, token_slot, slot_token, pair_q, pair_k, *, scale, block, chunk, causal=False):
    """Online softmax over the key blocks of each query block (flash attention's forward)."""
    total, nb = q.shape[0], K.num_blocks_of(slot_token, block)
    qb, kb, vb = (_layout(x, slot_token, block) for x in (q, k, v))
    valid = K.slot_valid(slot_token, total, block)
    heads = q.shape[1]

    def step(carry, pairs):
        m, norm, acc = carry
        pq, pk = pairs
        s = jnp.where(K.pair_mask(valid, pq, pk, causal), scale * K.scores(qb, kb, pq, pk), -jnp.inf)
        m_new = jnp.maximum(m, jax.ops.segment_max(s.max(-1), pq, num_segments=nb))
        # only a -inf maximum (no key yet) is not shifted by: a +inf score makes its row NaN
        # (inf - inf), as torch's softmax; a NaN maximum carries on
        m_safe = jnp.where(m_new == -jnp.inf, 0, m_new)
        rescale = jnp.where(m == -jnp.inf, 0, jnp.exp(m - m_safe))
        e = jnp.exp(s - m_safe[pq][..., None])
        norm = norm * rescale + K.combine(e.sum(-1), pq, nb)
        acc = acc * jnp.swapaxes(rescale, 1, 2)[..., None] + K.combine(
            jnp.einsum("phqk,pkhd->pqhd", e, vb[pk]), pq, nb
        )
        return (m_new, norm, acc), None

    init = varying_like((
        jnp.full((nb, heads, block), -jnp.inf, q.dtype),
        jnp.zeros((nb, heads, block), q.dtype),
        jnp.zeros((nb, block, heads, v.shape[-1]), q.dtype),
    ), q, k, v, token_slot, slot_token, pair_q, pair_k)
    (m, norm, acc), _ = jax.lax.scan(step, init, K.chunked(pair_q, pair_k, chunk))
    norm_t = jnp.swapaxes(norm, 1, 2)  # (nb, block, heads)
    # (a query whose every score is -inf: 0 / 0 = NaN, as torch's softmax; empty slots divide by 1)
    out_b = acc / jnp.where(valid[..., None], norm_t, 1)[..., None]
    lse_b = jnp.swapaxes(jnp.where(m == -jnp.inf, 0, m), 1, 2) + jnp.log(norm_t)
    return K.from_blocks(out_b, token_slot), K.from_blocks(lse_b, token_slot)


def attention_save(outs, q, k, v, token_slot, slot_token, pair_q, pair_k, **_):
    out, lse = outs
    return q, k, v, out, lse, token_slot, slot_token, pair_q, pair_k


def _pair_probabilities(res, pq, pk, block, scale, causal):
    """The softmax weights of the pairs ``(pq, pk)``, recomputed from the saved log-sum-exp as
    flash attention's backward does, with the blocked q, k, v."""
    q, k, v, _, lse, _, slot_token, _, _ = res
    qb, kb, vb = (_layout(x, slot_token, block) for x in (q, k, v))
    lse_b = _layout(lse, slot_token, block)  # (empty slots: 0; a non-finite row's weights are NaN, as torch's)
    valid = K.slot_valid(slot_token, q.shape[0], block)
    return K.probabilities(qb, kb, lse_b, valid, pq, pk, scale, causal), qb, kb, vb


def attention_jvp(res, tq, tk, tv, *_, scale, block, chunk, causal=False):
    """With ``P`` the softmax weights and ``dS = scale (dq k^T + q dk^T)``:
    ``d lse = sum_k P dS`` and ``d out = sum_k P dS v + P dv - out d lse``, summed over the key
    blocks of each query block."""
    out, token_slot, slot_token, pair_q, pair_k = res[3], res[5], res[6], res[7], res[8]
    nb = K.num_blocks_of(slot_token, block)
    tqb, tkb, tvb = (None if t is None else _layout(t, slot_token, block) for t in (tq, tk, tv))

    def step(carry, pairs):
        dlse, num = carry
        pq, pk = pairs
        p, qb, kb, vb = _pair_probabilities(res, pq, pk, block, scale, causal)
        ds = 0
        if tqb is not None:
            ds = ds + K.scores(tqb, kb, pq, pk)
        if tkb is not None:
            ds = ds + K.scores(qb, tkb, pq, pk)
        p_ds = p * (scale * ds)
        contribution = jnp.einsum("phqk,pkhd->pqhd", p_ds, vb[pk])
        if tvb is not None:
            contribution = contribution + jnp.einsum("phqk,pkhd->pqhd", p, tvb[pk])
        return (dlse + K.combine(p_ds.sum(-1), pq, nb), num + K.combine(contribution, pq, nb)), None

    heads, dim, dtype = out.shape[1], out.shape[2], out.dtype
    init = varying_like((jnp.zeros((nb, heads, block), dtype), jnp.zeros((nb, block, heads, dim), dtype)),
                        *res, tq, tk, tv)
    (dlse, num), _ = jax.lax.scan(step, init, K.chunked(pair_q, pair_k, chunk))
    dlse_b = jnp.swapaxes(dlse, 1, 2)  # (nb, block, heads)
    dout_b = num - _layout(out, slot_token, block) * dlse_b[..., None]
    return K.from_blocks(dout_b, token_slot), K.from_blocks(dlse_b, token_slot)


def attention_vjp(res, ct, *, scale, block, chunk, causal=False):
    """Flash attention's backward per block pair: ``dv = P^T g``, ``dS = P (g v^T - D + g_lse)``
    with ``D = rowsum(g out)``, ``dq = scale dS k``, ``dk = scale dS^T q``; contributions are
    summed into the blocks they belong to."""
    q, k, v, out, _, token_slot, slot_token, pair_q, pair_k = res
    g, g_lse = ct
    nb = K.num_blocks_of(slot_token, block)
    gb = None if g is None else _layout(g, slot_token, block)
    d_b = None if g is None else _layout(jnp.sum(g * out, -1), slot_token, block)  # (nb, block, heads)
    g_lse_b = None if g_lse is None else _layout(g_lse, slot_token, block)

    def step(carry, pairs):
        dq, dk, dv = carry
        pq, pk = pairs
        p, qb, kb, vb = _pair_probabilities(res, pq, pk, block, scale, causal)
        shift = 0
        if gb is not None:
            shift = jnp.einsum("pqhd,pkhd->phqk", gb[pq], vb[pk]) - K.per_pair(d_b, pq)
            dv = dv + K.combine(jnp.einsum("phqk,pqhd->pkhd", p, gb[pq]), pk, nb)
        if g_lse_b is not None:
            shift = shift + K.per_pair(g_lse_b, pq)
        ds = scale * p * shift
        dq = dq + K.combine(jnp.einsum("phqk,pkhd->pqhd", ds, kb[pk]), pq, nb)
        dk = dk + K.combine(jnp.einsum("phqk,pqhd->pkhd", ds, qb[pq]), pk, nb)
        return (dq, dk, dv), None

    init = varying_like(tuple(jnp.zeros((nb, block, *x.shape[1:]), x.dtype) for x in (q, k, v)), *res, g, g_lse)
    (dq, dk, dv), _ = jax.lax.scan(step, init, K.chunked(pair_q, pair_k, chunk))
    dv = None if g is None else K.from_blocks(dv, token_slot)
    return K.from_blocks(dq, token_slot), K.from_blocks(dk, token_slot), dv, None, None, None, None


# ----------------------------------------------------------------------------------------------
# The same op with fused kernels (``kernels``, Pallas): forward and VJP run the kernels; the JVP
# is the XLA formula above (forward mode is not the training path). Extra integer arguments:
# the per-block (first, count, length, local) of ``kernels.block_meta``.


def _heads_first(x, slot_token, block):
    """(total, heads, ...) -> (heads, slots, ...) in the slot layout."""
    return jnp.moveaxis(K.to_blocks(x, slot_token, block).reshape(slot_token.shape[0], *x.shape[1:]), 1, 0)


def _tokens(xs, token_slot):
    """(heads, slots, ...) -> (total, heads, ...)."""
    return jnp.moveaxis(xs, 0, 1)[token_slot]


def fused_attention_primal(q, k, v, token_slot, slot_token, pair_q, pair_k, *meta, scale, block, chunk, interpret,
                           causal=False):
    qs, ks, vs = (_heads_first(x, slot_token, block) for x in (q, k, v))
    out, lse = KN.ragged_attention_forward(meta, qs, ks, vs, scale=scale, block=block, interpret=interpret,
                                                     causal=causal)
    return _tokens(out, token_slot), _tokens(lse, token_slot)


def fused_attention_save(outs, q, k, v, *ints, **_):
    return (q, k, v, *outs, *ints)


def fused_attention_jvp(res, tq, tk, tv, *_, scale, block, chunk, interpret, causal=False):
    """The XLA JVP formula (``attention_jvp``), in float32 or wider."""
    work = P.promoted_dtype(res[0].dtype, jnp.float32)
    floats = tuple(x.astype(work) for x in res[:5])
    tangents = (None if t is None else t.astype(work) for t in (tq, tk, tv))
    return attention_jvp(floats + tuple(res[5:9]), *tangents, scale=scale, block=block, chunk=chunk, causal=causal)


def _xla_vjp(res, ct, scale, block, chunk, interpret, causal):
    return attention_vjp(tuple(res[:9]), ct, scale=scale, block=block, chunk=chunk, causal=causal)[:3]


@differentiated_as(_xla_vjp, n_static=5)
def _kernel_vjp(res, ct, scale, block, chunk, interpret, causal):
    """Flash attention's backward in two kernels (dq; dk and dv), with
    ``delta = rowsum(g out) - g_lse``. Its own derivative (second order) is that of the XLA
    formula ``attention_vjp``: the kernels are not differentiated."""
    q, k, v, out, lse, token_slot, slot_token, _, _, *meta = res
    g, g_lse = ct
    acc = P.stat_dtype(out.dtype)
    delta = jnp.sum(g.astype(acc) * out.astype(acc), -1) - g_lse
    qs, ks, vs, gs = (_heads_first(x, slot_token, block) for x in (q, k, v, g.astype(q.dtype)))
    lse_s, delta_s = (_heads_first(x, slot_token, block) for x in (lse, delta))
    grads = KN.ragged_attention_backward(meta, qs, ks, vs, gs, lse_s, delta_s, scale=scale, block=block,
                                                   interpret=interpret, causal=causal)
    return tuple(_tokens(x, token_slot) for x in grads)


def fused_attention_vjp(res, ct, *, scale, block, chunk, interpret, causal=False):
    """``_kernel_vjp`` (absent cotangents as zeros)."""
    g, g_lse = ct
    out, lse = res[3], res[4]
    ct = (jnp.zeros_like(out) if g is None else g, jnp.zeros_like(lse) if g_lse is None else g_lse)
    grads = _kernel_vjp(tuple(res), ct, scale, block, chunk, interpret, causal)
    return (*grads, *([None] * (len(res) - 5)))


attention_op = define_op("nested_attention", attention_primal, attention_jvp, attention_vjp, attention_save)
