"""The dispatch of the kernel-backed norms (``jaxrules.dispatch``) and the regression guard of
issue 14, on a CPU: the decision is a pure function of (platform, device kind, shape, dtype) read
from the recorded GPU measurements, and the launches it implies — checked on the plan and on the
kernels lowered for CUDA (``jax.export``) — keep every benchmark program parallel: no
one-program backward like the 66850x256 cliff (``gcd(33425, 256) = 1``)."""

import contextlib
import dataclasses
import functools
import json
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _cuda_lowering import for_cuda
from _repo_files import load
from jax import export

from jaxrules import bench, dispatch
from jaxrules.nn import batch_norm, group_norm, layer_norm
from jaxrules.ops.normalization import rms_norm

H100 = dispatch.FALLBACK_KIND
MIN_BACKWARD_PROGRAMS = 128  # about one wave of an H100 (132 SMs); fewer only when there are fewer tiles


KINDS = (H100, "NVIDIA H200")  # every device kind with a table


@pytest.mark.parametrize("kind", KINDS)
def test_measurements_are_recorded_for_every_sweep_case(kind):
    """Each table holds every sweep case; points measured with earlier code are listed as
    ``stale``, with a note that says what changed since."""
    table = json.loads(dispatch.table_path(kind).read_text())
    points = {(p["op"], p["dtype"], p["weight_dtype"], tuple(p["features"])) for p in table["points"]}
    cases = {c.name: (c.op, c.dtype, c.weight_dtype, bench.sweep_features(c)) for c in bench.sweep_cases()}
    assert [name for name, k in cases.items() if k not in points] == []
    assert set(table.get("stale", [])) <= set(cases)
    assert not table.get("stale") or "stale" in table["note"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_plan_at_a_measured_point_is_the_faster_implementation_there(kind):
    """Each recorded point (the sweep on that GPU) decides its own shape: the fastest measured of
    the XLA formulas and the kernels (same dtypes; a kernel wins a tie, Triton's first). The
    Mosaic GPU kernels count where this JAX has their backend (their times are only in the table
    of the kind they were measured on)."""
    kernels = ("pallas", "mosaic") if dispatch.mosaic_backend_missing() is None else ("pallas",)
    chosen = set()
    for p in dispatch.measurements(kind):
        weight = jnp.dtype(p["weight_dtype"])
        if p["op"] in ROW_PLANS:
            plan = ROW_PLANS[p["op"]]("gpu", kind, *p["features"], jnp.dtype(p["dtype"]), weight)
        else:
            plan = dispatch.grouped_plan(p["op"], "gpu", kind, *p["features"], jnp.dtype(p["dtype"]), weight)
        # no table holds device times per step (record_dispatch.py keeps them out, RESULTS.md stop 27)
        assert not any(k.endswith("_step_ms") for k in p), p
        times = {k: p[f"{k}_ms"] for k in (*kernels, "xla") if f"{k}_ms" in p}
        trained = {k: p[f"{k}_train_ms"] for k in times if f"{k}_train_ms" in p}
        if len(trained) > 1 and "xla" in trained:  # measured in a training step too: decided there
            # the data: every kernel the step was not timed for loses there on its gradients alone
            # (they would stand in for its step's time), so no decision rests on them
            assert all(times[k] >= min(trained.values()) for k in times if k not in trained), p
            times = trained
        assert plan.impl == min(times, key=times.get), (p, plan.reason)
        assert kind in plan.reason
        chosen.add(plan.impl)
    assert {"pallas", "xla"} <= chosen


ROW_PLANS = {"layer_norm": dispatch.layer_norm_plan, "rms_norm": dispatch.rms_norm_plan}


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "group_norm"])
@pytest.mark.parametrize("kind", KINDS)
def test_an_unmeasured_kernel_is_not_the_default(op, kind, monkeypatch):
    """Until a GPU sweep records an op's kernels (a new op: rms_norm on the H200 until stop 27),
    its default on that GPU is the XLA formulas at every sweep shape, and the plan says why (here
    the op's points are taken out of the table). Where a kind has the op's points,
    ``test_the_plan_at_a_measured_point_...`` checks them."""
    points = tuple(p for p in dispatch.measurements(kind) if p["op"] != op)
    monkeypatch.setattr(dispatch, "measurements", lambda _: points)
    for case in [c for c in bench.sweep_cases() if c.op == op]:
        plan = bench.sweep_plan(case, "gpu", kind)
        assert plan.impl == "xla" and f"no {op} {case.dtype} measurements" in plan.reason, (case.name, plan)


@pytest.mark.parametrize("platform, kind, dtype, why", [
    ("cpu", "cpu", jnp.float32, "platform cpu"),
    ("gpu", H100, jnp.float64, "dtype float64"),
])
def test_no_kernel_off_the_gpu_or_for_float64(platform, kind, dtype, why):
    plan = dispatch.layer_norm_plan(platform, kind, 66850, 256, jnp.dtype(dtype))
    assert plan.impl == "xla" and why in plan.reason


def test_outside_the_measured_shapes_the_xla_formulas_run():
    plan = dispatch.grouped_plan("batch_norm", "gpu", H100, 64, 256, 1, jnp.dtype(jnp.bfloat16))  # (N, C) input
    assert plan.impl == "xla" and "outside the measured range" in plan.reason
    assert dispatch.layer_norm_plan("gpu", H100, 1000, 65536, jnp.dtype(jnp.float32)).impl == "xla"


def test_an_unmeasured_gpu_kind_uses_the_h100_measurements():
    assert dispatch.table_kind("NVIDIA B200") == H100 and dispatch.table_kind("NVIDIA H200") == "NVIDIA H200"
    kinds = ("NVIDIA B200", H100)
    b200, h100 = (dispatch.layer_norm_plan("gpu", kind, 66850, 256, jnp.dtype(jnp.bfloat16)) for kind in kinds)
    assert (b200.impl, b200.launch) == (h100.impl, h100.launch) and H100 in b200.reason
    # where the H100 runs its Mosaic GPU kernels (Hopper code), another kind takes the next fastest
    b200, h100 = (dispatch.layer_norm_plan("gpu", kind, 52427, 5120, jnp.dtype(jnp.bfloat16)) for kind in kinds)
    assert (h100.impl, b200.impl) == ("mosaic", "pallas"), (h100.reason, b200.reason)


@pytest.mark.parametrize("m, n", [(66850, 256), (66850, 768), (1000, 5120), (3, 12288), (65535, 4096), (16384, 4096),
                                  (16383, 16384), (1, 64), (4097, 1536)])
def test_row_launches_keep_the_device_busy(m, n):
    """Budgets of every layer-norm launch: a tile of at most max(4096, width) elements covering
    whole rows, every row in exactly one tile, and a backward of at least
    ``min(tiles, MIN_BACKWARD_PROGRAMS)`` programs with at most one step of idle tail."""
    launch = dispatch.rows_launch(m, n)
    assert (launch.width, launch.pieces) == (dispatch._next_power_of_2(n), 1)  # the rule: one padded piece
    assert launch.rows * launch.width <= max(4096, launch.width)
    tiles = launch.forward_programs(m)
    assert tiles == math.ceil(m / launch.rows)
    programs = launch.backward_programs(m)
    assert programs >= min(tiles, MIN_BACKWARD_PROGRAMS)
    assert (programs - 1) * launch.steps < tiles <= programs * launch.steps


