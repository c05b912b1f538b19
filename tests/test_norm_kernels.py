"""The fused normalization kernels (``jaxrules.norm_kernels``) beyond the registry records: every
tiling path of the batch/group-norm kernels in Pallas interpret mode against the jnp formulas,
running statistics from the kernels' statistics, RMS norm's kernels (layer norm's without
centering) against the XLA formulas and torch, through second order and vmap, the Triton
lowering for CUDA (which catches lowering errors without a GPU), bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _cuda_lowering import for_cuda
from jax import export

from jaxrules import dispatch, norm_kernels
from jaxrules.nn import batch_norm, group_norm, layer_norm
from jaxrules.ops.normalization import rms_norm, rms_norm_op, rms_norm_rows_op

RNG = np.random.default_rng(11)


def _ops(impl):
    return {
        "group_norm": lambda x, w, b: group_norm(x, 3, w, b, impl=impl),
        "batch_norm": lambda x, w, b: batch_norm(x, None, None, w, b, training=True, impl=impl)[0],
    }


def _value_and_grads(f, x, w, b, ct):
    y, pullback = jax.vjp(f, x, w, b)
    return (y, *pullback(ct))


def _every_grouped_launch(monkeypatch, launch):
    """Every batch/group-norm launch the ops make is ``launch`` (a table's fields too, on a GPU)."""
    monkeypatch.setattr(dispatch, "GroupedLaunch", lambda interpret=False, **_: launch)


# (N, C, L) shapes and tilings: L a multiple of the chunk or not, several chunks per row,
# several rows per tile, odd row counts (one row per tile), batch-norm statistics split.
TILINGS = [
    ((3, 6, 37), dict(chunk=8, tile_elements=16, stat_programs=64)),
    ((4, 6, 16), dict(chunk=8, tile_elements=32, stat_programs=8)),
    ((5, 6, 5), dict(chunk=4096, tile_elements=4096, stat_programs=1024)),
]


# The second passes walking the tiles last to first, group norm's forward as one kernel writing y,
# batch norm's backward as two kernels over slices of each channel's samples (split where N allows).
# (The order of a pass changes no value: ``test_a_second_pass_visits_every_tile_once...`` checks it.)
FORMS = [{}, dict(reverse=True, writes_y=True), dict(backward_programs=64, reverse=True)]


@pytest.mark.parametrize("form", FORMS, ids=["two-forward-kernels", "reversed-writes-y", "split-backward"])
@pytest.mark.parametrize("shape, tuning", TILINGS, ids=["ragged-chunks", "split-stats", "short-rows"])
@pytest.mark.parametrize("op", ["group_norm", "batch_norm"])
def test_grouped_kernels_match_the_jnp_formulas(op, shape, tuning, form, monkeypatch):
    """Values and gradients of the kernels (interpreted) against the jnp formulas, in float64 to
    1e-12; with ``writes_y`` group norm's forward is ``norm_kernels.local_forward_grouped`` (batch
    norm ignores it)."""
    launch = dispatch.GroupedLaunch(**tuning, **form, interpret=True)
    forward_kernel = norm_kernels.local_forward_grouped
    forwards = []
    monkeypatch.setattr(norm_kernels, "local_forward_grouped", lambda *a, **k: forwards.append(1) or forward_kernel(
        *a, **k))
    _every_grouped_launch(monkeypatch, launch)
    x = jnp.asarray(RNG.standard_normal(shape) * 3 + 5)  # a large mean: the variance must not cancel
    w, b = jnp.asarray(RNG.standard_normal(6) + 1), jnp.asarray(RNG.standard_normal(6))
    ct = jnp.asarray(RNG.standard_normal(shape))
    want = _value_and_grads(_ops("xla")[op], x, w, b, ct)
    got = _value_and_grads(_ops("pallas_interpret")[op], x, w, b, ct)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
    assert bool(forwards) == (op == "group_norm" and launch.writes_y)


@pytest.mark.parametrize("reverse", [False, True])
def test_a_second_pass_visits_every_tile_once_last_first_when_reversed(reverse):
    """``_Tiling.for_each_tile_again``: 3 tile rows of 2 rows by 3 chunks of 8 (a row of 20), each
    tile once, its row's values computed once per tile row; with ``reverse`` the last tile first."""
    from jax.experimental import io_callback

    tiling = norm_kernels._Tiling(6, 20, dispatch.GroupedLaunch(chunk=8, tile_elements=16, reverse=reverse))
    visits, rows = [], []

    def record(r, j, value):
        visits.append((int(r), int(j), int(value)))
        return np.int32(0)

    def per_row(r):
        rows.append(None)  # traced once: the loop body
        return r * 10

    jax.jit(lambda: tiling.for_each_tile_again(per_row, lambda r, j, v: io_callback(
        record, jax.ShapeDtypeStruct((), jnp.int32), r, j, v, ordered=True)))()
    forward = [(r, j, 10 * r) for r in range(3) for j in range(3)]
    assert visits == (forward[::-1] if reverse else forward) and len(rows) == 1


def test_batch_norms_split_backward_walks_several_tiles_per_slice(monkeypatch):
    """The split backward (``backward_programs``) where each slice of a channel holds several tile
    rows (8 samples in 2 slices of 4, tiles of 2 rows): values and gradients, and their own
    gradients (the kernels' derivative is the jnp formulas'), against the XLA formulas."""
    launch = dispatch.GroupedLaunch(chunk=8, tile_elements=16, backward_programs=64, interpret=True)
    _every_grouped_launch(monkeypatch, launch)
    splits = []
    counted = norm_kernels._backward_splits
    monkeypatch.setattr(norm_kernels, "_backward_splits", lambda *a: splits.append(counted(*a)) or splits[-1])
    x, ct = jnp.asarray(RNG.standard_normal((8, 6, 9)) * 3 + 5), jnp.asarray(RNG.standard_normal((8, 6, 9)))
    w, b = jnp.asarray(RNG.standard_normal(6) + 1), jnp.asarray(RNG.standard_normal(6))
    results = []
    for impl in ("xla", "pallas_interpret"):
        f = _ops(impl)["batch_norm"]
        grads = jax.grad(lambda x, w, b, f=f: jnp.sum(jnp.sin(f(x, w, b)) * ct), (0, 1, 2))
        second = jax.grad(lambda x, w, b, grads=grads: jnp.sum(jnp.cos(grads(x, w, b)[0])), (0, 1))(x, w, b)
        results.append((*_value_and_grads(f, x, w, b, ct), *second))
    for got, want in zip(results[1], results[0]):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)
    assert 2 in splits


