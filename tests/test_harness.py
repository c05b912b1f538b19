"""The harness itself: it passes a correct op, and each check fails the op it is meant to catch
(so no check is one that cannot fail). Also the CLI and COVERAGE.md."""

import dataclasses
import json
import pathlib
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrules
from jaxrules import OpRecord, Sample, SingularPoint, compat, define_op, testing
from jaxrules.cli import coverage_markdown, main
from jaxrules.testing import CHECKS, check_op, run_check


def _square_jvp(x, t):
    return 2 * x * t


def _square_vjp(x, ct):
    return (2 * x * ct,)


def _record(name, jvp=_square_jvp, vjp=_square_vjp, fn=None, **kw):
    op = define_op(name, lambda x: x * x, jvp, vjp)
    kw.setdefault("singular", (SingularPoint("zero", (np.zeros(2),), (np.zeros(2),)),))
    return OpRecord(
        name=name,
        fn=fn or op,
        public=(name,),
        formula_ops=(name,),
        seed=("none",),
        samples=lambda rng, dt: [Sample((rng.standard_normal((2, 3)).astype(dt),))],
        torch_fn=lambda torch, x: x * x,
        torch_name="x * x",
        **kw,
    )


GOOD = _record("test_square")
_JIT_DIFFERS = define_op("test_jit_differs", lambda x: x * x, _square_jvp, _square_vjp)


@jax.custom_batching.custom_vmap
def _wrong_batching(x):
    return x * x


@_wrong_batching.def_vmap
def _wrong_batching_rule(axis_size, in_batched, x):
    return x * x + 1.0, in_batched[0]


def test_a_correct_op_passes_every_check():
    results = check_op(GOOD)
    assert [r.check for r in results] == list(CHECKS)
    assert all(r.passed for r in results), [r for r in results if not r.passed]


@pytest.mark.parametrize(
    "broken, failing",
    [
        # A wrong VJP formula: finite differences and the JVP/VJP identity both see it.
        (_record("test_bad_vjp", vjp=lambda x, ct: (3 * x * ct,)), {"gradients", "jvp_vjp", "torch"}),
        # A wrong JVP formula.
        (_record("test_bad_jvp", jvp=lambda x, t: -2 * x * t), {"gradients", "jvp_vjp", "torch"}),
        # Right first derivatives, wrong second ones (the VJP formula's own derivative in x is
        # lost; the JVP formula's is doubled): only the second-order comparisons see them.
        (_record("test_bad_second_rev", vjp=lambda x, ct: (2 * jax.lax.stop_gradient(x) * ct,)), {"gradients"}),
        (_record("test_bad_second_fwd", jvp=lambda x, t: 2 * (2 * x - jax.lax.stop_gradient(x)) * t),
         {"gradients"}),
        # A function whose batching rule is wrong.
        (_record("test_bad_batching", fn=lambda x: _wrong_batching(x)), {"vmap"}),
        # The public function bypasses the rule: the formula spy notices.
        (_record("test_bypass", fn=lambda x: x * x), {"formulas"}),
        # A wrong expected value at a singular point.
        (_record("test_bad_singular", singular=(SingularPoint("zero", (np.zeros(2),), (np.ones(2),)),)), {"singular"}),
        # A non-finite second derivative at a singular point.
        (
            _record("test_infinite_second", jvp=lambda x, t: t * jnp.sqrt(jnp.abs(x)),
                    vjp=lambda x, ct: (ct * jnp.sqrt(jnp.abs(x)),), fn=None,
                    singular=(SingularPoint("zero", (np.zeros(2),), (np.zeros(2),)),)),
            {"singular"},
        ),
        # A function whose value under jit differs from eager evaluation.
        (_record("test_jit_differs", fn=lambda x: _JIT_DIFFERS(x) + (0.0 if isinstance(x, jax.core.Tracer) else 1.0)),
         {"jit"}),
        # A function that fails on a zero-size input with JAX's own error (a max without identity).
        (_record("test_bad_empty", fn=lambda x: GOOD.fn(x) * jnp.max(x)), {"empty"}),
        # A torch reference that disagrees.
        (dataclasses.replace(GOOD, name="test_bad_torch", torch_fn=lambda torch, x: x * x * 1.5), {"torch"}),
    ],
    ids=lambda v: v.name if isinstance(v, OpRecord) else "",
)
def test_each_check_catches_its_failure(broken, failing):
    results = {r.check: r for r in check_op(broken, sorted(failing))}
    for check in failing:
        assert not results[check].passed, f"{check} did not catch {broken.name}"


