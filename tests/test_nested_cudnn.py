"""``nested.scaled_dot_product_attention(impl="cudnn")``: cuDNN's packed-sequence
layout. On the CPU: the packed segments in JAX's convention (checked through JAX's own
conversion to cuDNN's offsets), the dispatch, the refusal, and the op's derivative contract with
JAX's cuDNN call replaced by an emulation of its packed semantics (whose backward may not be
differentiated and which has no forward mode, as cuDNN's). On a GPU (skipped elsewhere: "cuDNN
needs a GPU"): values and gradients against the XLA formulas on ragged lengths, a JVP and a
second-order case, under jit."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.cudnn import fused_attention_stablehlo as fused

import jaxrules.nested as N
from jaxrules.nested import cudnn as C
from jaxrules.nested import ops as nested_ops

GPU = jax.default_backend() == "gpu"
needs_gpu = pytest.mark.skipif(not GPU, reason="cuDNN needs a GPU")


def _gap(a, b):
    """The largest absolute difference over the leaves, relative to the largest entry of ``b``."""
    gaps = []
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        x, y = (np.asarray(jnp.asarray(t, jnp.float32)) for t in (x, y))
        assert np.isfinite(x).all() and np.isfinite(y).all()
        gaps.append(np.max(np.abs(x - y), initial=0) / max(np.max(np.abs(y), initial=0), 1.0))
    return max(gaps)


def _nested(lengths, inner, dtype, seed):
    rng = np.random.default_rng(seed)
    offsets = jnp.asarray(np.concatenate([[0], np.cumsum(lengths)]), jnp.int32)
    values = jnp.asarray(rng.standard_normal((int(sum(lengths)), *inner)), dtype)
    return values, offsets


def _attend(offsets, impl, causal, max_len=None):
    def f(q, k, v):
        q, k, v = (N.from_jagged(t, offsets, max_seqlen=max_len) for t in (q, k, v))
        return N.scaled_dot_product_attention(q, k, v, is_causal=causal, impl=impl).values

    return f


# ----------------------------------------------------------------------------------------------
# The packed layout (CPU)


def test_packed_segments_follow_jaxs_convention():
    seqlen, starts = C.packed_segments(jnp.array([0, 3, 3, 7, 8]))  # lengths 3, 0, 4, 1
    # starts (not cumulative lengths), -1 for the empty sequence and the unused last entry
    np.testing.assert_array_equal(seqlen, [[3, -1, 4, 1]])
    np.testing.assert_array_equal(starts, [[0, -1, 3, 7, -1]])
    # what JAX hands cuDNN (T = 8 tokens, 2 heads of 16: 32 elements a token): the non-empty
    # sequences' lengths and cumulative offsets in elements, then a filler segment of length 0
    q = jnp.zeros((1, 8, 2, 16), jnp.bfloat16)
    cu_len, _, cu_off, _ = fused._fix_seqlen_offsets(seqlen, seqlen, starts, starts, q, q)
    np.testing.assert_array_equal(cu_len, [[3, 4, 1, 0]])
    np.testing.assert_array_equal(cu_off, [[0, 96, 224, 256, 256]])


def test_one_sequence_gets_a_filler_slot():
    # one slot would not be the packed layout (JAX's get_max_seg_per_batch needs M > 1)
    seqlen, starts = C.packed_segments(jnp.array([0, 5]))
    np.testing.assert_array_equal(seqlen, [[5, -1]])
    np.testing.assert_array_equal(starts, [[0, -1, -1]])
    assert fused.get_max_seg_per_batch(starts) == 2


def test_padded_rows_and_back():
    # lengths 3, 0, 2 in rows of 4: token t of sequence b at row b * 4 + t
    rows = C._padded_index(jnp.array([0, 3, 3, 5]), 5, 4)
    np.testing.assert_array_equal(rows, [0, 1, 2, 8, 9])
    x = jnp.arange(5.0)
    padded = jnp.zeros(12).at[rows].set(x)
    np.testing.assert_array_equal(padded, [0, 1, 2, 0, 0, 0, 0, 0, 3, 4, 0, 0])
    np.testing.assert_array_equal(padded[rows], x)
    # the same rows by a gather (what the padded layout runs): each slot's token, valid or not
    source, valid = C._padded_source(jnp.array([0, 3, 3, 5]), 4)
    np.testing.assert_array_equal(source, [0, 1, 2, 0, 0, 0, 0, 0, 3, 4, 0, 0])
    np.testing.assert_array_equal(valid, [1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0, 0])
    # rows are even (JAX's cuDNN refuses odd lengths)
    assert (C._padded_row(75), C._padded_row(2048)) == (76, 2048)


# ----------------------------------------------------------------------------------------------
# Dispatch (CPU)


@pytest.mark.parametrize(("args", "expected"), [
    (("gpu", jnp.bfloat16, 64, 64, 4, 100, False), True),
    (("gpu", jnp.float16, 128, 128, 1, 1, False), True),
    (("cpu", jnp.bfloat16, 64, 64, 4, 100, False), False),  # a GPU only
    (("gpu", jnp.float32, 64, 64, 4, 100, False), False),  # half precision only
    (("gpu", jnp.bfloat16, 12, 12, 4, 100, False), False),  # head dim not a multiple of 8
    (("gpu", jnp.bfloat16, 264, 264, 4, 100, False), False),  # head dim above 256
    (("gpu", jnp.bfloat16, 64, 32, 4, 100, False), False),  # v narrower than q
    (("gpu", jnp.bfloat16, 64, 64, 4, 100, True), False),  # with_lse: cuDNN's statistics are per slot
    (("gpu", jnp.bfloat16, 64, 64, 0, 100, False), False),  # no heads
    (("gpu", jnp.bfloat16, 64, 64, 4, 2**24, False), False),  # element offsets past int32
])
def test_static_applies(args, expected):
    assert C.static_applies(*args) is expected


def test_dispatch_prefers_cudnn_where_it_applies():
    pick = nested_ops._attention_impl
    assert pick(None, jnp.bfloat16, 64, 64, 16, 4, cudnn=True) == "cudnn"
    assert pick("cudnn", jnp.bfloat16, 64, 64, 16, 4, cudnn=True) == "cudnn"
    assert pick("xla", jnp.bfloat16, 64, 64, 16, 4, cudnn=True) == "xla"
    with pytest.raises(ValueError, match="impl='cudnn' needs a GPU"):
        pick("cudnn", jnp.bfloat16, 64, 64, 16, 4, cudnn=False)


@pytest.mark.skipif(GPU, reason="the CPU's refusal")
def test_impl_cudnn_is_refused_off_a_gpu_and_the_default_runs_the_formulas(monkeypatch):
    # Off a GPU the dispatch refuses before JAX is asked (``accepts``): JAX's own refusal at trace
    # time depends on the machine (jax 0.12 traces its cuDNN call on a CPU backend where the cuDNN
    # library is installed).
    asked = []
    monkeypatch.setattr(C, "accepts", lambda *args: asked.append(args) or True)
    values, offsets = _nested((3, 1, 0, 5), (2, 16), jnp.bfloat16, 0)
    with pytest.raises(ValueError, match="impl='cudnn' needs a GPU"):
        _attend(offsets, "cudnn", False)(values, values, values)
    np.testing.assert_array_equal(_attend(offsets, None, False)(values, values, values),
                                  _attend(offsets, "xla", False)(values, values, values))
    assert not asked


# ----------------------------------------------------------------------------------------------
# The derivative contract, cuDNN emulated (CPU)


@jax.custom_jvp
def _frozen(x):
    return x


@_frozen.defjvp
def _frozen_jvp(primals, tangents):
    raise AssertionError("the emulated cuDNN backward was differentiated")


def _weights(q, k, keep, scale):
    """Softmax over the kept keys; a row with none is 0 (cuDNN's padding rows)."""
    s = jnp.where(keep, scale * jnp.einsum("tnh,snh->nts", q, k), -jnp.inf)
    e = jnp.where(keep, jnp.exp(s - jnp.max(s, -1, keepdims=True, initial=-jnp.inf)), 0)
    return e / jnp.maximum(jnp.sum(e, -1, keepdims=True), 1e-30)


@jax.custom_vjp
def _masked_attention(q, k, v, keep, scale):
    return jnp.einsum("nts,snh->tnh", _weights(q, k, keep, scale), v)


def _masked_fwd(q, k, v, keep, scale):
    return _masked_attention(q, k, v, keep, scale), (q, k, v, keep, scale)


def _masked_bwd(res, g):
    q, k, v, keep, scale = res
    p = _weights(q, k, keep, scale)
    dp = jnp.einsum("tnh,snh->nts", g, v)
    ds = p * (dp - jnp.sum(dp * p, -1, keepdims=True))
    grads = (scale * jnp.einsum("nts,snh->tnh", ds, k), scale * jnp.einsum("nts,tnh->snh", ds, q),
             jnp.einsum("nts,tnh->snh", p, g))
    return (*map(_frozen, grads), None, None)


_masked_attention.defvjp(_masked_fwd, _masked_bwd)

_CALLS = []


def _emulated_cudnn(query, key, value, bias=None, mask=None, q_seqlen=None, kv_seqlen=None, q_offsets=None,
                    kv_offsets=None, *, scale, mask_type, qkv_layout):
    """JAX's cuDNN attention emulated, packed (the segments cuDNN receives from JAX's
    ``_fix_seqlen_offsets``) or padded (row ``b``'s first ``q_seqlen[b]`` rows): forward mode
    and a differentiated backward fail."""
    _CALLS.append("packed" if q_offsets is not None else "padded")
    assert (bias, mask, qkv_layout) == (None, None, "BTNH")
    t = jnp.arange(query.shape[1])[:, None]
    if q_offsets is not None:
        assert query.shape[0] == 1 and fused.get_max_seg_per_batch(q_offsets) > 1
        assert mask_type in (fused.MaskType.NO_MASK, fused.MaskType.PADDING_CAUSAL)
        lengths, _, offsets, _ = fused._fix_seqlen_offsets(q_seqlen, kv_seqlen, q_offsets, kv_offsets, query, key)
        starts = offsets.reshape(-1)[:-1] // (query.shape[2] * query.shape[3])
        inside = ((t >= starts) & (t < starts + lengths.reshape(-1))).astype(jnp.float32)  # (T, segments)
        keeps = ((inside @ inside.T) > 0)[None]
    else:
        assert mask_type in (fused.MaskType.PADDING, fused.MaskType.PADDING_CAUSAL) and q_seqlen.ndim == 1
        keeps = (t[None] < q_seqlen[:, None, None]) & (t.T[None] < kv_seqlen[:, None, None])
    if mask_type == fused.MaskType.PADDING_CAUSAL:
        keeps &= t >= t.T
    return jnp.stack([_masked_attention(*x, m, scale) for *x, m in zip(query, key, value, keeps, strict=True)])


@pytest.fixture
def emulated(monkeypatch):
    """cuDNN emulated in float32, matmuls at full precision (no TF32 on a GPU)."""
    monkeypatch.setattr(fused, "dot_product_attention", _emulated_cudnn)
    monkeypatch.setattr(C, "static_applies", lambda *args: True)
    with jax.default_matmul_precision("highest"):
        yield
    C.accepts.cache_clear()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("max_len", "layout"), [(None, "padded"), (18, "packed")])