def _lowered_kernels(fn, *args):
    """``[(name, grid)]`` of the Triton custom calls in ``jit(vjp)`` of ``fn`` lowered for CUDA."""
    step = jax.jit(lambda g, *a: jax.vjp(fn, *a)[1](g))
    module = export.export(step, platforms=["cuda"],
                           disabled_checks=[export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])
    with for_cuda():
        text = module(args[0], *args).mlir_module()
    calls = re.findall(r'grid_x = (\d+) : i32, grid_y = (\d+) : i32.*?name = "(\w+)"', text)
    return [(name, int(x) * int(y)) for x, y, name in calls]


# The benchmark programs of issue 14: the bench's cases, the ragged block's layer norm (66850 tokens
# of 256), and sweep shapes of every kind.
GUARDED = [
    bench.SweepCase("layer_norm", (66850, 256), "bfloat16", "bfloat16"),  # the ragged block
    bench.SweepCase("layer_norm", (16384, 4096), "float32", "float32"),  # bench default case
    bench.SweepCase("layer_norm", (16384, 4096), "bfloat16", "bfloat16"),
    bench.SweepCase("layer_norm", (66850, 768), "float32", "float32"),
    bench.SweepCase("layer_norm", (1000, 5120), "bfloat16", "float32"),
    bench.SweepCase("group_norm", (64, 256, 56, 56), "float32", "float32"),  # bench default case
    bench.SweepCase("batch_norm", (64, 256, 56, 56), "float32", "float32"),
    bench.SweepCase("group_norm", (128, 128, 56, 56), "bfloat16", "bfloat16"),
    bench.SweepCase("rms_norm", (66850, 256), "bfloat16", "bfloat16"),  # the cliff's shape
    bench.SweepCase("rms_norm", (16384, 4096), "float32", "float32"),
    bench.SweepCase("rms_norm", (1000, 5120), "bfloat16", "float32"),
    bench.SweepCase("rms_norm", (3, 12288), "float32", "float32"),
]


@pytest.mark.parametrize("case", GUARDED, ids=lambda c: c.name)
def test_guarded_programs_lower_to_the_planned_kernels(case):
    """The kernel path of each guarded program (the default on an H100 where the dispatch picks
    it) lowers for CUDA to exactly the planned custom calls with the planned grids (two: forward
    or statistics, and backward), each within the budgets above."""
    x = jax.ShapeDtypeStruct(case.shape, case.dtype)
    v = jax.ShapeDtypeStruct((case.channels,), case.weight_dtype)
    kernels = dict(_lowered_kernels(_impl_fn(case, "pallas"), x, v, v))
    if case.op in bench.ROW_OPS:
        m = math.prod(case.shape[:-1])
        launch = dispatch.rows_launch(m, case.shape[-1])
        forward, backward = f"{case.op}_fwd", f"{case.op}_bwd"
        assert kernels == {forward: launch.forward_programs(m), backward: launch.backward_programs(m)}
        assert kernels[backward] >= min(kernels[forward], MIN_BACKWARD_PROGRAMS)
    else:
        layout = "batch" if case.op == "batch_norm" else "group"
        assert set(kernels) == {f"{layout}_norm_stats", f"{layout}_norm_bwd"}
        assert min(kernels.values()) >= MIN_BACKWARD_PROGRAMS


@pytest.mark.parametrize("case", [c for c in GUARDED if c.op not in bench.ROW_OPS], ids=lambda c: c.name)
def test_guarded_grouped_programs_on_the_h200s_launches(case, monkeypatch):
    """With the H200's grouped launches (its table's ``grouped_launches``): group norm lowers to its
    one forward kernel and the backward, one program per group; batch norm to the statistics,
    then the row sums' and the dx kernels over at least ``MIN_BACKWARD_PROGRAMS`` programs, never
    back to one program per channel (64 at a ResNet stem)."""
    launch = dispatch.grouped_launch(case.op, "NVIDIA H200")
    monkeypatch.setattr(dispatch, "GroupedLaunch", lambda interpret=False, **_: launch)
    x = jax.ShapeDtypeStruct(case.shape, case.dtype)
    v = jax.ShapeDtypeStruct((case.channels,), case.weight_dtype)
    kernels = dict(_lowered_kernels(_impl_fn(case, "pallas"), x, v, v))
    n, c = case.shape[:2]
    if case.op == "group_norm":
        assert kernels == {"group_norm_fwd": n * 32, "group_norm_bwd": n * 32}
    else:
        assert set(kernels) == {"batch_norm_stats", "batch_norm_bwd_sums", "batch_norm_bwd_dx"}
        assert kernels["batch_norm_bwd_sums"] == kernels["batch_norm_bwd_dx"] >= MIN_BACKWARD_PROGRAMS
        assert kernels["batch_norm_bwd_dx"] % c == 0 and kernels["batch_norm_bwd_dx"] > c


@pytest.mark.parametrize("case", [c for c in GUARDED if c.op in bench.ROW_OPS], ids=lambda c: c.name)
def test_guarded_programs_lower_to_two_mosaic_kernels(case):
    """``impl="mosaic"`` (issue 21) lowers for CUDA to the two Mosaic GPU kernels, forward and
    backward, and no Triton kernel."""
    x = jax.ShapeDtypeStruct(case.shape, case.dtype)
    v = jax.ShapeDtypeStruct((case.channels,), case.weight_dtype)
    step = jax.jit(lambda g, *a: jax.vjp(_impl_fn(case, "mosaic"), *a)[1](g))
    text = export.export(step, platforms=["cuda"])(x, x, v, v).mlir_module()
    assert text.count("stablehlo.custom_call @mosaic_gpu") == 2 and "triton" not in text


ROW_POINT = {"op": "layer_norm", "dtype": "float32", "weight_dtype": "float32", "features": [16384, 4096],
             "xla_ms": 0.48, "jax_ms": 0.48}


