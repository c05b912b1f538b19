"""Pointwise losses: the partial derivatives with respect to each input. Part of
``jaxrules.partials``."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jaxrules.mechanism import explicit_sharding, unsharded_along
from jaxrules.partials.elementwise import promoted_dtype, safe_reciprocal, with_rank
from jaxrules.partials.reductions import logsumexp_parts

__all__ = [  # the helpers jaxrules.partials re-exports (formulas write P.<name>)
    "bce_derivatives", "bce_with_logits_derivatives", "clamped_var", "ctc_alpha_beta", "ctc_extended",
    "ctc_occupancy", "gaussian_nll_derivatives",
    "hinge_embedding_derivatives", "huber_derivatives", "kl_div_derivatives", "l1_derivatives",
    "lce_accumulation", "lce_backward", "lce_chunk_size", "lce_coefficients", "lce_forward", "lce_per_token",
    "lce_tangent", "lce_token_cotangent", "lce_token_weights", "lce_unpack", "margin_ranking_derivatives",
    "mse_derivatives", "poisson_nll_derivatives", "smooth_l1_derivatives", "soft_margin_derivatives"
]

# ----------------------------------------------------------------------------------------------
# Pointwise losses: the partial derivatives with respect to each input.

_LOG_FLOOR = -100.0  # torch clamps the logs of binary_cross_entropy at -100


def bce_derivatives(x, y):
    """Of ``-(y max(log x, -100) + (1 - y) max(log(1 - x), -100))``, consistent with the clamped
    forward: where a log is clamped it is locally constant, so its term contributes nothing
    (torch's input gradient is ``(x - y)/max(x(1 - x), 1e-12)``, its target gradient ``-logit(x)``
    — infinite at x in {0, 1} although the forward is finite there)."""
    floor = math.exp(_LOG_FLOOR)
    live_x, live_1mx = x > floor, 1 - x > floor  # where the logs are not clamped
    log_x = jnp.where(live_x, jnp.log(jnp.where(live_x, x, 1)), _LOG_FLOOR)
    log_1mx = jnp.where(live_1mx, jnp.log1p(-jnp.where(live_1mx, x, 0)), _LOG_FLOOR)
    clamped_x, clamped_1mx = jnp.logical_not(live_x), jnp.logical_not(live_1mx)
    dx = -(y * safe_reciprocal(x, clamped_x) - (1 - y) * safe_reciprocal(1 - x, clamped_1mx))
    return dx, -(log_x - log_1mx)


def bce_with_logits_derivatives(x, y, pos_weight):
    """Of ``-(p y logsigmoid(x) + (1 - y) logsigmoid(-x))`` (seed
    ``binary_cross_entropy_with_logits_backward`` and ``..._target_backward``):
    ``(sigmoid(x) - y (1 + (p - 1) sigmoid(-x)), logsigmoid(-x) - p logsigmoid(x), -y
    logsigmoid(x))``. d/dx is ``(p y + 1 - y) sigmoid(x) - p y`` written linear in y: -+inf at a
    +-inf target with p = 1, as torch's ``sigmoid(x) - y``, not inf - inf."""
    dx = jax.nn.sigmoid(x) - y * (1 + (pos_weight - 1) * jax.nn.sigmoid(-x))
    dy = jax.nn.log_sigmoid(-x) - pos_weight * jax.nn.log_sigmoid(x)
    return dx, dy, -y * jax.nn.log_sigmoid(x)


def l1_derivatives(x, y):
    """Of ``|x - y|``: ``(sgn(x - y), -sgn(x - y))`` (complex: ``conj(sgn(x - y))``, ``(x - y) / |x - y|``
    conjugated in JAX's convention, ``docs/design.md`` §2), 0 where x == y and where the difference is
    NaN (torch's ``sgn`` backward, derivatives.yaml's l1_loss through abs: torch.sign(NaN) = 0;
    jnp.sign gives NaN)."""
    d = x - y
    if jnp.iscomplexobj(d):  # JAX's convention for a real function of complex d: conj(sgn(d))
        a = jnp.abs(d)
        s = jnp.where(a > 0, jnp.conj(d) / jnp.where(a > 0, a, 1), 0).astype(d.dtype)
        return s, -s
    s = jnp.where(d > 0, 1, jnp.where(d < 0, -1, 0)).astype(d.dtype)
    return s, -s