def test_emulated_op_values_and_derivatives_are_the_formulas(emulated, causal, max_len, layout):
    lengths = (5, 1, 0, 9, 3)  # max_len 9: the padded layout; a bound of 18 (the total): one packed row
    values, offsets = _nested(lengths, (2, 8), jnp.float32, 1)
    q, k, v = values, values[::-1] * 0.5, values + 1
    t = _nested(lengths, (2, 8), jnp.float32, 2)[0]
    f, ref = _attend(offsets, None, causal, max_len), _attend(offsets, "xla", causal, max_len)  # default: cuDNN
    del _CALLS[:]
    jax.make_jaxpr(f)(q, k, v)
    assert _CALLS and set(_CALLS) == {layout}  # the default ran (emulated) cuDNN, in this layout
    loss = lambda g: lambda *a: jnp.sum(jnp.sin(g(*a)))  # noqa: E731

    def derivatives(g):  # g's value, gradient, JVP and second order, one program
        return jax.jit(lambda: (
            g(q, k, v), jax.grad(loss(g), (0, 1, 2))(q, k, v),
            # forward mode: the XLA formulas' JVP (cuDNN has none: the emulation refuses it)
            jax.jvp(g, (q, k, v), (t, t, t)),
            # second order: the XLA formulas' derivative of cuDNN's backward (the emulation's is frozen)
            jax.jvp(jax.grad(loss(g), (0, 1, 2)), (q, k, v), (t, -t, t))[1]))()

    got, want = derivatives(f), derivatives(ref)
    assert _gap(f(q, k, v), want[0]) < 1e-5  # eager
    for what, g, w, tol in zip(("value", "gradient", "jvp", "second order"), got, want, (1e-5, 1e-5, 1e-5, 1e-4)):
        assert _gap(g, w) < tol, what


