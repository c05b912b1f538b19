"""The opt-in fused layer-norm / RMS-norm kernels (``impl="pallas"``, ``jaxrules.norm_kernels``) and
their launch, a rule of the shape (``dispatch.rows_launch``): the rule's bounds at any row count;
the kernels lowered for CUDA on the rule's grids, and the default lowered for CUDA to no kernel;
the kernels in Pallas' interpret mode against the XLA ops (float64) at several launches, in half
precision, against torch, through second order and vmap; the removed implementations' warnings
and bad input. The compiled kernels against the XLA formulas run on a GPU only."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _cuda_lowering import for_cuda
from jax import export

from jaxrules import dispatch
from jaxrules.nn import batch_norm, group_norm, layer_norm
from jaxrules.ops.normalization import affine_normalize_op, layer_norm_rows_op, rms_norm, rms_norm_op, rms_norm_rows_op

RNG = np.random.default_rng(11)

# ----------------------------------------------------------------------------------------------
# The launch rule

ROW_COUNTS = (1, 2, 3, 7, 255, 256, 257, 1000, 4097, 16383, 65535, 66850, 2**20 + 1, 10**7 + 3)
WIDTHS = (1, 24, 100, 768, 5120, 12288, 16384)


def test_the_rule_launches_every_row_count_in_bounded_masked_tiles():
    """For any (M, N): a power-of-two width covering N (the rest masked), tiles of about
    ``TILE_ELEMENTS`` rows (a power of two, no more rows than M), a forward program per tile, and
    a backward of at most ``BACKWARD_PROGRAMS`` programs that covers every tile, leaves no
    program idle, and keeps at least half that many busy (no one-program backward, whatever
    the divisors of M)."""
    for m in ROW_COUNTS:
        for n in WIDTHS:
            launch = dispatch.rows_launch(m, n)
            where = (m, n, launch)
            assert launch.width >= n > launch.width // 2 or launch.width == n == 1, where
            assert launch.width & (launch.width - 1) == 0 and launch.rows & (launch.rows - 1) == 0, where
            assert launch.rows <= m and launch.rows * launch.width <= max(dispatch.TILE_ELEMENTS, launch.width), where
            assert launch.num_warps == (8 if launch.width >= 2048 else 4) and not launch.interpret, where
            tiles = -(-m // launch.rows)
            assert launch.forward_programs(m) == tiles and tiles * launch.rows >= m, where
            programs = launch.backward_programs(m)
            assert programs <= dispatch.BACKWARD_PROGRAMS, where
            assert programs * launch.steps * launch.rows >= m, where
            assert (programs - 1) * launch.steps < tiles, where  # every program has a tile
            assert programs >= min(tiles, dispatch.BACKWARD_PROGRAMS // 2), where
            launch.check_covers(n, "k")


def test_a_relaunch_is_the_rule_at_the_new_shape_and_keeps_interpret_mode():
    launch = dispatch.rows_launch(37, 10, interpret=True)
    assert launch.interpret and dispatch.relaunch(launch, 4 * 37, 10) == dispatch.rows_launch(4 * 37, 10,
                                                                                              interpret=True)
    assert dispatch.relaunch(dispatch.rows_launch(8, 8), 65535, 4096) == dispatch.rows_launch(65535, 4096)
    with pytest.raises(TypeError, match="relaunch"):
        dispatch.relaunch(None, 8, 8)
    for n in (0, 17):
        with pytest.raises(ValueError, match="my kernel: a row of"):
            dispatch.rows_launch(8, 16).check_covers(n, "my kernel")


# ----------------------------------------------------------------------------------------------
# Lowered for CUDA (no GPU needed: ``_cuda_lowering.for_cuda``)

TRITON = "__gpu$xla.gpu.triton"


def _impl_fn(op, impl):
    return {"layer_norm": lambda x, w, b: layer_norm(x, x.shape[-1], w, b, impl=impl),
            "rms_norm": lambda x, w, b: rms_norm(x, x.shape[-1], w, impl=impl),
            "group_norm": lambda x, w, b: group_norm(x, 32, w, b, impl=impl),
            "batch_norm": lambda x, w, b: batch_norm(x, None, None, w, b, training=True, impl=impl)[0]}[op]


def _step(fn):
    """``jit`` of a training step's value and gradients of ``fn(x, w, b)`` for a cotangent ``g``."""
    return jax.jit(lambda g, x, w, b: (lambda y, pullback: (y, pullback(g)))(*jax.vjp(fn, x, w, b)))