@pytest.mark.parametrize("times, n, triton_missing, kind, want", [
    ({"pallas_ms": 0.50, "mosaic_ms": 0.45}, 4096, False, KINDS[0], "mosaic"),  # the fastest measured kernel
    ({"pallas_ms": 0.40, "mosaic_ms": 0.45}, 4096, False, KINDS[0], "pallas"),
    ({"pallas_ms": 0.50, "mosaic_ms": 0.45}, 4000, False, KINDS[0], "xla"),  # Mosaic does not take 4000
    ({"pallas_ms": 0.40}, 4096, False, KINDS[0], "pallas"),  # no Mosaic measurement, no Mosaic kernel
    ({"pallas_ms": 0.40, "mosaic_ms": 0.45}, 4096, True, KINDS[0], "mosaic"),  # without Triton, Mosaic if faster
    ({"pallas_ms": 0.40, "mosaic_ms": 0.55}, 4096, True, KINDS[0], "xla"),
    # a kind without its own table (an A100 uses the H100's): never the Hopper kernels
    ({"pallas_ms": 0.50, "mosaic_ms": 0.45}, 4096, False, "NVIDIA A100-SXM4-80GB", "xla"),
    # device times per step, were a point to hold them, do not decide (RESULTS.md stops 27 and 28)
    ({"pallas_ms": 0.040, "pallas_step_ms": 0.012, "xla_step_ms": 0.007}, 4096, False, KINDS[0], "pallas"),
])
def test_the_fastest_measured_implementation_runs_mosaic_included(times, n, triton_missing, kind, want,
                                                                   monkeypatch):
    monkeypatch.setattr(dispatch, "measurements", lambda kind: ({**ROW_POINT, **times},))
    monkeypatch.setattr(dispatch, "triton_backend_missing", lambda: "no Triton here" if triton_missing else None)
    monkeypatch.setattr(dispatch, "mosaic_backend_missing", lambda: None)
    plan = dispatch.layer_norm_plan("gpu", kind, 16384, n, jnp.float32)
    assert plan.impl == want, plan.reason
    from jaxrules import mosaic_kernels

    kinds = {"pallas": dispatch.RowsLaunch, "mosaic": mosaic_kernels.MosaicRowsLaunch, "xla": type(None)}
    assert isinstance(plan.launch, kinds[want])
    assert ("no Triton here" in plan.reason) == triton_missing


def _impl_fn(case, impl):
    if case.op == "layer_norm":
        return lambda x, w, b: layer_norm(x, x.shape[-1], w, b, impl=impl)
    if case.op == "rms_norm":
        return lambda x, w, b: rms_norm(x, x.shape[-1], w, impl=impl)
    if case.op == "batch_norm":
        return lambda x, w, b: batch_norm(x, None, None, w, b, training=True, impl=impl)[0]
    return lambda x, w, b: group_norm(x, 32, w, b, impl=impl)


@pytest.mark.parametrize("m, n, tile_elements, programs", [
    (37, 96, 256, 3),  # several tiles per backward program, a partial last tile, width padded to 128
    (130, 33, 128, 256),  # one tile per program, odd width
    (5, 7, 4096, 256),  # fewer rows than a tile
])
@pytest.mark.parametrize("op", bench.ROW_OPS)
def test_row_kernels_match_the_jnp_formulas_at_any_shape(op, m, n, tile_elements, programs, monkeypatch):
    """The masked tiles in interpret mode against the XLA formulas (values, dx, dw, db) at
    float64 precision, with launch parameters forcing multi-step backward programs."""
    monkeypatch.setattr(dispatch, "TILE_ELEMENTS", tile_elements)
    monkeypatch.setattr(dispatch, "BACKWARD_PROGRAMS", programs)
    rng = np.random.default_rng(3)
    x, ct = (jnp.asarray(rng.standard_normal((m, n)) * 3 + 2) for _ in range(2))
    w, b = jnp.asarray(rng.standard_normal(n) + 1), jnp.asarray(rng.standard_normal(n))
    results = []
    for impl in ("xla", "pallas_interpret"):
        case = bench.SweepCase(op, (m, n), "float64", "float64")
        y, pullback = jax.vjp(_impl_fn(case, impl), x, w, b)
        results.append((y, *pullback(ct)))
    for got, want in zip(results[1], results[0]):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_record_dispatch_merges_by_key_and_clears_stale_points(tmp_path, monkeypatch):
    """benchmarks/record_dispatch.py: a measured point replaces the table's point of the same
    (op, dtypes, features) and leaves the stale list; other points and stale names stay."""
    module = load("benchmarks/record_dispatch.py")
    monkeypatch.setattr(dispatch, "DATA", tmp_path)
    cases = bench.sweep_cases()[:2]
    point = lambda c, ms: {"op": c.op, "dtype": c.dtype, "weight_dtype": c.weight_dtype,  # noqa: E731
                           "features": list(bench.sweep_features(c)), "pallas_ms": ms, "xla_ms": 1.0, "jax_ms": 1.0}
    dispatch.table_path("GPU X").write_text(json.dumps({
        "note": "stale: old formulas", "stale": [c.name for c in cases], "points": [point(c, 5.0) for c in cases]}))
    record = {"device_kind": "GPU X", "jax": "0.11.2", "points": [point(cases[0], 0.5)]}
    _, table = module.merge([record], "cmd")
    by_name = {c.name: p for c in cases for p in table["points"] if p["features"] == list(bench.sweep_features(c))
               and p["dtype"] == c.dtype and p["op"] == c.op}
    assert len(table["points"]) == 2
    assert by_name[cases[0].name]["pallas_ms"] == 0.5 and by_name[cases[1].name]["pallas_ms"] == 5.0
    assert table["stale"] == [cases[1].name] and table["command"] == "cmd"
    # a verification record (no kernel times) updates the XLA and plain-JAX times only
    row = {**point(cases[1], 0.0), "xla_ms": 0.25, "jax_ms": 0.75, "default_ms": 9.0}
    del row["pallas_ms"]
    dispatch.table_path("GPU X").write_text(json.dumps(table))
    _, updated = module.merge([{"device_kind": "GPU X", "jax": "0.11.2", "points": [], "rows": [row]}], "cmd2")
    changed = [p for p in updated["points"] if p["features"] == row["features"] and p["dtype"] == row["dtype"]
               and p["op"] == row["op"]]
    assert [(p["pallas_ms"], p["xla_ms"], p["jax_ms"]) for p in changed] == [(5.0, 0.25, 0.75)]
    assert "stale" not in updated  # its last stale point's XLA times are fresh now
    dispatch.table_path("GPU X").write_text(json.dumps(updated))  # where the plan was the kernel: its time too
    _, kernel = module.merge([{"device_kind": "GPU X", "jax": "0.11.2", "points": [],
                               "rows": [{**row, "plan": "pallas"}]}], "cmd3")
    assert [p["pallas_ms"] for p in kernel["points"] if p["features"] == row["features"]
            and p["dtype"] == row["dtype"] and p["op"] == row["op"]] == [9.0]
    # a first rms_norm sweep: its points join the table; the cases it did not measure are named
    rms = [c for c in bench.sweep_cases() if c.op == "rms_norm"]
    assert set(module.missing(kernel)["rms_norm"]) == {c.name for c in rms}
    _, measured = module.merge([{"device_kind": "GPU X", "jax": "0.11.2", "points": [point(rms[0], 0.5)]}], "cmd4")
    assert point(rms[0], 0.5) in measured["points"] and rms[0].name not in module.missing(measured)["rms_norm"]