def mse_derivatives(x, y):
    """Of ``(x - y)^2`` (seed ``mse_loss_double_backward``: second derivative 2)."""
    d = 2 * (x - y)
    return d, -d


def kl_div_derivatives(x, t, log_target):
    """Of torch's pointwise KL term, ``t (log t - x)`` (0 where t == 0) or, with ``log_target``,
    ``exp(t) (t - x)``: input ``-t`` / ``-exp(t)``; target ``log t + 1 - x`` (``-inf`` at t == 0,
    as torch: the one-sided slope of t log t) / ``exp(t) (t + 1 - x)`` (seed ``kl_div`` formulas of
    derivatives.yaml)."""
    if log_target:
        e = jnp.exp(t)
        return -e, e * (t + 1 - x)
    return -t, jnp.log(t) + 1 - x


def margin_ranking_derivatives(x1, x2, y, margin):
    """Of ``max(0, -y (x1 - x2) + margin)``: ``(-y, y, -(x1 - x2), 1)`` where the hinge is
    active, including at 0 (torch's ``clamp_min`` backward passes the gradient at the bound), 0
    elsewhere, also at an infinite target; the last is the margin's. At a NaN target all are NaN
    (whether the hinge is active is undefined; torch: NaN, its chain rule's ``0 * NaN``)."""
    active = (-y * (x1 - x2) + margin >= 0).astype(x1.dtype)
    nan_target = jnp.isnan(y)
    return tuple(jnp.where(nan_target, jnp.nan, d).astype(d.dtype)
                 for d in (-y * active, y * active, -(x1 - x2) * active, active))


def hinge_embedding_derivatives(x, y, margin):
    """Of ``[y != 1] max(0, margin - x) + [y != -1] x``: ``-[y != 1][margin - x >= 0] + [y != -1]``
    (torch's ``clamp_min`` backward: the active branch at the bound); the labels get 0; the
    margin ``[y != 1][margin - x >= 0]``."""
    hinge = jnp.where((y != 1) & (margin - x >= 0), 1, 0).astype(x.dtype)
    dx = jnp.where(y != -1, 1, 0).astype(x.dtype) - hinge
    return dx, jnp.zeros_like(y), hinge


def huber_derivatives(x, y, delta):
    """Of torch's huber loss ``d^2 / 2`` inside ``|d| < delta``, ``delta (|d| - delta / 2)``
    outside: ``d`` inside, ``delta sign(d)`` outside; second derivative ``[|d| < delta]`` (seed
    ``huber_loss_double_backward``: 0 on the boundary). The delta's: 0 inside, ``|d| - delta``
    outside (continuous: 0 on the boundary)."""
    d = x - y
    inside = jnp.abs(d) < delta
    g = jnp.where(inside, d, delta * jnp.sign(d))
    return g, -g, jnp.where(inside, 0, jnp.abs(d) - delta).astype(x.dtype)


def smooth_l1_derivatives(x, y, beta):
    """Of torch's smooth L1 loss ``d^2 / (2 beta)`` inside ``|d| < beta``, ``|d| - beta / 2``
    outside: ``d / beta`` inside, ``sign(d)`` outside; beta = 0 is the L1 loss (seed
    ``smooth_l1_loss_double_backward``). The beta's: ``-d^2 / (2 beta^2)`` inside, ``-1/2``
    outside (continuous on the boundary)."""
    d = x - y
    inside = jnp.abs(d) < beta  # never where beta == 0
    b = jnp.where(inside, beta, 1)
    g = jnp.where(inside, d / b, jnp.sign(d))
    return g, -g, jnp.where(inside, -0.5 * d * d / (b * b), -0.5).astype(x.dtype)


