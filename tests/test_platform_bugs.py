"""Pins of bugs in a JAX release's platform (XLA's compiler for one backend) that give wrong values
in plain JAX as in jaxrules, and that jaxrules does not work around (docs/compatibility.md, "On a
GPU"). Each test states the right value; where the bug applies it is expected to fail, so the
release that fixes the bug shows (then update docs/compatibility.md and the tests that wait on it)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _platform_bugs import GPU_REDUCTION_BUG, GPU_REDUCTION_BUG_REASON, ON_A_GPU, TRITON_GEMM_FLOAT64_BUG


@pytest.mark.skipif(not ON_A_GPU, reason="compares a GPU's float64 values with the CPU device's")
@pytest.mark.xfail(TRITON_GEMM_FLOAT64_BUG, strict=True,
                   reason="jax 0.12.0.1's CUDA backend computes this float64 batched matmul wrongly under jit "
                          "(relative error 6.5; XLA_FLAGS=--xla_gpu_enable_triton_gemm=false gives the CPU's "
                          "values): XLA's Triton GEMM, docs/compatibility.md")
def test_plain_jaxs_float64_attention_under_jit_of_vmap_equals_the_cpus():
    """``jit(vmap(attention, in_axes=(None, 0, 0)))`` in plain jax.numpy, float64, the query
    unbatched: the default device's values against the CPU device's."""
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 2, 5, 4)), rng.standard_normal((2, 2, 5, 3))
    attention = jax.jit(jax.vmap(lambda q, k, v: jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) / 2, axis=-1) @ v,
                                 in_axes=(None, 0, 0)))
    with jax.enable_x64(True):
        here = np.asarray(attention(*(jnp.asarray(a, jnp.float64) for a in (q, k, v))))
        with jax.default_device(jax.devices("cpu")[0]):
            cpu = np.asarray(attention(*(jnp.asarray(a, jnp.float64) for a in (q, k, v))))
    np.testing.assert_allclose(here, cpu, rtol=1e-10, atol=1e-12)


def test_plain_jaxs_variance_over_three_axes_equals_numpys():
    """``jnp.var(x, axis=(0, 2, 3))`` (a batch norm's statistics) of NCHW arrays of a few shapes,
    float32 and float64, eagerly and under ``jit``, against NumPy's in float64. Where the reduction
    bug applies, a wrong value is an expected failure (xfail); a right one passes, since the
    bug does not show in every compilation."""
    errors = []
    with jax.enable_x64(True):
        for shape in [(4, 6, 10, 8), (4, 6, 9, 8), (8, 6, 10, 8)]:
            for dtype, rtol in ((np.float64, 1e-12), (np.float32, 1e-5)):
                x = np.random.default_rng(1).standard_normal(shape).astype(dtype)
                want = x.astype(np.float64).var((0, 2, 3))
                for mode, var in (("eager", jnp.var), ("jit", jax.jit(jnp.var, static_argnames="axis"))):
                    got = np.asarray(var(jnp.asarray(x), axis=(0, 2, 3)), np.float64)
                    error = float(np.max(np.abs(got - want) / want))
                    if not error <= rtol:
                        errors.append(f"{shape} {np.dtype(dtype).name} {mode}: relative error {error:.1e}")
    if errors and GPU_REDUCTION_BUG:
        pytest.xfail(f"{GPU_REDUCTION_BUG_REASON}: {errors}")
    assert not errors, errors


def test_plain_jaxs_matrix_one_norm_derivatives_equal_the_column_sums():
    """``jnp.linalg.norm(x, ord=1)`` (the largest column sum of ``|x|``), float64, eagerly: its JVP
    is ``sum_i sign(x[i, j]) t[i, j]`` over the largest column ``j``, its VJP ``sign(x)`` in that
    column and 0 elsewhere. Where they are not, on a GPU, it is an expected failure (observed:
    NaN on jax 0.11.2's CUDA backend, where ``jnp.max(jnp.sum(jnp.abs(x), axis=0))`` is right)."""
    x = np.arange(12.0).reshape(3, 4) * 0.37 - 1.3 + 0.01 * np.arange(12.0).reshape(3, 4) ** 2
    t = np.random.default_rng(0).standard_normal((3, 4))
    column = int(np.argmax(np.abs(x).sum(0)))
    want_vjp = np.zeros_like(x)
    want_vjp[:, column] = np.sign(x[:, column])
    with jax.enable_x64(True):
        norm = lambda a: jnp.linalg.norm(a, ord=1)  # noqa: E731
        jvp = float(jax.jvp(norm, (jnp.asarray(x),), (jnp.asarray(t),))[1])
        vjp = np.asarray(jax.vjp(norm, jnp.asarray(x))[1](1.0)[0])
    wrong = not (np.isclose(jvp, np.sum(want_vjp * t), rtol=1e-12) and np.array_equal(vjp, want_vjp))
    if wrong and ON_A_GPU:
        pytest.xfail(f"a GPU's jnp.linalg.norm(x, ord=1) derivatives: JVP {jvp}, VJP {vjp.ravel()} "
                     "(docs/compatibility.md, 'On a GPU')")
    assert not wrong, (jvp, vjp)
