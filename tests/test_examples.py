"""The models of examples/: they train with optax (the loss falls), and the
same file with plain JAX swapped in for jaxrules' two namespaces gives the same gradients.

"Swapped in" is literal: each example is loaded twice from its file (``examples/plain.py``'s
``load``); in the second copy the module globals ``jnp`` and ``nn`` become ``jax.numpy`` and
plain-JAX versions of the torch functions jax.nn lacks, differentiated by JAX's own autodiff.
The models avoid the points where the two conventions differ (ties in max
pooling, relu at 0; see examples/cnn.py), so the gradients must agree to float32 rounding.
"""

import importlib.util
import pathlib

import equinox as eqx
import jax
import numpy as np

_spec = importlib.util.spec_from_file_location(
    "examples_plain", pathlib.Path(__file__).resolve().parents[1] / "examples" / "plain.py")
plain_jax = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plain_jax)
load = plain_jax.load

# Gradient agreement, relative to each parameter's largest gradient entry (float32 models).
GRAD_RTOL = 1e-5


def grad_errors(grads, reference):
    """Per leaf: max |g - g_ref| / max |g_ref|."""
    leaves, ref_leaves = jax.tree.leaves(grads), jax.tree.leaves(reference)
    assert len(leaves) == len(ref_leaves)
    errors = []
    for g, r in zip(leaves, ref_leaves):
        assert g.shape == r.shape and g.dtype == r.dtype == np.float32
        g, r = np.asarray(g, np.float64), np.asarray(r, np.float64)
        assert np.all(np.isfinite(g))
        errors.append(np.max(np.abs(g - r)) / np.max(np.abs(r)))
    return np.array(errors)


def assert_swap_took_effect(grad_fn, args, grad_fn_plain, args_plain):
    """jaxrules' rules run in the first gradient program and nowhere in the plain one."""
    assert "jaxrules" in str(jax.make_jaxpr(grad_fn)(*args))
    assert "jaxrules" not in str(jax.make_jaxpr(grad_fn_plain)(*args_plain))


def assert_same_leaves(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_gpt_trains_and_matches_plain_jax():
    gpt, plain = load("gpt"), load("gpt", plain=True)
    model, losses = gpt.train(steps=60)
    assert all(np.isfinite(losses))
    assert losses[0] > 0.9 * np.log(gpt.VOCAB)  # an untrained model: about uniform
    assert np.mean(losses[-10:]) < 0.3 * losses[0], losses
    # Plain JAX trains the same way: the same loss curve up to float32 rounding (measured: 3e-6).
    _, losses_plain = plain.train(steps=60)
    np.testing.assert_allclose(losses, losses_plain, rtol=0, atol=1e-4)

    grad_fns = [eqx.filter_jit(eqx.filter_value_and_grad(m.loss_fn)) for m in (gpt, plain)]
    fresh = gpt.GPT(jax.random.PRNGKey(1))
    # Twins of fresh and the trained model (instances of gpt.GPT): plain.GPT instances with the same arrays.
    plain_structure = jax.tree.structure(jax.eval_shape(plain.GPT, jax.random.PRNGKey(1)))
    fresh_plain, trained_plain = (jax.tree.unflatten(plain_structure, jax.tree.leaves(m)) for m in (fresh, model))
    tokens = gpt.make_batch(jax.random.PRNGKey(2))
    params, static = eqx.partition(fresh, eqx.is_array)
    params_plain, static_plain = eqx.partition(fresh_plain, eqx.is_array)  # plain.GPT's methods
    assert_swap_took_effect(lambda p: jax.grad(gpt.loss_fn)(eqx.combine(p, static), tokens), (params,),
                            lambda p: jax.grad(plain.loss_fn)(eqx.combine(p, static_plain), tokens), (params_plain,))
    for m, m_plain in ((fresh, fresh_plain), (model, trained_plain)):
        (loss, grads), (loss_plain, grads_plain) = grad_fns[0](m, tokens), grad_fns[1](m_plain, tokens)
        np.testing.assert_allclose(loss, loss_plain, rtol=1e-5)
        errors = grad_errors(eqx.filter(grads, eqx.is_array), eqx.filter(grads_plain, eqx.is_array))
        print(f"gpt: loss {float(loss):.6f} vs {float(loss_plain):.6f}, max relative gradient error {errors.max():.2e}")
        assert errors.max() < GRAD_RTOL, errors


def test_cnn_trains_threads_running_stats_and_matches_plain_jax():
    cnn, plain = load("cnn"), load("cnn", plain=True)
    params, batch_stats, losses = cnn.train(steps=40)
    assert all(np.isfinite(losses))
    assert np.mean(losses[-10:]) < 0.3 * losses[0], losses
    # Plain JAX trains the same way: the same loss curve up to float32 rounding (measured: 1e-7).
    np.testing.assert_allclose(losses, plain.train(steps=40)[2], rtol=0, atol=1e-4)
    # The running statistics moved with training, and eval mode (which uses them) classifies.
    _, init_stats = cnn.init(jax.random.PRNGKey(0))
    assert all(np.max(np.abs(np.asarray(a) - np.asarray(b))) > 1e-2
               for a, b in zip(jax.tree.leaves(batch_stats), jax.tree.leaves(init_stats)))
    x, y = cnn.make_batch(jax.random.PRNGKey(123), batch=128)
    assert float(cnn.accuracy(params, batch_stats, x, y)) > 0.9

    grad_fns = [jax.jit(jax.value_and_grad(m.loss_fn, has_aux=True)) for m in (cnn, plain)]
    fresh, fresh_stats = cnn.init(jax.random.PRNGKey(1))
    assert_same_leaves((fresh, fresh_stats), plain.init(jax.random.PRNGKey(1)))
    x, y = cnn.make_batch(jax.random.PRNGKey(2))
    args = (fresh, fresh_stats, x, y)
    assert_swap_took_effect(jax.grad(cnn.loss_fn, has_aux=True), args, jax.grad(plain.loss_fn, has_aux=True), args)
    for p, s in ((fresh, fresh_stats), (params, batch_stats)):
        (loss, stats), grads = grad_fns[0](p, s, x, y)
        (loss_plain, stats_plain), grads_plain = grad_fns[1](p, s, x, y)
        np.testing.assert_allclose(loss, loss_plain, rtol=1e-5)
        for a, b in zip(jax.tree.leaves(stats), jax.tree.leaves(stats_plain), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        errors = grad_errors(grads, grads_plain)
        print(f"cnn: loss {float(loss):.6f} vs {float(loss_plain):.6f}, max relative gradient error {errors.max():.2e}")
        assert errors.max() < GRAD_RTOL, errors
