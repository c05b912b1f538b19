"""Dense attention and bilinear forms with torch.nn.functional's semantics:
``scaled_dot_product_attention`` and ``bilinear``. Their formulas live here, beside
the ops (attention: the backward from the saved logits; bilinear: seed
``_trilinear_backward``), and so do their registry records."""

from __future__ import annotations

import functools
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from jaxrules import _validate as V
from jaxrules import partials
from jaxrules._namespace import exported_as
from jaxrules.dispatch import CUDNN_DTYPES
from jaxrules.mechanism import define_op, differentiated_as, explicit_sharding

# ----------------------------------------------------------------------------------------------
# Ops: scaled_dot_product_attention
#
# Shapes: q (..., L, E), k (..., S, E), v (..., S, Ev), bias (additive, float) and keep (boolean,
# True = attend) broadcast to (..., L, S); the batch axes "..." broadcast. The op returns
# (out (..., L, Ev), lse (..., L)): lse is the row logsumexp of the logits, what flash attention
# saves for its backward; the public function drops it.

def _acc_dtype(dtype):
    """The dtype of the softmax statistics: at least float32 (bfloat16/float16 input
    accumulates in float32, as flash kernels do)."""
    return partials.promoted_dtype(dtype, jnp.float32)


def _swap(x):
    return jnp.swapaxes(x, -1, -2)


def _matmul(a, b, dtype):
    """``a @ b`` with operands in the inputs' ``dtype`` and the product accumulated in
    ``_acc_dtype(dtype)``: bfloat16/float16 operands keep the tensor cores' fast rate (and a
    statistics-dtype ``P`` or ``dS`` is rounded to ``dtype`` first, as flash kernels and torch's
    math backend do); float32/float64 as a plain matmul."""
    return jnp.matmul(a.astype(dtype), b.astype(dtype), preferred_element_type=_acc_dtype(dtype))


def _logits(q, k, bias, keep, scale):
    """``s = scale q k^T + bias``, ``-inf`` where ``keep`` is False, in the accumulation dtype."""
    s = _matmul(q, _swap(k), q.dtype) * scale
    rank = max(s.ndim, jnp.ndim(bias), jnp.ndim(keep))
    s = partials.with_rank(s, rank) + partials.with_rank(bias.astype(_acc_dtype(q.dtype)), rank)
    return jnp.where(partials.with_rank(keep, rank), s, -jnp.inf)


def _scores(q, k, bias, keep, scale):
    """``(s, alive)``: the logits ``s`` and which rows the masks leave a key (``attn_mask`` all
    False, or -inf, leave none), found from the masks' own shape (a constant without a mask)."""
    rank = max(jnp.ndim(keep), jnp.ndim(bias))
    alive = partials.with_rank(keep, rank) & partials.with_rank(bias != -jnp.inf, rank)
    return _logits(q, k, bias, keep, scale), jnp.any(alive, axis=-1, keepdims=True)


def _weights(s, alive):
    """The attention weights ``P = softmax(s)`` along the keys: ``jax.nn.softmax``'s expression,
    which XLA's GPU compiler fuses into one kernel (row max, exp, sum and divide; split into
    steps, they cost three more passes over ``s``). A dead row is 0 (torch's ``_safe_softmax``);
    its logits are replaced before the softmax too, so that no derivative meets its NaN. A row
    with a NaN or +inf logit is NaN (as torch's)."""
    return jnp.where(alive, jax.nn.softmax(jnp.where(alive, s, 0), axis=-1), 0)


def _softmax_backward(s, alive, d_p):
    """``dS = P o (dP - rowsum(dP o P))`` written from the logits, as JAX's autodiff transposes
    ``jax.nn.softmax``: with ``e = exp(s - max s)`` and ``z = rowsum(e)``, ``dS = e o (dP / z -
    rowsum(dP o e) / z^2)``. XLA's GPU compiler fuses this with the recomputation of ``e`` into
    one kernel that reads ``s`` and ``dP`` once (from the saved ``P``, the row sum and ``dS``
    were two passes reading both)."""
    e, z = partials.softmax_parts(jnp.where(alive, s, 0), -1)
    return jnp.where(alive, e * (d_p / z - jnp.sum(d_p * e, axis=-1, keepdims=True) / (z * z)), 0)


