"""``python -m jaxrules bench`` machinery on tiny inputs (the numbers themselves come from the
GPU machine: benchmarks/RESULTS.md)."""

import jax.numpy as jnp
import pytest

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
        assert ("the value and the gradients" in table) == with_value


def test_a_jax_less_case_times_jaxrules_alone():
    case = bench.Case("abs", rnp.abs, None, None, {"cpu": [(4,)], "gpu": [(4,)]})
    (row,), _ = bench.run([case], repeats=1, with_torch=False)
    assert row["jax_ms"] is None and row["jaxrules_ms"] > 0
