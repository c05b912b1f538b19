"""Strict promotion: the op records under ``jax.numpy_rank_promotion("raise")`` and
``jax.numpy_dtype_promotion("strict")`` (the harness's opt-in ``strict_promotion`` check,
``python -m jaxrules check --strict-promotion``), and the cases a user met explicitly.

A record takes 0.3-20 CPU s (two compilations per sample), so a CI run checks a rotating subset
(``SUBSET``, seeded by the commit, ``tests/_rotation.py``) besides the records in ``ALWAYS``;
``JAXRULES_STRICT_ALL=1`` checks every record. ``STRICT_OPEN`` lists the records whose formulas
promote implicitly, each with where (none: every record passes); a listed record in the
subset must still fail, so a fixed one is removed."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _rotation import commit_seed, rotating_subset

import jaxrules.numpy as rnp
import jaxrules.scipy.linalg as rsl
from jaxrules import define_op, records
from jaxrules.registry import OpRecord, Sample
from jaxrules.testing import check_strict_promotion, release_programs, run_check, strict_promotion

SUBSET = 8
# Records checked every run: the cheap ones that promoted implicitly. The linear-algebra ones that did
# (det, slogdet, adjugate, the lu family, qr: 5-20 CPU s each, 90 together) are in the rotation, and
# ``test_lu_and_det_gradients_under_vmap`` below keeps their cases.
ALWAYS = ("pad", "matmul", "pinv")

STRICT_OPEN: dict[str, str] = {}  # record -> the formula that still promotes implicitly

ALL = [r.name for r in records()]


def _selected() -> list[str]:
    if os.environ.get("JAXRULES_STRICT_ALL"):
        return ALL
    rest = [n for n in ALL if n not in ALWAYS]
    return [n for n in ALL if n in ALWAYS or n in rotating_subset(rest, SUBSET, commit_seed(), "strict")]


def test_open_records_exist():
    assert set(STRICT_OPEN) <= set(ALL), sorted(set(STRICT_OPEN) - set(ALL))
    assert not set(STRICT_OPEN) & set(ALWAYS)


@pytest.mark.parametrize("name", _selected())
def test_strict_promotion_check(name):
    (record,) = [r for r in records() if r.name == name]
    result = run_check(record, "strict_promotion")
    release_programs()
    if name in STRICT_OPEN:
        assert not result.passed, f"{name} passes the strict_promotion check now: remove it from STRICT_OPEN"
    else:
        assert result.passed, result.detail


def _rng_matrices(shape, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def test_pad_linear_ramp_of_complex_input():
    """Value against NumPy's pad; JVP and VJP under strict promotion equal them under JAX's default."""
    z = _rng_matrices((3, 4), np.complex128)
    f = lambda z: rnp.pad(z, 2, "linear_ramp", end_values=1.0 - 2.0j)  # noqa: E731
    ct = _rng_matrices((7, 8), np.complex128, seed=1)
    want = jax.jvp(f, (z,), (z,)), jax.vjp(f, z)[1](ct)
    with strict_promotion():
        got = jax.jvp(f, (z,), (z,)), jax.vjp(f, z)[1](ct)
    np.testing.assert_allclose(got[0][0], np.pad(z, 2, "linear_ramp", end_values=1.0 - 2.0j), rtol=1e-12)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("target", [jnp.float32, jnp.float64, jnp.bfloat16])
def test_matmul_with_preferred_element_type(target):
    """``d sum(A A^T) / dA = 2 * (column sums of A)`` on every row, computed in NumPy."""
    a = _rng_matrices((3, 4), np.float32)
    with strict_promotion():
        out = rnp.matmul(a, a.T, preferred_element_type=target)
        grad = jax.grad(lambda a: rnp.matmul(a, a.T, preferred_element_type=target).astype(jnp.float32).sum())(a)
    assert out.dtype == jnp.dtype(target)
    tol = 2e-2 if target == jnp.bfloat16 else 1e-5
    np.testing.assert_allclose(np.asarray(out, np.float64), a.astype(np.float64) @ a.T.astype(np.float64), rtol=tol)
    np.testing.assert_allclose(grad, np.broadcast_to(2 * a.sum(0), a.shape), rtol=tol, atol=tol)


def test_lu_and_det_gradients_under_vmap():
    """vmap of the gradients of ``lu``, ``lu_factor``, ``det`` and ``slogdet`` under strict
    promotion equal the default's, and det's gradient is ``det(A) A^{-T}`` (NumPy)."""
    a = _rng_matrices((2, 3, 3))
    loss = lambda a: (rsl.lu(a)[2].sum() + rsl.lu_factor(a)[0].sum() + rnp.linalg.det(a)  # noqa: E731
                      + rnp.linalg.slogdet(a)[1])
    want = jax.vmap(jax.grad(loss))(a)
    with strict_promotion():
        got = jax.vmap(jax.grad(loss))(a)
        det_grad = jax.vmap(jax.grad(rnp.linalg.det))(a)
    np.testing.assert_array_equal(got, want)
    expected = np.linalg.det(a)[:, None, None] * np.swapaxes(np.linalg.inv(a), -1, -2)
    np.testing.assert_allclose(det_grad, expected, rtol=1e-10)


def test_qr_of_complex_input():
    """Gradient of ``|R|^2 + Re Q`` for complex A under strict promotion, against the default's."""
    a = _rng_matrices((4, 3), np.complex128)
    loss = lambda a: jnp.sum(jnp.abs(rnp.linalg.qr(a)[1]) ** 2) + jnp.sum(rnp.linalg.qr(a)[0].real)  # noqa: E731
    want = jax.grad(loss)(a)
    with strict_promotion():
        got = jax.grad(loss)(a)
    np.testing.assert_array_equal(got, want)