def _logsumexp(s):
    """The row logsumexp of the logits, -inf for a row without a finite logit. Its shift does not
    count for differentiation (it cancels), as ``jax.nn.softmax``'s: max's derivative divides by
    the count of entries equal to the maximum, 0 where XLA's fused recomputation of ``s`` rounds
    differently (NaN under ``jit``)."""
    top = jnp.max(s, axis=-1, keepdims=True, initial=-jnp.inf)  # S = 0: -inf
    top = jax.lax.stop_gradient(jnp.where(top == -jnp.inf, 0, top))
    return (top + jnp.log(jnp.sum(jnp.exp(s - top), axis=-1, keepdims=True)))[..., 0]


def _dropped(p, drop, dropout):
    """``P o Z`` with the dropout factors ``Z`` (0 or ``1 / (1 - p)``) when ``dropout``."""
    return p * drop.astype(p.dtype) if dropout else p


def _attention_primal(q, k, v, bias, keep, drop, *, scale, dropout):
    s, alive = _scores(q, k, bias, keep, scale)
    p = _weights(s, alive)
    out = _matmul(_dropped(p, drop, dropout), v, v.dtype).astype(v.dtype)
    return out, _logsumexp(s)


def _save_attention(out, q, k, v, bias, keep, drop, *, scale, dropout):
    """The residuals: q, k, v, the dropout factors, the output, the logits ``s`` and which rows
    are alive (the weights ``P`` come back from ``s`` in one fused pass; on an H100 keeping ``P``
    beat recomputing it from the row logsumexp by 5-11%, with a lower peak memory, and ``s``
    costs the same memory as ``P``)."""
    return (q, k, v, drop, out[0], *_scores(q, k, bias, keep, scale))


def _attention_jvp(res, tq, tk, tv, tbias, tkeep, tdrop, *, scale, dropout):
    """Forward mode of softmax attention: with ``ds = scale (dq k^T + q dk^T) + dbias``,
    ``dlse = rowsum(P o ds)`` and ``dout = (P o ds o Z) v - dlse out + (P o Z) dv`` (``Z``: the
    dropout factors, 1 without dropout)."""
    q, k, v, drop, out, s, alive = res
    p = _weights(s, alive)
    terms = [None if tq is None else _matmul(tq, _swap(k), q.dtype) * scale,
             None if tk is None else _matmul(q, _swap(tk), q.dtype) * scale,
             tbias]
    terms = [t for t in terms if t is not None]
    d_out = None if tv is None else _matmul(_dropped(p, drop, dropout), tv, v.dtype)
    d_lse = None
    if terms:
        rank = max(t.ndim for t in terms)
        terms = [partials.with_rank(t, rank) for t in terms]
        p_ds = p * partials.with_rank(sum(terms[1:], terms[0]).astype(p.dtype), p.ndim)
        d_lse = jnp.sum(p_ds, axis=-1)
        d_scores = _matmul(_dropped(p_ds, drop, dropout), v, v.dtype) - d_lse[..., None] * out.astype(p.dtype)
        d_out = d_scores if d_out is None else d_out + d_scores
    return d_out, d_lse


def _attention_vjp(res, ct, *, scale, dropout):
    """The attention backward from the saved logits (torch's math backend: ``_softmax_backward_data``):
    ``dv = (P o Z)^T dO``, ``dP = Z o (dO v^T)``, ``dS = P o (dP - rowsum(dP o P) + dlse)``, ``dq =
    scale dS k``, ``dk = scale dS^T q``, ``dbias = dS`` (``Z``: the dropout factors, 1 without
    dropout). ``rowsum(dP o P)`` equals flash attention's ``rowsum(dO o out)``; XLA computes it in
    the pass that forms ``dS`` (``_softmax_backward``), where the other needs ``out``, a matmul
    more when the output itself is not used."""
    q, k, v, drop, _, s, alive = res
    p = _weights(s, alive)
    g_out, g_lse = ct
    d_v = None
    d_s = 0
    if g_out is not None:
        d_v = _matmul(_swap(_dropped(p, drop, dropout)), g_out, v.dtype)
        d_s = _softmax_backward(s, alive, _dropped(_matmul(g_out, _swap(v), v.dtype), drop, dropout))
    if g_lse is not None:
        d_s = d_s + p * g_lse[..., None].astype(p.dtype)
    d_q = _matmul(d_s, k, q.dtype) * scale
    d_k = _matmul(_swap(d_s), q, q.dtype) * scale
    return d_q, d_k, d_v, d_s, None, None