def _structs(shape, dtype, weight_dtype, channels):
    x, v = jax.ShapeDtypeStruct(shape, dtype), jax.ShapeDtypeStruct((channels,), weight_dtype)
    return x, x, v, v


# (op, shape, dtype, weight dtype): a ragged transformer block's 66850 tokens, a bench case, mixed
# precision, a few wide rows, the widest rows, more rows than any tile count divides evenly.
KERNEL_CASES = [
    ("layer_norm", (66850, 256), "bfloat16", "bfloat16"),
    ("layer_norm", (16384, 4096), "float32", "float32"),
    ("layer_norm", (1000, 5120), "bfloat16", "float32"),
    ("rms_norm", (3, 12288), "float32", "float32"),
    ("rms_norm", (2049, 16384), "bfloat16", "bfloat16"),
    ("rms_norm", (2**20 + 1, 24), "float16", "float16"),
]


@pytest.mark.parametrize("op, shape, dtype, weight_dtype", KERNEL_CASES, ids=lambda v: str(v))
def test_pallas_lowers_for_cuda_to_the_two_kernels_on_the_rules_grids(op, shape, dtype, weight_dtype):
    """``impl="pallas"``'s training step lowered for CUDA holds exactly the forward and the
    backward Triton kernels, on the grids of ``rows_launch`` at the shape's rows."""
    step = _step(_impl_fn(op, "pallas"))
    module = export.export(step, platforms=["cuda"], disabled_checks=[export.DisabledSafetyCheck.custom_call(TRITON)])
    with for_cuda():
        text = module(*_structs(shape, dtype, weight_dtype, shape[-1])).mlir_module()
    calls = re.findall(r'grid_x = (\d+) : i32, grid_y = (\d+) : i32.*?name = "(\w+)"', text)
    m = int(np.prod(shape[:-1]))
    launch = dispatch.rows_launch(m, shape[-1])
    assert {name: int(x) * int(y) for x, y, name in calls} == {
        f"{op}_fwd": launch.forward_programs(m), f"{op}_bwd": launch.backward_programs(m)}
    assert len(calls) == 2 and text.count(f"custom_call @{TRITON}") == 2


# Large shapes of real models and small ones: the default is the XLA formulas at every one.
DEFAULT_CASES = [
    ("layer_norm", (4096, 8192), "bfloat16", "bfloat16"),
    ("layer_norm", (8192, 8192), "bfloat16", "bfloat16"),
    ("layer_norm", (66850, 256), "bfloat16", "float32"),
    ("layer_norm", (8, 24), "float32", "float32"),
    ("rms_norm", (16384, 4096), "float32", "float32"),
    ("rms_norm", (65536, 16384), "bfloat16", "bfloat16"),
    ("group_norm", (256, 64, 112, 112), "float32", "float32"),
    ("group_norm", (8, 320, 64, 64), "float16", "float32"),
    ("batch_norm", (256, 64, 112, 112), "float32", "float32"),
    ("batch_norm", (64, 256, 56, 56), "bfloat16", "bfloat16"),
]


@pytest.mark.parametrize("op, shape, dtype, weight_dtype", DEFAULT_CASES, ids=lambda v: str(v))
def test_the_default_lowers_for_cuda_to_no_kernel(op, shape, dtype, weight_dtype):
    """``impl=None`` (and ``"xla"``) on a GPU is the XLA formulas at every shape: the training
    step lowered for CUDA calls no Triton, Pallas or Mosaic kernel (no custom call at all)."""
    channels = shape[-1] if op in ("layer_norm", "rms_norm") else shape[1]
    args = _structs(shape, dtype, weight_dtype, channels)
    for impl in (None, "xla"):
        text = _step(_impl_fn(op, impl)).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
        assert "custom_call" not in text and "triton" not in text and "mosaic" not in text, (op, shape, impl)


# ----------------------------------------------------------------------------------------------
# The kernels interpreted, against the XLA ops (float64)

# (M, N) and launches: several rows per tile with M not a multiple of them and a backward program
# walking several tiles (its last partly past M), tiles wholly past M (programs x steps x rows > M),
# one row per tile; the rule's own launch at a ragged shape.
ROW_LAUNCHES = [
    ((37, 10), dict(rows=4, width=16, steps=3)),
    ((9, 5), dict(rows=2, width=8, steps=4)),
    ((6, 16), dict(rows=1, width=16, steps=2)),
    ((37, 45), None),
]


