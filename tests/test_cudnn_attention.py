"""``scaled_dot_product_attention`` on cuDNN (the GPU default in float16/bfloat16):
values, gradients (vmapped, jitted, second order) against the XLA formulas in the same dtype, and
the compiled gradient runs cuDNN's forward once. Needs a GPU with cuDNN: skipped elsewhere (the
dispatch's refusal on a CPU is checked here too)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrules.nn import scaled_dot_product_attention

GPU = jax.default_backend() == "gpu"
needs_gpu = pytest.mark.skipif(not GPU, reason="cuDNN's flash attention needs a GPU")


def _qkv(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.standard_normal(shape), dtype) for _ in range(3)]


def _gap(a, b):
    return max(float(jnp.max(jnp.abs(jnp.asarray(x, jnp.float32) - jnp.asarray(y, jnp.float32))))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.mark.skipif(GPU, reason="the CPU's refusal")
def test_impl_cudnn_is_refused_off_a_gpu_and_the_default_runs_the_formulas():
    q, k, v = _qkv((2, 3, 5, 8), jnp.bfloat16)
    with pytest.raises(ValueError, match="impl='cudnn' needs a GPU"):
        scaled_dot_product_attention(q, k, v, impl="cudnn")
    np.testing.assert_array_equal(scaled_dot_product_attention(q, k, v),
                                  scaled_dot_product_attention(q, k, v, impl="xla"))


@needs_gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_cudnn_values_and_gradients_match_the_formulas(dtype, causal):
    q, k, v = _qkv((2, 4, 200, 64), dtype)
    ct = _qkv((2, 4, 200, 64), dtype, seed=1)[0]

    def grads(impl):
        f = lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=causal, impl=impl)  # noqa: E731
        out, pullback = jax.vjp(f, q, k, v)
        return out, pullback(ct)

    tol = 0.05 if dtype == jnp.bfloat16 else 0.01
    assert _gap(jax.jit(lambda: grads("cudnn"))(), jax.jit(lambda: grads("xla"))()) < tol


@needs_gpu
def test_cudnn_under_vmap_and_second_order():
    q, k, v = _qkv((3, 2, 4, 64, 32), jnp.bfloat16)
    f = lambda impl: jax.vmap(lambda q, k, v: scaled_dot_product_attention(q, k, v, impl=impl))  # noqa: E731
    assert _gap(jax.jit(f("cudnn"))(q, k, v), jax.jit(f("xla"))(q, k, v)) < 0.05
    loss = lambda impl: lambda q: jnp.sum(jnp.sin(f(impl)(q, k, v).astype(jnp.float32)))  # noqa: E731
    hvp = lambda impl: jax.jvp(jax.grad(loss(impl)), (q,), (v,))[1]  # noqa: E731 - second order
    assert _gap(jax.jit(lambda: hvp(None))(), jax.jit(lambda: hvp("xla"))()) < 0.1


@needs_gpu
def test_the_gradient_runs_cudnns_forward_once():
    q, k, v = _qkv((2, 4, 256, 64), jnp.bfloat16)
    grad = jax.jit(jax.grad(lambda q, k, v: jnp.sum(scaled_dot_product_attention(q, k, v).astype(jnp.float32)),
                            (0, 1, 2)))
    hlo = grad.lower(q, k, v).compile().as_text()
    calls = re.findall(r'custom_call_target="__cudnn\$fmha\w*"', hlo)
    forwards = [c for c in calls if "Backward" not in c]
    assert len(forwards) == 1 and len(calls) == 2, calls


@pytest.mark.parametrize("causal", [False, True])
def test_the_cudnn_ops_forward_mode_is_the_formulas(causal):
    """The cuDNN op's JVP (the XLA op's formula on cuDNN's (B, L, N, E) layout) runs without a
    GPU: it never calls cuDNN. Against ``jax.jvp`` of the XLA path (the JVP passes the XLA op's
    three masks, bias, keep and drop: with one missing, forward mode of the cuDNN path raises on
    every GPU)."""
    from jaxrules.ops import attention as A

    rng = np.random.default_rng(5)
    q, k, v, tq, tk, tv = (jnp.asarray(rng.standard_normal((2, 6, 3, 8))) for _ in range(6))  # (B, L, N, E)
    got = A._cudnn_jvp((q, k, v), tq, tk, tv, scale=0.3, causal=causal)
    heads = lambda x: jnp.swapaxes(x, 1, 2)  # noqa: E731 - (B, N, L, E), torch's layout
    want = jax.jvp(lambda q, k, v: heads(scaled_dot_product_attention(*map(heads, (q, k, v)), is_causal=causal,
                                                                      scale=0.3, impl="xla")),
                   (q, k, v), (tq, tk, tv))[1]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