attention_op = define_op("scaled_dot_product_attention", _attention_primal, _attention_jvp, _attention_vjp,
                         _save_attention, none_for_zero_cotangents=True)


# ----------------------------------------------------------------------------------------------
# Ops: scaled_dot_product_attention on cuDNN (the GPU default in half precision)
#
# cuDNN's fused flash attention (``jax.nn.dot_product_attention(implementation="cudnn")``) on
# q, k, v in its layout (B, L, N, E) with no mask (or causal, L == S): forward and backward are
# cuDNN's; the JVP is the XLA formula above (forward mode is not the training path); second
# derivatives come from the XLA formulas (``differentiated_as``: cuDNN is never differentiated).



def _cudnn(q, k, v, scale, causal):
    return jax.nn.dot_product_attention(q, k, v, scale=scale, is_causal=causal, implementation="cudnn")


def _heads_first(x):
    """(B, L, N, E) <-> (B, N, L, E)."""
    return jnp.swapaxes(x, 1, 2)


def _batch_sharded_alike(*xs):
    """Under an ``Explicit`` mesh, ``xs`` (q, k, v: (..., L, E)) with their batch axes (all but the
    last two, aligned from the right) sharded alike, as the first one whose batch axes are sharded
    (a query-sharded batch with replicated keys and values: each device takes its slice of them,
    no communication); their last two axes as they are. Else ``xs``."""
    specs = [explicit_sharding(x) for x in xs]
    batch = max(x.ndim for x in xs) - 2
    padded = [None if s is None else (None,) * (batch - x.ndim + 2) + tuple(s.spec) + (None,) * (x.ndim - len(s.spec))
              for x, s in zip(xs, specs)]
    target = next((p[:batch] for p in padded if p is not None and any(p[:batch])), None)
    if target is None:
        return xs
    out = []
    for x, p in zip(xs, padded):
        want = tuple(None if x.shape[a] == 1 else target[batch - x.ndim + 2 + a] for a in range(x.ndim - 2))
        if p is not None and tuple(p[batch - x.ndim + 2:batch]) != want:
            x = jax.sharding.reshard(x, jax.sharding.PartitionSpec(*want, *p[batch:]))
        out.append(x)
    return tuple(out)


def _causal_keep(length, keys, causal):
    """``keep`` for no mask, or the causal one (top-left aligned): an iota compare, which XLA fuses
    into the passes over the logits (a (L, S) constant would be read by each)."""
    return jnp.tri(length, keys, dtype=bool) if causal else jnp.ones((1, 1), bool)


def _plain_masks(q, k, causal):
    """The XLA op's (bias, keep, drop) for no mask (or a causal one) and no dropout, on (B, L, N, E)."""
    return jnp.zeros((1, 1), q.dtype), _causal_keep(q.shape[1], k.shape[1], causal), jnp.ones((1, 1), q.dtype)


def _cudnn_reference_vjp(q, k, v, g, scale, causal):
    """``(dq, dk, dv)`` by the XLA op's VJP formula (what cuDNN's backward computes)."""
    masks = _plain_masks(q, k, causal)

    def f(q, k, v):
        return _heads_first(attention_op(*map(_heads_first, (q, k, v)), *masks, scale=scale, dropout=False)[0])

    return jax.vjp(f, q, k, v)[1](g)