def test_a_training_steps_times_decide_where_recorded(tmp_path, monkeypatch):
    """``record_dispatch.py`` adds a training step's record (``bench --with-value``) as
    ``<impl>_train_ms`` to the points the table has, keeping their gradients-only times, and
    refuses a with-value record whose cotangent was given; the dispatch then decides such a point,
    and shapes nearest to it, on the training step's times (here the kernel, where the gradients
    alone favour XLA), other points on the gradients-only ones."""
    module = load("benchmarks/record_dispatch.py")
    monkeypatch.setattr(dispatch, "DATA", tmp_path)
    for cached in (dispatch._table, dispatch.measurements):
        cached.cache_clear()
    monkeypatch.setattr(dispatch, "triton_backend_missing", lambda: None)
    point = lambda m, n, **ms: {"op": "layer_norm", "dtype": "float32", "weight_dtype": "float32",  # noqa: E731
                                "features": [m, n], **ms}
    dispatch.table_path("GPU X").write_text(json.dumps({"points": [
        point(65536, 4096, pallas_ms=1.35, xla_ms=1.30, jax_ms=2.0), point(1024, 4096, pallas_ms=0.5, xla_ms=0.4,
                                                                           jax_ms=0.6)]}))
    meta = {"with_value": True, "cotangent_after_value": True}
    step = {"device_kind": "GPU X", "jax": "0.11.2", "meta": meta,
            "points": [point(65536, 4096, pallas_ms=1.48, xla_ms=2.06, jax_ms=3.0),
                       point(8, 8, pallas_ms=0.1, xla_ms=0.2, jax_ms=0.3)]}  # not in the table: left out
    with pytest.raises(ValueError, match="before stop 31"):
        module.merge([{**step, "meta": {"with_value": True}}], "cmd")
    _, table = module.merge([step], "cmd")
    assert table["points"] == [point(1024, 4096, pallas_ms=0.5, xla_ms=0.4, jax_ms=0.6),
                               point(65536, 4096, pallas_ms=1.35, xla_ms=1.30, jax_ms=2.0, pallas_train_ms=1.48,
                                     xla_train_ms=2.06, jax_train_ms=3.0)]
    dispatch.table_path("GPU X").write_text(json.dumps(table))
    for cached in (dispatch._table, dispatch.measurements):
        cached.cache_clear()
    plan = lambda m: dispatch.layer_norm_plan("gpu", "GPU X", m, 4096, jnp.dtype("float32"))  # noqa: E731
    assert plan(65536).impl == plan(40000).impl == "pallas" and "training step" in plan(65536).reason
    assert plan(1024).impl == "xla" and "training step" not in plan(1024).reason
    for cached in (dispatch._table, dispatch.measurements):
        cached.cache_clear()


@pytest.mark.parametrize("mosaic_ms, want", [(1.40, "pallas"), (1.30, "mosaic")])
def test_a_kernel_without_a_training_step_time_counts_with_its_gradients_time(monkeypatch, mosaic_ms, want):
    """A training-step decision (here the Triton kernel's 1.35 ms against XLA's 2.06) counts a
    kernel the step was not timed for with its gradients-only time, and says so: never the XLA
    formulas, which win on the gradients alone."""
    point = {"op": "layer_norm", "dtype": "float32", "weight_dtype": "float32", "features": [65536, 4096],
             "pallas_ms": 1.49, "mosaic_ms": mosaic_ms, "xla_ms": 1.29, "pallas_train_ms": 1.35, "xla_train_ms": 2.06}
    monkeypatch.setattr(dispatch, "measurements", lambda kind: (point,))
    impl, reason = dispatch._decide("layer_norm", "GPU X", "float32", None, (65536, 4096), ("pallas", "mosaic"))
    assert impl == want and "the gradients) (Mosaic GPU kernel: gradients only)" in reason, reason


def test_record_dispatch_leaves_device_times_out(tmp_path, monkeypatch):
    """Device times per step never reach a table (the dispatch decides per call, RESULTS.md stops 27
    and 28), whether a record's points or its rows bring them."""
    module = load("benchmarks/record_dispatch.py")
    monkeypatch.setattr(dispatch, "DATA", tmp_path)
    case = bench.sweep_cases()[0]
    point = {"op": case.op, "dtype": case.dtype, "weight_dtype": case.weight_dtype,
             "features": list(bench.sweep_features(case)), "pallas_ms": 0.05, "xla_ms": 0.06, "jax_ms": 0.06,
             "pallas_step_ms": 0.012, "xla_step_ms": 0.007}
    record = {"device_kind": "GPU X", "jax": "0.11.2", "points": [point]}
    (plain,) = module.merge([record], "cmd")[1]["points"]
    assert plain == {k: v for k, v in point.items() if not k.endswith("_step_ms")}
    dispatch.table_path("GPU X").write_text(json.dumps({"points": [point]}))  # an older table that has them
    row = {**point, "xla_ms": 0.04, "default_ms": 0.04, "plan": "xla"}
    del row["pallas_ms"]
    (updated,) = module.merge([{"device_kind": "GPU X", "jax": "0.11.2", "points": [], "rows": [row]}], "cmd")[1][
        "points"]
    assert updated["xla_ms"] == 0.04 and not any(k.endswith("_step_ms") for k in updated)


