"""Ragged transformer block, nested (jaxrules.nested) vs padded dense (XLA and cuDNN attention),
forward + backward.

The block: qkv = linear(x) -> attention within each sequence -> output projection -> residual
-> layer_norm; the loss sums the squares of the real rows. Timed: ``jit(grad)`` with respect to
the parameters and the input, median of ``--repeats`` runs after warm-up. Peak memory: the
device's ``peak_bytes_in_use`` of a fresh process that runs only that variant (so variants do
not share a peak), and XLA's compiled temp size.

    python benchmarks/nested_attention_block.py --out results.md   # every variant, one process each
    python benchmarks/nested_attention_block.py --one nested --lengths uniform   # one variant, JSON

``nested`` runs the nested attention's default with ``max_seqlen=max_len`` (cuDNN where it
applies, bfloat16/float16: here on the sequences copied into padded rows, the layout that costs
cuDNN least; else the Pallas kernels on a GPU); ``nested-packed`` the same without a length bound,
so cuDNN runs on the values as one packed row (THD, compute capability 9.0); ``nested-pallas``
forces the Pallas kernels (``impl="pallas"``). Each result records the cuDNN calls in the
compiled block (``cudnn_calls``). ``--variants`` picks a subset.

Padded dense is what a JAX user writes without a ragged type: (B, max_len, d) arrays, the
sequence lengths, ``jax.nn.dot_product_attention`` and JAX's autodiff: ``padded`` lets JAX pick
the attention (XLA), ``cudnn`` asks for cuDNN's fused flash attention
(``implementation="cudnn"``, bfloat16/float16 only: the strongest padded baseline). Each variant also times its
attention alone (forward + backward) and reports its TFLOP/s counting only the real, unpadded
work: ``14 sum_i n_i^2 d`` FLOPs (forward ``4 sum n_i^2 d``, backward 2.5x the forward, the
FlashAttention convention; causal: ``n_i (n_i + 1) / 2`` for ``n_i^2``). ``--masks none,causal``
runs every variant without and with a causal mask (``is_causal``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import subprocess
import sys
import time

import numpy as np

LENGTH_DISTRIBUTIONS = {
    # uniform on 1..max_len: mean ~ max_len / 2
    "uniform": lambda rng, b, m: rng.integers(1, m + 1, b),
    # a long tail: most sequences short, a few near max_len (mean ~ max_len / 4)
    "long-tail": lambda rng, b, m: np.clip(rng.exponential(m / 4, b).astype(int) + 1, 1, m),
}


VARIANTS = ("nested", "nested-packed", "nested-pallas", "padded", "cudnn")
# the nested variants: (attention impl, whether max_seqlen bounds the lengths)
NESTED = {"nested": (None, True), "nested-packed": (None, False), "nested-pallas": ("pallas", True)}


def _params(rng, d, dtype):
    s = 1 / math.sqrt(d)
    return {
        "w_qkv": (s * rng.standard_normal((3 * d, d))).astype(dtype),
        "b_qkv": np.zeros(3 * d, dtype),
        "w_out": (s * rng.standard_normal((d, d))).astype(dtype),
        "ln_w": np.ones(d, dtype),
        "ln_b": np.zeros(d, dtype),
    }


def _nested_loss(heads, max_len, causal, impl=None, bounded=True):
    import jax.numpy as jnp

    import jaxrules.nested as N

    def loss(params, values, offsets):
        x = N.from_jagged(values, offsets, max_seqlen=max_len if bounded else None)
        d = x.inner_shape[-1]
        qkv = N.linear(x, params["w_qkv"], params["b_qkv"])
        q, k, v = (t.with_values(t.values.reshape(-1, heads, d // heads)) for t in qkv.split_with_sizes([d] * 3))
        att = N.scaled_dot_product_attention(q, k, v, is_causal=causal, impl=impl)
        y = N.linear(att.with_values(att.values.reshape(-1, d)), params["w_out"])
        out = N.layer_norm(x + y, d, params["ln_w"], params["ln_b"])
        return jnp.sum(jnp.square(out.values.astype(jnp.float32)))

    return loss


def _padded_loss(heads, implementation, causal):
    import jax
    import jax.numpy as jnp

    def layer_norm(x, w, b, eps=1e-5):
        mean = x.mean(-1, keepdims=True)
        var = jnp.square(x - mean).mean(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + eps) * w + b

    def loss(params, x, lengths):
        b, length, d = x.shape
        qkv = x @ params["w_qkv"].T + params["b_qkv"]
        q, k, v = (t.reshape(b, length, heads, d // heads) for t in jnp.split(qkv, 3, axis=-1))
        att = jax.nn.dot_product_attention(q, k, v, query_seq_lengths=lengths, key_value_seq_lengths=lengths,
                                           is_causal=causal, implementation=implementation)
        y = att.reshape(b, length, d) @ params["w_out"].T
        out = layer_norm(x + y, params["ln_w"], params["ln_b"])
        real = (jnp.arange(length)[None, :] < lengths[:, None])[..., None]
        return jnp.sum(jnp.where(real, jnp.square(out.astype(jnp.float32)), 0))

    return loss


def _median_ms(step, args, repeats):
    import jax

    for _ in range(3):
        jax.block_until_ready(step(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(step(*args))
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def _attention_step(variant, rng, lengths, max_len, d, heads, np_dtype, causal):
    """(jit of the attention's forward + backward alone, its arguments) for ``variant``."""
    import jax
    import jax.numpy as jnp

    import jaxrules.nested as N

    dh = d // heads
    if variant in NESTED:
        offsets = jnp.asarray(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
        qkv = [jnp.asarray(rng.standard_normal((int(lengths.sum()), heads, dh)).astype(np_dtype)) for _ in range(3)]
        impl, bounded = NESTED[variant]

        def loss(q, k, v, offsets):
            q, k, v = (N.from_jagged(t, offsets, max_seqlen=max_len if bounded else None) for t in (q, k, v))
            att = N.scaled_dot_product_attention(q, k, v, is_causal=causal, impl=impl)
            return jnp.sum(att.values.astype(jnp.float32))

        return jax.jit(jax.grad(loss, argnums=(0, 1, 2))), (*qkv, offsets)
    implementation = "cudnn" if variant == "cudnn" else None
    qkv = [jnp.asarray(rng.standard_normal((len(lengths), max_len, heads, dh)).astype(np_dtype)) for _ in range(3)]

    def loss(q, k, v, lengths):
        att = jax.nn.dot_product_attention(q, k, v, query_seq_lengths=lengths, key_value_seq_lengths=lengths,
                                           is_causal=causal, implementation=implementation)
        real = (jnp.arange(q.shape[1])[None, :] < lengths[:, None])[..., None, None]
        return jnp.sum(jnp.where(real, att.astype(jnp.float32), 0))

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2))), (*qkv, jnp.asarray(lengths))