@pytest.mark.parametrize("shape, tiling", ROW_LAUNCHES, ids=["rows-4-steps-3", "past-the-rows", "rows-1", "rule"])
@pytest.mark.parametrize("center", [True, False], ids=["layer_norm", "rms_norm"])
def test_rows_kernels_match_the_xla_ops_at_every_launch(center, shape, tiling):
    """Values and every cotangent (of y and of the statistics) of the rows kernel ops against the
    XLA ops', float64."""
    m, n = shape
    launch = dispatch.rows_launch(m, n, interpret=True) if tiling is None else dispatch.RowsLaunch(
        **tiling, num_warps=4, interpret=True)
    x = jnp.asarray(RNG.standard_normal(shape) * 3 + 2)
    w, b = jnp.asarray(RNG.standard_normal(n) + 1), jnp.asarray(RNG.standard_normal(n))
    g, g_stats = jnp.asarray(RNG.standard_normal(shape)), jnp.asarray(RNG.standard_normal((2, m)))
    if center:
        ours = lambda x, w, b: layer_norm_rows_op(x, w, b, eps=1e-3, launch=launch)  # noqa: E731
        ref = lambda x, w, b: affine_normalize_op(x, w[None], b[None], axes=(1,), eps=1e-3, axis_name=None)  # noqa: E731
        args, cts, ref_cts = (x, w, b), (g, *g_stats), (g, g_stats[0][:, None], g_stats[1][:, None])
    else:
        ours = lambda x, w: rms_norm_rows_op(x, w, eps=1e-3, launch=launch)  # noqa: E731
        ref = lambda x, w: rms_norm_op(x, w, axes=(1,), eps=1e-3)  # noqa: E731
        args, cts, ref_cts = (x, w), (g, g_stats[1]), (g, g_stats[1][:, None])
    out, pullback = jax.vjp(ours, *args)
    out_ref, pullback_ref = jax.vjp(ref, *args)
    for got, want in zip(out, out_ref):
        np.testing.assert_allclose(got, want.reshape(got.shape), rtol=1e-12, atol=1e-12)
    for got, want in zip(pullback(cts), pullback_ref(ref_cts)):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_the_public_ops_run_the_rules_multi_step_launch(op, monkeypatch):
    """``impl="pallas_interpret"`` through the public op, with the rule's constants lowered so
    that its launch at 37 x 96 has tiles of 2 rows padded to 128 and 3 backward programs of 7
    tiles: values and gradients (x, weight, bias) equal ``impl="xla"``'s, float64."""
    monkeypatch.setattr(dispatch, "TILE_ELEMENTS", 256)
    monkeypatch.setattr(dispatch, "BACKWARD_PROGRAMS", 3)
    launch = dispatch.rows_launch(37, 96)
    assert (launch.rows, launch.width, launch.steps, launch.backward_programs(37)) == (2, 128, 7, 3)
    x, ct = (jnp.asarray(RNG.standard_normal((37, 96)) * 3 + 2) for _ in range(2))
    w, b = jnp.asarray(RNG.standard_normal(96) + 1), jnp.asarray(RNG.standard_normal(96))
    results = []
    for impl in ("xla", "pallas_interpret"):
        y, pullback = jax.vjp(_impl_fn(op, impl), x, w, b)
        results.append((y, *pullback(ct)))
    for got, want in zip(results[1], results[0]):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_half_precision_kernels_track_the_float64_result(op, dtype):
    """Inputs, outputs and gradients in the half type, statistics and sums in float32."""
    fn = {"layer_norm": lambda x, w, b: layer_norm(x, 128, w, b, impl="pallas_interpret"),
          "rms_norm": lambda x, w, b: rms_norm(x, 128, w, impl="pallas_interpret")}[op]
    x, ct = RNG.standard_normal((4, 128)), RNG.standard_normal((4, 128))
    w, b = RNG.standard_normal(128) + 1, RNG.standard_normal(128)
    want = _value_and_grads(fn, *map(jnp.asarray, (x, w, b, ct)))
    got = _value_and_grads(fn, *[jnp.asarray(a, dtype) for a in (x, w, b, ct)])
    for g, e in zip(got, want):
        assert g.dtype == dtype
        scale = float(jnp.max(jnp.abs(e))) + 1
        assert float(jnp.max(jnp.abs(g.astype(jnp.float64) - e))) < 3e-2 * scale