def soft_margin_derivatives(x, y):
    """Of ``softplus(-y x)``: ``(-y sigmoid(-y x), -x sigmoid(-y x))`` — stable at |x| = 800,
    where torch's ``soft_margin_loss_backward`` overflows to NaN."""
    s = jax.nn.sigmoid(-y * x)
    return -y * s, -x * s


def poisson_nll_derivatives(x, t, eps, *, log_input, full, **_):
    """Of torch's ``poisson_nll_loss``: ``exp(x) - t x`` (``log_input``) or ``x - t log(x + eps)``,
    plus with ``full`` the Stirling term ``t log t - t + log(2 pi t) / 2`` where ``t > 1``:
    ``(exp(x) - t, -x)`` or ``(1 - t / (x + eps), -log(x + eps))``, the target's plus
    ``log t + 1 / (2 t)`` where ``t > 1`` and 0 elsewhere (torch: NaN at t = 0, from ``0 * log 0``
    in the masked term's backward). The eps's (an argument: it may be traced): 0 with
    ``log_input``, ``-t / (x + eps)`` without."""
    if log_input:
        dx, dt, deps = jnp.exp(x) - t, -x, jnp.zeros_like(x)
    else:
        dx, dt, deps = 1 - t / (x + eps), -jnp.log(x + eps), -t / (x + eps)
    if full:
        big = t > 1
        safe = jnp.where(big, t, 2)
        dt = dt + jnp.where(big, jnp.log(safe) + 0.5 / safe, 0)
    return dx, dt, deps


def clamped_var(var, eps):
    """``max(var, eps)`` passing var's gradient straight through (torch 2.13's ``var.clamp_(min=eps)``
    under ``no_grad`` in ``gaussian_nll_loss``: the clamp's own derivative is 1 at every order),
    +inf at var = +inf, and NaN at a negative var (torch raises; that check needs a concrete
    var)."""
    clamped = jnp.where(var < eps, var + jax.lax.stop_gradient(eps - var), var)
    return jnp.where(var < 0, jnp.nan, clamped)


def gaussian_nll_derivatives(x, y, var, eps, **_):
    """Of ``(log v + (x - y)^2 / v) / 2`` with ``v`` the clamped var (``clamped_var``): ``(d / v, -d
    / v, (1 / v - d^2 / v^2) / 2, 0)`` with ``d = x - y`` (torch's ``gaussian_nll_loss`` through
    ``log`` and ``div`` backward; 0 at var = +inf, their limit); eps (an argument: it may be
    traced) gets 0, the clamp's gradient going to var."""
    v = clamped_var(var, eps)
    d = x - y
    return d / v, -d / v, 0.5 * (1 / v - d * d / (v * v)), jnp.zeros_like(d)


# ----------------------------------------------------------------------------------------------
# The fused linear + cross-entropy head (``jaxrules.nn.linear_cross_entropy``): the logits
# ``l = x W^T + b`` (tokens x vocabulary) are never held whole. Every pass (the primal's
# logsumexp, the JVP, the VJP) is a scan over chunks of the vocabulary that recomputes the
# chunk's logits (tokens x chunk, in the accumulation dtype) from x and the chunk's rows of W:
# the full chunks in a scan, the vocabulary's remainder (a smaller chunk) once after it.

LCE_CHUNK_ELEMENTS = 1 << 25  # logits per chunk when chunk_size is None (128 MiB in float32)
LCE_MIN_CHUNK = 256  # classes per chunk at least (a wide matmul), unless the vocabulary is smaller


