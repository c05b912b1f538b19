"""Training-step time of the examples' models with jaxrules vs the same file with plain JAX swapped
in (``examples/plain.py``): the GPT of ``examples/gpt.py`` and the CNN of ``examples/cnn.py`` at a
GPU size, one optax Adam step (forward, backward, update) under ``jit``, the two programs timed
alternately in one process (``bench.interleaved_median_ms``), medians.

    PYTHONPATH=. python3 benchmarks/examples_step.py --out step.md
    PYTHONPATH=. python3 benchmarks/examples_step.py --scale 8 --repeats 3   # CPU smoke run
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys

import equinox as eqx
import jax
import optax

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import bench  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "examples_plain", pathlib.Path(__file__).resolve().parents[1] / "examples" / "plain.py")
plain_jax = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plain_jax)


def gpt_steps(scale: int, vocab: int = 1024):
    """A label and ``[(step, args)]`` for jaxrules and plain JAX: one Adam step of the GPT
    (float32; its head is jaxrules' fused ``linear_cross_entropy``, plain JAX's logits and
    cross-entropy: ``vocab=32768`` makes the head a large part of the step)."""
    sizes = {"vocab": vocab, "seq_len": 512 // scale, "d_model": 512 // scale, "n_heads": 8, "n_layers": 4}
    batch = max(1, 32 // scale)
    steps = []
    for module in (plain_jax.load("gpt"), plain_jax.load("gpt", plain=True)):
        model = module.GPT(jax.random.PRNGKey(0), **sizes)
        optimizer = optax.adam(1e-3)
        opt_state = optimizer.init(eqx.filter(model, eqx.is_array))
        tokens = module.make_batch(jax.random.PRNGKey(1), batch=batch, seq_len=sizes["seq_len"],
                                   vocab=sizes["vocab"])

        @eqx.filter_jit
        def step(model, opt_state, tokens, module=module, optimizer=optimizer):
            loss, grads = eqx.filter_value_and_grad(module.loss_fn)(model, tokens)
            updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(model, eqx.is_array))
            return eqx.apply_updates(model, updates), opt_state, loss

        steps.append((step, (model, opt_state, tokens)))
    label = (f"gpt: batch {batch}, seq {sizes['seq_len']}, d_model {sizes['d_model']}, 8 heads, 4 layers, "
             f"vocab {vocab}")
    return label, steps


def cnn_steps(scale: int):
    """A label and ``[(step, args)]`` for jaxrules and plain JAX: one Adam step of the CNN
    (float32, batch norm in training mode)."""
    channels, size, batch = (1, 64, 128, 256), max(8, 64 // scale), max(2, 128 // scale)
    steps = []
    for module in (plain_jax.load("cnn"), plain_jax.load("cnn", plain=True)):
        params, batch_stats = module.init(jax.random.PRNGKey(0), channels=channels, size=size)
        optimizer = optax.adam(1e-3)
        opt_state = optimizer.init(params)
        x, y = module.make_batch(jax.random.PRNGKey(1), batch=batch, size=size)

        @jax.jit
        def step(params, batch_stats, opt_state, x, y, module=module, optimizer=optimizer):
            (loss, batch_stats), grads = jax.value_and_grad(module.loss_fn, has_aux=True)(params, batch_stats, x, y)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), batch_stats, opt_state, loss

        steps.append((step, (params, batch_stats, opt_state, x, y)))
    label = f"cnn: batch {batch}, {size}x{size}, channels {channels}"
    return label, steps


def cnn_layer_calls(scale: int):
    """``[(label, {"jaxrules": call, "plain JAX": call})]``: forward+backward (``jit`` of ``vjp``
    with a ones cotangent) of each layer op of the CNN step at its shapes, to find which op a
    slower step comes from (``--layers``)."""
    import jax.numpy as jnp

    import jaxrules.nn as nn

    channels, size, batch = (1, 64, 128, 256), max(8, 64 // scale), max(2, 128 // scale)
    plain = plain_jax.PLAIN_NN
    key = jax.random.PRNGKey(0)
    calls = []

    def timed(label, make, *args):
        def call(fn):
            run = jax.jit(lambda *a: jax.vjp(fn, *a)[1](jax.tree.map(jnp.ones_like, jax.eval_shape(fn, *a))))
            return lambda: run(*args)

        calls.append((label, {"jaxrules": call(make(nn)), "plain JAX": call(make(plain))}))

    for c_in, c_out in zip(channels, channels[1:]):
        x = jax.random.normal(key, (batch, c_in, size, size), jnp.float32)
        w = jax.random.normal(key, (c_out, c_in, 3, 3), jnp.float32)
        y = jax.random.normal(key, (batch, c_out, size, size), jnp.float32)
        ones = jnp.ones(c_out, jnp.float32)
        shape = f"{batch}x{c_in}x{size}x{size}"
        timed(f"conv2d {shape} -> {c_out}", lambda m: lambda x, w: m.conv2d(x, w, padding=1), x, w)
        timed(f"batch_norm (training) {batch}x{c_out}x{size}x{size}",
              lambda m, r=ones: lambda y, w, b: m.batch_norm(y, r, r, w, b, training=True)[0], y, ones, ones)
        timed(f"max_pool2d {batch}x{c_out}x{size}x{size}", lambda m: lambda y: m.max_pool2d(y, 2), y)
        size //= 2
    return calls


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=1, help="divide the sizes (CPU smoke runs)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--models", default="gpt,gpt32k,cnn")
    parser.add_argument("--out")
    parser.add_argument("--layers", action="store_true", help="time the CNN's layer ops one by one instead")
    args = parser.parse_args(argv)
    if args.layers:
        for label, calls in cnn_layer_calls(args.scale):
            times = bench.interleaved_median_ms(calls, args.repeats)
            print(f"| {label} | {times['jaxrules']:.3f} | {times['plain JAX']:.3f} | "
                  f"{times['plain JAX'] / times['jaxrules']:.2f}x |", flush=True)
        return
    lines = [f"Device: {jax.devices()[0].device_kind}, jax {jax.__version__}; ms per training step (median of "
             f"{args.repeats} runs of {bench.CALLS_PER_RUN} queued steps, the two programs alternating).", "",
             "| model | jaxrules ms | plain JAX ms | plain / jaxrules |", "| --- | --- | --- | --- |"]
    builders = {"gpt": gpt_steps, "gpt32k": lambda scale: gpt_steps(scale, vocab=32768), "cnn": cnn_steps}
    for name in args.models.split(","):
        label, ((ours, ours_args), (plain, plain_args)) = builders[name](args.scale)
        times = bench.interleaved_median_ms({"ours": lambda: ours(*ours_args), "plain": lambda: plain(*plain_args)},
                                            args.repeats)
        ours_ms, plain_ms = times["ours"], times["plain"]
        lines.append(f"| {label} | {ours_ms:.3f} | {plain_ms:.3f} | {plain_ms / ours_ms:.2f}x |")
        print(lines[-1], flush=True)
    table = "\n".join(lines)
    print(table)
    if args.out:
        pathlib.Path(args.out).write_text(table + "\n")


if __name__ == "__main__":
    main()
