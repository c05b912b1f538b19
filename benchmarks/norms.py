"""The normalization defaults against the strongest baselines at the held-out shapes of real models.

For each point of ``shapes.held_out()`` (or ``--count`` points of ``--seed``) this times, in one
process and interleaved (``bench.interleaved_median_ms``: the median of ``--repeats``
runs of ``--calls`` back-to-back calls), the jitted forward + backward of

* ``default``: jaxrules' op as a user calls it (``impl=None``),
* ``xla``: ``impl="xla"``, the XLA formulas,
* ``jax``: the same math in plain JAX, differentiated by JAX's autodiff,
* ``pallas`` (GPU only, ``--variants``): the opt-in fused Triton kernels,

in the form of a training step (``--form train``: the value and the gradients of x, the weight and
the bias for a cotangent that waits for the value, ``bench.fwd_bwd(with_value=True)``) or
gradients only (``--form grads``). Bar: the default at least 0.95x of the faster of ``xla`` and
``jax`` (ratio = best / default), or within ``MARGIN_MS`` where the faster is under ``SMALL_MS``.
Where ``default`` and ``xla`` compile to the same program (``same_program``: their optimized HLO
texts equal, which the dispatch makes so at every shape), that program was timed twice: its time is
the mean of the two medians, and the bar compares it with ``jax`` (the faster of two timings of one
program would favour the baseline by the measurement's spread).

    PYTHONPATH=. python benchmarks/norms.py --out norms.json            # the held-out draw
    PYTHONPATH=. python benchmarks/norms.py --count 4 --max-elements 65536   # a small CPU try
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import bench  # noqa: E402
import shapes  # noqa: E402

from jaxrules.nn import batch_norm, group_norm, layer_norm, rms_norm  # noqa: E402

SMALL_MS = 0.1
MARGIN_MS = 0.010
VARIANTS = ("default", "xla", "jax", "pallas")


def plain_norm(op, x, w, b, eps=1e-5):
    """The op in plain JAX, as a user writes it (statistics in float32 for half inputs, output in
    x's dtype; RMS norm without bias and with torch's default eps, ``finfo(float32).eps``)."""
    xf = x.astype(jnp.promote_types(x.dtype, jnp.float32))
    if op == "rms_norm":
        eps = jnp.finfo(xf.dtype).eps
        return (xf * jax.lax.rsqrt(jnp.mean(jnp.square(xf), -1, keepdims=True) + eps) * w).astype(x.dtype)
    if op == "layer_norm":
        axes, view = (-1,), lambda v: v
    elif op == "batch_norm":
        axes, view = (0, 2, 3), lambda v: v[:, None, None]
    else:
        g = xf.reshape(x.shape[0], shapes.GROUPS, -1)
        mean = jnp.mean(g, -1, keepdims=True)
        var = jnp.mean(jnp.square(g - mean), -1, keepdims=True)
        y = ((g - mean) * jax.lax.rsqrt(var + eps)).reshape(x.shape)
        return (y * w[:, None, None] + b[:, None, None]).astype(x.dtype)
    mean = jnp.mean(xf, axes, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axes, keepdims=True)
    return ((xf - mean) * jax.lax.rsqrt(var + eps) * view(w) + view(b)).astype(x.dtype)


def variant_fn(op: str, variant: str):
    """``(x, w, b) -> y`` of ``op`` in ``variant``; RMS norm ignores ``b``."""
    if variant == "jax":
        return functools.partial(plain_norm, op)
    impl = {"default": None, "xla": "xla", "pallas": "pallas"}[variant]
    if impl == "pallas" and jax.default_backend() != "gpu":
        impl = "pallas_interpret"
    if op == "layer_norm":
        return lambda x, w, b: layer_norm(x, x.shape[-1], w, b, impl=impl)
    if op == "rms_norm":
        return lambda x, w, b: rms_norm(x, x.shape[-1], w, impl=impl)
    if op == "batch_norm":
        return lambda x, w, b: batch_norm(x, None, None, w, b, training=True, impl=impl)[0]
    return lambda x, w, b: group_norm(x, shapes.GROUPS, w, b, impl=impl)


def inputs(point: shapes.Point, seed: int):
    """``(ct, x, w, b)`` on the device, drawn there (a host copy of 512 MiB would dominate)."""
    keys = jax.random.split(jax.random.key(seed), 4)
    x = jax.random.normal(keys[0], point.shape, point.dtype)
    ct = jax.random.normal(keys[1], point.shape, point.dtype)
    w = (jax.random.normal(keys[2], (point.channels,), jnp.float32) + 1).astype(point.weight_dtype)
    b = jax.random.normal(keys[3], (point.channels,), jnp.float32).astype(point.weight_dtype)
    return ct, x, w, b


def verdict(row: dict) -> tuple[float, bool]:
    """``(best / default, ok)`` with best the faster of ``xla`` and ``jax``; where ``default`` and
    ``xla`` are one program (``row["same_program"]``), default is the mean of its two times."""
    mine = row["default_ms"]
    rivals = [row[f"{v}_ms"] for v in ("xla", "jax") if f"{v}_ms" in row]
    if row.get("same_program"):
        mine = (mine + row["xla_ms"]) / 2
        rivals = [row["jax_ms"]] if "jax_ms" in row else [mine]
    best = min(rivals)
    return best / mine, best / mine >= 0.95 or (best < SMALL_MS and mine - best <= MARGIN_MS)


def compile_variants(point, variants, with_value: bool, args) -> dict:
    """Each variant's jitted step at ``point``, compiled one after another (``default`` before
    ``xla``: a program compiled twice in one process is compiled the second time after the first
    ended, as a user's would be, not beside it)."""
    return {v: bench.fwd_bwd(variant_fn(point.op, v), with_value).lower(*args).compile() for v in variants}


