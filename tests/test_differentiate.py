"""jaxrules.differentiate: forward then backward equals jax.vjp; the residuals are what JAX saves;
the report names the non-differentiable equations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.core import Primitive

import jaxrules.numpy as rnp
from jaxrules import differentiate
from jaxrules.differentiate import nondifferentiable
from jaxrules.nn import layer_norm

RNG = np.random.default_rng(11)
X = jnp.asarray(RNG.standard_normal((4, 3)))
W = jnp.asarray(RNG.standard_normal((3, 2)))


def mlp(x, w):
    h = jnp.tanh(x @ w)
    return jnp.sum(rnp.linalg.vector_norm(h, axis=1)) + jnp.sum(jnp.sin(w))


def normed(x, w):
    return layer_norm(x @ w, 2) * 2.0, jnp.mean(x)


def scanned(x, w):
    def step(c, _):
        return jnp.tanh(c @ w @ w.T), None

    return jax.lax.scan(step, x, None, length=3)[0]


def _saved_residuals(fn, *args):
    from jax._src.ad_checkpoint import saved_residuals  # the data behind print_saved_residuals

    return [(tuple(a.shape), np.dtype(a.dtype)) for a, _ in saved_residuals(fn, *args)]


@pytest.mark.parametrize("fn", [mlp, normed, scanned], ids=lambda f: f.__name__)
def test_forward_then_backward_equals_vjp(fn):
    d = differentiate(fn, X, W)
    out, residuals = d.forward(X, W)
    ref_out, pullback = jax.vjp(fn, X, W)
    cts = jax.tree.map(lambda o: jnp.asarray(RNG.standard_normal(o.shape)), ref_out)
    for a, b in zip(jax.tree.leaves((out, d.backward(residuals, cts))), jax.tree.leaves((ref_out, pullback(cts)))):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    # Residuals are plain arrays: they can cross a step or a device (here: through host memory).
    moved = [jnp.asarray(np.asarray(r)) for r in residuals]
    for a, b in zip(jax.tree.leaves(d.backward(moved, cts)), jax.tree.leaves(pullback(cts))):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fn", [mlp, normed, scanned], ids=lambda f: f.__name__)
def test_captured_is_what_jax_saves(fn):
    d = differentiate(fn, X, W)
    saved = _saved_residuals(fn, X, W)
    assert sorted((c.shape, c.dtype.str) for c in d.captured) == sorted((s, t.str) for s, t in saved)
    assert d.residual_bytes == sum(int(np.prod(s)) * t.itemsize for s, t in saved)
    _, residuals = d.forward(X, W)
    assert [r.shape for r in residuals] == [c.shape for c in d.captured]


def test_captured_names_its_source():
    d = differentiate(mlp, X, W)
    sources = [c.source for c in d.captured]
    assert "the argument 0" in sources and "the argument 1" in sources
    assert any(s.startswith("tanh from") for s in sources)
    # the vector_norm op's output: a custom_jvp application (call_hi_primitive under jax_custom_jvp3)
    assert any(s.startswith(("custom_jvp_call from", "call_hi_primitive from")) and "jvp_rule" in s for s in sources)
    assert "residuals" in repr(d)


no_rule_p = Primitive("test_no_rule")
no_rule_p.def_impl(lambda x: x * 2)
no_rule_p.def_abstract_eval(lambda x: x)


def test_report_names_non_differentiable_equations():
    def fn(x, w):
        i = jnp.argmax(x)
        frozen = jax.lax.stop_gradient(w)
        return jnp.sum(x @ frozen) + i

    reasons = {r.equation.split()[0]: r.reason for r in differentiate(fn, X, W).report}
    assert "integer" in reasons["argmax"]
    assert "stop_gradient" in reasons["stop_gradient"]
    assert differentiate(mlp, X, W).report == []


def test_a_primitive_without_a_rule_is_reported_and_refused():
    def fn(x):
        return jnp.sum(no_rule_p.bind(x))

    (entry,) = nondifferentiable(fn, X)
    assert entry.equation.startswith("test_no_rule") and "no differentiation rule" in entry.reason
    with pytest.raises(ValueError, match="cannot be differentiated: test_no_rule"):
        differentiate(fn, X)