def test_the_one_kernel_forward_keeps_the_xla_formulas_infinities(monkeypatch):
    """An infinite weight: y is +-inf where x is off its group's mean, as the XLA formulas give
    (a form ``x scale + (b - mean scale)`` made the whole group NaN)."""
    _every_grouped_launch(monkeypatch, dispatch.GroupedLaunch(chunk=8, tile_elements=16, writes_y=True,
                                                              interpret=True))
    x = jnp.asarray(RNG.standard_normal((2, 6, 10)))
    w, b = jnp.asarray([1.0, np.inf, 2.0, -np.inf, 1.0, 1.0]), jnp.zeros(6)
    got, want = (group_norm(x, 3, w, b, impl=impl) for impl in ("pallas_interpret", "xla"))
    assert np.isinf(want).sum() == 2 * 2 * 10  # channels 1 and 3 of both samples
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_the_grouped_forward_kernel_is_group_norms_only():
    x = jnp.ones((2, 4, 5))
    with pytest.raises(ValueError, match="local_forward_grouped: layout must be 'group'"):
        norm_kernels.local_forward_grouped(x, jnp.ones((4, 2)), jnp.ones((4, 2)), layout="batch", groups=1, eps=1e-5,
                                           launch=dispatch.GroupedLaunch(writes_y=True, interpret=True))


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
@pytest.mark.parametrize("op", ["group_norm", "batch_norm", "layer_norm", "rms_norm"])
def test_half_precision_kernels_track_the_float64_result(op, dtype):
    """Inputs, outputs and gradients in the half type, statistics and sums in float32."""
    fns = dict(_ops("pallas_interpret"), layer_norm=lambda x, w, b: layer_norm(x, 128, w, b, impl="pallas_interpret"),
               rms_norm=lambda x, w, b: rms_norm(x, 128, w, impl="pallas_interpret"))
    shape, channels = ((4, 128), 128) if op in ("layer_norm", "rms_norm") else ((4, 6, 20), 6)
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
        (lambda x, w, b: rms_norm(x, 256, w, impl="pallas"), rows, vec256),
    ]
    for f, x, v in cases:
        _lowers_for_cuda(f, x, v)


