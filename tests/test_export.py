"""``jax.export`` of models built on jaxrules: the XLA paths (what runs on
a CPU) export, serialize, deserialize and give the same values; the fused kernels' Triton custom
calls are refused by ``jax.export``'s compatibility check, as the README's "Supported JAX" says."""

import importlib.util
import pathlib

import equinox as eqx
import jax
import jax.numpy
import numpy as np
import pytest
from _cuda_lowering import for_cuda

import jaxrules.nn as nn

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}_export", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def roundtrip(fn, *args):
    """Export ``jit(fn)`` at ``args``, serialize, deserialize, call; returns (restored outputs,
    direct outputs, the exported module's text)."""
    exported = jax.export.export(jax.jit(fn))(*args)
    blob = exported.serialize()
    assert isinstance(blob, bytearray) and len(blob) > 0
    restored = jax.export.deserialize(blob)
    assert restored.in_avals == exported.in_avals and restored.out_avals == exported.out_avals
    return restored.call(*args), jax.jit(fn)(*args), exported.mlir_module()


def assert_same(a, b):
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b) and leaves_a
    for x, y in zip(leaves_a, leaves_b, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)


def test_gpt_loss_and_grad_export_and_reload():
    gpt = load("gpt")
    model = gpt.GPT(jax.random.PRNGKey(0))
    params, static = eqx.partition(model, eqx.is_array)
    leaves, treedef = jax.tree.flatten(params)  # Equinox classes are not serializable pytree nodes
    tokens = gpt.make_batch(jax.random.PRNGKey(1))

    def loss_and_grad(leaves, tokens):
        loss_of = lambda leaves: gpt.loss_fn(eqx.combine(jax.tree.unflatten(treedef, leaves), static), tokens)
        return jax.value_and_grad(loss_of)(leaves)

    assert "jaxrules" in str(jax.make_jaxpr(loss_and_grad)(leaves, tokens))  # jaxrules' rules are in it
    restored, direct, text = roundtrip(loss_and_grad, leaves, tokens)
    assert "custom_call" not in text
    assert_same(restored, direct)
    assert np.isfinite(float(restored[0])) and float(restored[0]) > 1.0


def test_cnn_training_step_export_and_reload():
    cnn = load("cnn")
    params, batch_stats = cnn.init(jax.random.PRNGKey(0))
    x, y = cnn.make_batch(jax.random.PRNGKey(1))
    step = jax.value_and_grad(cnn.loss_fn, has_aux=True)  # ((loss, new running statistics), grads)
    assert "jaxrules" in str(jax.make_jaxpr(step)(params, batch_stats, x, y))
    restored, direct, text = roundtrip(step, params, batch_stats, x, y)
    assert "custom_call" not in text
    assert_same(restored, direct)


def test_fused_kernels_are_not_export_stable():
    """The Pallas (Triton) path lowers to a custom call that jax.export refuses to serialize; the same
    function with ``impl="xla"`` (the README's advice) exports for the GPU."""
    fn = lambda impl: jax.jit(lambda x, w, b: jax.numpy.sum(nn.layer_norm(x, (64,), w, b, impl=impl)))
    args = (jax.numpy.ones((128, 64), jax.numpy.float32), jax.numpy.ones(64, jax.numpy.float32),
            jax.numpy.zeros(64, jax.numpy.float32))
    with pytest.raises(ValueError, match="custom calls whose targets have no compatibility guarantees"), for_cuda():
        jax.export.export(fn("pallas"), platforms=("cuda",))(*args)  # for_cuda: lowered without a GPU
    exported = jax.export.export(fn("xla"), platforms=("cuda",))(*args)
    assert exported.platforms == ("cuda",) and "custom_call" not in exported.mlir_module()
    assert jax.export.deserialize(exported.serialize()).platforms == ("cuda",)