def _value_and_grads(f, x, w, b, ct):
    y, pullback = jax.vjp(f, x, w, b)
    return (y, *pullback(ct))


@pytest.mark.parametrize("center", [True, False], ids=["layer_norm", "rms_norm"])
def test_batched_weights_under_vmap_and_forward_over_reverse(center):
    """Weights batched, so the kernels run under ``jax.vmap`` (not folded into the rows), and
    forward-over-reverse through them: against the XLA ops, float64."""
    launch = dispatch.RowsLaunch(rows=2, width=16, steps=2, num_warps=4, interpret=True)
    x, ct, v = (jnp.asarray(RNG.standard_normal((3, 7, 10)) * 2 + 1) for _ in range(3))
    w, b = jnp.asarray(RNG.standard_normal((3, 10)) + 1), jnp.asarray(RNG.standard_normal((3, 10)))
    if center:
        ours = lambda x, w, b: layer_norm_rows_op(x, w, b, eps=1e-3, launch=launch)[0]  # noqa: E731
        ref = lambda x, w, b: affine_normalize_op(x, w[None], b[None], axes=(1,), eps=1e-3, axis_name=None)[0]  # noqa: E731
    else:
        ours = lambda x, w, b: rms_norm_rows_op(x, w, eps=1e-3, launch=launch)[0]  # noqa: E731
        ref = lambda x, w, b: rms_norm_op(x, w, axes=(1,), eps=1e-3)[0]  # noqa: E731

    def derivatives(f):
        loss = lambda x, w, b: jnp.sum(jnp.sin(jax.vmap(f)(x, w, b)) * ct)  # noqa: E731
        grads = jax.grad(loss, (0, 1, 2))(x, w, b)
        return (*grads, jax.jvp(lambda x: jax.grad(loss)(x, w, b), (x,), (v,))[1])

    for got, want in zip(derivatives(ours), derivatives(ref)):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)


def _pallas_calls(jaxpr):
    """``(x's shape, grid)`` of each ``pallas_call`` in ``jaxpr`` and the jaxprs it holds (under
    ``jax_custom_jvp3`` a ``custom_jvp`` call's equation holds its trace, ``jax.stages.Traced``,
    in an object among its parameters rather than a jaxpr)."""
    from jax.extend import core

    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            yield eqn.invars[0].aval.shape, tuple(eqn.params["grid_mapping"].grid)
        for param in eqn.params.values():
            traced = getattr(param, "traced", None)
            if isinstance(traced, jax.stages.Traced):
                param = traced.jaxpr
            for sub in param if isinstance(param, tuple | list) else (param,):
                if isinstance(sub, core.ClosedJaxpr | core.Jaxpr):
                    yield from _pallas_calls(getattr(sub, "jaxpr", sub))


def test_a_shared_weight_under_vmap_folds_into_one_launch_of_the_folded_rows():
    """vmap of layer norm with a shared weight: one forward kernel over the 3 x 7 rows, on the
    rule's grid for 21 rows (``dispatch.relaunch``), not a kernel per example."""
    x = jnp.asarray(RNG.standard_normal((3, 7, 10)))
    jaxpr = jax.make_jaxpr(jax.vmap(lambda x: layer_norm(x, 10, jnp.ones(10), impl="pallas_interpret")))(x)
    assert list(_pallas_calls(jaxpr.jaxpr)) == [((21, 10), (dispatch.rows_launch(21, 10).forward_programs(21),))]


# ----------------------------------------------------------------------------------------------
# RMS norm: the layer-norm row kernels with center=False.