def lce_chunk_size(tokens: int, vocab: int, chunk_size: int | None = None) -> int:
    """Classes per chunk: ``chunk_size``, else the largest power of two with at most
    ``LCE_CHUNK_ELEMENTS`` logits for ``tokens`` tokens (at least ``LCE_MIN_CHUNK``); at most
    the vocabulary."""
    if chunk_size is None:
        fit = max(LCE_CHUNK_ELEMENTS // max(tokens, 1), 1)
        chunk_size = max(1 << (fit.bit_length() - 1), LCE_MIN_CHUNK)
    return min(chunk_size, vocab)


def lce_accumulation(dtype):
    """The dtype of the logits, the statistics and the sums: float32 for bfloat16/float16
    inputs, else the input's."""
    return promoted_dtype(dtype, jnp.float32)


def _lce_chunk(x, weight, bias, start, size):
    """The logits of classes ``[start, start + size)`` (tokens, size) in the accumulation dtype
    (the matmul's ``preferred_element_type``), and those rows of ``weight``."""
    rows = jax.lax.dynamic_slice_in_dim(weight, start, size, 0)
    logits = jax.lax.dot_general(x, rows, (((1,), (1,)), ((), ())), preferred_element_type=lce_accumulation(x.dtype))
    if bias is not None:
        part = jax.lax.dynamic_slice_in_dim(bias, start, size, 0).astype(logits.dtype)
        logits = logits + with_rank(part, logits.ndim)
    return logits, rows


def _over_chunks(first, step, vocab, chunk):
    """``first(0, chunk)``, then ``step(carry, start, size)`` over the other full chunks (a scan:
    the carries take the types, shardings and batching of a chunk's results) and the tail of
    ``vocab % chunk`` classes (once, outside the scan)."""
    n, tail = divmod(vocab, chunk)
    carry = first(0, chunk)
    if n > 1:
        carry, _ = jax.lax.scan(lambda c, j: (step(c, j * chunk, chunk), None), carry, jnp.arange(1, n))
    if tail:
        carry = step(carry, n * chunk, tail)
    return carry


def _chunk_weights(class_weight, start, size, like):
    if class_weight is None:
        return jnp.ones((size,), like.dtype)
    return jax.lax.dynamic_slice_in_dim(class_weight, start, size, 0).astype(like.dtype)


def _target_value(values, target, start, size):
    """``values[i, target_i - start]`` where ``target_i`` is in the chunk, else 0."""
    local = target - start
    hit = (local >= 0) & (local < size)
    picked = jnp.take_along_axis(values, jnp.clip(local, 0, size - 1).astype(jnp.int32)[:, None], axis=1)[:, 0]
    return jnp.where(hit, picked, 0)


def lce_forward(x, weight, bias, target, class_weight, *, chunk, smoothing):
    """One pass over the vocabulary's chunks: per token the logsumexp of the logits (online: a
    running maximum and a rescaled sum of exponentials), the target's logit (0 where no class
    holds it) and, when ``smoothing``, ``sum_c w_c l_c``. (tokens,) arrays in the accumulation
    dtype; ``(lse, picked, weighted_sum)``; the logsumexp is NaN where a logit is infinite."""
    vocab, tokens = weight.shape[0], x.shape[0]
    acc = lce_accumulation(x.dtype)
    if vocab == 0:
        return (jnp.full((tokens,), -jnp.inf, acc),) + (jnp.zeros((tokens,), acc),) * 2

    def stats(start, size):
        logits, _ = _lce_chunk(x, weight, bias, start, size)
        top = jnp.max(logits, axis=1)
        shift = jnp.where(jnp.isfinite(top), top, 0)
        sumexp = jnp.sum(jnp.exp(logits - shift[:, None]), axis=1)
        weighted = (jnp.sum(logits * _chunk_weights(class_weight, start, size, logits)[None, :], axis=1)
                    if smoothing else jnp.zeros_like(top))
        return top, sumexp, _target_value(logits, target, start, size), weighted

    def step(carry, start, size):
        top, sumexp, picked, weighted = carry
        c_top, c_sumexp, c_picked, c_weighted = stats(start, size)
        new = jnp.maximum(top, c_top)
        shift = jnp.where(jnp.isfinite(new), new, 0)
        rescale = jnp.exp(jnp.where(jnp.isfinite(top), top, 0) - shift)
        c_rescale = jnp.exp(jnp.where(jnp.isfinite(c_top), c_top, 0) - shift)
        return new, sumexp * rescale + c_sumexp * c_rescale, picked + c_picked, weighted + c_weighted

    top, sumexp, picked, weighted = _over_chunks(stats, step, vocab, chunk)
    # An infinite logit makes the token's log-probabilities NaN (torch's log_softmax: inf - inf),
    # so its loss and all its derivatives are NaN, as torch's: its logsumexp is NaN.
    lse = jnp.where(jnp.isfinite(top), top + jnp.log(sumexp), jnp.nan)
    return lse, picked, weighted


def lce_token_weights(target, class_weight, *, vocab, ignore_index, dtype):
    """``(kept, w_t)``: the tokens whose target is not ``ignore_index``, and the class weight of
    each token's target (0 where ignored; NaN where the target is out of ``[0, vocab)``, so that
    the loss and every derivative there are NaN, never a finite wrong value)."""
    kept = target != ignore_index
    bad = kept & ((target < 0) | (target >= vocab))
    safe = jnp.where(kept & ~bad, target, 0)
    w = jnp.ones(target.shape, dtype) if class_weight is None or vocab == 0 else class_weight[safe].astype(dtype)
    return kept, jnp.where(bad, jnp.nan, jnp.where(kept, w, 0))


def lce_coefficients(target, class_weight, lse, *, vocab, ignore_index, smoothing, z_loss):
    """``(a, b, e)`` per token with ``d loss_t / d l_tc = a_t p_tc - b_t [c = t] - e_t w_c``
    (``p = softmax(l)``): for ``loss_t = (1 - s) w_t (lse - l_t) + (s / V) sum_c w_c (lse - l_c)
    + z lse^2``, ``a = (1 - s) w_t + (s / V) sum_c w_c + 2 z lse``, ``b = (1 - s) w_t``, ``e = s /
    V`` (0 for ignored tokens; ``e`` None without smoothing). Seeds ``_log_softmax_backward_data``
    and ``nll_loss_backward``."""
    kept, w_t = lce_token_weights(target, class_weight, vocab=vocab, ignore_index=ignore_index, dtype=lse.dtype)
    total = vocab if class_weight is None else jnp.sum(class_weight.astype(lse.dtype))
    a = (1 - smoothing) * w_t
    if smoothing:
        a = a + smoothing / vocab * total
    if z_loss:
        a = a + 2 * z_loss * jnp.where(kept, lse, 0)
    e = jnp.where(kept, smoothing / vocab, 0).astype(lse.dtype) if smoothing and vocab else None
    return jnp.where(kept, a, 0), (1 - smoothing) * w_t, e


def lce_tangent(x, weight, bias, target, class_weight, lse, tx, tw, tb, *, chunk, smoothing):
    """``(sum_c p_tc dl_tc, dl_t[target], sum_c w_c dl_tc)`` per token for the logits' tangent
    ``dl = tx W^T + x tW^T + tb`` (each term where its tangent is not None), over the chunks; the
    first is the logsumexp's tangent."""
    vocab, tokens = weight.shape[0], x.shape[0]
    acc = lce_accumulation(x.dtype)
    if vocab == 0:
        return (jnp.zeros((tokens,), acc),) * 3
    dims = (((1,), (1,)), ((), ()))

    def sums(start, size):
        logits, rows = _lce_chunk(x, weight, bias, start, size)
        dl = jnp.zeros_like(logits)
        if tx is not None:
            dl = dl + jax.lax.dot_general(tx, rows, dims, preferred_element_type=acc)
        if tw is not None:
            dl = dl + jax.lax.dot_general(x, jax.lax.dynamic_slice_in_dim(tw, start, size, 0), dims,
                                          preferred_element_type=acc)
        if tb is not None:
            dl = dl + jax.lax.dynamic_slice_in_dim(tb, start, size, 0).astype(acc)[None, :]
        weighted = (jnp.sum(dl * _chunk_weights(class_weight, start, size, dl)[None, :], axis=1)
                    if smoothing else jnp.zeros_like(lse))
        p = jnp.exp(logits - lse[:, None])
        return jnp.sum(p * dl, axis=1), _target_value(dl, target, start, size), weighted

    return _over_chunks(sums, lambda carry, start, size: tuple(c + s for c, s in zip(carry, sums(start, size))),
                        vocab, chunk)


def lce_backward(x, weight, bias, target, class_weight, lse, a, b, e, *, chunk):
    """``(dx, dW, db)`` for the logits' cotangent ``G_tc = a_t p_tc - b_t [c = t] - e_t w_c``
    (no ``e`` term when ``e`` is None; ``dx = G W``, ``dW = G^T x``, ``db = sum_t G``; db None
    without a bias), chunk by chunk: each chunk's G is cast to the input dtype for the two
    matmuls (accumulating in the accumulation dtype); dx is summed over the chunks in the
    accumulation dtype, dW and db are written chunk by chunk (each class in one chunk, in place:
    no tokens x vocabulary and no float32 vocabulary x features buffer)."""
    vocab = weight.shape[0]
    acc = lce_accumulation(x.dtype)
    if vocab == 0:
        return jnp.zeros(x.shape, acc), jnp.zeros_like(weight), None if bias is None else jnp.zeros_like(bias)

    def grads(start, size):
        logits, rows = _lce_chunk(x, weight, bias, start, size)
        onehot = (start + jnp.arange(size))[None, :] == target[:, None]
        g = a[:, None] * jnp.exp(logits - lse[:, None]) - jnp.where(onehot, b[:, None], 0)
        if e is not None:
            g = g - e[:, None] * _chunk_weights(class_weight, start, size, g)[None, :]
        gc = g.astype(x.dtype)
        dx = jax.lax.dot_general(gc, rows, (((1,), (0,)), ((), ())), preferred_element_type=acc)
        # (the tokens, contracted here, may be sharded under an Explicit mesh: dW takes W's sharding)
        dw = jax.lax.dot_general(gc, x, (((0,), (0,)), ((), ())), preferred_element_type=acc,
                                 out_sharding=explicit_sharding(weight, x)).astype(weight.dtype)
        db = None if bias is None else jnp.sum(g, axis=0).astype(bias.dtype)
        return dx, dw, db

    def place(full, part, start):
        return None if full is None else jax.lax.dynamic_update_slice_in_dim(full, part, start, 0)

    def first(start, size):
        dx, dw, db = grads(start, size)
        return dx, place(jnp.zeros_like(weight), dw, start), place(None if bias is None else jnp.zeros_like(bias),
                                                                   db, start)

    def step(carry, start, size):
        c_dx, c_dw, c_db = carry
        dx, dw, db = grads(start, size)
        return c_dx + dx, place(c_dw, dw, start), place(c_db, db, start)

    return _over_chunks(first, step, vocab, chunk)


def lce_unpack(items, has_bias, has_class_weight):
    """``(x, weight, target, bias, class_weight)`` from the op's arrays (or their tangents):
    ``x, weight, target``, then bias and class_weight where present (None where absent)."""
    x, weight, target, *rest = items
    bias = rest.pop(0) if has_bias else None
    class_weight = rest.pop(0) if has_class_weight else None
    return x, weight, target, bias, class_weight


def lce_per_token(values, target, class_weight, *, vocab, ignore_index, reduction):
    """Per-token values reduced as the loss is: as they are (``"none"``), summed, or summed and
    divided by the sum of the kept tokens' class weights (``"mean"``; torch's ``nll_loss``
    denominator, 1 where it is 0 so that ignored tokens give 0, not 0 / 0)."""
    if reduction == "none":
        return values
    total = jnp.sum(values)
    if reduction == "sum":
        return total
    _, w_t = lce_token_weights(target, class_weight, vocab=vocab, ignore_index=ignore_index, dtype=values.dtype)
    denominator = jnp.sum(w_t)
    return total / jnp.where(denominator == 0, 1, denominator)


def lce_token_cotangent(ct, target, class_weight, *, vocab, ignore_index, reduction, dtype):
    """The transpose of ``lce_per_token``: each token's cotangent, (tokens,) in ``dtype``."""
    ct = jnp.asarray(ct).astype(dtype)
    if reduction == "none":
        return ct
    if reduction == "mean":
        _, w_t = lce_token_weights(target, class_weight, vocab=vocab, ignore_index=ignore_index, dtype=dtype)
        denominator = jnp.sum(w_t)
        ct = ct / jnp.where(denominator == 0, 1, denominator)
    return jnp.broadcast_to(ct, target.shape)


# ----------------------------------------------------------------------------------------------
# Connectionist temporal classification (ctc_loss): the forward and backward variables of the
# extended label sequence (a blank before, between and after the labels), in log space.


def _log_sum3(a, b, c):
    """``log(e^a + e^b + e^c)``: -inf where all three are -inf, with finite derivatives of every
    order there (0: the log reads 1 where the sum is 0; the shift ``m`` cancels, so it carries no
    derivative); NaN where one is NaN."""
    m = jax.lax.stop_gradient(jnp.maximum(jnp.maximum(a, b), c))
    m = jnp.where(jnp.isfinite(m), m, 0)
    total = jnp.exp(a - m) + jnp.exp(b - m) + jnp.exp(c - m)
    positive = total > 0
    return jnp.where(positive, m + jnp.log(jnp.where(positive, total, 1)), jnp.where(total == 0, -jnp.inf, jnp.nan))


def _shifted(a, by, fill):
    """``a`` moved ``by`` places along its last axis (right for ``by > 0``), ``fill`` entering;
    its length kept (a shift past the end leaves only ``fill``)."""
    length = a.shape[-1]
    step = min(abs(by), length)
    pad = jnp.full(a.shape[:-1] + (step,), fill, a.dtype)
    return jnp.concatenate([pad, a[..., :length - step]] if by > 0 else [a[..., step:], pad], axis=-1)


def ctc_extended(targets, target_lengths, blank):
    """The extended labels ``(N, 2 S + 1)`` (blank, y_1, blank, ..., y_S, blank) of padded targets
    ``(N, S)``, and where a path may skip from ``s - 2`` to ``s`` (``s`` a label, not the one two
    places back)."""
    n, s = targets.shape
    targets = jnp.where(jnp.arange(s)[None] < target_lengths[:, None], targets, blank)  # the padding is never read
    ext = jnp.full((n, 2 * s + 1), blank, targets.dtype).at[:, 1::2].set(targets)
    skip = jnp.zeros(ext.shape, bool).at[:, 2:].set((ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2]))
    return ext, skip & (jnp.arange(2 * s + 1)[None] < 2 * target_lengths[:, None] + 1)