def _cudnn_forward(q, k, v, scale, causal):
    """``(out, pullback)`` of cuDNN's training-mode forward (what ``jax.vjp`` runs): the primal
    and the backward call the same forward, which XLA merges into one."""
    return jax.vjp(lambda q, k, v: _cudnn(q, k, v, scale, causal), q, k, v)


@differentiated_as(_cudnn_reference_vjp, n_static=2)
def _cudnn_backward(q, k, v, g, scale, causal):
    """cuDNN's backward; second derivatives those of ``_cudnn_reference_vjp``."""
    return _cudnn_forward(q, k, v, scale, causal)[1](g)


def _cudnn_primal(q, k, v, *, scale, causal):
    return _cudnn_forward(q, k, v, scale, causal)[0]


def _cudnn_jvp(res, tq, tk, tv, *, scale, causal):
    """The XLA op's JVP formula, on the output and weights recomputed by its forward."""
    q, k, v = map(_heads_first, res)
    bias, keep, _ = _plain_masks(*res[:2], causal)
    s, alive = _scores(q, k, bias, keep, scale)
    out = _matmul(_weights(s, alive), v, v.dtype).astype(v.dtype)
    tq, tk, tv = (None if t is None else _heads_first(t) for t in (tq, tk, tv))
    d_out, _ = _attention_jvp((q, k, v, None, out, s, alive), tq, tk, tv, None, None, None, scale=scale, dropout=False)
    return _heads_first(d_out)


def _cudnn_vjp(res, g, *, scale, causal):
    return _cudnn_backward(*res, g, scale, causal)


cudnn_attention_op = define_op("scaled_dot_product_attention_cudnn", _cudnn_primal, _cudnn_jvp, _cudnn_vjp,
                               lambda out, q, k, v, **_: (q, k, v))


def _cudnn_layout(x):
    """(..., L, E) -> cuDNN's (B, L, N, E): the heads axis -3 (one head for a 2-d input), the
    batch axes before it flattened."""
    if x.ndim == 2:
        return x[None, :, None]
    return _heads_first(x.reshape(-1, *x.shape[-3:]))


@functools.lru_cache(maxsize=256)
def _cudnn_accepts(shape, keys, dtype, scale, causal) -> bool:
    """Whether JAX's cuDNN attention takes these (B, L, N, E) / (B, S, N, E) shapes (traced once:
    its rules on sequence lengths and head dims vary with the cuDNN version and the GPU)."""
    q = jax.ShapeDtypeStruct(shape, dtype)
    k = jax.ShapeDtypeStruct(keys, dtype)
    try:
        jax.eval_shape(lambda q, k, v: jax.vjp(lambda *a: _cudnn(*a, scale, causal), q, k, v)[0], q, k, k)
    except (NotImplementedError, ValueError, RuntimeError):  # JAX's refusals: shapes, layouts, no cuDNN
        return False
    return True


def _cudnn_applies(q, k, v, attn_mask, dropout_p, gqa, causal, scale) -> bool:
    """Whether cuDNN's flash attention runs this call: a GPU, float16/bfloat16, no mask (causal
    only with L == S), no dropout, no GQA, equal batch axes, ``E == Ev``, no zero size, and
    shapes JAX's cuDNN attention accepts (e.g. head dim a multiple of 8 up to 128 or 256, even
    sequence lengths)."""
    if not (jax.default_backend() == "gpu" and q.dtype.name in CUDNN_DTYPES and attn_mask is None
            and dropout_p == 0 and not gqa and q.ndim >= 2 and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]
            and k.shape == v.shape and q.shape[-1] == k.shape[-1]
            and (not causal or q.shape[-2] == k.shape[-2]) and 0 not in q.shape + k.shape):
        return False
    return _cudnn_accepts(_cudnn_layout(q).shape, _cudnn_layout(k).shape, q.dtype, scale, causal)


def _cudnn_attention(q, k, v, *, scale, causal):
    """``cudnn_attention_op`` on (..., L, E), through cuDNN's layout (B, L, N, E)."""
    out = cudnn_attention_op(*map(_cudnn_layout, (q, k, v)), scale=scale, causal=causal)
    return _heads_first(out).reshape(*q.shape[:-1], v.shape[-1])


