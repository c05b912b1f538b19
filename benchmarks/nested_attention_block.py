"""Ragged transformer block, nested (jaxrules.nested) vs padded dense, forward + backward.

The block: qkv = linear(x) -> attention within each sequence -> output projection -> residual
-> layer_norm; the loss sums the squares of the real rows. Timed: ``jit(grad)`` with respect to
the parameters and the input, median of ``--repeats`` runs after warm-up. Peak memory: the
device's ``peak_bytes_in_use`` of a fresh process that runs only that variant (so variants do
not share a peak), and XLA's compiled temp size.

    python benchmarks/nested_attention_block.py --out results.md   # every variant, one process each
    python benchmarks/nested_attention_block.py --one nested --lengths uniform   # one variant, JSON

Padded dense is what a JAX user writes without a ragged type: (B, max_len, d) arrays, a key
mask, ``jax.nn.dot_product_attention`` and JAX's autodiff.
"""

from __future__ import annotations

import argparse
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


def _params(rng, d, dtype):
    s = 1 / math.sqrt(d)
    return {
        "w_qkv": (s * rng.standard_normal((3 * d, d))).astype(dtype),
        "b_qkv": np.zeros(3 * d, dtype),
        "w_out": (s * rng.standard_normal((d, d))).astype(dtype),
        "ln_w": np.ones(d, dtype),
        "ln_b": np.zeros(d, dtype),
    }


def _nested_loss(heads, max_len):
    import jax.numpy as jnp

    import jaxrules.nested as N

    def loss(params, values, offsets):
        x = N.from_jagged(values, offsets, max_seqlen=max_len)
        d = x.inner_shape[-1]
        qkv = N.linear(x, params["w_qkv"], params["b_qkv"])
        q, k, v = (t.with_values(t.values.reshape(-1, heads, d // heads)) for t in qkv.split_with_sizes([d] * 3))
        att = N.scaled_dot_product_attention(q, k, v)
        y = N.linear(att.with_values(att.values.reshape(-1, d)), params["w_out"])
        out = N.layer_norm(x + y, d, params["ln_w"], params["ln_b"])
        return jnp.sum(jnp.square(out.values.astype(jnp.float32)))

    return loss


def _padded_loss(heads):
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
        att = jax.nn.dot_product_attention(q, k, v, query_seq_lengths=lengths, key_value_seq_lengths=lengths)
        y = att.reshape(b, length, d) @ params["w_out"].T
        out = layer_norm(x + y, params["ln_w"], params["ln_b"])
        real = (jnp.arange(length)[None, :] < lengths[:, None])[..., None]
        return jnp.sum(jnp.where(real, jnp.square(out.astype(jnp.float32)), 0))

    return loss


def run_one(variant, lengths_name, batch, max_len, d, heads, dtype, repeats, seed):
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    lengths = LENGTH_DISTRIBUTIONS[lengths_name](rng, batch, max_len).astype(np.int32)
    np_dtype = jnp.dtype(dtype)
    params = jax.tree.map(jnp.asarray, _params(rng, d, np_dtype))
    if variant == "nested":
        x = jnp.asarray(rng.standard_normal((int(lengths.sum()), d)).astype(np_dtype))
        aux = jnp.asarray(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
        loss = _nested_loss(heads, max_len)
    else:
        x = jnp.asarray(rng.standard_normal((batch, max_len, d)).astype(np_dtype))
        aux = jnp.asarray(lengths)
        loss = _padded_loss(heads)
    step = jax.jit(jax.grad(loss, argnums=(0, 1)))
    compiled = step.lower(params, x, aux).compile()
    memory = compiled.memory_analysis()
    for _ in range(3):
        jax.block_until_ready(step(params, x, aux))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(step(params, x, aux))
        times.append(time.perf_counter() - start)
    stats = jax.devices()[0].memory_stats() or {}
    return {
        "variant": variant, "lengths": lengths_name, "dtype": dtype, "mean_len": float(lengths.mean()),
        "max_len": int(max_len), "tokens": int(lengths.sum()), "median_ms": 1e3 * statistics.median(times),
        "peak_bytes": stats.get("peak_bytes_in_use"), "temp_bytes": getattr(memory, "temp_size_in_bytes", None),
        "device": jax.devices()[0].device_kind,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", choices=("nested", "padded"))
    parser.add_argument("--lengths", default="uniform", choices=tuple(LENGTH_DISTRIBUTIONS))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--max-len", type=int, default=2048)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.one:
        for dtype in args.dtypes.split(","):
            result = run_one(args.one, args.lengths, args.batch, args.max_len, args.d_model, args.heads, dtype,
                             args.repeats, args.seed)
            print(json.dumps(result), flush=True)
        return
    rows = []
    for lengths_name in LENGTH_DISTRIBUTIONS:
        for dtype in args.dtypes.split(","):
            pair = {}
            for variant in ("nested", "padded"):
                cmd = [sys.executable, __file__, "--one", variant, "--lengths", lengths_name, "--dtypes", dtype,
                       "--batch", str(args.batch), "--max-len", str(args.max_len), "--d-model", str(args.d_model),
                       "--heads", str(args.heads), "--repeats", str(args.repeats), "--seed", str(args.seed)]
                done = subprocess.run(cmd, capture_output=True, text=True)
                if done.returncode:
                    print(done.stderr[-3000:], file=sys.stderr)
                    pair[variant] = None
                    continue
                pair[variant] = json.loads(done.stdout.strip().splitlines()[-1])
                print(done.stdout.strip(), flush=True)
            rows.append(pair)
    lines = [
        "| lengths | dtype | mean / max len | nested ms | padded ms | speedup | nested peak GiB | padded peak GiB | "
        "memory ratio | nested temp GiB | padded temp GiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for pair in rows:
        n, p = pair.get("nested"), pair.get("padded")
        ref = n or p
        if ref is None:
            continue
        fmt = lambda r, k, s=1.0: "failed" if r is None or r[k] is None else f"{r[k] / s:.2f}"  # noqa: E731
        speed = f"{p['median_ms'] / n['median_ms']:.2f}x" if n and p else "-"
        mem = f"{p['peak_bytes'] / n['peak_bytes']:.2f}x" if n and p and n["peak_bytes"] and p["peak_bytes"] else "-"
        lines.append(
            f"| {ref['lengths']} | {ref['dtype']} | {ref['mean_len']:.0f} / {ref['max_len']} | {fmt(n, 'median_ms')} | "
            f"{fmt(p, 'median_ms')} | {speed} | {fmt(n, 'peak_bytes', 2**30)} | {fmt(p, 'peak_bytes', 2**30)} | "
            f"{mem} | {fmt(n, 'temp_bytes', 2**30)} | {fmt(p, 'temp_bytes', 2**30)} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(table + "\n")


if __name__ == "__main__":
    main()