def _lowers_for_cuda(f, x, v):
    """``jit`` of ``f``'s value and gradients at x, weights like ``v``, exported for CUDA: its
    module has Triton calls."""
    step = jax.jit(lambda g, x, w, b: (lambda y, pullback: (y, pullback(g)))(*jax.vjp(f, x, w, b)))
    lowered = export.export(step, platforms=["cuda"],
                            disabled_checks=[export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])
    with for_cuda():
        module = lowered(x, x, v, v).mlir_module()
    assert "xla.gpu.triton" in module
    return module


def test_the_grouped_forms_lower_for_cuda(monkeypatch):
    """Group norm's one-kernel forward and the reversed second passes through Triton's lowering:
    the forward is one kernel (no statistics kernel), named ``group_norm_fwd``; batch norm's split
    backward: the row sums' and the dx kernels, not the fused one."""
    launch = dispatch.GroupedLaunch(reverse=True, writes_y=True)
    _every_grouped_launch(monkeypatch, launch)
    v = jax.ShapeDtypeStruct((8,), jnp.bfloat16)
    module = _lowers_for_cuda(lambda x, w, b: group_norm(x, 4, w, b, impl="pallas"),
                              jax.ShapeDtypeStruct((4, 8, 5, 7), jnp.bfloat16), v)
    assert "group_norm_fwd" in module and "group_norm_stats" not in module and "group_norm_bwd" in module
    split = launch.__class__(backward_programs=1024)
    _every_grouped_launch(monkeypatch, split)
    module = _lowers_for_cuda(lambda x, w, b: batch_norm(x, None, None, w, b, training=True, impl="pallas")[0],
                              jax.ShapeDtypeStruct((4, 8, 5, 7), jnp.bfloat16), v)
    assert "batch_norm_bwd_sums" in module and "batch_norm_bwd_dx" in module and '"batch_norm_bwd"' not in module


@pytest.mark.parametrize("call, words", [
    (lambda x: group_norm(x, 2, impl="triton"), ["group_norm", "impl"]),
    (lambda x: batch_norm(x, None, None, training=True, impl="cuda"), ["batch_norm", "impl"]),
    (lambda x: batch_norm(x, None, None, training=True, impl="pallas", axis_name="d"), ["batch_norm", "axis_name"]),
    (lambda x: group_norm(x, 2, jnp.ones(3), impl="pallas_interpret"), ["group_norm", "weight"]),
    (lambda x: rms_norm(x, 3, impl="triton"), ["rms_norm", "impl"]),
    (lambda x: rms_norm(x, 3, jnp.ones(4), impl="pallas_interpret"), ["rms_norm", "weight"]),
    (lambda x: jax.jit(lambda e: rms_norm(x, 3, eps=e, impl="pallas_interpret"))(1e-3), ["rms_norm", "eps"]),
])
def test_bad_input(call, words):
    with pytest.raises(ValueError) as err:
        call(jnp.ones((2, 4, 3)))
    for word in words:
        assert word in str(err.value)


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


# (M, N) and launches of the rows kernels: several rows per tile with M not a multiple of them, a
# backward program walking several tiles (its last one partly past M, or wholly: programs x steps
# x rows > M), one row per tile, rows held in pieces, a forward walking several tiles; each with the
# next tile prefetched and without.
ROW_LAUNCHES = [
    ((37, 10), dict(rows=4, width=16, steps=3)),
    ((9, 5), dict(rows=2, width=8, steps=4)),
    ((6, 16), dict(rows=1, width=16, steps=2)),
    ((37, 10), dict(rows=2, width=16, steps=3, forward_rows=8)),  # the forward's own tiles, bigger
    ((37, 10), dict(rows=4, width=16, steps=2, forward_rows=1)),  # and smaller
    ((37, 10), dict(rows=4, width=4, steps=3, pieces=3)),  # rows in pieces, the last partly past N
    ((9, 12), dict(rows=2, width=4, steps=4, pieces=3, forward_rows=4)),  # pieces that cover N exactly
    ((37, 10), dict(rows=4, width=16, steps=3, forward_rows=2, forward_steps=3)),  # a forward walking tiles
    ((37, 10), dict(rows=2, width=4, steps=3, pieces=3, forward_rows=4, forward_steps=2)),  # in pieces
    ((37, 10), dict(rows=2, width=16, steps=3, forward_width=4, forward_pieces=3)),  # the forward alone in pieces
    ((37, 10), dict(rows=4, width=4, steps=3, pieces=3, split=True)),  # the split backward: a program a piece
    ((9, 12), dict(rows=2, width=4, steps=4, pieces=3, split=True)),  # its pieces covering N, programs past M
]