# ----------------------------------------------------------------------------------------------
# Ops: bilinear (seed ``_trilinear_backward``): y[..., o] = x1[..., i] W[o, i, j] x2[..., j] + b[o]

def _form(x1, w, x2):
    """``x1 W x2``, contracting ``x1`` with ``W`` first (torch's ``_trilinear`` order, so a
    non-finite entry of ``x2`` gives the same +-inf as torch's)."""
    return jnp.einsum("...oj,...j->...o", jnp.einsum("...i,oij->...oj", x1, w), x2)


def _bilinear_primal(x1, x2, w, b):
    out = _form(x1, w, x2)
    return out + partials.with_rank(b, out.ndim)


def _bilinear_jvp(res, t1, t2, tw, tb):
    """The product rule: ``dy = dx1 W x2 + x1 dW x2 + x1 W dx2 + db``."""
    x1, x2, w = res
    terms = [
        None if t1 is None else _form(t1, w, x2),
        None if tw is None else _form(x1, tw, x2),
        None if t2 is None else _form(x1, w, t2),
        tb,
    ]
    present = [t for t in terms if t is not None]
    rank = max(t.ndim for t in present)
    present = [partials.with_rank(t, rank) for t in present]
    return sum(present[1:], present[0])


def _bilinear_vjp(res, g):
    """Seed ``_trilinear_backward``: each factor's gradient is the trilinear form with the
    cotangent in its place (``gx1 = g W x2``, ``gx2 = x1 W^T g``, ``gW = g x1 x2``), and the
    bias gets ``g`` summed over the batch."""
    x1, x2, w = res
    return (
        # g contracted with W first: exact (+-inf) with one infinite entry of the other input
        jnp.einsum("...ij,...j->...i", jnp.einsum("...o,oij->...ij", g, w), x2),
        jnp.einsum("...ij,...i->...j", jnp.einsum("...o,oij->...ij", g, w), x1),
        jnp.einsum("...o,...i,...j->oij", g, x1, x2),
        g.reshape(-1, g.shape[-1]).sum(0),
    )


bilinear_op = define_op("bilinear", _bilinear_primal, _bilinear_jvp, _bilinear_vjp,
                        lambda out, x1, x2, w, b: (x1, x2, w))


# ----------------------------------------------------------------------------------------------
# Public functions: scaled_dot_product_attention

_SDPA = "scaled_dot_product_attention"
_KERNEL_IMPLS = ("pallas", "pallas_interpret")  # jaxrules.nested.dense.KERNEL_IMPLS