def _two_samples(name, jvp=_square_jvp, vjp=_square_vjp):
    """A square with two float64 samples: a matrix (sample 0) and a vector (sample 1)."""
    return dataclasses.replace(
        _record(name, jvp, vjp),
        samples=lambda rng, dt: [Sample((rng.standard_normal((2, 3)).astype(dt),)),
                                 Sample((rng.standard_normal(4).astype(dt),))])


def _on_vectors(wrong, right):
    """A formula that is ``wrong`` for a vector argument and ``right`` otherwise."""
    return lambda x, *rest: (wrong if x.ndim == 1 else right)(x, *rest)


_LOST = lambda x, ct: (2 * jax.lax.stop_gradient(x) * ct,)  # noqa: E731 - right first, wrong second derivative


def test_second_derivatives_run_on_the_records_first_sample_and_on_every_sample_at_full_depth():
    """Default depth: second derivatives on sample 0 alone (a break there is caught), first
    derivatives on every sample; ``full=True``: second derivatives on every sample too."""
    on_first = _two_samples("test_second_on_first", vjp=_on_vectors(_square_vjp, _LOST))
    assert not run_check(on_first, "gradients", full=False).passed
    on_second = _two_samples("test_second_on_second", vjp=_on_vectors(_LOST, _square_vjp))
    assert run_check(on_second, "gradients", full=False).passed
    failed = run_check(on_second, "gradients")  # full by default
    assert not failed.passed and "float64 sample 1 {}: jvp of vjp vs finite differences" in failed.detail
    first_order = _two_samples("test_first_on_second", vjp=_on_vectors(lambda x, ct: (3 * x * ct,), _square_vjp))
    failed = run_check(first_order, "gradients", full=False)
    assert not failed.passed and "float64 sample 1" in failed.detail and "<vjp(c), t>" in failed.detail


def test_the_compositions_run_on_the_first_sample_with_a_differentiable_argument():
    """A record whose sample 0 has no differentiable argument (integers): its first
    differentiable sample gets the second derivatives at the default depth."""
    record = _two_samples("test_second_after_integers", vjp=_on_vectors(_LOST, _square_vjp))
    record = dataclasses.replace(record, samples=lambda rng, dt: [Sample((np.arange(3),)),
                                                                 Sample((rng.standard_normal(4).astype(dt),))])
    failed = run_check(record, "gradients", full=False)
    assert not failed.passed and "float64 sample 1 {}: jvp of vjp vs finite differences" in failed.detail


@jax.custom_batching.custom_vmap
def _vector_batching_wrong(x):
    return x * x


@_vector_batching_wrong.def_vmap
def _vector_batching_wrong_rule(axis_size, in_batched, x):
    return x * x + (1.0 if x.ndim == 2 else 0.0), in_batched[0]  # wrong for a batch of vectors


def test_batched_values_run_on_every_sample_at_the_default_depth():
    op = define_op("test_vector_batching", lambda x: _vector_batching_wrong(x), _square_jvp, _square_vjp)
    bad = dataclasses.replace(_two_samples("test_vector_batching"), fn=op)
    failed = run_check(bad, "vmap", full=False)
    assert not failed.passed and "float64 sample 1: vmap in_axes=[0]" in failed.detail