def ctc_alpha_beta(lp, ext, skip, input_lengths, target_lengths):
    """``(log_alpha, log_beta, nll, emit)`` of log-probabilities ``lp`` ``(T, N, C)``: ``alpha_t(s)`` the
    probability of the paths through extended state ``s`` at time ``t`` over ``0..t``,
    ``beta_t(s)`` over ``t..T_n - 1``, both including ``lp[t, ext[s]]`` (Graves et al. 2006;
    torch's ``ctc_loss_cpu_template`` / ``ctc_loss_backward_cpu_template``), ``-inf`` outside
    ``t < T_n``; ``nll = -log(alpha_{T_n-1}(2 S_n) + alpha_{T_n-1}(2 S_n - 1))`` (0 for ``T_n = S_n = 0``);
    ``emit[t, n, s] = lp[t, n, ext[n, s]]``."""
    lp = unsharded_along(lp, (0, 2))  # an Explicit mesh: the scans walk T, each step reads all classes
    t_max, n, _ = lp.shape
    length = ext.shape[1]
    emit = jnp.take_along_axis(lp, jnp.broadcast_to(ext[None], (t_max, n, length)), axis=2)  # (T, N, L)
    ninf = jnp.array(-jnp.inf, lp.dtype)
    state = jnp.arange(length)[None]  # (1, L)
    final = (state == 2 * target_lengths[:, None]) | (state == 2 * target_lengths[:, None] - 1)
    # zeros (N, 1) derived from lp: under shard_map the scans' carries then vary as lp does
    zeros = jnp.zeros_like(jnp.sum(lp[:1], axis=(0, 2)))[:, None]
    start = jnp.where(state == 0, 0, ninf) + zeros  # a virtual step before t = 0

    def forward(a, step):
        t, e = step
        moved = e + _log_sum3(a, _shifted(a, 1, ninf), jnp.where(skip, _shifted(a, 2, ninf), ninf))
        live = (t < input_lengths)[:, None]
        return jnp.where(live, moved, a), jnp.where(live, moved, ninf)

    last, log_alpha = jax.lax.scan(forward, start, (jnp.arange(t_max), emit))
    top, _, total = logsumexp_parts(jnp.where(final, last, ninf), 1)
    nll = -(top + jnp.log(total))[:, 0]  # +inf: no path
    end = jnp.where(final, 0, ninf).astype(lp.dtype) + zeros
    skip_to = _shifted(skip, -2, False)  # from s, a skip to s + 2

    def backward(b, step):
        t, e = step
        nxt = jnp.where((t == input_lengths - 1)[:, None], end,
                        _log_sum3(b, _shifted(b, -1, ninf), jnp.where(skip_to, _shifted(b, -2, ninf), ninf)))
        live = (t < input_lengths)[:, None]
        moved = e + nxt
        return jnp.where(live, moved, end), jnp.where(live, moved, ninf)

    _, log_beta = jax.lax.scan(backward, end, (jnp.arange(t_max), emit), reverse=True)
    return log_alpha, log_beta, nll, emit


