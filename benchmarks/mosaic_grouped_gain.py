"""Would Mosaic GPU group-norm kernels gain (issue 21)? Group norm over G groups is a row norm of
x (N, C, H, W) viewed as (N G, C/G H W): the same statistics and the same bytes, with a per-channel
instead of a per-column affine. Where C/G H W is a width the Mosaic GPU row kernels take (a
multiple of 128 up to 16384), this times forward+backward (``jit`` of ``vjp``) of

* ``group_norm`` with the Triton grouped kernels (``impl="pallas"``) and with the XLA formulas;
* ``layer_norm`` over the (N G, C/G H W) view, float32 weight and bias of that width, with the
  Triton row kernels (``impl="pallas"``) and the Mosaic GPU row kernels (``impl="mosaic"``),

side by side in one process (``bench.interleaved_median_ms``). The row kernels on the view bound
what Mosaic GPU grouped kernels of the row kernels' design could reach.

    PYTHONPATH=. python3 benchmarks/mosaic_grouped_gain.py --out gain.md     # GPU (Hopper)
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

from jaxrules import bench
from jaxrules.nn import group_norm, layer_norm

GROUPS = 32
# (N, C, H, W) with C/G H W a multiple of 128 up to 16384
SHAPES = ((128, 128, 56, 56), (32, 512, 28, 28), (64, 256, 28, 28), (64, 128, 32, 32), (256, 256, 16, 16))


def variants(shape):
    """``{label: fn(x, w, b)}`` on x (N, C, H, W), w and b (C,)."""
    n, c = shape[:2]
    width = c // GROUPS * math.prod(shape[2:])

    def rows(impl):
        def fn(x, w, b):  # the per-channel weights as per-column ones of the view (same bytes read)
            wide_w = jnp.repeat(w[: c // GROUPS], width // (c // GROUPS))
            wide_b = jnp.repeat(b[: c // GROUPS], width // (c // GROUPS))
            return layer_norm(x.reshape(n * GROUPS, width), width, wide_w, wide_b, impl=impl).reshape(x.shape)

        return fn

    return {
        "group_norm Triton": lambda x, w, b: group_norm(x, GROUPS, w, b, impl="pallas"),
        "group_norm XLA": lambda x, w, b: group_norm(x, GROUPS, w, b, impl="xla"),
        "rows Triton": rows("pallas"),
        "rows Mosaic": rows("mosaic"),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    labels = list(variants(SHAPES[0]))
    lines = [f"Device: {jax.devices()[0].device_kind}, jax {jax.__version__}; ms per forward+backward (median of "
             f"runs of {bench.CALLS_PER_RUN} queued calls, the variants alternating); {GROUPS} groups, float32 "
             "weights.", "", "| shape | dtype | " + " | ".join(labels) + " | rows Mosaic / group_norm Triton |",
             "| --- | --- | " + " | ".join("---" for _ in labels) + " | --- |"]
    for dtype in args.dtypes.split(","):
        for shape in SHAPES:
            x, ct = (jnp.asarray(rng.standard_normal(shape), dtype) for _ in range(2))
            w, b = (jnp.asarray(rng.standard_normal(shape[1]), jnp.float32) for _ in range(2))
            compiled = {}
            for label, fn in variants(shape).items():
                try:
                    compiled[label] = bench.fwd_bwd(fn).lower(ct, x, w, b).compile()
                except Exception as err:  # noqa: BLE001 - a variant that cannot run is reported
                    print(f"  {label} {shape} {dtype}: {type(err).__name__}: {str(err)[:200]}", file=sys.stderr)
            times = bench.interleaved_median_ms({lb: (lambda c=c: c(ct, x, w, b)) for lb, c in compiled.items()},
                                                args.repeats)
            ratio = (f"{times['rows Mosaic'] / times['group_norm Triton']:.2f}"
                     if {"rows Mosaic", "group_norm Triton"} <= times.keys() else "-")
            lines.append(f"| {'x'.join(map(str, shape))} | {dtype} | "
                         + " | ".join(f"{times[lb]:.3f}" if lb in times else "n/a" for lb in labels) + f" | {ratio} |")
            print(lines[-1], flush=True)
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        pathlib.Path(args.out).write_text(table)


if __name__ == "__main__":
    main()
