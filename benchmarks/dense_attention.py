"""Dense ``scaled_dot_product_attention`` forward + backward over a shape sweep (the
GPU path): jaxrules' default (cuDNN where it applies: half precision, no mask), its XLA formulas
(``impl="xla"``), jaxrules' fused kernels (``impl="pallas"``, the
ragged flash kernels of ``jaxrules.nested.dense``), ``jax.nn.dot_product_attention`` with JAX's
autodiff (XLA), and with ``implementation="cudnn"`` (cuDNN's fused flash attention, half
precision only): the strongest baseline a JAX user would pick; and JAX's own Mosaic GPU flash
attention (half precision, non-causal), the measure of what Mosaic GPU kernels could gain.
Timings are medians of runs of queued calls, the variants alternating in one process
(``benchmarks/bench.py``); TFLOP/s count the real work (14 B H L^2 E: 4 forward, 10 backward with the
recomputed scores; half when causal).

    PYTHONPATH=. python3 benchmarks/dense_attention.py --out dense.md           # GPU
    PYTHONPATH=. python3 benchmarks/dense_attention.py --smoke                  # CPU: tiny, interpret mode
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import bench  # noqa: E402

from jaxrules.ops.attention import scaled_dot_product_attention  # noqa: E402

# (B, H, L, E): GPT-2 and ViT shapes, long sequences, an odd length (ViT's 197), a large head dim
SHAPES = ((8, 12, 512, 64), (4, 16, 2048, 64), (2, 16, 4096, 64), (64, 12, 197, 64), (2, 8, 4096, 128),
          (1, 32, 1000, 128))
SMOKE_SHAPES = ((1, 2, 21, 16),)


def _variants(dtype, causal, kernel_impl):
    """``{label: fn(q, k, v)}`` on (B, H, L, E) arrays."""
    variants = {
        "jaxrules default": lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=causal),
        "jaxrules XLA": lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=causal, impl="xla"),
        "jaxrules kernels": lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=causal, impl=kernel_impl),
        # jax.nn takes (B, L, H, E)
        "jax.nn (XLA)": lambda q, k, v: jnp.swapaxes(jax.nn.dot_product_attention(
            *(jnp.swapaxes(x, 1, 2) for x in (q, k, v)), is_causal=causal), 1, 2),
    }
    if jax.default_backend() == "gpu" and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16):
        variants["jax.nn cuDNN"] = lambda q, k, v: jnp.swapaxes(jax.nn.dot_product_attention(
            *(jnp.swapaxes(x, 1, 2) for x in (q, k, v)), is_causal=causal, implementation="cudnn"), 1, 2)
    if jax.default_backend() == "gpu" and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16) and not causal:
        variants["JAX Mosaic GPU"] = _mosaic_gpu_attention
    return variants


def _mosaic_gpu_attention(q, k, v):
    """JAX's own Pallas Mosaic GPU flash attention (``jax.experimental.pallas.ops.gpu.
    attention_mgpu``: Hopper, half precision, non-causal backward, L a multiple of 64) on (B, H,
    L, E): what a Mosaic GPU version of the nested kernels could reach."""
    from jax.experimental.pallas.ops.gpu import attention_mgpu

    config = attention_mgpu.TuningConfig(block_q=64, block_kv=128, max_concurrent_steps=2, block_q_dkv=64,
                                         block_kv_dkv=64, block_q_dq=64, block_kv_dq=64)
    out = attention_mgpu.attention(*(jnp.swapaxes(x, 1, 2) for x in (q, k, v)), config)
    return jnp.swapaxes(out, 1, 2)


def run(shapes, dtypes, repeats, kernel_impl):
    rows = []
    rng = np.random.default_rng(0)
    for dtype in dtypes:
        for causal in (False, True):
            for b, h, length, e in shapes:
                q, k, v, ct = (jnp.asarray(rng.standard_normal((b, h, length, e)), dtype) for _ in range(4))
                steps = {label: bench.fwd_bwd(fn) for label, fn in _variants(dtype, causal, kernel_impl).items()}
                compiled = {}
                for label, step in steps.items():
                    try:
                        compiled[label] = step.lower(ct, q, k, v).compile()
                    except Exception as err:  # noqa: BLE001 - a variant that cannot run is reported
                        print(f"  {label} {b}x{h}x{length}x{e} {dtype}: {type(err).__name__}: {str(err)[:200]}",
                              file=sys.stderr)
                times = bench.interleaved_median_ms({lb: (lambda c=c: c(ct, q, k, v)) for lb, c in compiled.items()},
                                                    repeats)
                flops = 14 * b * h * length * length * e * (0.5 if causal else 1.0)
                row = {"shape": f"{b}x{h}x{length}x{e}", "dtype": jnp.dtype(dtype).name, "causal": causal, **times,
                       "tflops": {lb: flops / (t * 1e-3) / 1e12 for lb, t in times.items()}}
                rows.append(row)
                print(row, flush=True)
    return rows


def markdown(rows, labels):
    lines = [f"Device: {jax.devices()[0].device_kind}, jax {jax.__version__}; ms per forward+backward (median of "
             f"runs of {bench.CALLS_PER_RUN} queued calls, the variants alternating); TFLOP/s in parentheses.", "",
             "| shape (B, H, L, E) | dtype | causal | " + " | ".join(labels) + " | default vs best jax.nn |",
             "| --- | --- | --- | " + " | ".join("---" for _ in labels) + " | --- |"]
    for r in rows:
        cells = [f"{r[lb]:.3f} ({r['tflops'][lb]:.0f})" if lb in r else "n/a" for lb in labels]
        others = [r[lb] for lb in labels if lb in r and lb.startswith("jax.nn")]
        ratio = f"{min(others) / r['jaxrules default']:.2f}x" if "jaxrules default" in r and others else "-"
        lines.append(f"| {r['shape']} | {r['dtype']} | {r['causal']} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--smoke", action="store_true", help="CPU: one tiny shape, the kernels in interpret mode")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    shapes, impl = (SMOKE_SHAPES, "pallas_interpret") if args.smoke else (SHAPES, "pallas")
    rows = run(shapes, args.dtypes.split(","), 3 if args.smoke else args.repeats, impl)
    table = markdown(rows, ["jaxrules default", "jaxrules XLA", "jaxrules kernels", "jax.nn (XLA)", "jax.nn cuDNN",
                            "JAX Mosaic GPU"])
    print(table)
    if args.out:
        pathlib.Path(args.out).write_text(table)


if __name__ == "__main__":
    main()