def test_cli_check_full_runs_every_composition(monkeypatch, tmp_path, capsys):
    seen = []
    real = testing.run_check

    def spy(record, check, full=True):
        seen.append(full)
        return real(record, check, full)

    monkeypatch.setattr("jaxrules.cli.run_check", spy)
    out = tmp_path / "report.json"
    assert main(["check", "--ops", "deg2rad", "--checks", "jit", "--workers", "1", "--full", "--quiet",
                 "--json", str(out)]) == 0
    assert seen == [True] and json.loads(out.read_text())["full"] is True
    assert "full depth" in capsys.readouterr().out
    assert main(["check", "--ops", "deg2rad", "--checks", "jit", "--workers", "1", "--quiet"]) == 0
    assert seen == [True, False]


_X3 = np.linspace(-1.0, 1.0, 3)
_WRONG_SECOND_ORDER = define_op("test_wrong_second_order", lambda x: x * x,
                                lambda x, t: 2 * jax.lax.stop_gradient(x) * t,  # d/dx of the JVP lost
                                lambda x, ct: (2 * jax.lax.stop_gradient(x) * ct,))


@pytest.mark.parametrize("f, wrong", [
    (define_op("test_square_right", lambda x: x * x, _square_jvp, _square_vjp), None),
    (define_op("test_wrong_jvp", lambda x: x * x, lambda x, t: 3 * x * t, _square_vjp), "jvp vs finite differences"),
    (define_op("test_wrong_vjp", lambda x: x * x, _square_jvp, lambda x, ct: (3 * x * ct,)),
     "<vjp(c), t> vs <c, finite differences>"),
    (_WRONG_SECOND_ORDER, "jvp of jvp vs finite differences"),
])
def test_check_derivatives_passes_right_formulas_and_names_the_first_wrong_one(f, wrong):
    if wrong is None:
        assert testing.check_derivatives(f, (_X3,)) < 1e-8
    else:
        with pytest.raises(AssertionError, match=re.escape(wrong)):
            testing.check_derivatives(f, (_X3,))


def test_check_derivatives_refuses_arguments_below_float64():
    with pytest.raises(TypeError, match="check_derivatives: argument 1 is float32"):
        testing.check_derivatives(jnp.multiply, (_X3, _X3.astype(np.float32)))


def test_low_precision_checks_dtype_and_values():
    # The output comes back in float64 whatever the input: the float32 check must fail.
    upcast = _record("test_upcast", fn=lambda x: define_op("test_up", lambda x: (x * x).astype(jnp.float64),
                                                           _square_jvp, _square_vjp)(x))
    assert not run_check(upcast, "low_precision").passed


def test_a_known_platform_bug_skips_its_failure_and_fails_its_pass(monkeypatch):
    bad = _record("test_bad_batching_platform", fn=lambda x: _wrong_batching(x))
    bug = (lambda: True, "a platform's wrong batched product")
    monkeypatch.setitem(testing.PLATFORM_BUGS, (bad.name, "vmap"), bug)
    monkeypatch.setitem(testing.PLATFORM_BUGS, (GOOD.name, "vmap"), bug)
    failing = run_check(bad, "vmap")
    assert failing.passed and failing.skipped and "known platform bug: a platform's" in failing.detail
    fixed = run_check(GOOD, "vmap")
    assert not fixed.passed and "no longer shows" in fixed.detail
    monkeypatch.setitem(testing.PLATFORM_BUGS, (bad.name, "vmap"), (lambda: False, "elsewhere"))
    assert not run_check(bad, "vmap").passed  # where the bug does not apply, the check is as ever


def test_every_platform_bug_names_a_record_and_a_check():
    names = {r.name for r in jaxrules.records()}
    for (record, check), (applies, bug) in testing.PLATFORM_BUGS.items():
        assert record in names and check in CHECKS and callable(applies) and bug, (record, check)