def _rms(impl, shape):
    return lambda x, w: rms_norm(x, shape, w, impl=impl)


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 2e-6)])
@pytest.mark.parametrize("x_shape, normalized", [((3, 5, 7), (7,)), ((2, 3, 4), (3, 4)), ((9,), 9)])
def test_rms_norm_kernels_match_the_xla_formulas(x_shape, normalized, dtype, tol):
    """Values and gradients (x, weight) of the kernels in interpret mode against the XLA path."""
    x = jnp.asarray(RNG.standard_normal(x_shape) * 2 + 1, dtype)
    w_shape = (normalized,) if isinstance(normalized, int) else normalized
    w = jnp.asarray(RNG.standard_normal(w_shape) + 1, dtype)
    ct = jnp.asarray(RNG.standard_normal(x_shape), dtype)
    results = []
    for impl in ("xla", "pallas_interpret"):
        y, pullback = jax.vjp(_rms(impl, normalized), x, w)
        results.append((y, *pullback(ct)))
    for got, want in zip(results[1], results[0]):
        assert got.dtype == want.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_rms_norm_kernels_match_torch():
    """Against torch.nn.functional.rms_norm (float64): value and the gradients of x and weight,
    with and without a weight, default and given eps."""
    torch = pytest.importorskip("torch")
    x, w, ct = RNG.standard_normal((6, 10)), RNG.standard_normal(10) + 1, RNG.standard_normal((6, 10))
    for weight, eps in ((w, None), (None, 1e-2)):
        tx = torch.tensor(x, requires_grad=True)
        tw = None if weight is None else torch.tensor(weight, requires_grad=True)
        ty = torch.nn.functional.rms_norm(tx, (10,), tw, eps)
        grads = torch.autograd.grad(ty, [t for t in (tx, tw) if t is not None], torch.tensor(ct))
        args = (jnp.asarray(x),) if weight is None else (jnp.asarray(x), jnp.asarray(weight))
        fn = lambda *a, eps=eps: rms_norm(a[0], 10, *a[1:], eps=eps, impl="pallas_interpret")  # noqa: E731
        y, pullback = jax.vjp(fn, *args)
        for got, want in zip((y, *pullback(jnp.asarray(ct))), (ty, *grads)):
            np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-12, atol=1e-12)


def test_rms_norm_kernels_rstd_cotangent():
    """The kernel op's second output (rstd, (M,)): the backward kernel's ``g_rstd`` terms against
    the XLA op's, both outputs' cotangents at once."""
    x, w = jnp.asarray(RNG.standard_normal((7, 5))), jnp.asarray(RNG.standard_normal(5) + 1)
    g, g_rstd = jnp.asarray(RNG.standard_normal((7, 5))), jnp.asarray(RNG.standard_normal(7))
    launch = dispatch.rows_launch(7, 5, interpret=True)
    (y, rstd), pullback = jax.vjp(lambda x, w: rms_norm_rows_op(x, w, eps=1e-3, launch=launch), x, w)
    (y_ref, rstd_ref), pullback_ref = jax.vjp(lambda x, w: rms_norm_op(x, w, axes=(1,), eps=1e-3), x, w)
    np.testing.assert_allclose(y, y_ref, rtol=1e-13)
    np.testing.assert_allclose(rstd, rstd_ref[:, 0], rtol=1e-13)
    for got, want in zip(pullback((g, g_rstd)), pullback_ref((g, g_rstd[:, None]))):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_rms_norm_kernels_second_order_through_the_formulas():
    """Reverse-over-reverse and forward-over-reverse of the kernel path equal the XLA path's (the
    backward kernel is never differentiated: its derivatives are those of the jnp formulas)."""
    x, w = jnp.asarray(RNG.standard_normal((4, 6)) + 0.5), jnp.asarray(RNG.standard_normal(6) + 1)
    ct, v = jnp.asarray(RNG.standard_normal((4, 6))), jnp.asarray(RNG.standard_normal((4, 6)))

    def second_order(impl):
        def loss(x, w):
            return jnp.sum(jnp.sin(rms_norm(x, 6, w, impl=impl)) * ct)

        grad = jax.grad(loss, (0, 1))
        reverse = jax.grad(lambda x, w: jnp.sum(grad(x, w)[0] * v) + jnp.sum(grad(x, w)[1] ** 2), (0, 1))(x, w)
        forward = jax.jvp(lambda x: grad(x, w), (x,), (v,))[1]
        return jax.tree.leaves((reverse, forward))

    for got, want in zip(second_order("pallas_interpret"), second_order("xla")):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("weight_batched", [False, True], ids=["shared-weight", "batched-weight"])
