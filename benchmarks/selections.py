"""``python benchmarks/selections.py``: forward+backward of the selection ops (``topk``,
``sort``, ``max`` along an axis) against plain JAX's autodiff of the same call (``lax.top_k``,
``jnp.sort``, ``jnp.max``), in one process, interleaved: a training step's form
(``bench.fwd_bwd(with_value=True)``), the median of 21 runs of ``bench.CALLS_PER_RUN`` calls.
``--small`` runs tiny shapes (a CPU try)."""

from __future__ import annotations

import argparse
import json
import sys

import jax
import jax.numpy as jnp

import jaxrules.torch as T

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import bench  # noqa: E402

CASES = [  # (name, shape, dtype, jaxrules' call, plain JAX's call, output shape)
    ("topk k=50", (4096, 32768), "bfloat16", lambda v: T.topk(v, 50)[0], lambda v: jax.lax.top_k(v, 50)[0], (4096, 50)),
    ("topk k=8", (4096, 32768), "bfloat16", lambda v: T.topk(v, 8)[0], lambda v: jax.lax.top_k(v, 8)[0], (4096, 8)),
    ("topk k=50", (4096, 32768), "float32", lambda v: T.topk(v, 50)[0], lambda v: jax.lax.top_k(v, 50)[0], (4096, 50)),
    ("sort", (4096, 4096), "float32", lambda v: T.sort(v)[0], jnp.sort, (4096, 4096)),
    ("sort", (16384, 1024), "bfloat16", lambda v: T.sort(v)[0], jnp.sort, (16384, 1024)),
    ("max dim", (8192, 8192), "bfloat16", lambda v: T.max(v, 1)[0], lambda v: jnp.max(v, 1), (8192,)),
    ("max dim", (8192, 8192), "float32", lambda v: T.max(v, 1)[0], lambda v: jnp.max(v, 1), (8192,)),
]


def run(small: bool = False, repeats: int = 21) -> list[dict]:
    rows = []
    for name, shape, dtype, ours, plain, out in CASES:
        if small:
            shape, out = (8, 64), (8,) if len(out) == 1 else (8, min(out[1], 64))
        x = jax.random.normal(jax.random.key(0), shape, dtype)
        ct = jax.random.normal(jax.random.key(1), out, dtype)
        calls = {}
        for label, fn in (("jaxrules", ours), ("plain", plain)):
            step = bench.fwd_bwd(fn, with_value=True)
            calls[label] = lambda step=step: step(ct, x)
        times = bench.interleaved_median_ms(calls, repeats)
        rows.append({"op": name, "shape": list(shape), "dtype": dtype, "jaxrules_ms": times["jaxrules"],
                     "plain_ms": times["plain"], "speed": times["plain"] / times["jaxrules"]})
        print(f"{name:10s} {shape} {dtype:8s} jaxrules {times['jaxrules']:.4f} ms, plain {times['plain']:.4f} ms, "
              f"plain/jaxrules {rows[-1]['speed']:.3f}", flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/selections.py", description=__doc__)
    parser.add_argument("--small", action="store_true", help="tiny shapes (a CPU try)")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--out", default=None, help="JSON file of the rows")
    args = parser.parse_args(argv)
    rows = run(args.small, args.repeats)
    if args.out:
        meta = {"device": jax.devices()[0].device_kind, "jax": jax.__version__,
                "command": "python benchmarks/selections.py " + " ".join(argv if argv is not None else sys.argv[1:])}
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
