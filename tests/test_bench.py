"""``benchmarks/bench.py`` machinery on tiny inputs (the numbers themselves come from the
GPU machine), and the normalization benchmark of ``benchmarks/norms.py`` at ``benchmarks/shapes.py``."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _repo_files import load

import jaxrules.numpy as rnp

bench = load("benchmarks/bench.py")


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


def test_interleaved_runs_pair_up_by_repeat():
    clock = iter(range(1000))
    out = bench.interleaved_times_ms({"a": lambda: next(clock), "b": lambda: next(clock)}, repeats=5, warmup=0,
                                     calls=1, wait=lambda x: x)
    assert len(out["a"]) == len(out["b"]) == 5 and all(t >= 0 for t in out["a"] + out["b"])


def test_paired_ratio_gives_the_median_and_binomial_order_statistics():
    # Ten ratios 1..10: P(Binomial(10, 1/2) <= 1) = 11/1024 <= 0.025 < P(<= 2) = 56/1024, so the
    # 95% interval runs from the 2nd to the 9th smallest ratio.
    assert bench.paired_ratio([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [1] * 10) == (5.5, 2.0, 9.0)
    assert bench.paired_ratio([4.0, 9.0], [2.0, 3.0]) == (2.5, 2.0, 3.0)  # too few: the extremes
    rng = np.random.default_rng(0)
    covered = 0
    for _ in range(400):  # equal sides: the interval holds 1 at least 95% of the time
        a, b = rng.lognormal(0, 0.01, 40), rng.lognormal(0, 0.01, 40)
        _, low, high = bench.paired_ratio(list(a), list(b))
        covered += low <= 1.0 <= high
    assert covered >= 0.93 * 400
    with pytest.raises(ValueError, match="paired_ratio"):
        bench.paired_ratio([], [])


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


def test_device_timeline_cuts_a_trace_without_module_events_at_the_hosts_waits():
    """``benchmarks/device_timeline.step_windows``: with "XLA Modules" events, the last ``steps``
    of them; without (jax 0.11.2's GPU trace), the operations cut at the ``steps - 1`` longest
    gaps, each window from its first start to its last end (overlapping operations included)."""
    timeline = load("benchmarks/device_timeline.py")
    ops = [("a", 0, 10), ("b", 12, 5), ("nccl", 3, 30), ("c", 100, 10), ("d", 111, 3), ("e", 300, 4), ("f", 305, 2)]
    assert timeline.step_windows([], ops, 3) == [(0, 34), (100, 15), (300, 8)]
    assert timeline.step_windows([("m", 100, 15), ("m", 0, 40), ("m", 300, 9)], ops, 2) == [(100, 15), (300, 9)]
    assert timeline.step_windows([], [], 3) == []


def test_the_held_out_shapes_are_a_fixed_draw_of_real_models_shapes():
    """``benchmarks/shapes.py``: the same points on every call; at least 200 distinct held-out
    points, none of the tuning draw's, with every op and dtype; rows of 256 to 16384 and 512 to
    65536 tokens, group norm's channels a multiple of its groups, no tensor over the element cap."""
    shapes = load("benchmarks/shapes.py")
    points = shapes.held_out()
    assert points == shapes.held_out() and shapes.draw(3, 20) == shapes.draw(3, 20) != shapes.draw(4, 20)
    assert len(set(points)) == len(points) >= 200
    assert not set(points) & set(shapes.draw(shapes.TUNING_SEED, shapes.HELD_OUT_POINTS))
    assert not set(points) & set(shapes.seen())
    assert set(shapes.long_rows_grid()) | set(shapes.many_rows_grid()) <= set(shapes.seen())
    assert {p.op for p in points} == {"layer_norm", "rms_norm", "batch_norm", "group_norm"}
    assert {p.dtype for p in points} == {"bfloat16", "float16", "float32"}
    assert any(p.weight_dtype != p.dtype for p in points)
    for p in points:
        assert np.prod(p.shape) <= shapes.MAX_ELEMENTS and p.weight_dtype in (p.dtype, "float32"), p
        if p.op in ("layer_norm", "rms_norm"):
            tokens, width = p.shape
            assert 256 <= width <= 16384 and 512 <= tokens <= 65536 and p.channels == width, p
        else:
            assert len(p.shape) == 4 and p.shape[2] == p.shape[3] and p.channels == p.shape[1], p
            assert p.op == "batch_norm" or p.channels % shapes.GROUPS == 0, p


def test_the_norms_benchmark_times_every_variant_at_small_points(tmp_path, capsys):
    """``benchmarks/norms.py`` at the held-out draw's points of at most 90000 elements (group
    norm's smallest feature map): a row per point with every variant's time (``pallas``
    on a GPU only) and the verdict, the table printed, the rows and the run's metadata written."""
    norms = load("benchmarks/norms.py")
    out = tmp_path / "norms.json"
    rows = norms.main(["--count", "240", "--max-elements", "90000", "--repeats", "2", "--calls", "1",
                       "--out", str(out)])
    small = [p for p in load("benchmarks/shapes.py").held_out() if np.prod(p.shape) <= 90000]
    assert len(rows) == len(small) >= 1
    for row, point in zip(rows, small, strict=True):
        assert (row["op"], tuple(row["shape"]), row["dtype"]) == (point.op, point.shape, point.dtype)
        variants = ("default", "xla", "jax", *(("pallas",) if jax.default_backend() == "gpu" else ()))
        assert {key for key in row if key.endswith("_ms")} == {f"{v}_ms" for v in variants}
        assert all(row[f"{v}_ms"] > 0 for v in variants)
        assert row["same_program"]  # the dispatch runs the XLA formulas by default at every shape
        assert row["ratio"] == pytest.approx(row["jax_ms"] / ((row["default_ms"] + row["xla_ms"]) / 2))
    printed = capsys.readouterr().out
    assert f"{len(rows)} points" in printed and "| point | default ms | xla ms | jax ms |" in printed
    saved = json.loads(out.read_text())
    assert saved["rows"] == rows and saved["meta"]["count"] == 240


@pytest.mark.parametrize(("row", "ratio", "ok"), [
    ({"default_ms": 1.2, "xla_ms": 1.0, "jax_ms": 1.1}, 1.0 / 1.2, False),  # two programs: the faster rival
    ({"default_ms": 1.2, "xla_ms": 1.0, "jax_ms": 1.1, "same_program": True}, 1.1 / 1.1, True),  # one, timed twice
    ({"default_ms": 1.3, "xla_ms": 1.1, "jax_ms": 1.0, "same_program": True}, 1.0 / 1.2, False),
    ({"default_ms": 0.09, "xla_ms": 0.09, "jax_ms": 0.082, "same_program": True}, 0.082 / 0.09, True),  # within 10 us
])
def test_the_norms_verdict_times_one_program_once(row, ratio, ok):
    """Where ``default`` and ``xla`` are one program, its time is the mean of its two timings and
    the bar is plain JAX; else the faster of ``xla`` and plain JAX."""
    got = load("benchmarks/norms.py").verdict(row)
    assert got == (pytest.approx(ratio), ok)


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm", "batch_norm", "group_norm"])
def test_the_norms_benchmarks_plain_jax_is_the_same_math(op):
    """``benchmarks/norms.py``'s plain-JAX baseline computes what jaxrules' op computes (RMS norm
    with torch's default eps), so that the times compare the same work."""
    norms = load("benchmarks/norms.py")
    point = load("benchmarks/shapes.py").Point(op, (4, 64, 3, 3) if op in ("batch_norm", "group_norm") else (6, 64),
                                               "float32", "float32")
    _, x, w, b = norms.inputs(point, 0)
    np.testing.assert_allclose(norms.plain_norm(op, x, w, b), norms.variant_fn(op, "default")(x, w, b), rtol=2e-5,
                               atol=2e-5)


def test_the_selections_benchmark_times_both_sides_at_small_shapes(tmp_path):
    """``benchmarks/selections.py --small``: a row per case with both sides' times and their
    ratio, written with the run's metadata."""
    selections = load("benchmarks/selections.py")
    out = tmp_path / "selections.json"
    assert selections.main(["--small", "--repeats", "2", "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert len(saved["rows"]) == len(selections.CASES) and saved["meta"]["command"].endswith(str(out))
    for row in saved["rows"]:
        assert row["jaxrules_ms"] > 0 and row["plain_ms"] > 0
        assert row["speed"] == pytest.approx(row["plain_ms"] / row["jaxrules_ms"])
