"""Without Pallas' Triton backend (deprecated in JAX 0.11, to be removed) every op backed by its
kernels falls back to its XLA formulas with one warning. The backend is hidden by making
``jax.experimental.pallas.triton`` fail to import."""

from __future__ import annotations

import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrules import dispatch, nn
from jaxrules import nested as N

TRITON = "jax.experimental.pallas.triton"


@pytest.fixture
def hidden_triton(monkeypatch):
    """The Triton backend fails to import (as in a JAX that removed it); the lazy check is
    reset before and after."""
    dispatch.triton_backend_missing.cache_clear()
    monkeypatch.setitem(sys.modules, TRITON, None)  # import -> ModuleNotFoundError
    yield
    dispatch.triton_backend_missing.cache_clear()


def _layer_norm_plan(impl):
    """The plan ``layer_norm`` makes for 1000 rows of 1536 float32 with ``impl``."""
    from jaxrules.ops.normalization import _rows_plan

    return _rows_plan("layer_norm", impl, jax.ShapeDtypeStruct((1000, 1536), jnp.float32), 1536)


def test_this_jax_has_the_backend():
    """The environment the other tests compare against: the backend imports here, and
    ``impl="pallas"`` plans the kernels on the rule's launch."""
    dispatch.triton_backend_missing.cache_clear()
    assert dispatch.triton_backend_missing() is None
    plan = _layer_norm_plan("pallas")
    assert plan.impl == "pallas" and plan.launch == dispatch.rows_launch(1000, 1536)


def test_the_kernels_plan_falls_back_with_one_warning(hidden_triton):
    with pytest.warns(dispatch.KernelFallbackWarning, match="Triton backend is not available"):
        plan = _layer_norm_plan("pallas")
    assert plan.impl == "xla" and "Triton" in plan.reason and plan.launch is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second decision does not warn again
        assert _layer_norm_plan("pallas").impl == "xla"


def test_the_default_does_not_look_for_the_backend(hidden_triton):
    """The default (the XLA formulas) imports nothing of the backend: no warning on a machine
    without it."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _layer_norm_plan(None).impl == "xla" and _layer_norm_plan("xla").impl == "xla"
        nn.layer_norm(jnp.ones((2, 3)), 3)
    assert dispatch.triton_backend_missing.cache_info().currsize == 0


def _nested_inputs():
    rng = np.random.default_rng(0)
    lengths = [3, 0, 5]
    values = [jnp.asarray(rng.standard_normal((sum(lengths), 2, 16)), jnp.float32) for _ in range(3)]
    return [N.from_lengths(v, lengths) for v in values]


def test_nested_attention_kernel_impl_falls_back(hidden_triton):
    """An explicit kernel impl runs the XLA formulas (same values and gradients) and warns."""
    q, k, v = _nested_inputs()

    def loss(impl, q, k, v):
        return jnp.sum(N.scaled_dot_product_attention(q, k, v, impl=impl).values ** 2)

    with pytest.warns(dispatch.KernelFallbackWarning):
        value, grads = jax.value_and_grad(loss, argnums=(1, 2, 3))("pallas_interpret", q, k, v)
    want_value, want_grads = jax.value_and_grad(loss, argnums=(1, 2, 3))("xla", q, k, v)
    np.testing.assert_allclose(value, want_value, rtol=1e-6)
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got.values, want.values, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_a_norm_kernel_impl_falls_back(hidden_triton, op):
    """``impl="pallas"`` runs the XLA formulas instead: same values and gradients as ``impl="xla"``."""
    x = jnp.asarray(np.random.default_rng(1).standard_normal((4, 8, 3)), jnp.float32)
    w = jnp.linspace(0.5, 1.5, 3)
    calls = {
        "layer_norm": lambda x, w, impl: nn.layer_norm(x, 3, w, impl=impl),
        "rms_norm": lambda x, w, impl: nn.rms_norm(x, 3, w, impl=impl),
    }

    def loss(x, w, impl):
        return jnp.sum(jnp.sin(calls[op](x, w, impl)))

    with pytest.warns(dispatch.KernelFallbackWarning):
        got = jax.value_and_grad(loss, argnums=(0, 1))(x, w, "pallas")
    want = jax.value_and_grad(loss, argnums=(0, 1))(x, w, "xla")
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_the_kernel_records_are_not_applicable_without_the_backend(hidden_triton):
    """The harness skips every check of a kernel-backed record, saying why (its XLA twin record
    checks the formulas that then run); with the backend, the same check runs and passes."""
    from jaxrules import registry, testing

    kernel_records = [r for r in registry.records() if r.kernel_backed]
    assert sorted(r.name for r in kernel_records) == sorted(r.name for r in registry.records()
                                                            if r.name.endswith("[pallas]"))
    assert len(kernel_records) == 4  # layer and RMS norm, nested and dense attention
    record = registry.get("layer_norm[pallas]")
    with pytest.warns(dispatch.KernelFallbackWarning):
        hidden = testing.run_check(record, "formulas")
    assert hidden.passed and hidden.skipped and "Triton backend is not available" in hidden.detail
    sys.modules.pop(TRITON)  # the backend back
    dispatch.triton_backend_missing.cache_clear()
    present = testing.run_check(record, "formulas")
    assert present.passed and not present.skipped, present
