"""``python -m jaxrules bench`` machinery on tiny inputs (the numbers themselves come from the
GPU machine: benchmarks/RESULTS.md)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _repo_files import load

import jaxrules.numpy as rnp
from jaxrules import bench


@pytest.fixture(autouse=True)
def _no_bandwidth_measurement(monkeypatch):
    """The copy-bandwidth measurement moves 256 MB: not what these tests are about."""
    monkeypatch.setattr(bench, "copy_bandwidth", lambda platform: 1.0)


def test_interleaved_medians_time_every_callable_per_call():
    counts = {"a": 0, "b": 0}

    def call(label):
        counts[label] += 1
        return jnp.zeros(())

    out = bench.interleaved_median_ms({k: (lambda k=k: call(k)) for k in counts}, repeats=3, warmup=1, calls=4)
    assert set(out) == {"a", "b"} and all(v > 0 for v in out.values())
    assert counts == {"a": 1 + 3 * 4, "b": 1 + 3 * 4}


def test_run_reports_both_timings_and_the_table():
    case = bench.Case("abs", rnp.abs, jnp.abs, None, {"cpu": [(8, 8)], "gpu": [(8, 8)]})
    for with_value in (False, True):
        rows, meta = bench.run([case], repeats=2, with_torch=False, with_value=with_value)
        (row,) = rows
        assert row["jaxrules_ms"] > 0 and row["jax_ms"] > 0 and row["torch_ms"] is None
        assert row["residual_bytes"] == row["jax_residual_bytes"] == 8 * 8  # int8 sign / bool mask
        table = bench.markdown(rows, meta)
        assert "| abs | float32 | 8x8 |" in table
        assert ("a training step: the value, then the gradients" in table) == with_value


def test_a_training_step_computes_its_cotangent_after_the_value():
    """``fwd_bwd(with_value=True)``: the cotangent passes a barrier with the value (a training
    step's backward waits for the value, so XLA cannot fuse the value's pass into the backward's);
    the gradients are the same in every form."""
    fn = lambda x, w: jnp.sin(x) * w  # noqa: E731
    args = (jnp.linspace(-1.0, 1.0, 6), jnp.full(6, 2.0), jnp.arange(6.0))

    def barriers(**kw):
        return str(jax.make_jaxpr(bench.fwd_bwd(fn, **kw))(*args)).count("optimization_barrier")

    assert (barriers(with_value=False), barriers(with_value=True, cotangent_after_value=False),
            barriers(with_value=True)) == (0, 0, 1)
    ct, x, w = args
    want = (jnp.sin(x) * w, (ct * jnp.cos(x) * w, ct * jnp.sin(x)))
    for kw in ({"with_value": True}, {"with_value": True, "cotangent_after_value": False}):
        got = bench.fwd_bwd(fn, **kw)(*args)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
        for g, e in zip(got[1], want[1]):
            np.testing.assert_allclose(g, e, rtol=1e-6)


def test_a_jax_less_case_times_jaxrules_alone():
    case = bench.Case("abs", rnp.abs, None, None, {"cpu": [(4,)], "gpu": [(4,)]})
    (row,), _ = bench.run([case], repeats=1, with_torch=False)
    assert row["jax_ms"] is None and row["jaxrules_ms"] > 0


def test_the_sweep_covers_the_issues_shapes_and_dtypes():
    cases = bench.sweep_cases()
    names = {c.name for c in cases}
    for name in ("layer_norm 66850x256 bfloat16", "layer_norm 8192x5120 float32", "layer_norm 3x12288 float32",
                 "batch_norm 256x64x112x112 bfloat16", "group_norm 128x512x7x7 bfloat16+float32-weights",
                 "rms_norm 66850x256 bfloat16", "rms_norm 3x12288 float32"):
        assert name in names
    # 201 layer/batch/group-norm points, and rms_norm at layer_norm's 129 shapes and dtypes
    assert len(names) == len(cases) == 330
    assert sorted(c.name.replace("rms_norm", "layer_norm") for c in cases if c.op == "rms_norm") == sorted(
        c.name for c in cases if c.op == "layer_norm")
    widths = {c.shape[-1] for c in cases if c.op == "layer_norm"}
    assert {768, 1536, 5120, 12288} <= widths and min(widths) == 64 and max(widths) == 16384


def test_speed_of_light_bytes_count_every_tensor_a_forward_backward_moves():
    case = bench.SweepCase("layer_norm", (1000, 256), "bfloat16", "float32")
    tensor, weights = 1000 * 256 * 2, 256 * 4
    assert bench.sweep_bytes(case) == 4 * tensor + 6 * weights  # x (stats), x and dy, dx
    assert bench.sweep_bytes(case, with_value=True) == 5 * tensor + 6 * weights  # and y


@pytest.mark.parametrize("default, best, ok", [(1.0, 0.95, True), (1.0, 0.94, False), (0.090, 0.066, True),
                                               (0.095, 0.060, False)])
def test_sweep_verdict_uses_the_noise_margin_only_under_the_threshold(default, best, ok):
    row = {"default_ms": default, "xla_ms": best, "jax_ms": best + 1}
    assert bench.sweep_verdict(row)[1] == ok


def test_sweep_table_of_some_variants_leaves_missing_ratios_empty():
    # `bench --suite sweep --variants default,jax` crashed on the missing XLA column (H100 run).
    row = {"op": "layer_norm", "shape": (3, 64), "dtype": "float32", "weight_dtype": "float32", "plan": "xla",
           "default_ms": 2.0, "jax_ms": 1.0, "sol": 0.5}
    meta = {"device": "cpu", "jax": "0", "repeats": 1, "jax_copy_gbps": 1.0, "sol_gbps": 1.0}
    assert bench.sweep_verdict(row) == (0.5, False)
    assert bench.sweep_verdict({"default_ms": 1.0}) == (None, None)
    line = bench.sweep_markdown([row], meta).splitlines()[-1]
    assert line == "| layer_norm | 3x64 | float32 | xla | 2.000 | — | — | — | 1.000 | 0.50 | 0.50 | — | 50% | LOW |  |"


def test_run_sweep_records_what_the_dispatch_reads(monkeypatch):
    monkeypatch.setattr(bench, "copy_probe", lambda platform: {"jax_copy_gbps": 1.0, "torch_copy_gbps": None,
                                                               "sol_gbps": 1.0})
    case = bench.SweepCase("group_norm", (2, 64, 3, 3), "float32", "float32")
    rows, meta = bench.run_sweep([case], variants=("default", "pallas", "xla", "jax"), repeats=1)
    (row,) = rows
    assert row["plan"] == "xla" and all(row[f"{v}_ms"] > 0 for v in ("default", "pallas", "xla", "jax"))
    record = bench.dispatch_record(rows, meta)
    (point,) = record["points"]
    assert point["features"] == [64, 2, 9] and point["op"] == "group_norm"  # N G groups, C/G rows, H W
    assert "| group_norm | 2x64x3x3 | float32 | xla |" in bench.sweep_markdown(rows, meta)


def test_recheck_times_again_only_the_points_below_the_bar(monkeypatch):
    cases = [bench.SweepCase("layer_norm", (3, 64), "float32", "float32"),
             bench.SweepCase("layer_norm", (3, 128), "float32", "float32")]
    rows = [{"op": "layer_norm", "shape": [3, 64], "dtype": "float32", "weight_dtype": "float32", "plan": "xla",
             "default_ms": 1.0, "xla_ms": 0.5, "jax_ms": 0.6, "sol": 0.5},  # 0.5x: timed again
            {"op": "layer_norm", "shape": [3, 128], "dtype": "float32", "weight_dtype": "float32", "plan": "xla",
             "default_ms": 0.5, "xla_ms": 0.5, "jax_ms": 0.6, "sol": 0.5}]
    timed = []

    def run_sweep(again, variants, repeats, with_value):
        timed.append(([c.shape for c in again], repeats))
        return [{**rows[0], "default_ms": 0.52, "xla_ms": 0.5}], {}

    monkeypatch.setattr(bench, "run_sweep", run_sweep)
    (row,) = bench.recheck_sweep(cases, rows, ("default", "xla", "jax"), repeats=30)
    assert timed == [([(3, 64)], 30)]
    assert row is rows[0] and row["default_ms"] == 0.52 and row["rechecked"] == 30
    assert row["first"] == {"default_ms": 1.0, "xla_ms": 0.5, "jax_ms": 0.6}
    assert bench.sweep_verdict(row)[1] and rows[1].get("rechecked") is None
    meta = {"device": "cpu", "jax": "0", "repeats": 10, "jax_copy_gbps": 1.0, "sol_gbps": 1.0}
    assert bench.sweep_markdown(rows, meta).splitlines()[-2].endswith("| ok (rechecked) | ok (rechecked) |")
    assert bench.recheck_sweep(cases, rows, ("default", "xla", "jax"), repeats=30) == []  # none below now


@pytest.mark.parametrize("xla, jax_, ok", [(0.100, 0.071, False), (0.090, 0.071, True), (0.30, 0.29, True),
                                           (0.33, 0.30, False)])
def test_xla_verdict_holds_the_formulas_to_plain_jax(xla, jax_, ok):
    """Issue 14: the XLA formulas never below 0.95x of plain JAX (with the margin under 0.2 ms)."""
    row = {"default_ms": 0.01, "xla_ms": xla, "jax_ms": jax_}
    ratio, verdict = bench.xla_verdict(row)
    assert verdict == ok and ratio == pytest.approx(jax_ / xla)
    assert bench.sweep_verdict(row)[1]  # the default is judged on its own


def test_device_time_per_step_replaces_per_call_times_only_where_measured():
    row = {"default_ms": 0.05, "xla_ms": 0.100, "jax_ms": 0.071}
    assert bench.xla_verdict(row)[1] is False
    row.update(default_step_ms=0.0078, xla_step_ms=0.0080, jax_step_ms=0.0079)
    assert bench.xla_verdict(row) == (pytest.approx(0.0079 / 0.0080), True)
    row["xla_step_ms"] = 0.0100  # device time 0.79x, 2.1 us: within the device-time margin
    assert bench.xla_verdict(row)[1] is True
    row["xla_step_ms"] = 0.0110  # 0.72x, 3.1 us: low
    assert bench.xla_verdict(row)[1] is False
    meta = {"device": "cpu", "jax": "0", "repeats": 1, "jax_copy_gbps": 1.0, "sol_gbps": 1.0}
    table = bench.sweep_markdown([{**row, "op": "layer_norm", "shape": [3, 64], "dtype": "float32",
                                   "weight_dtype": "float32", "plan": "pallas", "sol": 0.1}], meta).splitlines()
    assert table[-1].endswith("| ok | LOW (device) |")
    row["default_step_ms"] = 0.1  # the default is judged per call, whatever the loop says of it
    assert bench.sweep_verdict(row) == (pytest.approx(0.071 / 0.05), True)
    assert "Below the bar: the default at 0 of 1, the XLA formulas at 1 of 1 points." in table[0]


def test_device_time_sweep_times_only_host_bound_rows_below_the_bar():
    """On the CPU backend: the looped programs compile and run, the rows above the bar or above
    0.2 ms per call are left alone, and the measured rows get a device time for every variant."""
    cases = [bench.SweepCase("layer_norm", (3, 64), "float32", "float32"),
             bench.SweepCase("layer_norm", (3, 128), "float32", "float32"),
             bench.SweepCase("group_norm", (2, 64, 3, 3), "float32", "float32")]
    rows = [{"op": c.op, "shape": list(c.shape), "dtype": c.dtype, "weight_dtype": c.weight_dtype} for c in cases]
    rows[0].update(default_ms=0.05, xla_ms=0.100, jax_ms=0.071)  # XLA 0.71x per call, host-bound: timed
    rows[1].update(default_ms=0.05, xla_ms=0.070, jax_ms=0.071)  # above the bar: left alone
    rows[2].update(default_ms=0.05, xla_ms=0.400, jax_ms=0.300)  # below it but 0.4 ms: per call stands
    (timed,) = bench.device_time_sweep(cases, rows, repeats=1)
    assert timed is rows[0] and all(rows[0][f"{v}_step_ms"] > 0 for v in ("default", "xla", "jax"))
    assert not any(k.endswith("_step_ms") for r in rows[1:] for k in r)
    rows[1]["features"] = [3, 128]
    assert bench.device_time_sweep(cases, rows, repeats=1, every=True) == rows[:2]  # every host-bound row
    assert rows[1]["xla_step_ms"] > 0 and "xla_step_ms" not in rows[2]
    (point,) = bench.dispatch_record([{**rows[1], "pallas_ms": 0.06, "pallas_step_ms": 0.01}],
                                     {"device": "cpu", "jax": "0"})["points"]
    assert {k for k in point if k.endswith("_ms")} == {"pallas_ms", "pallas_step_ms", "xla_ms", "xla_step_ms",
                                                       "jax_ms", "jax_step_ms"}


def test_host_bound_cases_are_those_the_table_records_under_the_noise_floor(monkeypatch):
    from jaxrules import dispatch

    quick = {"op": "layer_norm", "dtype": "bfloat16", "weight_dtype": "float32", "features": [3, 768],
             "pallas_ms": 0.05, "xla_ms": 0.06, "jax_ms": 0.07}
    slow = {**quick, "features": [1000, 768], "jax_ms": 0.25}  # one variant at 0.25 ms: not host-bound
    monkeypatch.setattr(dispatch, "measurements", lambda kind: (quick, slow))
    cases = [bench.SweepCase("layer_norm", shape, dtype, "float32") for shape in ((3, 768), (1000, 768))
             for dtype in ("bfloat16", "float16", "float32")]
    assert [c.name for c in bench.host_bound_cases(cases, "any")] == [
        "layer_norm 3x768 bfloat16+float32-weights", "layer_norm 3x768 float16+float32-weights"]


def test_looped_program_applies_every_step():
    """``bench.looped``: x moves by 1e-6 dx per step, and each step's cotangent is the previous
    step's dx (nothing but w and b loop-invariant): with dx = 2 ct, the steps move x by 1e-6 (2 +
    4 + 8) from ct = 1."""
    def step(ct, x, w, b):
        return 2 * ct, w, b

    x, ct = jnp.zeros(4), jnp.ones(4)
    # the step's gradients are written whole (a barrier): the nudge cannot fuse into one variant's dx pass
    assert "stablehlo.optimization_barrier" in bench.looped(step, 3).lower(ct, x, x, x).as_text()
    np.testing.assert_allclose(bench.looped(step, 3)(ct, x, x, x), 14e-6, rtol=1e-6)
    out = bench.looped(lambda *a: (None, step(*a)), 2, with_value=True)(ct, x, x, x)
    np.testing.assert_allclose(out, 6e-6, rtol=1e-6)


def test_device_timeline_cuts_a_trace_without_module_events_at_the_hosts_waits():
    """``benchmarks/device_timeline.step_windows``: with "XLA Modules" events, the last ``steps``
    of them; without (jax 0.11.2's GPU trace), the operations cut at the ``steps - 1`` longest
    gaps, each window from its first start to its last end (overlapping operations included)."""
    from _repo_files import load

    timeline = load("benchmarks/device_timeline.py")
    ops = [("a", 0, 10), ("b", 12, 5), ("nccl", 3, 30), ("c", 100, 10), ("d", 111, 3), ("e", 300, 4), ("f", 305, 2)]
    assert timeline.step_windows([], ops, 3) == [(0, 34), (100, 15), (300, 8)]
    assert timeline.step_windows([("m", 100, 15), ("m", 0, 40), ("m", 300, 9)], ops, 2) == [(100, 15), (300, 9)]
    assert timeline.step_windows([], [], 3) == []


def test_the_speed_of_light_table_gives_each_point_below_the_target_its_class(tmp_path):
    """``benchmarks/speed_of_light.py``: training-step records only (a gradients-only one is
    refused), a later record's point replacing an earlier one's, widths under the minimum left out,
    each point below the target with the class of its reason."""
    module = load("benchmarks/speed_of_light.py")

    def row(op, shape, dtype, ms, sol):
        return {"op": op, "shape": shape, "dtype": dtype, "weight_dtype": dtype, "plan": "pallas", "default_ms": ms,
                "sol": sol}

    meta = {"device": "GPU X", "sol_gbps": 4000.0, "with_value": True, "cotangent_after_value": True}
    old = {"meta": meta, "rows": [row("layer_norm", [65535, 4096], "bfloat16", 0.9, 0.60),
                                  row("group_norm", [64, 256, 56, 56], "float32", 0.4, 0.55)]}
    new = {"meta": meta, "rows": [row("layer_norm", [65535, 4096], "bfloat16", 0.7, 0.90),
                                  row("rms_norm", [21844, 12288], "float32", 1.6, 0.77),
                                  row("rms_norm", [66850, 512], "float32", 0.2, 0.60),  # narrower than 1024
                                  row("batch_norm", [64, 256, 14, 14], "float32", 0.1, 0.30),  # a 196 map
                                  row("rms_norm", [1000, 12288], "float32", 0.14, 0.42)]}  # short before wide
    paths = []
    for i, record in enumerate((old, new)):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(record))
    rows, _ = module.load(paths)
    table = module.markdown(rows, 0.85, 1024)
    assert table.startswith("3 of 4 points below 85%")
    assert "| rms_norm | 1000x12288 | float32 | pallas | 0.140 | 0.42 | short |" in table
    assert "| layer_norm | 65535x4096 | bfloat16 | pallas | 0.700 | 0.90 |  |" in table
    assert "| group_norm | 64x256x56x56 | float32 | pallas | 0.400 | 0.55 | grouped |" in table
    assert "| 1.600 | 0.77 | wide rows |" in table and "66850x512" not in table and "14x14" not in table
    paths[0].write_text(json.dumps({**old, "meta": {**meta, "with_value": False}}))
    with pytest.raises(ValueError, match="gradients only"):
        module.load(paths)


def test_a_step_profile_counts_each_operation_in_passes_of_one_tensor():
    """``benchmarks/step_profile.py`` on a small case compiled here, its trace given (a CPU trace
    has no GPU plane): each operation's time over the time the probe moves one activation once."""
    module = load("benchmarks/step_profile.py")
    case = bench.SweepCase("layer_norm", (64, 128), "float32", "float32")
    one = 64 * 128 * 4 / (2000.0 * 1e3)  # us at 2000 GB/s
    trace = {"/device:GPU:0": {"span_us": 10 * one, "idle_us": 0.5,
                               "ops": [(0.0, 2 * one, "layer_norm_fwd"), (3.0, 3 * one, "layer_norm_bwd")]}}
    seen = []

    def timeline(call, steps):
        seen.append((call()[0].shape, steps))  # the step returns the value, then the gradients
        return trace

    row = module.profile(case, "xla", 2000.0, steps=3, timeline=timeline)
    assert seen == [((64, 128), 3)]
    assert row["passes"] == 10 and [op["passes"] for op in row["ops"]] == [2, 3]
    text = module.format_profile(row)
    assert "10.00 passes" in text and "layer_norm_bwd" in text
    assert "no GPU operations" in module.format_profile(module.profile(case, "xla", 2000.0, 1, lambda c, s: {}))


def test_the_grouped_tuning_chooses_the_best_geometric_mean_over_every_point():
    """``benchmarks/grouped_norm_tuning.py --choose``: a setting timed at every point, by the
    geometric mean of the faster baseline over its time (one not timed everywhere is left out);
    the defaults' mean beside it."""
    import dataclasses

    from jaxrules import dispatch

    module = load("benchmarks/grouped_norm_tuning.py")
    defaults = {f.name: f.default for f in dataclasses.fields(dispatch.GroupedLaunch) if f.name != "interpret"}

    def record(shape, ms, **launch):
        return {"op": "batch_norm", "shape": shape, "dtype": "float32", "launch": {**defaults, **launch}, "ms": ms,
                "xla_ms": 1.0, "jax_ms": 2.0}

    records = [record([1], 1.0), record([2], 1.0), record([1], 0.5, backward_programs=1024),
               record([2], 2.0, backward_programs=1024), record([1], 0.8, backward_programs=4096),
               record([2], 0.9, backward_programs=4096), record([2], 0.7, backward_programs=4096),  # twice: median
               record([1], 0.1, num_warps=4), record([1], 0.1, num_warps=4)]  # twice at one point, never at the other
    best = module.best_setting(records)
    assert best["launch"] == {"backward_programs": 4096} and best["as_is"] == 1.0
    assert abs(best["geomean"] - (1 / 0.8 * (1 / 0.9 + 1 / 0.7) / 2) ** 0.5) < 1e-12  # the median of two
    with pytest.raises(ValueError, match="no setting was timed at every point"):
        module.best_setting([record([1], 1.0), record([2], 1.0, num_warps=4)])