def test_rms_norm_kernels_under_vmap(weight_batched):
    """vmap over a leading axis (shared weight: folded into the kernel's rows; batched weight: the
    kernel under ``jax.vmap``), values and gradients against the XLA path."""
    x, ct = jnp.asarray(RNG.standard_normal((3, 4, 5))), jnp.asarray(RNG.standard_normal((3, 4, 5)))
    w = jnp.asarray(RNG.standard_normal((3, 5) if weight_batched else 5) + 1)
    results = []
    for impl in ("xla", "pallas_interpret"):
        fn = jax.vmap(_rms(impl, 5), in_axes=(1, 0 if weight_batched else None), out_axes=1)
        y, pullback = jax.vjp(fn, jnp.swapaxes(x, 0, 1), w)
        results.append((y, *pullback(jnp.swapaxes(ct, 0, 1))))
    for got, want in zip(results[1], results[0]):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_rms_norm_default_off_the_gpu_is_the_xla_formulas():
    """impl=None on a CPU: the XLA op (no kernel op in the program); empty input too."""
    jaxpr = str(jax.make_jaxpr(lambda x: rms_norm(x, 4))(jnp.ones((2, 4))))
    assert "rms_norm_rows" not in jaxpr and "rsqrt" in jaxpr
    assert "rms_norm_rows" in str(jax.make_jaxpr(lambda x: rms_norm(x, 4, impl="pallas_interpret"))(jnp.ones((2, 4))))
    assert rms_norm(jnp.ones((0, 4)), 4, impl="pallas_interpret").shape == (0, 4)


# ----------------------------------------------------------------------------------------------
# The implementations an op takes


@pytest.mark.parametrize("op, impl", [("layer_norm", "mosaic"), ("rms_norm", "mosaic"), ("layer_norm",
                                      "mosaic_interpret"), ("batch_norm", "pallas"), ("group_norm", "pallas"),
                                      ("group_norm", "pallas_interpret")])