def _attention_inputs(query, key, value):
    q, k, v = (V.array(_SDPA, n, a) for n, a in (("query", query), ("key", key), ("value", value)))
    for name, a in (("query", q), ("key", k), ("value", v)):
        if jnp.iscomplexobj(a):
            raise TypeError(f"{_SDPA}: {name} must be real, got {a.dtype}")
        if a.ndim < 2:
            raise ValueError(f"{_SDPA}: {name} must have shape (..., length, features) (rank >= 2), got {a.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"{_SDPA}: query {q.shape} and key {k.shape} must have the same last axis (E)")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"{_SDPA}: key {k.shape} and value {v.shape} must have the same length axis (S)")
    dtype = jnp.result_type(q, k, v)
    return q.astype(dtype), k.astype(dtype), v.astype(dtype)


def _gqa_split(q, k, v, bias, keep):
    """``enable_gqa``: query heads (axis -3, Hq) grouped by key/value head (H, Hq % H == 0):
    query head ``h`` reads key/value head ``h // (Hq / H)`` (torch's ``repeat_interleave``),
    done by broadcasting a (H, G) split of the query heads against a length-1 axis of k and v."""
    if min(q.ndim, k.ndim, v.ndim) < 3:
        raise ValueError(f"{_SDPA}: enable_gqa needs query, key and value of shape (..., heads, length, "
                         f"features), got {q.shape}, {k.shape}, {v.shape}")
    hq, h = q.shape[-3], k.shape[-3]
    if v.shape[-3] != h or h == 0 or hq % h:
        raise ValueError(f"{_SDPA}: enable_gqa needs key and value with the same number of heads dividing "
                         f"query's, got {hq}, {h} and {v.shape[-3]}")
    groups = hq // h

    def split(m):
        if m.ndim < 3:
            return m
        if m.shape[-3] == 1:
            return m[..., None, :, :]
        return m.reshape(m.shape[:-3] + (h, groups) + m.shape[-2:])

    q = q.reshape(q.shape[:-3] + (h, groups) + q.shape[-2:])
    return q, k[..., None, :, :], v[..., None, :, :], split(bias), split(keep)


@exported_as("jaxrules.nn.scaled_dot_product_attention")
def scaled_dot_product_attention(query: ArrayLike, key: ArrayLike, value: ArrayLike, attn_mask: ArrayLike | None = None, dropout_p: float = 0.0, is_causal: bool = False, *, scale: float | None = None, enable_gqa: bool = False, dropout_key: ArrayLike | None = None, impl: str | None = None) -> Array:
    """Softmax attention ``softmax(scale q k^T + mask) v``, torch.nn.functional's semantics.

    The forward keeps the attention weights ``P`` (as torch's math backend does); the VJP is
    the flash-attention backward on them (``dv = P^T dO``, ``dS = P o (dO v^T - rowsum(dO o out))``,
    ``dq = scale dS k``, ``dk = scale dS^T q``; a float mask gets ``dS``) and the JVP its
    forward-mode counterpart; with dropout, ``P`` becomes ``P o Z`` (``Z`` the dropout
    factors) in the output and ``dv``, and ``dP`` is ``Z o (dO v^T)``. A row whose every key is masked (boolean False or a ``-inf`` float
    mask) gives output 0 and zero gradients, as torch 2.13 on the CPU does (its flash and math
    backends both; flash kernels on GPUs too). On a GPU, in float16/bfloat16, where cuDNN's flash
    attention applies (see ``impl="cudnn"``) it runs by default: cuDNN's forward and backward, the
    JVP and second derivatives from the formulas above; elsewhere the portable XLA formulas.
    ``impl="pallas"`` runs the fused flash-attention kernels of the
    ragged attention (``jaxrules.nested.dense``: the scores never stored, the backward from the
    saved log-sum-exp) where they apply; they become the GPU default once measured against cuDNN
    and these formulas (``docs/design.md`` §3). Mirrors
    ``torch.nn.functional.scaled_dot_product_attention``.

    Args:
        query: ``(..., L, E)``, real (integer and boolean input is promoted to float).
        key: ``(..., S, E)``; the batch axes of query, key and value broadcast.
        value: ``(..., S, Ev)``.
        attn_mask: None, a boolean mask (True: attend) or an additive float mask (differentiable),
            broadcastable to ``(..., L, S)``.
        dropout_p: the probability of dropping an attention weight, a static number in [0, 1]:
            the weights ``P`` become ``P o Z`` with ``Z = bernoulli(dropout_key, 1 - dropout_p,
            (..., L, S)) / (1 - dropout_p)`` (the output's batch axes; 0 for ``dropout_p = 1``),
            as torch does with its own generator. Needs ``dropout_key`` when positive.
        is_causal: a lower-triangular mask aligned at the top left (query ``i`` attends keys
            ``j <= i``, also for ``L != S``, as torch); not with ``attn_mask`` (``ValueError``).
        scale: keyword-only (as torch): the logits' factor, a static number; None:
            ``1 / sqrt(E)``.
        enable_gqa: keyword-only: grouped-query attention: key and value have ``H`` heads (axis
            -3) dividing the query's ``Hq``; query head ``h`` uses key/value head ``h // (Hq / H)``.
        dropout_key: keyword-only, jaxrules' addition (torch draws from its global generator;
            ``key`` is the attention key): a ``jax.random`` key for the dropout mask; ignored
            when ``dropout_p`` is 0.

        impl: keyword-only: None (cuDNN where it applies, else the formulas above), ``"xla"``
            (the formulas above), ``"cudnn"`` (cuDNN's flash attention via
            ``jax.nn.dot_product_attention``: a GPU, float16/bfloat16, no ``attn_mask``,
            ``is_causal`` only with ``L == S``, no dropout, no ``enable_gqa``, equal batch axes,
            ``E == Ev``, shapes JAX's cuDNN attention accepts (head dim a multiple of 8 up to 128,
            256 from Hopper on; even lengths); otherwise a ``ValueError``), ``"pallas"`` (the fused
            kernels: no ``attn_mask``, no dropout, no ``enable_gqa``, the batch and head axes of
            query, key and value equal, ``L == S`` and one power-of-two head dim >= 16 (``E ==
            Ev``); otherwise a
            ``ValueError``; on a JAX without Pallas' Triton backend the XLA formulas, warned once)
            or ``"pallas_interpret"`` (the kernels in Pallas' interpret mode, for tests on a CPU).

    Returns:
        The attention output ``(..., L, Ev)`` in the operands' result dtype.

    Example:
        >>> import jax.numpy as jnp, jaxrules.nn as nn
        >>> q, k, v = jnp.ones((1, 2)), jnp.zeros((3, 2)), jnp.array([[0.0], [1.0], [5.0]])
        >>> print(nn.scaled_dot_product_attention(q, k, v))  # equal scores: the mean of the values
        [[2.]]
    """
    if impl not in (None, "xla", "cudnn", *_KERNEL_IMPLS):
        raise ValueError(f"{_SDPA}: impl must be None, 'xla', 'cudnn', 'pallas' or 'pallas_interpret', got {impl!r}")
    q, k, v = _batch_sharded_alike(*_attention_inputs(query, key, value))
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real) or not 0 <= dropout_p <= 1:
        raise ValueError(f"{_SDPA}: dropout_p must be a static number in [0, 1], got {dropout_p!r}")
    if dropout_p > 0 and dropout_key is None:
        raise ValueError(f"{_SDPA}: dropout_p={dropout_p!r} needs dropout_key (a jax.random key)")
    causal, gqa = V.flag(_SDPA, "is_causal", is_causal), V.flag(_SDPA, "enable_gqa", enable_gqa)
    if scale is None:
        scale = 1 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0  # E = 0: the logits are 0 anyway
    scale = float(V.static_scalar(_SDPA, "scale", scale))
    length, keys = q.shape[-2], k.shape[-2]
    bias = jnp.zeros((1, 1), q.dtype)
    keep = _causal_keep(length, keys, causal)
    if attn_mask is not None:
        if causal:
            raise ValueError(f"{_SDPA}: attn_mask must be None when is_causal=True (as torch)")
        mask = V.array(_SDPA, "attn_mask", attn_mask, inexact=False)
        if mask.dtype == bool:
            keep = mask
        elif jnp.issubdtype(mask.dtype, jnp.floating):
            bias = mask.astype(q.dtype)
        else:
            raise TypeError(f"{_SDPA}: attn_mask must be boolean or real floating, got {mask.dtype}")
    if impl in (None, "cudnn"):
        if _cudnn_applies(q, k, v, attn_mask, dropout_p, gqa, causal, scale):
            return _cudnn_attention(q, k, v, scale=scale, causal=causal)
        if impl == "cudnn":
            raise ValueError(f"{_SDPA}: impl='cudnn' needs a GPU, float16 or bfloat16, no attn_mask (is_causal only "
                             "with L == S), no dropout, no enable_gqa, equal batch axes, one head dim (E == Ev) and "
                             "shapes JAX's cuDNN attention accepts (head dim a multiple of 8 up to 128, or 256 from "
                             f"Hopper on; even lengths); got query {q.shape} {q.dtype}, key {k.shape}, value {v.shape} "
                             f"on {jax.default_backend()}")
    if impl in _KERNEL_IMPLS and 0 not in q.shape + k.shape + v.shape:  # zero-size: the formulas (no work)
        from jaxrules.nested import dense  # late: jaxrules.nn loads no Pallas kernels

        if not dense.kernel_applies(q, k, v, attn_mask, dropout_p, gqa):
            raise ValueError(f"{_SDPA}: impl={impl!r} needs no attn_mask, no dropout, no enable_gqa, equal batch and "
                             f"head axes, L == S and one power-of-two head dim >= 16 (E == Ev); got query {q.shape}, key "
                             f"{k.shape}, value {v.shape}")
        return dense.dense_attention(q, k, v, scale=scale, is_causal=causal, impl=impl)
    heads = q.shape[-3] if gqa and q.ndim >= 3 else None
    if gqa:
        q, k, v, bias, keep = _gqa_split(q, k, v, bias, keep)
    try:
        logits = jnp.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]) + (length, keys)
    except ValueError:
        raise ValueError(f"{_SDPA}: the batch axes of query {q.shape}, key {k.shape} and value {v.shape} do not "
                         "broadcast (key/value heads differing from query's need enable_gqa=True)") from None
    for m in (bias, keep):
        try:
            fits = jnp.broadcast_shapes(m.shape, logits) == logits
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"{_SDPA}: attn_mask {np.shape(attn_mask)} must broadcast to (..., L, S) = {logits}")
    drop = jnp.ones((1, 1), q.dtype)
    if dropout_p > 0:
        shape = logits if heads is None else logits[:-4] + (heads,) + logits[-2:]
        kept = jax.random.bernoulli(dropout_key, 1 - dropout_p, shape)
        drop = jnp.where(kept, 1 / (1 - dropout_p) if dropout_p < 1 else 0, 0).astype(q.dtype)
        drop = drop if heads is None else drop.reshape(logits)
    out, _ = attention_op(q, k, v, bias, keep, drop, scale=scale, dropout=dropout_p > 0)
    return out if heads is None else out.reshape(out.shape[:-4] + (heads,) + out.shape[-2:])