@pytest.mark.parametrize("applies, avoided_by", [
    (compat.triton_gemm_float64_bug, "--xla_gpu_enable_triton_gemm=false"),
    (compat.gpu_reduction_bug, "--xla_gpu_deterministic_ops=true"),
    (compat.gpu_reduction_bug, "--xla_gpu_autotune_level=0"),
])
def test_the_platform_bugs_apply_to_jax_0_12s_gpu_alone(monkeypatch, applies, avoided_by):
    assert testing.PLATFORM_BUGS[("scaled_dot_product_attention", "vmap")][0] is compat.triton_gemm_float64_bug
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(jax, "__version__", "0.12.0.1")
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_enable_command_buffer=")
    assert applies()
    monkeypatch.setenv("XLA_FLAGS", f"--xla_gpu_enable_command_buffer= {avoided_by}")
    assert not applies()
    monkeypatch.delenv("XLA_FLAGS")
    monkeypatch.setattr(jax, "__version__", "0.11.2")
    assert not applies()
    monkeypatch.setattr(jax, "__version__", "0.12.0.1")
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    assert not applies()


def test_unknown_check_is_refused():
    with pytest.raises(ValueError, match="unknown check"):
        run_check(GOOD, "bogus")


def test_cli_check_passes_and_writes_json(tmp_path, capsys):
    out = tmp_path / "report.json"
    code = main(["check", "--ops", "deg2rad", "--checks", "jit,formulas", "--json", str(out), "--quiet"])
    text = capsys.readouterr().out
    assert code == 0
    assert "deg2rad" in text and "2 passed, 0 failed" in text
    report = json.loads(out.read_text())
    assert {r["check"] for r in report["results"]} == {"jit", "formulas"}
    assert report["backend"] == jax.default_backend()


def test_cli_check_counts_skipped_checks_apart_from_passed_ones(capsys):
    """One device (``--host-devices 1``): the sharded check is skipped, and the summary does not
    count it as passed."""
    code = main(["check", "--ops", "deg2rad", "--checks", "jit,sharded", "--workers", "1", "--host-devices", "1",
                 "--quiet"])
    text = capsys.readouterr().out
    assert code == 0 and "1 passed, 0 failed, 1 skipped" in text, text


def test_cli_check_runs_worker_processes(capsys):
    code = main(["check", "--ops", "deg2rad,rad2deg", "--checks", "jit", "--workers", "2", "--quiet"])
    text = capsys.readouterr().out
    assert code == 0 and "2 passed, 0 failed" in text and "(2 worker processes)" in text
    assert text.index("deg2rad") < text.index("rad2deg")  # the table keeps the records' order


def test_cli_check_fails_on_a_failing_op(monkeypatch, capsys):
    broken = _record("test_cli_broken", vjp=lambda x, ct: (3 * x * ct,))
    monkeypatch.setattr(jaxrules, "records", lambda pattern=None: [broken])
    assert main(["check", "--checks", "jvp_vjp", "--quiet"]) == 1
    assert "FAIL test_cli_broken / jvp_vjp" in capsys.readouterr().out


def test_cli_check_rejects_unknown_ops_and_checks(capsys, monkeypatch):
    assert main(["check", "--ops", "no_such_op", "--quiet"]) == 2
    assert main(["check", "--checks", "bogus", "--quiet"]) == 2
    monkeypatch.setenv("JAXRULES_SHARDED_MODES", "")  # main sets it; restored (removed) afterwards
    assert main(["check", "--checks", "sharded", "--sharded-modes", "auto,bogus", "--quiet"]) == 2
    assert "unknown mesh modes ['bogus']" in capsys.readouterr().err


def test_cli_list_covers_every_op(capsys):
    assert main(["list"]) == 0
    text = capsys.readouterr().out
    for record in jaxrules.records():
        assert record.name in text


def test_cli_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"jaxrules {jaxrules.__version__}"


def test_cli_list_shows_public_names_in_100_columns(capsys):
    assert main(["list"]) == 0
    text = capsys.readouterr().out
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "numpy.linalg.norm" in text and "nn.gelu" in text
    assert "gelu_double_backward" not in text  # the seed functions only with --wide
    assert main(["list", "--wide", "--ops", "gelu"]) == 0
    assert "gelu_double_backward" in capsys.readouterr().out