def test_an_auto_mesh_leaves_the_choice_to_the_shard_where_the_splits_disagree(monkeypatch):
    """``dispatch.shard_plan``: where every shard's plan is the whole array's, that plan; else a
    ``ShardPlan``, which ``shard_launch`` decides on a shard's features (the kernel's launch for
    that shape, None for the XLA formulas). A plan here: the Triton kernel up to 4096 rows (and
    for batch norm up to 16 samples). ``mesh_splits``: the shard counts of mesh axes 4 and 2."""
    def plan(platform, kind, m, n, dtype, weight_dtype=None):
        launch = dispatch.rows_launch(m, n) if m <= 4096 else None
        return dispatch.Plan("xla" if launch is None else "pallas", launch, f"{m} rows")

    def grouped(op, platform, kind, groups, rows, length, dtype, weight_dtype=None):
        return dispatch.Plan("pallas", dispatch.GroupedLaunch(), "") if rows <= 16 else dispatch.Plan("xla", None, "")

    monkeypatch.setattr(dispatch, "layer_norm_plan", plan)
    monkeypatch.setattr(dispatch, "grouped_plan", grouped)
    assert dispatch.mesh_splits((4, 2)) == {2, 4, 8}
    bf16 = jnp.bfloat16

    def rows(m):
        return dispatch.shard_plan("layer_norm", "gpu", H100, (m, 512), bf16, bf16, [(m // 4, 512), (m // 8, 512)])

    assert rows(65536).impl == "xla"  # 16384 and 8192 a shard: XLA everywhere
    assert rows(4096).launch == dispatch.rows_launch(4096, 512)  # a kernel everywhere: the whole array's launch
    per_shard = rows(16384)  # 4096 rows on 4 devices
    assert per_shard.impl == "per shard" and "pallas/xla" in per_shard.reason
    assert per_shard.launch == dispatch.ShardPlan("layer_norm", "gpu", H100, "bfloat16")
    assert dispatch.shard_launch(per_shard.launch, (4096, 512), bf16) == dispatch.rows_launch(4096, 512)
    assert dispatch.shard_launch(per_shard.launch, (8192, 512), bf16) is None
    assert dispatch.relaunch(per_shard.launch, 3 * 16384, 512, bf16) == per_shard.launch  # vmap's fold: still per shard
    batch = dispatch.shard_plan("batch_norm", "gpu", H100, (64, 32, 49), bf16, bf16, [(64, 16, 49)])
    assert batch.launch == dispatch.ShardPlan("batch_norm", "gpu", H100, "bfloat16")
    assert dispatch.shard_launch(batch.launch, (64, 16, 49), bf16) == dispatch.GroupedLaunch()
    assert dispatch.shard_launch(batch.launch, (64, 32, 49), bf16) is None
    assert dispatch.shard_launch(dispatch.GroupedLaunch(), (64, 32, 49), bf16) == dispatch.GroupedLaunch()


MAX_TILE_ELEMENTS = 32768  # benchmarks/layer_norm_tuning.py's largest tile: beyond it registers spill
assert dispatch.MAX_TILE_ELEMENTS == MAX_TILE_ELEMENTS


def _tuned_shapes(kind):
    """The shapes of ``kind``'s tuned launches and their neighbours: rows within a factor of two,
    widths padded to the same power of two."""
    for entry in dispatch._table(kind).get("rows_launches", ()):
        m, n = entry["features"]
        width = dispatch._next_power_of_2(n)
        for dm, n2 in ((1, n), (0.5, n), (2, n), (0.6, n), (1, width // 2 + 1), (1.7, width)):
            yield entry["dtype"], max(1, round(m * dm)), min(n2, dispatch.MAX_WIDTH)


def test_tuned_row_launches_keep_the_device_busy():
    """The H200's measured launches (``dispatch.tuned_rows_launch``) at and around every tuned
    shape keep the budgets: both kernels' tiles at most ``MAX_TILE_ELEMENTS``, every row in one
    tile of each, a backward of at least ``min(tiles, MIN_BACKWARD_PROGRAMS)`` programs with at
    most one step of idle tail."""
    shapes = list(_tuned_shapes("NVIDIA H200"))
    assert len(shapes) >= 100
    tuned = 0
    for dtype, m, n in shapes:
        launch = dispatch.rows_launch(m, n, dtype=jnp.dtype(dtype), device_kind="NVIDIA H200")
        tuned += launch.device_kind == "NVIDIA H200" and launch == dispatch.tuned_rows_launch(
            "NVIDIA H200", m, n, jnp.dtype(dtype))
        forward = launch.forward_launch()
        for tile in (launch, forward):
            assert tile.span >= n > tile.span - tile.width and tile.width & (tile.width - 1) == 0
            assert tile.rows * tile.held_columns <= max(MAX_TILE_ELEMENTS, tile.held_columns)
            assert tile.rows <= dispatch._next_power_of_2(m)
        assert launch.forward_programs(m) == math.ceil(m / forward.rows)
        tiles, programs = math.ceil(m / launch.rows), launch.backward_programs(m)
        assert math.prod(launch.backward_grid(m)) >= min(tiles, MIN_BACKWARD_PROGRAMS)  # split: times the pieces
        assert (programs - 1) * launch.steps < tiles <= programs * launch.steps
    assert tuned == len(shapes)  # each is near a tuned shape: its tuned launch, not the rule


def test_tuned_row_launches_only_where_measured():
    """A tuned launch stands in only on its own device kind, its dtype's kind (float16 follows
    bfloat16), within a factor of two of a tuned shape; elsewhere the rule (``rows_launch``)."""
    bf16, f16, f32 = (jnp.dtype(d) for d in ("bfloat16", "float16", "float32"))
    h200 = functools.partial(dispatch.rows_launch, device_kind="NVIDIA H200")
    assert h200(52427, 5120, dtype=bf16).device_kind == "NVIDIA H200"
    assert h200(52427, 5120, dtype=f16) == h200(52427, 5120, dtype=bf16)
    assert h200(52427, 5120, dtype=f32) != h200(52427, 5120, dtype=bf16)
    for m, n, dtype in ((3, 5120, bf16), (52427, 5120, None), (40, 64, bf16)):  # far from a tuned shape, no dtype
        assert dispatch.tuned_rows_launch("NVIDIA H200", m, n, dtype) is None
        # the rule, marked with the kind so that a relaunch (a shard, vmap's fold) can take a tuned one
        assert h200(m, n, dtype=dtype) == dataclasses.replace(dispatch.rows_launch(m, n), device_kind="NVIDIA H200")
    for launch in (dispatch.rows_launch(52427, 5120, dtype=bf16, device_kind=H100),
                   dispatch.rows_launch(52427, 5120, dtype=bf16, device_kind="NVIDIA A100-SXM4-80GB"),
                   h200(52427, 5120, dtype=bf16, interpret=True)):
        assert launch == dispatch.rows_launch(52427, 5120, interpret=launch.interpret)  # the rule, unmarked
    # the plan carries the kind's launch, and a relaunch (a shard, vmap's folded rows) keeps to it
    plan = dispatch.layer_norm_plan("gpu", "NVIDIA H200", 52427, 5120, bf16)
    assert plan.impl == "pallas" and plan.launch == h200(52427, 5120, dtype=bf16)
    folded = dispatch.relaunch(h200(26214, 5120, dtype=bf16), 52427, 5120, bf16)
    assert folded == h200(52427, 5120, dtype=bf16)
    # a relaunch (vmap's fold) or a shard from a shape the rule serves to one a tuned launch serves: the tuned one
    assert dispatch.relaunch(h200(3, 5120, dtype=bf16), 52427, 5120, bf16) == h200(52427, 5120, dtype=bf16)
    whole = dispatch.layer_norm_plan("gpu", "NVIDIA H200", 24000, 1024, bf16)  # a kernel on the rule's launch
    assert whole.impl == "pallas"
    assert whole.launch == dataclasses.replace(dispatch.rows_launch(24000, 1024), device_kind="NVIDIA H200")
    assert dispatch.shard_launch(whole.launch, (12000, 1024), bf16) == h200(12000, 1024, dtype=bf16)
    assert h200(12000, 1024, dtype=bf16) == dispatch.tuned_rows_launch("NVIDIA H200", 12000, 1024, bf16)
    # pieces only where they pad less than one piece: a power-of-two width near an awkward tuned one
    # (65536x8192 near 52427x5120's 5 of 1024, 32767x16384 near 21844x12288's 3 of 4096) keeps one;
    # a split backward keeps its measured pieces (21844x12288's 2048 wide)
    for m, n in ((65536, 8192), (32767, 16384)):
        for launch in (h200(m, n, dtype=bf16), h200(m, n, dtype=bf16).forward_launch()):
            assert (launch.width, launch.pieces) == ((2048, 8) if launch.split else (n, 1)), (m, n, launch)
    assert h200(32767, 16384, dtype=bf16).split
    # only at the tuned shapes' padded width: 10240 wide rows (16384) never take 5120's (8192) prefetch,
    # whose registers spill at 16384 (9.4 ms for 1.1 at 16383x16384 bfloat16, RESULTS.md stop 30); they
    # take 12288's launch (the forward's rows in 3 or 4 pieces of 4096, the backward split in pieces of
    # 2048) or the rule's
    for m, n in ((65535, 10240), (52427, 9000), (32767, 12288)):
        launch = h200(m, n, dtype=bf16)
        forward = launch.forward_launch()
        assert forward.span >= n and forward.width in (4096, 16384) and not launch.prefetch, (m, n, launch)
        assert launch.span >= n and (launch.width, launch.split) in ((2048, True), (16384, False)), (m, n, launch)


@pytest.mark.parametrize("walking", [False, True], ids=["tuned", "forward-walking-3-tiles"])
def test_a_tuned_launch_lowers_for_cuda_with_its_own_grids(walking):
    """A launch with a forward of its own (rows in 5 pieces of 1024) and the backward's prefetch
    (the H200's at 52427x5120 bfloat16), and the same with a forward walking 3 tiles per program,
    lowers for CUDA to the two kernels on the grids it plans."""
    from jaxrules.ops.normalization import layer_norm_rows_op

    m, n = 52427, 5120
    launch = dispatch.rows_launch(m, n, dtype=jnp.dtype(jnp.bfloat16), device_kind="NVIDIA H200")
    assert launch.prefetch and launch.forward_launch().pieces == 5 and launch.pieces == 1
    if walking:
        launch = dataclasses.replace(launch, forward_steps=3, forward_prefetch=True)
        assert launch.forward_programs(m) == math.ceil(m / launch.forward_launch().rows / 3)
    x, v = jax.ShapeDtypeStruct((m, n), jnp.bfloat16), jax.ShapeDtypeStruct((n,), jnp.float32)
    fn = lambda x, w, b: layer_norm_rows_op(x, w, b, eps=1e-5, launch=launch)[0]  # noqa: E731
    kernels = dict(_lowered_kernels(fn, x, v, v))
    assert kernels == {"layer_norm_fwd": launch.forward_programs(m), "layer_norm_bwd": launch.backward_programs(m)}


@pytest.mark.parametrize("n, pieces", [(4096, (4096, 1)), (1000, (1024, 1)), (12288, (4096, 3)), (5120, (1024, 5)),
                                       (768, (256, 3)), (1536, (512, 3)), (3000, (1024, 3)), (100, (128, 1)),
                                       (9000, (2048, 5)), (16383, (16384, 1))])
# 9000: 9 of 1024 are too many pieces, 3 of 4096 pad more; 16383: 8 of 2048 pad as much as one piece
def test_row_pieces_pad_the_least(n, pieces):
    assert dispatch.row_pieces(n) == pieces


def _tuning_record(kernel, ms, launch, m, n):
    """A record of ``benchmarks/layer_norm_tuning.py``: ``kernel`` on ``launch`` at (m, n) bfloat16."""
    return {"op": "layer_norm", "m": m, "n": n, "dtype": "bfloat16", "kernel": kernel, "ms": ms,
            **{k: v for k, v in dataclasses.asdict(launch).items() if k != "interpret"}, "device_kind": "GPU X"}


@contextlib.contextmanager
def _table_of(monkeypatch, tmp_path, kind, table):
    """Within the block, ``kind``'s dispatch table is ``table`` (in ``tmp_path``), read afresh."""
    monkeypatch.setattr(dispatch, "DATA", tmp_path)
    dispatch.table_path(kind).write_text(json.dumps(table))
    dispatch._table.cache_clear()
    try:
        yield
    finally:
        dispatch._table.cache_clear()


def test_record_dispatch_takes_a_tuned_launch_only_past_the_margin():
    """benchmarks/record_dispatch.py --launches: per shape, a kernel's fastest launch when it beats
    the rule's by more than ``LAUNCH_MARGIN``, else the rule's."""
    module = load("benchmarks/record_dispatch.py")
    m, n = 65535, 4096
    rule = dispatch.rows_launch(m, n)

    def timed(kernel, ms, **fields):
        return _tuning_record(kernel, ms, dataclasses.replace(rule, **fields), m, n)

    records = [timed("forward", 1.0), timed("forward", 0.98, num_warps=4), timed("backward", 1.0),
               timed("backward", 0.9, rows=2, steps=rule.steps * 2, prefetch=True)]
    (entry,) = module.launches(records)
    assert entry["forward"]["num_warps"] == rule.num_warps and entry["forward"]["ms"] == 1.0  # 2%: noise
    assert entry["backward"] == {"tile_elements": 2 * rule.width, "num_warps": rule.num_warps, "rule_ms": 1.0,
                                 "ms": 0.9, "programs": math.ceil(math.ceil(m / 2) / (2 * rule.steps)),
                                 "prefetch": True}


def test_rows_in_pieces_are_recorded_and_launched_per_kernel(tmp_path, monkeypatch):
    """``record_dispatch.py --launches`` takes each kernel's fastest launch, rows in one padded
    piece or in pieces (``dispatch.row_pieces``), past ``LAUNCH_MARGIN``; ``tuned_rows_launch``
    then launches that kernel on pieces of that width: at the tuned shape with the tiles measured,
    at a neighbour with the pieces its width needs."""
    module = load("benchmarks/record_dispatch.py")
    m, n = 21844, 12288
    rule = dispatch.rows_launch(m, n)
    pieces = dataclasses.replace(rule, width=4096, pieces=3, rows=2, steps=dispatch.backward_steps(m, 2, 256))

    timed = functools.partial(_tuning_record, m=m, n=n)
    padded = [timed("forward", 1.0, rule), timed("backward", 2.0, rule)]
    (entry,) = module.launches(padded + [timed("forward", 0.99, pieces), timed("backward", 1.99, pieces)])
    assert "piece_width" not in entry["forward"] and entry["forward"]["ms"] == 1.0  # 1%: noise
    (entry,) = module.launches(padded + [timed("forward", 0.8, pieces), timed("backward", 2.05, pieces)])
    assert entry["forward"] == {"tile_elements": 2 * 12288, "num_warps": rule.num_warps, "rule_ms": 1.0, "ms": 0.8,
                                "piece_width": 4096}
    assert "piece_width" not in entry["backward"] and entry["backward"]["ms"] == 2.0
    with _table_of(monkeypatch, tmp_path, "GPU X", {"rows_launches": [entry]}):
        bf16 = jnp.dtype("bfloat16")
        launch = dispatch.tuned_rows_launch("GPU X", m, n, bf16)
        assert launch == dataclasses.replace(rule, forward_rows=2, forward_width=4096, forward_pieces=3,
                                             forward_warps=rule.num_warps, device_kind="GPU X")
        forward = launch.forward_launch()
        assert (forward.rows, forward.width, forward.pieces, forward.span) == (2, 4096, 3, 12288)
        near = dispatch.tuned_rows_launch("GPU X", m, 9000, bf16).forward_launch()  # 3 of 4096 cover 9000 too
        assert (near.width, near.pieces, near.rows) == (4096, 3, 2)


def test_a_split_backward_is_recorded_and_launched(tmp_path, monkeypatch):
    """A split backward (``RowsLaunch.split``) measured fastest by more than ``LAUNCH_MARGIN``
    over every backward holding whole rows becomes the entry's backward (its piece width, a tile
    of one piece); ``tuned_rows_launch`` launches it split, its pieces kept at the width measured
    (also where one piece would pad no more: 16384 wide rows), and it lowers for CUDA to the
    forward and a backward over programs x pieces, with XLA's row sums between."""
    from jaxrules.ops.normalization import layer_norm_rows_op

    module = load("benchmarks/record_dispatch.py")
    m, n = 21844, 12288
    rule = dispatch.rows_launch(m, n)
    whole = dataclasses.replace(rule, width=4096, pieces=3, rows=1, steps=dispatch.backward_steps(m, 1, 256))
    split = dataclasses.replace(whole, split=True, rows=2, steps=dispatch.backward_steps(m, 2, 128), num_warps=4)
    timed = functools.partial(_tuning_record, m=m, n=n)
    records = [timed("forward", 1.0, rule), timed("backward", 2.0, rule), timed("backward", 1.5, whole)]
    (entry,) = module.launches(records + [timed("backward", 1.48, split)])  # 1.3% faster: noise
    assert "split" not in entry["backward"] and entry["backward"]["ms"] == 1.5
    # one piece 1.5, pieces 1.47 (not past the margin), the split 1.44: 2% faster than the pieces, noise
    one_piece = dataclasses.replace(whole, width=16384, pieces=1)
    (entry,) = module.launches(records[:2] + [timed("backward", 1.5, one_piece), timed("backward", 1.47, whole),
                                              timed("backward", 1.44, split)])
    assert "split" not in entry["backward"] and "piece_width" not in entry["backward"]
    assert entry["backward"]["ms"] == 1.5
    (entry,) = module.launches(records + [timed("backward", 1.2, split)])
    assert entry["backward"] == {"tile_elements": 2 * 4096, "num_warps": 4, "rule_ms": 2.0, "ms": 1.2,
                                 "piece_width": 4096, "split": True, "programs": split.backward_programs(m),
                                 "prefetch": False}
    with _table_of(monkeypatch, tmp_path, "GPU X", {"rows_launches": [entry]}):
        bf16 = jnp.dtype("bfloat16")
        launch = dispatch.tuned_rows_launch("GPU X", m, n, bf16)
        assert (launch.split, launch.width, launch.pieces, launch.rows, launch.num_warps) == (True, 4096, 3, 2, 4)
        assert launch.backward_programs(m) == split.backward_programs(m) == 127 and not launch.forward_launch().split
        wide = dispatch.tuned_rows_launch("GPU X", 32767, 16384, bf16)
        assert (wide.split, wide.width, wide.pieces, wide.rows) == (True, 4096, 4, 2)
    x, v = jax.ShapeDtypeStruct((m, n), jnp.bfloat16), jax.ShapeDtypeStruct((n,), jnp.float32)
    fn = lambda x, w, b: layer_norm_rows_op(x, w, b, eps=1e-5, launch=launch)[0]  # noqa: E731
    assert dict(_lowered_kernels(fn, x, v, v)) == {"layer_norm_fwd": launch.forward_programs(m),
                                                   "layer_norm_bwd": 127 * 3}


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_each_devices_rows_run_the_split_backward_their_shape_plans(op):
    """Rows sharded over 2 devices (43688 of 12288, bfloat16): the backward's partition callback
    lowers, on each device's 21844 rows, the H200's split backward for that shape (a program per
    piece of 2048, XLA's row sums before it), the one-device program's kernels on its grids, and
    an all-reduce of each weight gradient, no all-gather."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxrules import partitioning as pt

    m, n, bf16, f32 = 21844, 12288, jnp.bfloat16, jnp.float32
    whole = dispatch.rows_launch(2 * m, n, dtype=jnp.dtype(bf16), device_kind="NVIDIA H200")
    local = dispatch.rows_launch(m, n, dtype=jnp.dtype(bf16), device_kind="NVIDIA H200")
    assert local.split and local.backward_grid(m) == (local.backward_programs(m), 6)
    stats = 4 if op == "layer_norm" else 2
    shard = [jax.ShapeDtypeStruct(s, t) for s, t in (((m, n), bf16), ((m, n), bf16), ((n,), bf16))]
    shard += [jax.ShapeDtypeStruct((m,), f32)] * stats
    impl = pt._ln_backward_impl if op == "layer_norm" else pt._rms_backward_impl
    mesh = jax.sharding.AbstractMesh((2,), ("data",))
    sharded = [jax.ShapeDtypeStruct((2 * a.shape[0], *a.shape[1:]) if a.shape[0] == m else a.shape, a.dtype,
                                    sharding=NamedSharding(mesh, P("data") if a.shape[0] == m else P()))
               for a in shard]
    n_sums = 2 if op == "layer_norm" else 1  # the weight's (and the bias's) gradients
    lower = pt._rows_backward_partition(impl, stats, n_sums)(whole, mesh, sharded, None)[0]
    lower = jax.shard_map(lower, in_specs=P(), out_specs=P(), check_vma=False)  # its psum's axis (1 device here)

    def lowered(fn, mesh=None):
        with for_cuda(mesh):
            return export.export(jax.jit(fn), platforms=["cuda"], disabled_checks=[
                export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])(*shard).mlir_module()

    want = lowered(lambda *a: impl(*a, local))
    got = lowered(lower, jax.make_mesh((1,), ("data",)))
    # (grid, name) of each Triton call (the IR bytecode carries the locations of its first tracing)
    calls = lambda text: re.findall(r'grid_x = (\d+) : i32, grid_y = (\d+) : i32.*?name = "(\w+)"', text, re.S)  # noqa: E731
    assert calls(got) == calls(want) and [c[:2] for c in calls(want)] == [(str(local.backward_programs(m)), "6")]
    assert "all_gather" not in got and got.count("stablehlo.all_reduce") == n_sums
    assert got.count("stablehlo.reduce") == want.count("stablehlo.reduce") >= 2  # the row sums, the partials' sums


def test_the_split_backwards_tuned_cover_their_rows_in_small_tiles():
    """``benchmarks/layer_norm_tuning.py``'s split launches: every one split, without the prefetch,
    its pieces (1024 to 4096 wide) covering the row, tiles of 2048 to 8192 elements; none for rows
    under 2048 wide."""
    module = load("benchmarks/layer_norm_tuning.py")
    for m, n in ((21844, 12288), (1000, 16384), (77, 3000)):
        launches = module.split_backwards(m, n, dispatch.rows_launch(m, n))
        assert len(launches) >= 12, (m, n)
        for launch in launches:
            assert launch.split and not launch.prefetch and (launch.pieces - 1) * launch.width < n <= launch.span
            assert launch.width in (1024, 2048, 4096) and 2048 <= launch.rows * launch.width <= 8192, launch
    assert module.split_backwards(8192, 1536, dispatch.rows_launch(8192, 1536)) == []


def test_a_walking_forward_is_recorded_and_launched(tmp_path, monkeypatch):
    """A forward walking tiles (``forward_steps``, ``forward_prefetch``) measured fastest becomes
    the entry's forward ``programs`` and ``prefetch``, which ``tuned_rows_launch`` walks again."""
    module = load("benchmarks/record_dispatch.py")
    m, n = 65535, 4096
    rule = dispatch.rows_launch(m, n)
    walking = dataclasses.replace(rule, forward_steps=dispatch.backward_steps(m, rule.rows, 264), forward_prefetch=True)
    timed = functools.partial(_tuning_record, m=m, n=n)
    (entry,) = module.launches([timed("forward", 1.0, rule), timed("forward", 0.8, walking),
                                timed("backward", 2.0, rule)])
    tiles = math.ceil(m / rule.rows)
    assert entry["forward"] == {"tile_elements": rule.rows * rule.width, "num_warps": rule.num_warps, "rule_ms": 1.0,
                                "ms": 0.8, "programs": math.ceil(tiles / walking.forward_steps), "prefetch": True}
    with _table_of(monkeypatch, tmp_path, "GPU X", {"rows_launches": [entry]}):
        launch = dispatch.tuned_rows_launch("GPU X", m, n, jnp.dtype("bfloat16"))
        assert (launch.forward_steps, launch.forward_prefetch) == (walking.forward_steps, True)
        assert launch.forward_programs(m) == entry["forward"]["programs"]


def test_record_dispatch_keeps_the_times_a_record_did_not_measure(tmp_path, monkeypatch):
    """A sweep run without a kernel's variant (``--variants pallas,xla,jax``) updates the times it
    measured and keeps the table's time of the kernel it left out; the tuned launches (rows and
    grouped) stay."""
    module = load("benchmarks/record_dispatch.py")
    monkeypatch.setattr(dispatch, "DATA", tmp_path)
    case = next(c for c in bench.sweep_cases() if c.op == "layer_norm")
    key = {"op": case.op, "dtype": case.dtype, "weight_dtype": case.weight_dtype,
           "features": list(bench.sweep_features(case))}
    launches = [{"dtype": case.dtype, "features": key["features"]}]
    grouped = {"group_norm": {"writes_y": True}}
    dispatch.table_path("GPU X").write_text(json.dumps({"rows_launches": launches, "grouped_launches": grouped,
                                                        "grouped_launches_command": "tune", "points": [
        {**key, "pallas_ms": 0.5, "mosaic_ms": 0.4, "xla_ms": 0.6, "jax_ms": 0.7}]}))
    record = {"device_kind": "GPU X", "jax": "0.11.2", "points": [{**key, "pallas_ms": 0.3, "xla_ms": 0.61,
                                                                   "jax_ms": 0.71}]}
    _, table = module.merge([record], "cmd")
    assert table["points"] == [{**key, "pallas_ms": 0.3, "mosaic_ms": 0.4, "xla_ms": 0.61, "jax_ms": 0.71}]
    assert table["rows_launches"] == launches
    assert (table["grouped_launches"], table["grouped_launches_command"]) == (grouped, "tune")


def test_record_dispatch_launches_replace_only_their_shapes():
    """A partial re-tune (``--launches`` with some shapes) replaces those shapes' entries and keeps
    the others."""
    module = load("benchmarks/record_dispatch.py")
    old = [{"dtype": "bfloat16", "features": [8, 64], "tag": "old"}, {"dtype": "float32", "features": [8, 64]}]
    new = [{"dtype": "bfloat16", "features": [8, 64], "tag": "new"}, {"dtype": "bfloat16", "features": [16, 64]}]
    merged = module.merge_launches({"rows_launches": old}, new)
    assert merged == [new[0], new[1], old[1]]


def test_changed_points_are_the_cases_whose_launch_or_plan_moved(tmp_path):
    """``benchmarks/changed_points.py``: against an earlier H200 table whose 52427x5120 bfloat16
    entry ran its forward in one piece, exactly the four sweep cases whose Triton launch that entry
    makes changed (layer and RMS norm, bfloat16 and bfloat16 with float32 weights: RMS norm's plan
    there is the Mosaic kernels, but the table's Triton time decides it too); against the table
    itself, none."""
    module = load("benchmarks/changed_points.py")
    table = json.loads(dispatch.table_path("NVIDIA H200").read_text())
    (entry,) = [e for e in table["rows_launches"] if e["dtype"] == "bfloat16" and e["features"] == [52427, 5120]]
    assert entry["forward"].pop("piece_width") == 1024
    before = tmp_path / "before.json"
    before.write_text(json.dumps(table))
    names = sorted(name for name, *_ in module.changed(before, "NVIDIA H200"))
    assert names == [f"{op} 52427x5120 bfloat16{w}" for op in ("layer_norm", "rms_norm")
                     for w in ("", "+float32-weights")]
    before.write_text(dispatch.table_path("NVIDIA H200").read_text())
    assert module.changed(before, "NVIDIA H200") == []


def test_the_grouped_launch_is_the_device_kinds_own():
    """``dispatch.grouped_launch``: the H200 table's group-norm settings (one kernel writing y, the
    second passes reversed) and batch norm's (the backward split over 4096 programs); the H100
    (no entry), a kind without a table (not the H100's entry by fallback) and the CPU take the
    defaults."""
    h200 = dispatch.grouped_launch("group_norm", "NVIDIA H200")
    assert h200.writes_y and h200.reverse and (h200.tile_elements, h200.num_warps) == (8192, 16)
    assert dispatch.grouped_plan("group_norm", "gpu", "NVIDIA H200", 64 * 32, 8, 3136, jnp.bfloat16).launch == h200
    assert dispatch.grouped_launch("batch_norm", "NVIDIA H200") == dispatch.GroupedLaunch(backward_programs=4096)
    for op, kind in (("batch_norm", "NVIDIA H100 80GB HBM3"), ("group_norm", "NVIDIA H100 80GB HBM3"),
                     ("group_norm", "NVIDIA B200"), ("group_norm", None)):
        assert dispatch.grouped_launch(op, kind, interpret=True) == dispatch.GroupedLaunch(interpret=True), (op, kind)
    # whether the forward is one kernel: the launch's, or a ShardPlan's device kind's
    shard_plan = functools.partial(dispatch.ShardPlan, platform="gpu", weight_dtype="bfloat16")
    assert dispatch.grouped_writes_y(h200) and not dispatch.grouped_writes_y(dispatch.GroupedLaunch())
    assert dispatch.grouped_writes_y(shard_plan("group_norm", device_kind="NVIDIA H200"))
    assert not dispatch.grouped_writes_y(shard_plan("batch_norm", device_kind="NVIDIA H200"))
    assert not dispatch.grouped_writes_y(shard_plan("group_norm", device_kind="NVIDIA H100 80GB HBM3"))


def test_a_kind_without_a_table_takes_no_grouped_launch_from_the_fallbacks(tmp_path, monkeypatch):
    """A GPU kind without a table decides on the fallback kind's measurements, but never runs the
    fallback's own grouped launch (measured on that kind only)."""
    with _table_of(monkeypatch, tmp_path, dispatch.FALLBACK_KIND, {"grouped_launches": {
        "group_norm": {"writes_y": True}}, "points": []}):
        assert dispatch.grouped_launch("group_norm", dispatch.FALLBACK_KIND).writes_y
        assert dispatch.grouped_launch("group_norm", "NVIDIA B200") == dispatch.GroupedLaunch()