# ----------------------------------------------------------------------------------------------
# Public functions: bilinear

@exported_as("jaxrules.nn.bilinear")
def bilinear(input1: ArrayLike, input2: ArrayLike, weight: ArrayLike, bias: ArrayLike | None = None) -> Array:
    """The bilinear form ``y[..., o] = sum_ij x1[..., i] W[o, i, j] x2[..., j] + b[o]``.

    Derivatives: seed ``_trilinear_backward`` (each input's gradient is the form with the
    cotangent in its place; the bias gets the cotangent summed over the batch) and its
    product-rule JVP. Mirrors ``torch.nn.functional.bilinear``.

    Args:
        input1: ``(..., H1)``, real (integer and boolean input is promoted to float).
        input2: ``(..., H2)`` with the same batch axes as ``input1``.
        weight: ``(O, H1, H2)``.
        bias: ``(O,)``; None: no bias.

    Returns:
        ``(..., O)`` in the operands' result dtype.
    """
    op = "bilinear"
    x1, x2, w = (V.array(op, n, a) for n, a in (("input1", input1), ("input2", input2), ("weight", weight)))
    b = None if bias is None else V.array(op, "bias", bias)
    for name, a in (("input1", x1), ("input2", x2), ("weight", w), ("bias", b)):
        if a is not None and jnp.iscomplexobj(a):
            raise TypeError(f"{op}: {name} must be real, got {a.dtype}")
    if x1.ndim < 1 or x2.ndim < 1 or x1.shape[:-1] != x2.shape[:-1]:
        raise ValueError(f"{op}: input1 {x1.shape} and input2 {x2.shape} must be (..., H1) and (..., H2) with "
                         "the same batch axes")
    if w.shape != (w.shape[0] if w.ndim else 0, x1.shape[-1], x2.shape[-1]):
        raise ValueError(f"{op}: weight must have shape (O, {x1.shape[-1]}, {x2.shape[-1]}), got {w.shape}")
    if b is not None and b.shape != (w.shape[0],):
        raise ValueError(f"{op}: bias must have shape ({w.shape[0]},), got {b.shape}")
    dtype = jnp.result_type(*(a for a in (x1, x2, w, b) if a is not None))
    b = jnp.zeros(w.shape[:1], dtype) if b is None else b
    return bilinear_op(x1.astype(dtype), x2.astype(dtype), w.astype(dtype), b.astype(dtype))