def test_cli_list_all_marks_jaxrules_names(capsys):
    assert main(["list", "--all"]) == 0
    text = capsys.readouterr().out
    assert max(len(line) for line in text.splitlines()) <= 100
    words = text[text.index("Names of each namespace"):].split()
    assert {"*gelu", "sigmoid", "one_hot", "*sum", "zeros", "float32", "*det", "matrix_rank", "erf"} <= set(words)
    assert "jaxrules.scipy.linalg:" in words and "gelu" not in words and "*zeros" not in words


@pytest.mark.parametrize("command", [["check", "--quiet"], ["list"], ["list", "--all"], ["list", "--wide"]])
def test_cli_unknown_ops_exit_2(command, capsys):
    assert main([*command, "--ops", "no_such_op"]) == 2
    assert "no_such_op" in capsys.readouterr().err


def test_coverage_md_is_current():
    path = pathlib.Path(__file__).resolve().parents[1] / "COVERAGE.md"
    assert path.read_text() == coverage_markdown(), "regenerate: python -m jaxrules list --markdown > COVERAGE.md"


def test_a_zero_size_sample_passes_every_check():
    """Zero-size samples belong in records: no formula runs for them (the mechanism's contract,
    which the ``formulas`` check then asserts), and every other check compares empty results."""
    empty = dataclasses.replace(GOOD, name="test_empty", samples=lambda rng, dt: [
        Sample((rng.standard_normal((0, 3)).astype(dt),)), Sample((rng.standard_normal((2, 3)).astype(dt),))])
    results = check_op(empty)
    assert all(r.passed for r in results), [r for r in results if not r.passed]


def test_a_checking_process_leaves_jax_cache_unbounded_and_check_trims_it_once(tmp_path):
    """JAX's bounded cache rescans every entry under a file lock on each write (quadratic over a
    run: the test suite's time tripled); the harness's processes leave it unbounded and
    ``trim_cache`` keeps the limit after a run, deleting the oldest entries first."""
    import os

    from jaxrules.cli import trim_cache

    assert jax.config.jax_compilation_cache_max_size == -1  # this process: conftest's configure_check_process
    for age, name in enumerate(["new", "middle", "old"]):
        path = tmp_path / name
        path.write_bytes(b"x" * 100)
        os.utime(path, (1e9 - age, 1e9 - age))
    assert trim_cache(str(tmp_path), max_bytes=250) == 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["middle", "new"]
    assert trim_cache(str(tmp_path), max_bytes=250) == 0
    assert trim_cache(str(tmp_path / "absent")) == 0


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="on a GPU the kernels' records run as users run them")
def test_off_a_gpu_the_kernels_records_are_checked_only_on_request(tmp_path, capsys):
    """``check`` skips the fused kernels' records off a GPU (Pallas' interpret mode is no user's
    path there), naming why and the option that checks them; ``--interpret-kernels`` runs them."""
    argv = ["check", "--ops", "rms_norm", "--checks", "jit", "--quiet", "--workers", "1"]
    out = tmp_path / "report.json"
    assert main([*argv, "--json", str(out)]) == 0
    results = {r["op"]: r for r in json.loads(out.read_text())["results"]}
    assert set(results) == {"rms_norm", "rms_norm[pallas]"}
    assert not results["rms_norm"]["skipped"] and results["rms_norm"]["passed"]
    assert results["rms_norm[pallas]"]["skipped"] and "--interpret-kernels" in results["rms_norm[pallas]"]["detail"]
    assert main([*argv, "--interpret-kernels", "--json", str(out)]) == 0
    results = {r["op"]: r for r in json.loads(out.read_text())["results"]}
    assert not results["rms_norm[pallas]"]["skipped"] and results["rms_norm[pallas]"]["passed"]
    capsys.readouterr()


@pytest.mark.parametrize("op, check", [("var", "empty"), ("kl_div", "torch"), ("index_reduce", "torch")])
def test_the_torch_references_advice_stays_out_of_the_checks_output(op, check):
    """torch warns at the samples' edges (var's zero degrees of freedom, kl_div's 'mean', a beta
    op); the check compares, it does not pass torch's advice on to the user."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        assert run_check(jaxrules.registry.get(op), check).passed
    assert not [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
