"""The normalization statistics (``partials.norm_stats``): one pass on a GPU (Welford/Chan
merges), two on a CPU; both agree with float64 references and stay precise where a one-pass
sum of squares cancels."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrules import partials as P
from jaxrules.testing import check_derivatives


@pytest.mark.parametrize("axes", [(-1,), (0, 2), (1,)])
def test_welford_moments_equal_the_two_pass_moments(axes):
    x = np.random.default_rng(0).standard_normal((7, 5, 9))
    mean, var = P.welford_moments(jnp.asarray(x), axes)
    np.testing.assert_allclose(mean, x.mean(axis=axes, keepdims=True), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(var, x.var(axis=axes, keepdims=True), rtol=1e-13)


def test_welford_moments_do_not_cancel_under_an_outlier_or_an_offset():
    """float32 rows whose first element is 1e4 (a one-pass sum of squares shifted by it loses 3+
    digits) and rows near 4096 with unit spread (unshifted Welford loses 3e-4): relative error
    <= 3e-5 of the float64 variance of the same float32 numbers (two passes: ~5e-7)."""
    rng = np.random.default_rng(1)
    outlier = rng.standard_normal((4, 5120)).astype(np.float32)
    outlier[:, 0] = 1e4
    offset = (4096 + rng.standard_normal((4, 5120))).astype(np.float32)
    for rows in (outlier, offset):
        _, var = P.welford_moments(jnp.asarray(rows), (-1,))
        exact = rows.astype(np.float64).var(axis=-1, keepdims=True)
        assert np.max(np.abs(np.asarray(var, np.float64) / exact - 1)) <= 3e-5
        shifted = rows - rows[:, :1]  # the cancelling form, to show the data discriminates
        naive = (shifted * shifted).mean(-1, keepdims=True) - shifted.mean(-1, keepdims=True) ** 2
        if rows is outlier:
            assert np.max(np.abs(naive / exact - 1)) > 1e-4


def test_welford_moments_derivatives_and_transforms():
    x = jnp.asarray(np.random.default_rng(2).standard_normal((3, 6)))
    check_derivatives(lambda v: P.welford_moments(v, (-1,)), (x,))
    mean, var = jax.vmap(lambda r: P.welford_moments(r, (0,)))(x)
    np.testing.assert_allclose(var[:, 0], np.var(np.asarray(x), axis=1), rtol=1e-13)


def test_welford_moments_of_an_empty_group_are_nan_as_jnp_mean():
    mean, var = P.welford_moments(jnp.ones((3, 0)), (-1,))
    assert mean.shape == var.shape == (3, 1) and np.isnan(mean).all() and np.isnan(var).all()


def _reduce_operand_counts(hlo_text):
    """Number of operands of each ``reduce`` in a StableHLO module (2 per reduced value)."""
    return [line.count("%") for line in hlo_text.splitlines() if "stablehlo.reduce(" in line]


def test_a_gpu_lowering_takes_one_pass_and_a_cpu_lowering_two():
    """The layer norm's XLA path lowered for CUDA computes its statistics in one variadic reduce
    (count, mean, M2); for the CPU in two single reductions."""
    from jaxrules.nn import layer_norm

    x = jax.ShapeDtypeStruct((16384, 1024), jnp.float32)  # many rows: one pass on a GPU
    f = jax.jit(lambda x: layer_norm(x, x.shape[-1], impl="xla"))
    cuda = f.trace(x).lower(lowering_platforms=("cuda",)).as_text()
    cpu = f.trace(x).lower(lowering_platforms=("cpu",)).as_text()
    assert "stablehlo.reduce(%" in cuda and any(line.count("stablehlo.reduce(") for line in cuda.splitlines())
    assert max(_reduce_operand_counts(cuda)) >= 6 > max(_reduce_operand_counts(cpu))
    small = jax.ShapeDtypeStruct((8, 32), jnp.float32)  # the direct forms (``direct_forms``): two passes
    assert max(_reduce_operand_counts(f.trace(small).lower(lowering_platforms=("cuda",)).as_text())) < 6
    long_rows = jax.ShapeDtypeStruct((4096, 12288), jnp.float32)  # few rows, but long: one pass
    assert max(_reduce_operand_counts(f.trace(long_rows).lower(lowering_platforms=("cuda",)).as_text())) >= 6


def test_a_group_norms_gpu_lowering_takes_two_passes_at_any_size():
    """A group norm of a UNet's first stage (groups of 65536 elements, 256 MiB) lowered for CUDA:
    no variadic reduce, the direct forms."""
    from jaxrules.nn import group_norm

    x = jax.ShapeDtypeStruct((16, 128, 256, 256), jnp.float32)
    f = jax.jit(lambda x: group_norm(x, 32))
    assert max(_reduce_operand_counts(f.trace(x).lower(lowering_platforms=("cuda",)).as_text())) < 6


@pytest.mark.parametrize("direct", [True, False])
def test_both_forms_of_the_backward_sums_stay_precise_under_a_large_offset(direct, monkeypatch):
    """``projection_means``' ``E[v (x - mean)]``, centered on the mean (small arrays) or summed
    over x minus each row's first element (``direct_forms`` replaced by False: every array): float32
    rows near 4096 on a grid of 1/4 (exact means) within 1e-6 of float64, where the unshifted
    ``E[v x] - mean E[v]`` (torch's kernels' form) is off by more."""
    from jaxrules.partials import normalization

    if not direct:
        monkeypatch.setattr(normalization, "direct_forms", lambda x, axes: False)
    rng = np.random.default_rng(3)
    x = 4096 + rng.integers(-8, 9, (16, 512)) / 4
    v = rng.standard_normal(x.shape)
    assert normalization.direct_forms(x, (-1,)) == direct
    exact = (v * (x - x.mean(-1, keepdims=True))).mean(-1, keepdims=True)
    x32, v32 = jnp.asarray(x, jnp.float32), jnp.asarray(v, jnp.float32)
    _, centered = P.projection_means(x32, x32.mean(-1, keepdims=True), v32, (-1,), None)
    scale = np.max(np.abs(exact))
    assert np.max(np.abs(np.asarray(centered, np.float64) - exact)) <= 1e-6 * scale
    unshifted = (v32 * x32).mean(-1, keepdims=True) - x32.mean(-1, keepdims=True) * v32.mean(-1, keepdims=True)
    assert np.max(np.abs(np.asarray(unshifted, np.float64) - exact)) > 1e-5 * scale


@pytest.mark.parametrize("shape, dtype, axes, direct", [
    ((4096, 768), jnp.float32, (-1,), True),  # a few thousand rows of 12 MiB: two passes
    ((4096, 6144), jnp.bfloat16, (-1,), True),  # 48 MiB, 4096 rows
    ((5120, 1536), jnp.bfloat16, (-1,), False),  # 15 MiB, 5120 rows of 1536: many rows
    ((6144, 6144), jnp.float32, (-1,), False),  # 144 MiB, 6144 rows
    ((8192, 1536), jnp.bfloat16, (-1,), False),  # 24 MiB: groups x bytes too few, but many rows
    ((5120, 1024), jnp.float32, (-1,), True),  # 20 MiB, 5120 rows of 1024: rows too short
    ((4608, 4096), jnp.float32, (-1,), True),  # 72 MiB, 4608 rows: too few
    ((5120, 768), jnp.bfloat16, (-1,), True),  # 7.5 MiB
    ((16, 320, 2048), jnp.float32, (-1,), False),  # a row norm of 5120 rows over two batch axes
    ((16384, 1024), jnp.float16, (-1,), False),  # 32 MiB over 16384 rows: one pass
    ((8192, 4096), jnp.float16, (-1,), False),  # 64 MiB
    ((4096, 12288), jnp.bfloat16, (-1,), False),  # 96 MiB, 4096 rows of 12288: long rows
    ((4096, 12288), jnp.float32, (1,), False),  # the same as a positive axis
    ((1024, 8192), jnp.float32, (-1,), False),  # 32 MiB, 1024 rows of 8192
    ((512, 8192), jnp.bfloat16, (-1,), True),  # long rows, but 8 MiB
    ((4096, 7168), jnp.float32, (-1,), True),  # 112 MiB, rows of 7168
    ((8, 64, 16384), jnp.float32, (2,), False),  # an instance norm over a long sequence: a row norm
    ((2, 16384, 1024), jnp.float32, (1,), True),  # long, but not x's last axis: 2048 groups
    ((16384, 320), jnp.float16, (-1,), True),  # 10 MiB over 16384 rows: groups x bytes too few
    ((32768, 256), jnp.float16, (-1,), False),  # 16 MiB over 32768 rows
    ((1024, 256), jnp.float32, (-1,), True),  # small
    ((16, 256, 14, 14), jnp.bfloat16, (0, 2, 3), True),  # batch norm's statistics over the batch axis too
    ((256, 64, 112, 112), jnp.bfloat16, (0, 2, 3), True),  # 392 MiB, 64 groups
    ((64, 32, 2, 12544), jnp.float32, (2, 3), True),  # a ResNet stage's group norm: 196 MiB, 2048 groups
    ((8, 32, 4, 16384), jnp.bfloat16, (2, 3), True),  # a UNet's: groups of 65536 over two axes
])
def test_the_statistics_forms_follow_the_bytes_the_groups_and_the_rows(shape, dtype, axes, direct):
    """``direct_forms``: one pass only for x of at least ``ONE_PASS_MIN_BYTES`` with many groups
    (at least ``ONE_PASS_MIN_GROUPS``, groups x bytes at least ``ONE_PASS_MIN_GROUP_BYTES``) or
    statistics over x's last axis alone of at least ``ONE_PASS_MIN_ROW`` elements, or of at least
    ``ONE_PASS_MANY_ROWS`` rows of ``ONE_PASS_MANY_ROWS_MIN_ROW`` elements: never for batch
    norms nor group norms (whose groups span two axes), whatever their size."""
    assert P.direct_forms(jax.ShapeDtypeStruct(shape, dtype), axes) == direct