@pytest.mark.parametrize("prefetch", [False, True], ids=["load-in-step", "prefetch"])
@pytest.mark.parametrize("shape, tiling", ROW_LAUNCHES,
                         ids=["rows-4", "rows-2-tail", "rows-1", "forward-rows-8", "forward-rows-1", "pieces-3",
                              "pieces-3-exact", "forward-walks-3", "forward-walks-2-pieces", "forward-pieces-3",
                              "split-3", "split-3-exact"])
@pytest.mark.parametrize("center", [True, False], ids=["layer_norm", "rms_norm"])
def test_rows_kernels_match_the_xla_ops_at_every_launch(center, shape, tiling, prefetch):
    """Values and every cotangent (of y and of the statistics) of the rows kernel ops against the
    XLA ops', float64, for launches the dispatch would not pick at these sizes."""
    from jaxrules.ops.normalization import affine_normalize_op, layer_norm_rows_op

    walks = "forward_steps" in tiling  # a walking forward prefetches with the backward
    launch = dispatch.RowsLaunch(**tiling, num_warps=4, interpret=True, prefetch=prefetch,
                                 forward_prefetch=prefetch and walks)
    m, n = shape
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


def test_a_launch_whose_pieces_do_not_cover_the_row_is_refused():
    """A forward layout given half (``forward_width`` without ``forward_pieces``: one piece of 4
    for rows of 10), or a split backward's two pieces of 4, would leave columns of y or dx
    unwritten: refused, naming the kernel."""
    launch = dispatch.RowsLaunch(rows=2, width=16, steps=3, num_warps=4, forward_width=4, interpret=True)
    x, w = jnp.ones((37, 10)), jnp.ones(10)
    with pytest.raises(ValueError, match="forward kernel: a row of 10 columns in 1 pieces of 4"):
        rms_norm_rows_op(x, w, eps=1e-3, launch=launch)
    split = dispatch.RowsLaunch(rows=2, width=4, pieces=2, steps=3, num_warps=4, split=True, forward_width=16,
                                interpret=True)
    with pytest.raises(ValueError, match="backward kernel: a row of 10 columns in 2 pieces of 4"):
        jax.grad(lambda x: rms_norm_rows_op(x, w, eps=1e-3, launch=split)[0].sum())(x)


SPLIT = dispatch.RowsLaunch(rows=2, width=4, steps=2, pieces=3, num_warps=4, split=True, interpret=True)


def test_the_split_backwards_row_sums_are_float32_for_bfloat16_inputs():
    """The row sums XLA hands the split backward's kernel are in the statistics' dtype (float32
    for bfloat16 x and g), one per row: sum g w and sum g w x_hat for layer norm, the latter for
    RMS norm."""
    x, w, stat = jax.ShapeDtypeStruct((7, 10), jnp.bfloat16), jax.ShapeDtypeStruct((10,), jnp.bfloat16), \
        jax.ShapeDtypeStruct((7,), jnp.float32)
    for center, n_sums in ((True, 2), (False, 1)):
        if center:
            fn = lambda x, g, w, s: norm_kernels.local_backward(x, g, w, s, s, s, s, launch=SPLIT)  # noqa: E731
        else:
            fn = lambda x, g, w, s: norm_kernels.local_backward(x, g, w, None, s, None, s, launch=SPLIT)  # noqa: E731
        (call,) = [e for e in jax.make_jaxpr(fn)(x, x, w, stat).eqns if e.primitive.name == "pallas_call"]
        assert [(v.aval.shape, v.aval.dtype) for v in call.invars[-n_sums:]] == [((7,), jnp.float32)] * n_sums