def test_the_check_fails_on_an_op_that_promotes():
    """An op whose VJP formula multiplies by a float64 constant array: fine in float64, a
    promotion in float32, which the check reports."""
    scale = np.float64(2.0)
    op = define_op("strict_promotion_probe", lambda x: 2 * x, lambda x, t: 2 * t, lambda x, ct: (scale * ct,))
    record = OpRecord("strict_promotion_probe", fn=op, public=("probe",), formula_ops=("strict_promotion_probe",),
                      seed=("none",), samples=lambda rng, dt: [Sample((rng.standard_normal(3).astype(dt),))],
                      torch_fn=None, torch_name="", low_precision=("float32",))
    with pytest.raises(jax.dtypes.TypePromotionError, match="float32"):
        check_strict_promotion(record)


def _probe_record(name, fn):
    return OpRecord(name, fn=fn, public=("probe",), formula_ops=(name,), seed=("none",),
                    samples=lambda rng, dt: [Sample((rng.standard_normal(3).astype(dt),))],
                    torch_fn=None, torch_name="")


def test_the_check_passes_one_program_whose_values_vary_from_run_to_run(monkeypatch):
    """A program whose values differ between two runs (as a GPU's atomic accumulations may) but that
    compiles to the same program under both promotions passes, saying so; the same difference from
    two different programs fails."""
    import jaxrules.testing as harness

    real = harness._strict_program
    runs = iter(range(1, 1000))

    class Noisy:  # the real program; each call's values moved by a different tiny amount on the host
        def __init__(self, f):
            self.jitted = real(f)

        def __call__(self, *inputs):
            nudge = 1 + 1e-9 * next(runs)
            return jax.tree.map(lambda x: np.asarray(x) * nudge, self.jitted(*inputs))

        def lower(self, *inputs):
            return self.jitted.lower(*inputs)

    monkeypatch.setattr(harness, "_strict_program", Noisy)
    record = _probe_record("strict_promotion_noisy", rnp.sin)
    worst, detail = check_strict_promotion(record)
    assert "one compiled program under both promotions" in detail and "float64" in detail, detail

    def promotion_dependent(x):  # traced under strict promotion: another constant, another program
        strict = jax.config.jax_numpy_dtype_promotion == "strict" and isinstance(x, jax.core.Tracer)
        return rnp.sin(x) * (1 + 1e-9 if strict else 1.0)

    monkeypatch.setattr(harness, "_strict_program", real)
    with pytest.raises(harness.CheckFailure, match="value, jvp, vjp and their vmap"):
        check_strict_promotion(_probe_record("strict_promotion_other_program", promotion_dependent))
