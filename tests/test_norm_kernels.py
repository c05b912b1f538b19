"""The fused normalization kernels (``jaxrules.norm_kernels``) beyond the registry records: every
tiling path of the batch/group-norm kernels in Pallas interpret mode against the jnp formulas,
running statistics from the kernels' statistics, the Triton lowering for CUDA (which catches
lowering errors without a GPU), bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from jaxrules import dispatch, norm_kernels
from jaxrules.nn import batch_norm, group_norm, layer_norm

RNG = np.random.default_rng(11)


def _ops(impl):
    return {
        "group_norm": lambda x, w, b: group_norm(x, 3, w, b, impl=impl),
        "batch_norm": lambda x, w, b: batch_norm(x, None, None, w, b, training=True, impl=impl)[0],
    }


def _value_and_grads(f, x, w, b, ct):
    y, pullback = jax.vjp(f, x, w, b)
    return (y, *pullback(ct))


# (N, C, L) shapes and tilings: L a multiple of the chunk or not, several chunks per row,
# several rows per tile, odd row counts (one row per tile), batch-norm statistics split.
TILINGS = [
    ((3, 6, 37), dict(chunk=8, tile_elements=16, stat_programs=64)),
    ((4, 6, 16), dict(chunk=8, tile_elements=32, stat_programs=8)),
    ((5, 6, 5), dict(chunk=4096, tile_elements=4096, stat_programs=1024)),
]


@pytest.mark.parametrize("shape, tuning", TILINGS, ids=["ragged-chunks", "split-stats", "short-rows"])
@pytest.mark.parametrize("op", ["group_norm", "batch_norm"])
def test_grouped_kernels_match_the_jnp_formulas(op, shape, tuning, monkeypatch):
    launch = dispatch.GroupedLaunch(**tuning, interpret=True)
    monkeypatch.setattr(dispatch, "GroupedLaunch", lambda interpret=False: launch)
    x = jnp.asarray(RNG.standard_normal(shape) * 3 + 5)  # a large mean: the variance must not cancel
    w, b = jnp.asarray(RNG.standard_normal(6) + 1), jnp.asarray(RNG.standard_normal(6))
    ct = jnp.asarray(RNG.standard_normal(shape))
    want = _value_and_grads(_ops("xla")[op], x, w, b, ct)
    got = _value_and_grads(_ops("pallas_interpret")[op], x, w, b, ct)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


def test_statistics_of_shifted_data_keep_their_precision():
    """float32 statistics of data whose mean is 1e4 times its spread: the kernels' shifted sums
    must not lose the variance (a naive sum of squares loses every digit here)."""
    x = RNG.standard_normal((4, 2, 300)) + 1e4
    mean, rstd = norm_kernels.grouped_stats(jnp.asarray(x, jnp.float32), layout="batch", groups=1, eps=0.0,
                                            launch=dispatch.GroupedLaunch(interpret=True))
    want = x.transpose(1, 0, 2).reshape(2, -1)
    np.testing.assert_allclose(mean, want.mean(1), rtol=1e-6)
    np.testing.assert_allclose(rstd, 1 / want.std(1), rtol=2e-3)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("op", ["group_norm", "batch_norm", "layer_norm"])
def test_half_precision_kernels_track_the_float64_result(op, dtype):
    """Inputs, outputs and gradients in the half type, statistics and sums in float32."""
    fns = dict(_ops("pallas_interpret"), layer_norm=lambda x, w, b: layer_norm(x, 128, w, b, impl="pallas_interpret"))
    shape, channels = ((4, 128), 128) if op == "layer_norm" else ((4, 6, 20), 6)
    x, ct = RNG.standard_normal(shape), RNG.standard_normal(shape)
    w, b = RNG.standard_normal(channels) + 1, RNG.standard_normal(channels)
    want = _value_and_grads(fns[op], *map(jnp.asarray, (x, w, b, ct)))
    got = _value_and_grads(fns[op], *[jnp.asarray(a, dtype) for a in (x, w, b, ct)])
    for g, e in zip(got, want):
        assert g.dtype == dtype
        scale = float(jnp.max(jnp.abs(e))) + 1
        assert float(jnp.max(jnp.abs(g.astype(jnp.float64) - e))) < 3e-2 * scale


def test_running_statistics_from_the_kernels_match_the_xla_path():
    x = jnp.asarray(RNG.standard_normal((5, 3, 4, 2)) * 2 + 1)
    mean, var = jnp.asarray(RNG.standard_normal(3)), jnp.asarray(RNG.random(3) + 0.5)
    results = [batch_norm(x, mean, var, training=True, momentum=0.3, impl=impl) for impl in ("xla", "pallas_interpret")]
    for got, want in zip(results[1], results[0]):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_kernels_lower_for_cuda(dtype):
    """The Triton lowering runs here, without a GPU: export for CUDA (the kernels' custom calls
    carry no compatibility guarantee, so that check is off; nothing is serialized)."""
    x4 = jax.ShapeDtypeStruct((4, 8, 5, 7), dtype)
    rows = jax.ShapeDtypeStruct((64, 256), dtype)
    vec8, vec256 = jax.ShapeDtypeStruct((8,), dtype), jax.ShapeDtypeStruct((256,), dtype)
    cases = [
        (lambda x, w, b: group_norm(x, 4, w, b, impl="pallas"), x4, vec8),
        (lambda x, w, b: batch_norm(x, None, None, w, b, training=True, impl="pallas")[0], x4, vec8),
        (lambda x, w, b: layer_norm(x, 256, w, b, impl="pallas"), rows, vec256),
    ]
    for f, x, v in cases:
        step = jax.jit(lambda g, x, w, b, f=f: jax.vjp(f, x, w, b))
        lowered = export.export(step, platforms=["cuda"],
                                disabled_checks=[export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])
        assert "xla.gpu.triton" in lowered(x, x, v, v).mlir_module()


@pytest.mark.parametrize("call, words", [
    (lambda x: group_norm(x, 2, impl="triton"), ["group_norm", "impl"]),
    (lambda x: batch_norm(x, None, None, training=True, impl="cuda"), ["batch_norm", "impl"]),
    (lambda x: batch_norm(x, None, None, training=True, impl="pallas", axis_name="d"), ["batch_norm", "axis_name"]),
    (lambda x: group_norm(x, 2, jnp.ones(3), impl="pallas_interpret"), ["group_norm", "weight"]),
])
def test_bad_input(call, words):
    with pytest.raises(ValueError) as err:
        call(jnp.ones((2, 4, 3)))
    for word in words:
        assert word in str(err.value)