@pytest.mark.parametrize("max_len", [7, 8])
def test_emulated_op_one_sequence_and_heads_free_layout(emulated, max_len):
    values, offsets = _nested((7,), (8,), jnp.float32, 3)  # (B, ragged, dim): one head; one sequence
    f, ref = _attend(offsets, "cudnn", True, max_len), _attend(offsets, "xla", True, max_len)
    pullback = lambda g: jax.vjp(g, values, values, values)[1](values)  # noqa: E731
    assert _gap(jax.jit(lambda: pullback(f))(), pullback(ref)) < 1e-5


@pytest.mark.parametrize(("batch", "total", "max_len", "expected"), [
    (64, 33_000, 2048, "padded"),  # many sequences: padding them costs cuDNN fewer slots than one row
    (64, 33_000, 33_000, "packed"),  # no bound on the lengths (traced offsets): the same slots, no copies
    (4, 100, 100, "packed"),
    (1, 50, 50, "padded"),  # one sequence: the packed row would carry an empty second slot
    (3, 40, 16, "padded"),
])
def test_layout_for(batch, total, max_len, expected):
    assert C.layout_for(batch, total, max_len) == expected


# ----------------------------------------------------------------------------------------------
# cuDNN (GPU)

LENGTHS = (37, 1, 0, 130, 64, 2)  # a length-1 and an empty sequence; lengths off cuDNN's tiles
BOUNDS = {"padded": 130, "packed": sum(LENGTHS)}  # max_seqlen: the longest (padded), the total (one packed row)


