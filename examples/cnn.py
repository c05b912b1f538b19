"""A small CNN written the way JAX users write one, with jaxrules swapped in.

The only jaxrules-specific lines are the two imports below: ``jaxrules.numpy`` and ``jaxrules.nn``
are drop-in namespaces for ``jax.numpy`` and ``jax.nn``, plus torch's ``conv2d``, ``batch_norm``,
``max_pool2d`` and ``cross_entropy`` (NCHW, torch's signatures), which ``jax.nn`` lacks.
``tests/test_examples.py`` loads this file a second time with ``jax.numpy`` / ``jax.nn`` (and plain
JAX versions of those torch functions) in place of the two namespaces and checks that the
gradients and the running statistics agree.

Model: two blocks of conv 3x3 (no bias) -> batch_norm (training mode) -> max_pool 2x2 -> relu, then a
linear classifier; loss: ``nn.cross_entropy``. Parameters and the batch norm running statistics
are plain dicts: ``forward`` returns the new running statistics (``nn.batch_norm`` returns them
rather than updating in place) and the training loop threads them through its state beside the
optax state. Max pooling comes before relu (the same values: both are monotone) so that a pooling
window never holds tied zeros, where "which element gets the gradient" is a convention. Task: 8x8
images with a horizontal or vertical bar (4 classes: the bar's orientation and half) in noise.

Run it: ``python examples/cnn.py`` (CPU, a few seconds).
"""

import functools

import jax
import optax

import jaxrules.nn as nn
import jaxrules.numpy as jnp

CHANNELS, N_CLASSES, SIZE = (1, 8, 16), 4, 8


def init(key, channels=CHANNELS, n_classes=N_CLASSES, size=SIZE):
    """Returns (params, batch_stats): the trained weights and the batch norm running statistics."""
    keys = jax.random.split(key, len(channels))
    params, batch_stats = {}, {}
    for i, (c_in, c_out) in enumerate(zip(channels[:-1], channels[1:])):
        fan_in = c_in * 9
        params[f"conv{i}"] = {"w": jax.random.normal(keys[i], (c_out, c_in, 3, 3), jnp.float32) / jnp.sqrt(fan_in)}
        params[f"bn{i}"] = {"w": jnp.ones(c_out, jnp.float32), "b": jnp.zeros(c_out, jnp.float32)}
        batch_stats[f"bn{i}"] = {"mean": jnp.zeros(c_out, jnp.float32), "var": jnp.ones(c_out, jnp.float32)}
    features = channels[-1] * (size // 2 ** (len(channels) - 1)) ** 2
    params["fc"] = {"w": jax.random.normal(keys[-1], (features, n_classes), jnp.float32) / jnp.sqrt(features),
                    "b": jnp.zeros(n_classes, jnp.float32)}
    return params, batch_stats


def forward(params, batch_stats, x, training):
    """x: (batch, channels, height, width) -> (logits, new batch_stats)."""
    new_stats = {}
    for i in range(len(batch_stats)):
        conv, bn, stats = params[f"conv{i}"], params[f"bn{i}"], batch_stats[f"bn{i}"]
        x = nn.conv2d(x, conv["w"], padding=1)  # no bias: batch norm subtracts it again
        x, mean, var = nn.batch_norm(x, stats["mean"], stats["var"], bn["w"], bn["b"], training=training,
                                     momentum=0.1)
        new_stats[f"bn{i}"] = {"mean": mean, "var": var}
        x = nn.relu(nn.max_pool2d(x, 2))
    logits = jnp.matmul(x.reshape(x.shape[0], -1), params["fc"]["w"]) + params["fc"]["b"]
    return logits, new_stats


def loss_fn(params, batch_stats, x, y):
    """Training-mode loss; aux: the updated running statistics."""
    logits, new_stats = forward(params, batch_stats, x, training=True)
    return nn.cross_entropy(logits, y), new_stats


@functools.partial(jax.jit, static_argnames=("batch", "size"))
def make_batch(key, batch=32, size=SIZE):
    """(images (batch, 1, size, size), labels): label 0/1 a horizontal bar in the top/bottom half,
    2/3 a vertical bar in the left/right half, in Gaussian noise."""
    k_label, k_pos, k_noise = jax.random.split(key, 3)
    labels = jax.random.randint(k_label, (batch,), 0, N_CLASSES)
    pos = jax.random.randint(k_pos, (batch,), 0, size // 2) + (labels % 2) * (size // 2)
    line = (jnp.arange(size)[None, :] == pos[:, None]).astype(jnp.float32)  # (batch, size)
    horizontal = jnp.broadcast_to(line[:, :, None], (batch, size, size))
    vertical = jnp.broadcast_to(line[:, None, :], (batch, size, size))
    images = jnp.where((labels < 2)[:, None, None], horizontal, vertical)
    images = images + 0.3 * jax.random.normal(k_noise, images.shape, jnp.float32)
    return images[:, None], labels


def train(steps=40, seed=0, learning_rate=1e-2):
    """Train from scratch; returns (params, batch_stats, list of losses)."""
    key_model, key_data = jax.random.split(jax.random.PRNGKey(seed))
    params, batch_stats = init(key_model)
    optimizer = optax.adam(learning_rate)
    opt_state = optimizer.init(params)

    @jax.jit
    def step(params, batch_stats, opt_state, x, y):
        (loss, batch_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch_stats, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), batch_stats, opt_state, loss

    losses = []
    for key in jax.random.split(key_data, steps):
        params, batch_stats, opt_state, loss = step(params, batch_stats, opt_state, *make_batch(key))
        losses.append(float(loss))
    return params, batch_stats, losses


@jax.jit
def accuracy(params, batch_stats, x, y):
    """Eval-mode accuracy (normalized with the running statistics)."""
    logits, _ = forward(params, batch_stats, x, training=False)
    return jnp.mean(jnp.argmax(logits, axis=-1) == y)


if __name__ == "__main__":
    params, batch_stats, losses = train()
    for i in range(0, len(losses), 10):
        print(f"step {i:3d}  loss {losses[i]:.4f}")
    print(f"step {len(losses) - 1:3d}  loss {losses[-1]:.4f}")
    x, y = make_batch(jax.random.PRNGKey(123), batch=256)
    print(f"eval accuracy (running statistics) {float(accuracy(params, batch_stats, x, y)):.3f}")
