"""The examples with plain JAX swapped in for jaxrules: ``load(name, plain=True)`` is a fresh
copy of ``examples/<name>.py`` whose globals ``jnp`` and ``nn`` (the only jaxrules objects it
holds, checked) are ``jax.numpy`` and ``PLAIN_NN`` -- ``jax.nn`` plus plain-JAX versions of the
torch functions jax.nn lacks (``layer_norm``, ``batch_norm``, ``conv2d``, ``max_pool2d``,
``cross_entropy``, ``scaled_dot_product_attention``) and of jaxrules' fused head
``linear_cross_entropy`` (the logits, then ``cross_entropy``), differentiated by JAX's own autodiff.
Used by ``tests/test_examples.py`` (same gradients) and ``benchmarks/examples_step.py`` (step
time on a GPU)."""

import importlib.util
import pathlib
import types

import jax
import jax.numpy
from jax import lax

EXAMPLES = pathlib.Path(__file__).resolve().parent


def _cross_entropy(input, target):
    logp = jax.nn.log_softmax(input, axis=1)
    return -jax.numpy.mean(jax.numpy.take_along_axis(logp, target[:, None], axis=1))


def _linear_cross_entropy(input, weight, target):
    logits = jax.numpy.matmul(input, weight.T)
    return _cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def _layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    axes = tuple(range(-len(normalized_shape), 0))
    mean = jax.numpy.mean(x, axes, keepdims=True)
    var = jax.numpy.var(x, axes, keepdims=True)
    y = (x - mean) / jax.numpy.sqrt(var + eps)
    return y * weight + bias


def _batch_norm(x, running_mean, running_var, weight=None, bias=None, *, training=False, momentum=0.1, eps=1e-5):
    axes = (0, *range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if training:
        mean, var = jax.numpy.mean(x, axes), jax.numpy.var(x, axes)
        n = x.size // x.shape[1]
        new_mean = (1 - momentum) * running_mean + momentum * lax.stop_gradient(mean)
        new_var = (1 - momentum) * running_var + momentum * lax.stop_gradient(var) * n / (n - 1)
    else:
        mean, var, new_mean, new_var = running_mean, running_var, running_mean, running_var
    y = (x - mean.reshape(shape)) / jax.numpy.sqrt(var.reshape(shape) + eps)
    return y * weight.reshape(shape) + bias.reshape(shape), new_mean, new_var


def _conv2d(input, weight, bias=None, stride=1, padding=0):
    y = lax.conv_general_dilated(input, weight, (stride, stride), [(padding, padding)] * 2,
                                 dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return y if bias is None else y + bias.reshape(1, -1, 1, 1)


def _max_pool2d(input, kernel_size, stride=None):
    stride = stride or kernel_size
    return lax.reduce_window(input, -jax.numpy.inf, lax.max, (1, 1, kernel_size, kernel_size),
                             (1, 1, stride, stride), "VALID")


def _scaled_dot_product_attention(query, key, value, is_causal=False):
    scores = jax.numpy.matmul(query, jax.numpy.swapaxes(key, -1, -2)) / jax.numpy.sqrt(query.shape[-1])
    if is_causal:
        scores = jax.numpy.where(jax.numpy.tri(*scores.shape[-2:], dtype=bool), scores, -jax.numpy.inf)
    return jax.numpy.matmul(jax.nn.softmax(scores, axis=-1), value)


PLAIN_NN = types.SimpleNamespace(
    **{name: getattr(jax.nn, name) for name in dir(jax.nn) if not name.startswith("_")},
    cross_entropy=_cross_entropy, linear_cross_entropy=_linear_cross_entropy, layer_norm=_layer_norm,
    batch_norm=_batch_norm, conv2d=_conv2d, max_pool2d=_max_pool2d,
    scaled_dot_product_attention=_scaled_dot_product_attention)


def load(name, plain=False):
    """A fresh copy of examples/<name>.py; ``plain``: jax.numpy / PLAIN_NN in place of jaxrules'."""
    spec = importlib.util.spec_from_file_location(f"example_{name}_{'plain' if plain else 'jaxrules'}",
                                                  EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import jaxrules.nn
    import jaxrules.numpy
    assert module.jnp is jaxrules.numpy and module.nn is jaxrules.nn
    others = [k for k, v in vars(module).items()
              if k not in ("jnp", "nn") and getattr(v, "__module__", "").startswith("jaxrules")]
    assert not others, f"{name}.py holds jaxrules objects besides jnp and nn: {others}"
    if plain:
        module.jnp, module.nn = jax.numpy, PLAIN_NN
    return module