@pytest.mark.parametrize("center", [True, False], ids=["layer_norm", "rms_norm"])
def test_a_split_backward_under_vmap_and_forward_over_reverse(center):
    """Weights batched, so the kernels run under ``jax.vmap`` (the split backward's grid gains a
    third axis after the pieces), and forward-over-reverse through them: against the XLA ops,
    float64."""
    from jaxrules.ops.normalization import affine_normalize_op, layer_norm_rows_op

    x, ct, v = (jnp.asarray(RNG.standard_normal((3, 7, 10)) * 2 + 1) for _ in range(3))
    w, b = jnp.asarray(RNG.standard_normal((3, 10)) + 1), jnp.asarray(RNG.standard_normal((3, 10)))
    if center:
        ours = lambda x, w, b: layer_norm_rows_op(x, w, b, eps=1e-3, launch=SPLIT)[0]  # noqa: E731
        ref = lambda x, w, b: affine_normalize_op(x, w[None], b[None], axes=(1,), eps=1e-3, axis_name=None)[0]  # noqa: E731
    else:
        ours = lambda x, w, b: rms_norm_rows_op(x, w, eps=1e-3, launch=SPLIT)[0]  # noqa: E731
        ref = lambda x, w, b: rms_norm_op(x, w, axes=(1,), eps=1e-3)[0]  # noqa: E731

    def derivatives(f):
        loss = lambda x, w, b: jnp.sum(jnp.sin(jax.vmap(f)(x, w, b)) * ct)  # noqa: E731
        grads = jax.grad(loss, (0, 1, 2))(x, w, b)
        return (*grads, jax.jvp(lambda x: jax.grad(loss)(x, w, b), (x,), (v,))[1])

    for got, want in zip(derivatives(ours), derivatives(ref)):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)


GPU = jax.default_backend() == "gpu"


def _effective(launch):
    """What a rows launch runs: each kernel's tile rows, warps, pieces, steps and prefetch."""
    forward = launch.forward_launch()
    return (forward.rows, forward.num_warps, forward.width, forward.pieces, forward.steps, forward.prefetch,
            launch.rows, launch.num_warps, launch.steps, launch.prefetch, launch.width, launch.pieces, launch.split)


def _matches_the_xla_ops_on_the_gpu(center, launch, m, n, dtype, tolerance):
    """Compiled for the GPU: values and gradients of the rows kernels on ``launch`` against the XLA
    ops on the same inputs, relative to the largest (the kernels sum in another order: 1e-4 in
    float32; two bfloat16 roundings, 2e-2, in bfloat16)."""
    from jaxrules.ops.normalization import affine_normalize_op, layer_norm_rows_op

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


GPU_TOLERANCES = [(jnp.float32, 1e-4), (jnp.bfloat16, 2e-2)]