def run_one(variant, lengths_name, batch, max_len, d, heads, dtype, repeats, seed, causal=False):
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    lengths = LENGTH_DISTRIBUTIONS[lengths_name](rng, batch, max_len).astype(np.int32)
    np_dtype = jnp.dtype(dtype)
    params = jax.tree.map(jnp.asarray, _params(rng, d, np_dtype))
    if variant in NESTED:
        x = jnp.asarray(rng.standard_normal((int(lengths.sum()), d)).astype(np_dtype))
        aux = jnp.asarray(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
        loss = _nested_loss(heads, max_len, causal, *NESTED[variant])
    else:
        x = jnp.asarray(rng.standard_normal((batch, max_len, d)).astype(np_dtype))
        aux = jnp.asarray(lengths)
        loss = _padded_loss(heads, "cudnn" if variant == "cudnn" else None, causal)
    step = jax.jit(jax.grad(loss, argnums=(0, 1)))
    compiled = step.lower(params, x, aux).compile()
    memory = compiled.memory_analysis()
    cudnn_calls = compiled.as_text().count("__cudnn$fmha")  # cuDNN attention calls in the block's program
    median_ms = _median_ms(step, (params, x, aux), repeats)
    stats = jax.devices()[0].memory_stats() or {}  # the block's peak: the attention-alone step runs after
    attention, attention_args = _attention_step(variant, rng, lengths, max_len, d, heads, np_dtype, causal)
    attention_ms = _median_ms(attention, attention_args, repeats)
    n = lengths.astype(np.float64)
    flops = 14 * float(np.sum(n * (n + 1) / 2 if causal else n * n)) * d
    return {
        "variant": variant, "lengths": lengths_name, "causal": causal, "dtype": dtype,
        "mean_len": float(lengths.mean()), "max_len": int(max_len), "tokens": int(lengths.sum()),
        "median_ms": median_ms,
        "peak_bytes": stats.get("peak_bytes_in_use"), "temp_bytes": getattr(memory, "temp_size_in_bytes", None),
        "cudnn_calls": cudnn_calls,
        "attention_ms": attention_ms, "attention_tflops": flops / (attention_ms * 1e-3) / 1e12,
        "device": jax.devices()[0].device_kind,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", choices=VARIANTS)
    parser.add_argument("--lengths", default="uniform", choices=tuple(LENGTH_DISTRIBUTIONS))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--max-len", type=int, default=2048)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--masks", default="none,causal", help="none, causal or both (comma-separated)")
    parser.add_argument("--causal", action="store_true", help="with --one: a causal mask")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"the variants to run (comma-separated, of {', '.join(VARIANTS)})")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.one:
        for dtype in args.dtypes.split(","):
            result = run_one(args.one, args.lengths, args.batch, args.max_len, args.d_model, args.heads, dtype,
                             args.repeats, args.seed, args.causal)
            print(json.dumps(result), flush=True)
        return
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {VARIANTS}")
    rows = []
    for lengths_name, mask, dtype in itertools.product(LENGTH_DISTRIBUTIONS, args.masks.split(","),
                                                       args.dtypes.split(",")):
        pair = {}
        for variant in variants:
            if variant == "cudnn" and dtype == "float32":
                continue  # cuDNN's flash attention takes bfloat16 and float16 only
            cmd = [sys.executable, __file__, "--one", variant, "--lengths", lengths_name, "--dtypes", dtype,
                   "--batch", str(args.batch), "--max-len", str(args.max_len), "--d-model", str(args.d_model),
                   "--heads", str(args.heads), "--repeats", str(args.repeats), "--seed", str(args.seed)]
            cmd += ["--causal"] if mask == "causal" else []
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                print(done.stderr[-3000:], file=sys.stderr)
                pair[variant] = None
                continue
            pair[variant] = json.loads(done.stdout.strip().splitlines()[-1])
            print(done.stdout.strip(), flush=True)
        rows.append(pair)
    names = ("nested", "packed", "pallas", "XLA", "cuDNN")  # the columns of VARIANTS
    lines = [
        "| lengths | mask | dtype | mean / max len | " + " | ".join(f"{n} ms" for n in names)
        + " | nested vs XLA | nested vs cuDNN | packed vs cuDNN | pallas vs cuDNN | peak GiB "
        + " / ".join(names) + " | attention ms " + " / ".join(names) + " | attention TFLOP/s "
        + " / ".join(names) + " |",
        "| --- " * (4 + len(names) + 4 + 3) + "|",
    ]

    def fmt(r, key, scale=1.0):
        return "n/a" if r is None or r.get(key) is None else f"{r[key] / scale:.2f}"

    def speedup(n, other):
        return f"{other['median_ms'] / n['median_ms']:.2f}x" if n and other else "-"

    for row in rows:
        results = [row.get(v) for v in VARIANTS]
        n, packed, pallas, x, c = results
        ref = next((r for r in results if r), None)
        if ref is None:
            continue
        lines.append(
            f"| {ref['lengths']} | {'causal' if ref['causal'] else 'none'} | {ref['dtype']} | "
            f"{ref['mean_len']:.0f} / {ref['max_len']} | " + " | ".join(fmt(r, "median_ms") for r in results)
            + f" | {speedup(n, x)} | {speedup(n, c)} | {speedup(packed, c)} | {speedup(pallas, c)} | "
            + " / ".join(fmt(r, "peak_bytes", 2**30) for r in results) + " | "
            + " / ".join(fmt(r, "attention_ms") for r in results) + " | "
            + " / ".join(fmt(r, "attention_tflops") for r in results) + " |"
        )
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(table + "\n")


if __name__ == "__main__":
    main()