def test_a_removed_kernel_impl_warns_and_runs_the_xla_formulas(op, impl):
    """The removed kernels' ``impl`` (layer/RMS norm's Mosaic GPU kernels, batch/group norm's
    Triton kernels) is deprecated: a ``DeprecationWarning`` naming the op, and the XLA formulas'
    values and gradients."""
    shape, channels = ((6, 5), 5) if op in ("layer_norm", "rms_norm") else ((4, 64, 3), 64)
    x, ct = (jnp.asarray(RNG.standard_normal(shape) * 2 + 1) for _ in range(2))
    w, b = jnp.asarray(RNG.standard_normal(channels) + 1), jnp.asarray(RNG.standard_normal(channels))
    with pytest.warns(DeprecationWarning, match=f"{op}: impl={impl!r} is deprecated"):
        got = _value_and_grads(_impl_fn(op, impl), x, w, b, ct)
    for g, e in zip(got, _value_and_grads(_impl_fn(op, "xla"), x, w, b, ct), strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("call, words", [
    (lambda x: layer_norm(x, 3, impl="triton"), ["layer_norm", "impl", "'triton'"]),
    (lambda x: rms_norm(x, 3, impl="triton"), ["rms_norm", "impl", "'triton'"]),
    (lambda x: group_norm(x, 2, impl="triton"), ["group_norm", "impl", "'triton'"]),
    (lambda x: batch_norm(x, None, None, training=True, impl="cuda"), ["batch_norm", "impl", "'cuda'"]),
    (lambda x: layer_norm(jnp.ones((2, 16385)), 16385, impl="pallas"), ["layer_norm", "16384", "16385"]),
    (lambda x: rms_norm(jnp.ones((2, 3, 16385)), 16385, impl="pallas_interpret"), ["rms_norm", "16384"]),
    (lambda x: rms_norm(x, 3, jnp.ones(4), impl="pallas_interpret"), ["rms_norm", "weight"]),
    (lambda x: jax.jit(lambda e: rms_norm(x, 3, eps=e, impl="pallas_interpret"))(1e-3), ["rms_norm", "eps"]),
    (lambda x: jax.jit(lambda e: layer_norm(x, 3, eps=e, impl="pallas"))(1e-3), ["layer_norm", "eps"]),
])
def test_bad_input(call, words):
    """An unknown ``impl``, rows wider than the kernels hold (``dispatch.MAX_WIDTH``), a traced eps
    for the kernels (compiled in): a ValueError naming the op."""
    with pytest.raises(ValueError) as err:
        call(jnp.ones((2, 4, 3)))
    for word in words:
        assert word in str(err.value)


# ----------------------------------------------------------------------------------------------
# Compiled on a GPU

GPU = jax.default_backend() == "gpu"


def _matches_the_xla_ops_on_the_gpu(center, launch, m, n, dtype, tolerance):
    """Compiled for the GPU: values and gradients of the rows kernels on ``launch`` against the XLA
    ops on the same inputs, relative to the largest (the kernels sum in another order: 1e-4 in
    float32; two bfloat16 roundings, 2e-2, in bfloat16)."""
    keys = jax.random.split(jax.random.PRNGKey(m + n), 4)
    x = (jax.random.normal(keys[0], (m, n)) * 3 + 1).astype(dtype)
    g = jax.random.normal(keys[1], (m, n)).astype(dtype)
    w, b = (jax.random.normal(keys[2], (n,)) + 1).astype(dtype), jax.random.normal(keys[3], (n,)).astype(dtype)
    if center:
        ours = lambda x, w, b: layer_norm_rows_op(x, w, b, eps=1e-5, launch=launch)[0]  # noqa: E731
        ref = lambda x, w, b: affine_normalize_op(x, w[None], b[None], axes=(1,), eps=1e-5,  # noqa: E731
                                                  axis_name=None)[0]
        args = (x, w, b)
    else:
        ours = lambda x, w: rms_norm_rows_op(x, w, eps=1e-5, launch=launch)[0]  # noqa: E731
        ref = lambda x, w: rms_norm_op(x, w, axes=(1,), eps=1e-5)[0]  # noqa: E731
        args = (x, w)
    step = lambda f: jax.jit(lambda g, *a: (lambda out, pb: (out, *pb(g)))(*jax.vjp(f, *a)))  # noqa: E731
    for got, want in zip(step(ours)(g, *args), step(ref)(g, *args)):
        got, want = got.astype(jnp.float32), want.astype(jnp.float32)
        scale = float(jnp.max(jnp.abs(want)))
        assert float(jnp.max(jnp.abs(got - want))) <= tolerance * scale, (m, n, launch)



# (M, N): one row, few wide rows, widths not a power of two, the widest rows, many rows (backward
# programs walking many tiles, M not a multiple of a tile), a bench case.
GPU_SHAPES = [(1, 768), (3, 12288), (77, 3000), (1000, 5120), (4097, 1536), (2049, 16384), (66850, 256),
              (16384, 4096)]
GPU_TOLERANCES = [(jnp.float32, 1e-4), (jnp.bfloat16, 2e-2)]


@pytest.mark.skipif(not GPU, reason="Triton compiles the kernels only on a GPU (interpreted: every_launch above)")
@pytest.mark.parametrize("dtype, tolerance", GPU_TOLERANCES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("center", [True, False], ids=["layer_norm", "rms_norm"])
def test_the_rules_launches_on_the_gpu_match_the_xla_formulas(center, dtype, tolerance):
    """The kernels compiled on the rule's launch at every shape of ``GPU_SHAPES``, and on a
    launch of one row per tile walking many tiles per backward program."""
    for m, n in GPU_SHAPES:
        _matches_the_xla_ops_on_the_gpu(center, dispatch.rows_launch(m, n), m, n, dtype, tolerance)
    m, n = 20001, 1000
    walking = dispatch.RowsLaunch(1, 1024, dispatch.backward_steps(m, 1, 7), num_warps=4)
    assert walking.backward_programs(m) == 7
    _matches_the_xla_ops_on_the_gpu(center, walking, m, n, dtype, tolerance)


@pytest.mark.skipif(not GPU, reason="Triton compiles the kernels only on a GPU")
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_pallas_on_the_gpu_matches_the_default(op):
    """The public op's ``impl="pallas"`` against its default (the XLA formulas) at a bfloat16
    transformer block's shape with float32 weights: values and gradients."""
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    x = (jax.random.normal(keys[0], (4, 2048, 4096)) * 3 + 1).astype(jnp.bfloat16)
    ct = jax.random.normal(keys[1], x.shape).astype(jnp.bfloat16)
    w, b = jax.random.normal(keys[2], (4096,)) + 1, jax.random.normal(keys[3], (4096,))
    got, want = (_step(_impl_fn(op, impl))(ct, x, w, b) for impl in ("pallas", None))
    for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        g, e = g.astype(jnp.float32), e.astype(jnp.float32)
        assert float(jnp.max(jnp.abs(g - e))) <= 2e-2 * float(jnp.max(jnp.abs(e))), op