@needs_gpu
@pytest.mark.parametrize("layout", ["padded", "packed"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("heads", "dim"), [(1, 64), (4, 64), (4, 128)])
def test_cudnn_values_and_gradients_match_the_formulas(layout, causal, heads, dim):
    assert C.layout_for(len(LENGTHS), sum(LENGTHS), BOUNDS[layout]) == layout
    values, offsets = _nested(LENGTHS, (heads, dim), jnp.bfloat16, 0)
    q, k, v = values, _nested(LENGTHS, (heads, dim), jnp.bfloat16, 1)[0], _nested(LENGTHS, (heads, dim),
                                                                                    jnp.bfloat16, 2)[0]
    ct = _nested(LENGTHS, (heads, dim), jnp.bfloat16, 3)[0]

    def run(impl):
        out, pullback = jax.vjp(_attend(offsets, impl, causal, max_len=BOUNDS[layout]), q, k, v)
        return out, pullback(ct)

    assert _gap(jax.jit(lambda: run("cudnn"))(), jax.jit(lambda: run("xla"))()) < 0.04  # bfloat16


@needs_gpu
@pytest.mark.parametrize("max_len", [75, 150])  # B = 1: padded, or one packed row with an empty filler slot
def test_cudnn_float16_heads_free_layout_and_one_sequence(max_len):
    values, offsets = _nested((75,), (64,), jnp.float16, 4)  # (B, ragged, dim)
    run = lambda impl: jax.vjp(_attend(offsets, impl, True, max_len), values, values, values)[1](values)  # noqa: E731
    assert _gap(jax.jit(lambda: run("cudnn"))(), jax.jit(lambda: run("xla"))()) < 0.01


@needs_gpu
@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_cudnn_jvp_and_second_order_are_the_formulas(layout):
    values, offsets = _nested(LENGTHS, (2, 64), jnp.bfloat16, 5)
    t = _nested(LENGTHS, (2, 64), jnp.bfloat16, 6)[0]
    f = lambda impl: _attend(offsets, impl, False, max_len=BOUNDS[layout])  # noqa: E731
    jvp = lambda impl: jax.jvp(f(impl), (values,) * 3, (t,) * 3)  # noqa: E731
    assert _gap(jax.jit(lambda: jvp(None))(), jax.jit(lambda: jvp("xla"))()) < 0.04
    loss = lambda impl: lambda q: jnp.sum(jnp.sin(f(impl)(q, values, values).astype(jnp.float32)))  # noqa: E731
    hvp = lambda impl: jax.jvp(jax.grad(loss(impl)), (values,), (t,))[1]  # noqa: E731
    assert _gap(jax.jit(lambda: hvp(None))(), jax.jit(lambda: hvp("xla"))()) < 0.05


@needs_gpu
@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_the_default_gradient_runs_one_cudnn_forward_and_no_pallas_kernel(layout):
    values, offsets = _nested(LENGTHS, (4, 64), jnp.bfloat16, 7)
    f = _attend(offsets, None, True, max_len=BOUNDS[layout])
    grad = jax.jit(jax.grad(lambda q, k, v: jnp.sum(f(q, k, v).astype(jnp.float32)), (0, 1, 2)))
    hlo = grad.lower(values, values, values).compile().as_text()
    calls = re.findall(r'custom_call_target="__cudnn\$fmha\w*"', hlo)
    assert len([c for c in calls if "Backward" not in c]) == 1 and len(calls) == 2, calls
    assert "__gpu$xla.gpu.triton" not in hlo and "triton_kernel_call" not in hlo  # no Pallas kernel
