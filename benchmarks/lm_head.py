"""The fused language-model head ``jaxrules.nn.linear_cross_entropy`` against plain JAX: peak
temporary memory and time of forward+backward (the mean loss and the gradients of the input and
the weight, one ``jit`` program each) in bfloat16, side by side in one process, over a grid of
vocabularies (32k, 128k, 256k), tokens (4k-32k) and widths (768-8192).

Three heads:

* ``jaxrules``: ``nn.linear_cross_entropy(x, w, t)`` (chunked over the vocabulary, the chunk
  picked from the shapes);
* ``unfused``: plain JAX's head, ``logits = x @ w.T`` (bfloat16, float32 accumulation inside the
  matmul), ``logsumexp`` of the float32 logits minus ``take_along_axis``, differentiated by JAX;
* ``checkpointed``: plain JAX's strongest head, a ``lax.map`` over chunks of the tokens of a
  ``jax.checkpoint``-ed chunk loss (the backward recomputes each chunk's logits); two chunk
  sizes are tried (the token count whose logits match jaxrules' chunk budget, and 8x that) and
  the faster is reported.

Temporary memory: ``compiled.memory_analysis().temp_size_in_bytes``. Time: the median of
``--repeats`` calls (each waited for with ``block_until_ready``, the heads alternating) after
warmup. Every program is compiled first, in a thread pool (XLA's compiles release the GIL); a
head whose temporaries and arguments do not fit the device is skipped ("n/a").

    PYTHONPATH=. python3 benchmarks/lm_head.py --out lm_head.json          # GPU (one H200: ~4 min)
    PYTHONPATH=. python3 benchmarks/lm_head.py --quick                     # CPU smoke run (seconds)

Bars: temporary memory <= 0.25x of the unfused head's at vocabularies >= 128k, time
>= 1.0x of both plain heads (speedup = their time / jaxrules' time).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxrules.nn as nn
from jaxrules.partials.losses import LCE_CHUNK_ELEMENTS

# (tokens, features, vocabulary): every vocabulary with tokens 4k-32k and widths 768-8192.
GRID = [
    (4096, 768, 32768), (16384, 4096, 32768), (32768, 8192, 32768), (32768, 768, 32768),
    (4096, 768, 131072), (4096, 8192, 131072), (16384, 768, 131072), (16384, 4096, 131072), (32768, 4096, 131072),
    (4096, 768, 262144), (4096, 8192, 262144), (16384, 2048, 262144), (32768, 768, 262144),
]
QUICK_GRID = [(64, 16, 512)]


def jaxrules_head(x, w, t):
    return nn.linear_cross_entropy(x, w, t)


def unfused_head(x, w, t):
    logits = x @ w.T
    lse = jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1)
    picked = jnp.take_along_axis(logits, t[:, None], axis=-1)[:, 0].astype(jnp.float32)
    return jnp.mean(lse - picked)


def checkpointed_head(chunk):
    """A ``lax.map`` over chunks of ``chunk`` tokens of a ``jax.checkpoint``-ed chunk loss (the
    last chunk padded with ignored tokens when ``chunk`` does not divide the tokens)."""

    def head(x, w, t):
        tokens, features = x.shape
        n = -(-tokens // chunk)
        pad = n * chunk - tokens
        xs = jnp.pad(x, ((0, pad), (0, 0))).reshape(n, chunk, features)
        ts = jnp.pad(t, (0, pad), constant_values=-1).reshape(n, chunk)

        @jax.checkpoint
        def chunk_loss(xc, tc):
            logits = (xc @ w.T).astype(jnp.float32)
            lse = jax.nn.logsumexp(logits, axis=-1)
            picked = jnp.take_along_axis(logits, jnp.maximum(tc, 0)[:, None], axis=-1)[:, 0]
            return jnp.sum(jnp.where(tc >= 0, lse - picked, 0))

        return jnp.sum(jax.lax.map(lambda a: chunk_loss(*a), (xs, ts))) / tokens

    return head


def checkpoint_chunks(tokens, vocab):
    """Token chunks tried for the checkpointed head: as many logits as jaxrules' chunk, and 8x."""
    base = max(LCE_CHUNK_ELEMENTS // vocab, 1)
    return sorted({min(base, tokens), min(8 * base, tokens)})


def program(head, shape):
    tokens, features, vocab = shape
    specs = (jax.ShapeDtypeStruct((tokens, features), jnp.bfloat16),
             jax.ShapeDtypeStruct((vocab, features), jnp.bfloat16), jax.ShapeDtypeStruct((tokens,), jnp.int32))
    return jax.jit(jax.value_and_grad(head, argnums=(0, 1))).lower(*specs)


def device_limit():
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("bytes_limit")


def inputs(shape, seed=0):
    tokens, features, vocab = shape
    kx, kw, kt = jax.random.split(jax.random.PRNGKey(seed), 3)
    x = jax.random.normal(kx, (tokens, features), jnp.bfloat16)
    w = (jax.random.normal(kw, (vocab, features), jnp.float32) / np.sqrt(features)).astype(jnp.bfloat16)
    t = jax.random.randint(kt, (tokens,), 0, vocab, jnp.int32)
    return x, w, t


def median_ms(calls, repeats, warmup):
    """Per label: the median of ``repeats`` single calls, each waited for, the labels alternating
    (the order rotating from one repeat to the next)."""
    for call in calls.values():
        for _ in range(warmup):
            jax.block_until_ready(call())
    times = {label: [] for label in calls}
    labels = list(calls)
    for r in range(repeats):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            start = time.perf_counter()
            jax.block_until_ready(calls[label]())
            times[label].append((time.perf_counter() - start) * 1e3)
    return {label: statistics.median(t) for label, t in times.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny grid (CPU smoke run)")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per head (default 20; --quick 3)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--workers", type=int, default=os.cpu_count(), help="compile threads")
    parser.add_argument("--out", help="write the measurements here as JSON")
    parser.add_argument("--points", help="only these, comma-separated TOKENSxFEATURESxVOCAB (4096x768x32768)")
    args = parser.parse_args(argv)
    grid = QUICK_GRID if args.quick else GRID
    if args.points:
        grid = [tuple(int(v) for v in p.split("x")) for p in args.points.split(",")]
    repeats = args.repeats or (3 if args.quick else 20)
    heads = {}
    for shape in grid:
        heads[shape] = {"jaxrules": jaxrules_head, "unfused": unfused_head}
        for chunk in checkpoint_chunks(shape[0], shape[2]):
            heads[shape][f"checkpointed/{chunk}"] = checkpointed_head(chunk)

    start = time.perf_counter()
    lowered = {(shape, label): program(head, shape) for shape, hs in heads.items() for label, head in hs.items()}
    with concurrent.futures.ThreadPoolExecutor(max(args.workers, 1)) as pool:
        compiled = dict(zip(lowered, pool.map(lambda low: low.compile(), lowered.values())))
    compile_s = time.perf_counter() - start
    limit = device_limit()

    rows = []
    for shape, hs in heads.items():
        tokens, features, vocab = shape
        x, w, t = inputs(shape)
        arg_bytes = x.nbytes + w.nbytes + t.nbytes
        memory, calls = {}, {}
        for label in hs:
            exe = compiled[shape, label]
            analysis = exe.memory_analysis()
            memory[label] = analysis.temp_size_in_bytes
            need = analysis.temp_size_in_bytes + analysis.output_size_in_bytes + arg_bytes
            if limit is None or need < 0.9 * limit:
                calls[label] = (lambda exe=exe, args=(x, w, t): exe(*args))
        times = median_ms(calls, repeats, args.warmup)
        losses = {label: float(call()[0]) for label, call in calls.items()}
        ckpt = [label for label in hs if label.startswith("checkpointed")]
        best = min((label for label in ckpt if label in times), key=times.get, default=ckpt[0])
        row = {"tokens": tokens, "features": features, "vocab": vocab,
               "temp_bytes": memory, "ms": times, "loss": losses, "checkpointed_best": best}
        ours, unfused = times.get("jaxrules"), times.get("unfused")
        row["memory_vs_unfused"] = memory["jaxrules"] / memory["unfused"]
        row["speedup_vs_unfused"] = None if ours is None or unfused is None else unfused / ours
        row["speedup_vs_checkpointed"] = None if ours is None or best not in times else times[best] / ours
        row["loss_rel_diff"] = (None if "unfused" not in losses or "jaxrules" not in losses else
                                abs(losses["jaxrules"] - losses["unfused"]) / abs(losses["unfused"]))
        row["bars"] = ((vocab < 131072 or row["memory_vs_unfused"] <= 0.25)
                       and all(s is not None and s >= 1.0 for s in (row["speedup_vs_unfused"],
                                                                    row["speedup_vs_checkpointed"])))
        rows.append(row)
        del x, w, t, calls
        print(_line(row), flush=True)

    device = jax.devices()[0]
    header = [f"Device: {device.device_kind} ({device.platform}), jax {jax.__version__}; bfloat16, forward+backward "
              f"(mean loss, gradients of input and weight); median of {repeats} calls; compile {compile_s:.0f} s.",
              "", "| vocab | tokens | width | temp MiB jaxrules / unfused / ckpt | memory vs unfused | "
              "ms jaxrules / unfused / ckpt (chunk) | vs unfused | vs ckpt | loss diff | bars |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    table = "\n".join(header + [_line(r) for r in rows])
    print()
    print(table)
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps({"device": device.device_kind, "jax": jax.__version__,
                                                      "repeats": repeats, "compile_s": compile_s, "rows": rows},
                                                     indent=1) + "\n")


def _line(row):
    best = row["checkpointed_best"]
    mem, ms = row["temp_bytes"], row["ms"]

    def mib(label):
        return f"{mem[label] / 2**20:.0f}"

    def msec(label):
        return f"{ms[label]:.2f}" if label in ms else "n/a"

    def ratio(value):
        return "n/a" if value is None else f"{value:.2f}x"

    diff = row["loss_rel_diff"]
    return (f"| {row['vocab']} | {row['tokens']} | {row['features']} | {mib('jaxrules')} / {mib('unfused')} / "
            f"{mib(best)} | {row['memory_vs_unfused']:.3f}x | {msec('jaxrules')} / {msec('unfused')} / {msec(best)} "
            f"({best.split('/')[1]}) | {ratio(row['speedup_vs_unfused'])} | {ratio(row['speedup_vs_checkpointed'])} | "
            f"{'n/a' if diff is None else f'{diff:.1e}'} | {'pass' if row['bars'] else 'FAIL'} |")


if __name__ == "__main__":
    main()