def ctc_occupancy(lp, ext, skip, input_lengths, target_lengths):
    """``(nll, occupancy)``: the loss per sequence and ``d nll / d lp = -occupancy`` ``(T, N, C)``,
    ``occupancy[t, c] = sum_{s: ext[s] = c} alpha_t(s) beta_t(s) / (y_t(c) p)`` (the expected
    number of paths' visits to class c at time t; torch's ``ctc_loss_backward_cpu_template``
    without its ``exp(lp)`` term). NaN at the steps ``t < T_n`` of a sequence whose loss is
    infinite (no path) or NaN (a NaN log-probability on its steps), as torch."""
    log_alpha, log_beta, nll, emit = ctc_alpha_beta(lp, ext, skip, input_lengths, target_lengths)
    # every exponent finite where it is selected and where it is not (both branches of a where
    # are differentiated: an inf or NaN in the other one would reach the second derivatives)
    through, lost = log_alpha + log_beta, ~jnp.isfinite(nll)[None, :, None]
    on_path = jnp.isfinite(through) & ~lost
    exponent = jnp.where(on_path, through - emit + nll[None, :, None], 0)
    visits = jnp.where(on_path, jnp.exp(exponent), 0)  # (T, N, L); 0 off the paths
    inside = jnp.arange(lp.shape[0])[:, None, None] < input_lengths[None, :, None]
    visits = jnp.where(lost & inside, jnp.nan, visits)
    index = jnp.broadcast_to(ext[None], visits.shape)
    occupancy = jnp.zeros(lp.shape, visits.dtype)
    t_idx = jnp.arange(lp.shape[0])[:, None, None]
    n_idx = jnp.arange(lp.shape[1])[None, :, None]
    return nll, occupancy.at[t_idx, n_idx, index].add(visits)