@pytest.mark.skipif(not GPU, reason="the tuned launches run on the GPU they were measured on")
@pytest.mark.parametrize("dtype, tolerance", GPU_TOLERANCES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("center", [True, False], ids=["layer_norm", "rms_norm"])
def test_tuned_launches_on_the_gpu_match_the_xla_formulas(center, dtype, tolerance):
    """Every tuned launch of this GPU's table that differs from the rule (a forward tile of its
    own, the backward's prefetch, another tile or warps, rows in pieces) at its shape and at a
    ragged neighbour (fewer rows, a width that is not a power of two), compiled
    (``_matches_the_xla_ops_on_the_gpu``)."""
    kind = jax.devices()[0].device_kind
    entries = [e for e in dispatch._table(kind).get("rows_launches", ()) if dispatch.table_kind(kind) == kind]
    if not entries:
        pytest.skip(f"no tuned launches for {kind}")
    checked = 0
    for m0, n0 in sorted({tuple(e["features"]) for e in entries}):
        for m, n in ((m0, n0), (m0 * 3 // 4 + 1, n0 * 3 // 4)):
            launch = dispatch.rows_launch(m, n, dtype=jnp.dtype(dtype), device_kind=kind)
            if _effective(launch) != _effective(dispatch.rows_launch(m, n)):
                _matches_the_xla_ops_on_the_gpu(center, launch, m, n, dtype, tolerance)
                checked += 1
    assert checked >= 8, checked


@pytest.mark.skipif(not GPU, reason="Triton compiles the pieces only on a GPU (interpreted: every_launch above)")
@pytest.mark.parametrize("dtype, tolerance", GPU_TOLERANCES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("center", [True, False], ids=["layer_norm", "rms_norm"])
def test_rows_in_pieces_on_the_gpu_match_the_xla_formulas(center, dtype, tolerance):
    """Rows in pieces (``dispatch.row_pieces``) compiled at awkward widths, one and several rows
    per tile, with the prefetch and without, rows not a multiple of a tile."""
    for m, n, rows in ((301, 12288, 1), (203, 5120, 2), (1001, 768, 8), (77, 3000, 4)):
        width, chunks = dispatch.row_pieces(n)
        for prefetch in (False, True):
            launch = dispatch.RowsLaunch(rows, width, dispatch.backward_steps(m, rows, 64), num_warps=8,
                                         prefetch=prefetch, pieces=chunks, forward_rows=max(1, rows // 2))
            _matches_the_xla_ops_on_the_gpu(center, launch, m, n, dtype, tolerance)


@pytest.mark.skipif(not GPU, reason="Triton compiles it only on a GPU (interpreted: every_launch above)")
@pytest.mark.parametrize("dtype, tolerance", GPU_TOLERANCES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("center", [True, False], ids=["layer_norm", "rms_norm"])
def test_the_split_backward_on_the_gpu_matches_the_xla_formulas(center, dtype, tolerance):
    """The split backward (``RowsLaunch.split``: XLA's row sums, a program per piece) compiled at
    wide and awkward widths, pieces of 1024 to 4096 with the last one partly past N, one and
    several rows per tile, with the prefetch and without, rows not a multiple of a tile."""
    for m, n, rows, width in ((301, 12288, 1, 4096), (203, 16384, 2, 2048), (77, 3000, 4, 1024)):
        for prefetch in (False, True):
            launch = dispatch.RowsLaunch(rows, width, dispatch.backward_steps(m, rows, 64), num_warps=4,
                                         prefetch=prefetch, pieces=-(-n // width), split=True,
                                         forward_width=width, forward_pieces=-(-n // width))
            _matches_the_xla_ops_on_the_gpu(center, launch, m, n, dtype, tolerance)


@pytest.mark.skipif(not GPU, reason="Triton compiles it only on a GPU (interpreted: grouped_kernels_match above)")
@pytest.mark.parametrize("dtype, tolerance", GPU_TOLERANCES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("form", FORMS[1:], ids=["reversed-writes-y", "split-backward"])
def test_the_grouped_forms_on_the_gpu_match_the_xla_formulas(form, dtype, tolerance, monkeypatch):
    """Group and batch norm with the one-kernel forward, the second passes reversed or not, the
    split backward, compiled for the GPU at feature maps that are not a multiple of the tiles,
    against ``impl="xla"``."""
    launch = dispatch.GroupedLaunch(**form)
    _every_grouped_launch(monkeypatch, launch)
    for shape in ((5, 96, 7, 7), (3, 64, 56, 56), (2, 32, 45, 45)):
        keys = jax.random.split(jax.random.PRNGKey(shape[1]), 4)
        x = (jax.random.normal(keys[0], shape) * 3 + 1).astype(dtype)
        g = jax.random.normal(keys[1], shape).astype(dtype)
        w, b = ((jax.random.normal(k, shape[1:2]) + 1).astype(dtype) for k in keys[2:])
        for op in (lambda x, w, b, impl: group_norm(x, 32, w, b, impl=impl),
                   lambda x, w, b, impl: batch_norm(x, None, None, w, b, training=True, impl=impl)[0]):
            results = [jax.jit(lambda g, x, w, b, impl=impl, op=op: (lambda y, pb: (y, *pb(g)))(
                *jax.vjp(lambda x, w, b: op(x, w, b, impl), x, w, b)))(g, x, w, b) for impl in ("pallas", "xla")]
            for got, want in zip(*results):
                got, want = got.astype(jnp.float32), want.astype(jnp.float32)
                assert float(jnp.max(jnp.abs(got - want))) <= tolerance * float(jnp.max(jnp.abs(want))), shape


@pytest.mark.skipif(not GPU, reason="Triton compiles it only on a GPU (interpreted: every_launch above)")
@pytest.mark.parametrize("dtype, tolerance", GPU_TOLERANCES, ids=["float32", "bfloat16"])
@pytest.mark.parametrize("center", [True, False], ids=["layer_norm", "rms_norm"])
def test_a_walking_forward_on_the_gpu_matches_the_xla_formulas(center, dtype, tolerance):
    """A forward whose programs walk several tiles (``forward_steps``), with the next tile's x
    prefetched and without, in one piece and in pieces, rows not a multiple of the tiles walked."""
    for m, n, rows in ((1001, 4096, 1), (203, 5120, 2), (1001, 768, 8)):
        width, chunks = dispatch.row_pieces(n)
        for prefetch in (False, True):
            launch = dispatch.RowsLaunch(rows, width, dispatch.backward_steps(m, rows, 64), num_warps=8, pieces=chunks,
                                         forward_steps=3, forward_prefetch=prefetch)
            _matches_the_xla_ops_on_the_gpu(center, launch, m, n, dtype, tolerance)
