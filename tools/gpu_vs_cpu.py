"""Where a GPU's values leave the CPU's: float64 programs run on the default device and on the CPU
device of one process, stage by stage; prints each stage's largest difference.

The stages are those of the two programs that give wrong float64 values on jax 0.12.0.1's CUDA
backend and right ones on 0.11.2's and on 0.12.0.1's CPU (docs/compatibility.md): the CNN of
``tests/test_torch_ports.py`` in training mode, and ``scaled_dot_product_attention`` under
``jax.vmap`` with the query unbatched, beside the same attention in plain jax.numpy. Each stage
runs eagerly and under ``jit``, and its gradient, so a difference names the stage, the mode and
the direction. The CNN's stages end with its head (linear and cross-entropy), then the whole CNN
runs as one function of its input.

    PYTHONPATH=. python tools/gpu_vs_cpu.py [--dump DIR] [--no-optimizations]

``--dump DIR`` writes each stage's optimized GPU programs (``jit`` and ``jit grad``) to DIR, to
read which fusions XLA made of a stage that parts (e.g. a Triton fusion: ``"kind":"__triton"``).
Run it again under ``XLA_FLAGS`` that turn one of XLA's GPU passes off to see whether that pass
moves the difference. ``--no-optimizations`` compiles as the tests and the check do
(``jax_disable_most_optimizations``): on jax 0.12.0.1's GPU XLA's reduction behind batch norm's
statistics is wrong in some compilations, in every one seen under that setting
(docs/compatibility.md).
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxrules.nn as nn  # noqa: E402
import jaxrules.torch.nn.functional as F  # noqa: E402


def _cnn_stages(rng):
    """The CNN port's layers, each a function of its input alone (parameters fixed)."""
    w1, b1 = rng.standard_normal((6, 2, 3, 3)) / 3, rng.standard_normal(6)
    gamma, beta = 1 + rng.random(6) / 2, rng.standard_normal(6) / 4
    mean, var = rng.standard_normal(6) / 4, 0.5 + rng.random(6)
    w2, b2 = rng.standard_normal((5, 6, 3, 3)) / 4, rng.standard_normal(5)
    wf, bf, target = rng.standard_normal((3, 5)), rng.standard_normal(3), jnp.asarray([0, 2, 1, 2])
    return [
        ("pad replicate", lambda h: F.pad(h, (1, -1, 2, 0), mode="replicate")),
        ("conv2d 1", lambda h: F.conv2d(h, w1, b1, stride=(1,), padding=(1,))),
        ("batch_norm eval", lambda h: F.batch_norm(h, mean, var, gamma, beta, training=False)),
        ("batch_norm training", lambda h: F.batch_norm(h, mean, var, gamma, beta, training=True, momentum=0.1,
                                                       eps=1e-5)),
        ("relu + max_pool2d", lambda h: F.max_pool2d(F.relu(h), 2)),
        ("pad reflect", lambda h: F.pad(h, (1, 1, 1, 1), mode="reflect")),
        ("conv2d 2", lambda h: F.conv2d(h, w2, b2, padding=0, dilation=(1,))),
        ("avg_pool2d", lambda h: F.avg_pool2d(h, 3, stride=1, padding=(1,), count_include_pad=False)),
        ("pad negative", lambda h: F.pad(h, (-1, 0, 0, -1))),
        ("adaptive_avg_pool2d", lambda h: F.adaptive_avg_pool2d(h, 1)),
        ("linear + cross_entropy", lambda h: F.cross_entropy(F.linear(h.reshape(h.shape[0], -1), wf, bf), target)),
    ]


def _on(device, fn, *args):
    args = [jax.device_put(jnp.asarray(a), device) for a in args]
    with jax.default_device(device):
        return np.asarray(fn(*args))


def _compare(name, fn, *args, dump=None):
    gpu, cpu = jax.devices()[0], jax.devices("cpu")[0]
    loss = lambda *a: jnp.sum(jnp.sin(fn(*a)))  # noqa: E731 - a generic cotangent
    modes = (("eager", fn), ("jit", jax.jit(fn)), ("grad", jax.grad(loss)), ("jit grad", jax.jit(jax.grad(loss))))
    for mode, f in modes:
        ours, ref = _on(gpu, f, *args), _on(cpu, f, *args)
        scale = max(1.0, float(np.abs(ref).max(initial=0)))
        print(f"{name:28s} {mode:9s} max |gpu - cpu| / scale = {np.abs(ours - ref).max(initial=0) / scale:.1e}")
        if dump is not None and mode.startswith("jit"):
            placed = [jax.device_put(jnp.asarray(a), gpu) for a in args]
            text = f.lower(*placed).compile().as_text()
            (dump / f"{re.sub(r'[^a-z0-9]+', '_', f'{name} {mode}'.lower())}.hlo").write_text(text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dump", type=pathlib.Path, help="write the optimized GPU programs here")
    parser.add_argument("--no-optimizations", action="store_true",
                        help="compile with jax_disable_most_optimizations, as the tests and the check do")
    args = parser.parse_args(argv)
    dump = args.dump
    if args.no_optimizations:
        jax.config.update("jax_disable_most_optimizations", True)
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
    print(jax.__version__, jax.devices())
    rng = np.random.default_rng(1)
    h = rng.standard_normal((4, 2, 9, 8))
    x, stages = h, _cnn_stages(rng)
    for name, stage in stages:
        _compare(name, stage, h, dump=dump)
        if name != "batch_norm eval":  # the next stage reads the training-mode output
            h = _on(jax.devices("cpu")[0], stage, h)
    training = [stage for name, stage in stages if name != "batch_norm eval"]
    _compare("the whole CNN, training", lambda x: functools.reduce(lambda h, stage: stage(h), training, x), x,
             dump=dump)
    q, k, v = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 2, 5, 4)), rng.standard_normal((2, 2, 5, 3))
    attention = jax.vmap(nn.scaled_dot_product_attention, in_axes=(None, 0, 0))
    _compare("vmap attention, q unbatched", lambda k: attention(q, k, v), k, dump=dump)
    plain = jax.vmap(lambda q, k, v: jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) / 2, axis=-1) @ v, in_axes=(None, 0, 0))
    _compare("the same in jax.numpy", lambda k: plain(q, k, v), k, dump=dump)


if __name__ == "__main__":
    main()