def program_text(compiled) -> str:
    """A compiled program's optimized HLO without its source metadata (names of Python frames)."""
    return re.sub(r", metadata=\{[^}]*\}", "", compiled.as_text())


def run(points, variants=VARIANTS, form="train", repeats=21, calls=5, batch=16, on_row=None):
    """Rows of each point's times (ms per call) by variant, compiled ``batch`` points at a time on
    threads before any of them is timed."""
    if jax.default_backend() != "gpu":
        variants = tuple(v for v in variants if v != "pallas")
    with_value = form == "train"
    rows = []
    with ThreadPoolExecutor(32) as pool:
        for start in range(0, len(points), batch):
            chunk = points[start:start + batch]
            prepared = []
            for i, p in enumerate(chunk):
                args = inputs(p, start + i)
                prepared.append((p, args, pool.submit(compile_variants, p, variants, with_value, args)))
            # every compile of the chunk ends before the first timing: a compile running on the
            # host's cores beside a timed loop delays its dispatches and idles the device
            ready = []
            for p, args, future in prepared:
                try:
                    ready.append((p, args, future.result()))
                except Exception as err:  # noqa: BLE001 - one failing point must not lose the others
                    print(f"{p.name}: failed to compile: {type(err).__name__}: {str(err)[:300]}", file=sys.stderr)
            del prepared
            for p, args, compiled in ready:
                try:
                    times = bench.interleaved_median_ms({v: (lambda c=c: c(*args)) for v, c in compiled.items()},
                                                        repeats, calls=calls)
                except Exception as err:  # noqa: BLE001 - one failing point must not lose the others
                    print(f"{p.name}: failed: {type(err).__name__}: {str(err)[:300]}", file=sys.stderr)
                    continue
                row = {"op": p.op, "shape": list(p.shape), "dtype": p.dtype, "weight_dtype": p.weight_dtype,
                       **{f"{v}_ms": t for v, t in times.items()}}
                if "default" in compiled and "xla" in compiled:
                    row["same_program"] = program_text(compiled["default"]) == program_text(compiled["xla"])
                row["ratio"], row["ok"] = verdict(row)
                rows.append(row)
                if on_row:
                    on_row(row)
            del ready
    return rows


def markdown(rows, meta) -> str:
    """The rows as a table, worst ratio first, with a summary line."""
    if not rows:
        return f"{meta['device']}, jax {meta['jax']}, form {meta['form']}: no point selected"
    cols = [v for v in VARIANTS if any(f"{v}_ms" in r for r in rows)]
    ratios = [r["ratio"] for r in rows]
    lines = [f"{meta['device']}, jax {meta['jax']}, form {meta['form']}: {len(rows)} points, "
             f"{sum(not r['ok'] for r in rows)} below the bar; best/default median "
             f"{statistics.median(ratios):.3f}, min {min(ratios):.3f}; default and xla one program at "
             f"{sum(bool(r.get('same_program')) for r in rows)}", "",
             "| point | " + " | ".join(f"{c} ms" for c in cols) + " | best/default | ok |",
             "|---|" + "---:|" * (len(cols) + 1) + "---|"]
    for r in sorted(rows, key=lambda r: r["ratio"]):
        name = shapes.Point(r["op"], tuple(r["shape"]), r["dtype"], r["weight_dtype"]).name
        cells = " | ".join(f"{r[f'{c}_ms']:.3f}" if f"{c}_ms" in r else "" for c in cols)
        lines.append(f"| {name} | {cells} | {r['ratio']:.3f} | {'yes' if r['ok'] else '**no**'} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=shapes.HELD_OUT_SEED)
    parser.add_argument("--count", type=int, default=shapes.HELD_OUT_POINTS)
    parser.add_argument("--max-elements", type=int, default=None, help="skip larger points (a CPU try)")
    parser.add_argument("--ops", default=",".join(shapes.OPS))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--form", choices=("train", "grads"), default="train")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--only", default=None,
                        help="only the points whose name (e.g. 'group_norm 8x1280x8x8 bfloat16') is one of these "
                             "(comma-separated)")
    parser.add_argument("--out", default=None, help="JSON file of the rows and the run's metadata")
    args = parser.parse_args(argv)
    drawn = shapes.held_out() if (args.seed, args.count) == (shapes.HELD_OUT_SEED, shapes.HELD_OUT_POINTS) else \
        shapes.draw(args.seed, args.count)
    points = [p for p in drawn if p.op in args.ops.split(",")
              and (args.max_elements is None or np.prod(p.shape) <= args.max_elements)
              and (args.only is None or p.name in {name.strip() for name in args.only.split(",")})]
    meta = {"device": jax.devices()[0].device_kind, "jax": jax.__version__, "form": args.form,
            "seed": args.seed, "count": args.count, "repeats": args.repeats, "calls": args.calls,
            "command": "python benchmarks/norms.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    start = time.perf_counter()
    rows = run(points, tuple(args.variants.split(",")), args.form, args.repeats, args.calls,
               on_row=lambda r: print(f"{r['op']} {r['shape']} {r['dtype']}: ratio {r['ratio']:.3f}", flush=True))
    meta["seconds"] = time.perf_counter() - start
    print(markdown(rows, meta))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
