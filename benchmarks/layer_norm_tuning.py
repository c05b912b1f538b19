"""Sweep the rows kernels' launch parameters (``jaxrules.dispatch.RowsLaunch``) per shape and
dtype on the GPU: the forward kernel (``norm_kernels.local_forward``) over rows per tile, warps and
tiles per program, the backward kernel (``local_backward``) over rows per tile, warps, programs and
the prefetch of the next tile, each with a row in one padded piece and, at widths that are not a
power of two, in pieces (``dispatch.row_pieces``), and (``--kernels split``) the split backward
(``RowsLaunch.split``: XLA's row sums, then a program per piece) over piece widths, rows, warps and
programs; each kernel alone on device-resident inputs (median of ``--repeats`` runs of 10 queued
calls), layer norm or RMS norm. Every setting's time goes to ``--out`` (JSON lines) and the best of
each kernel is printed beside the current rule's (``dispatch.rows_launch``), with the fraction of
the copy probe's bandwidth (forward: x and y; backward: x, the cotangent, dx).

    PYTHONPATH=. python3 benchmarks/layer_norm_tuning.py --shapes 52427x5120,16384x4096 --out t.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp

from jaxrules import bench, dispatch, norm_kernels

INTERPRET = jax.default_backend() != "gpu"  # a try on a CPU: the kernels interpreted


def settings(m: int, n: int):
    """``(kernel, launch)`` pairs to time at (m, n): the current rule's launch first, then, for each
    layout of a row (one padded piece, the rule's; pieces, ``dispatch.row_pieces``, where they pad
    less), the forward over rows per tile and warps, one tile per program or walking tiles (264 or
    528 programs, with and without the prefetch), the backward over rows, warps, programs and the
    prefetch."""
    rule = dispatch.rows_launch(m, n, interpret=INTERPRET)  # the rule (no device kind): what tuning starts from
    width, pieces = dispatch.row_pieces(n)
    layouts = [rule]
    if pieces > 1:
        rows = dispatch.tile_rows(dispatch.TILE_ELEMENTS, pieces * width, m)
        layouts.append(dataclasses.replace(rule, width=width, pieces=pieces, rows=rows,
                                           steps=dispatch.backward_steps(m, rows, dispatch.BACKWARD_PROGRAMS)))
    forward, backward = [], []
    for base in layouts:
        fits = lambda r: r * base.span <= dispatch.MAX_TILE_ELEMENTS and r <= dispatch._next_power_of_2(m)  # noqa: E731,B023
        rows = sorted(r for r in {1, 2, 4, 8, base.rows // 2, base.rows, base.rows * 2} if r >= 1 and fits(r))
        forward += [dataclasses.replace(base, rows=r, num_warps=w) for r, w in itertools.product(rows, (4, 8, 16))]
        near = sorted(r for r in {max(1, base.rows // 2), base.rows, base.rows * 2} if fits(r))
        for r, w, programs, prefetch in itertools.product(near, (4, 8), (264, 528), (False, True)):  # walking
            forward.append(dataclasses.replace(base, rows=r, num_warps=w, forward_prefetch=prefetch,
                                               forward_steps=dispatch.backward_steps(m, r, programs)))
        for r, w, programs, prefetch in itertools.product(near, (4, 8, 16), (256, 512), (False, True)):
            backward.append(dataclasses.replace(base, rows=r, num_warps=w, prefetch=prefetch,
                                                steps=dispatch.backward_steps(m, r, programs)))
    unique = lambda launches: list(dict.fromkeys([rule, *launches]))  # noqa: E731
    return ([("forward", launch) for launch in unique(forward)] + [("backward", launch) for launch in unique(backward)]
            + [("split", launch) for launch in unique(split_backwards(m, n, rule))])


def split_backwards(m: int, n: int, rule):
    """The split backward's launches at (m, n) (rows of at least 2048 columns): pieces of 1024 to
    4096 columns (at most ``n`` padded), tiles of 2048 to 8192 elements, 4 or 8 warps, about 128 to
    512 programs over the rows (each of them times the pieces), no prefetch."""
    launches = []
    for width in (1024, 2048, 4096):
        if n < 2048 or width > dispatch._next_power_of_2(n):
            continue
        for rows, warps, programs in itertools.product((1, 2, 4, 8), (4, 8), (128, 256, 512)):
            if 2048 <= rows * width <= 8192 and rows <= dispatch._next_power_of_2(m):
                launches.append(dataclasses.replace(rule, split=True, width=width, pieces=-(-n // width), rows=rows,
                                                    num_warps=warps, prefetch=False,
                                                    steps=dispatch.backward_steps(m, rows, programs)))
    return launches


def inputs(op, m, n, dtype):
    """``(x, w, b)`` of the forward and ``(x, g, w, *statistics)`` of the backward."""
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    x, g = (jax.random.normal(k, (m, n), dtype) for k in keys[:2])
    w = jax.random.normal(keys[2], (n,), jnp.float32)
    b = jax.random.normal(keys[3], (n,), jnp.float32) if op == "layer_norm" else None
    _, *stats = norm_kernels.local_forward(x, w, b, eps=1e-5, launch=dispatch.rows_launch(m, n, interpret=INTERPRET))
    return {"forward": (x, w, b), "backward": (x, g, w, *stats)}


def kernel_fn(op, kernel, launch):
    """The kernel alone as a function of ``inputs(...)[kernel]`` (zero statistics' cotangents)."""
    if kernel == "forward":
        return lambda x, w, b: norm_kernels.local_forward(x, w, b, eps=1e-5, launch=launch)
    if op == "layer_norm":
        return lambda x, g, w, mean, rstd: norm_kernels.local_backward(
            x, g, w, mean, rstd, jnp.zeros_like(mean), jnp.zeros_like(rstd), launch=launch)
    return lambda x, g, w, rstd: norm_kernels.local_backward(x, g, w, None, rstd, None, jnp.zeros_like(rstd),
                                                             launch=launch)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="layer_norm", choices=("layer_norm", "rms_norm"))
    parser.add_argument("--shapes", required=True, help="comma-separated MxN")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", help="append every setting's time here (JSON lines)")
    parser.add_argument("--kernels", default="forward,backward",
                        help="the kernels to time (comma-separated: forward, backward, split: the split backward's "
                             "launches, recorded as the backward's; record_dispatch.py --launches needs forward and "
                             "backward per shape: join another run's records of the other one)")
    args = parser.parse_args(argv)
    kernels = args.kernels.split(",")
    if not set(kernels) <= {"forward", "backward", "split"}:
        parser.error(f"--kernels: forward, backward and/or split, not {args.kernels!r}")
    gbps = bench.copy_probe("cpu" if INTERPRET else "gpu")["sol_gbps"]
    for shape, dtype in itertools.product(args.shapes.split(","), args.dtypes.split(",")):
        m, n = map(int, shape.split("x"))
        tensor = m * n * jnp.dtype(dtype).itemsize
        pairs = [("backward" if k == "split" else k, launch) for k, launch in settings(m, n) if k in kernels]
        pairs, arrays = list(dict.fromkeys(pairs)), inputs(args.op, m, n, dtype)
        with ThreadPoolExecutor(16) as pool:  # compile every setting ahead, together
            compiled = list(pool.map(lambda p: _compile(args.op, p[0], p[1], arrays[p[0]]), pairs))
        best = {}
        for (kernel, launch), call in zip(pairs, compiled):
            if call is None:
                continue
            ms = bench.median_ms(lambda: call(*arrays[kernel]), args.repeats)
            sol = (2 if kernel == "forward" else 3) * tensor / (ms * 1e-3) / 1e9 / gbps
            record = {"op": args.op, "m": m, "n": n, "dtype": dtype, "kernel": kernel, "ms": ms, "sol": sol,
                      **{k: v for k, v in dataclasses.asdict(launch).items() if k != "interpret"},
                      "device_kind": jax.devices()[0].device_kind}  # the GPU's, not the launch's (the rule: None)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(record) + "\n")
            if launch == dispatch.rows_launch(m, n, interpret=INTERPRET):
                record["rule"] = True
                best.setdefault(kernel + " rule", record)
            if kernel not in best or ms < best[kernel]["ms"]:
                best[kernel] = record
        for kernel in ("forward", "backward"):
            rule, top = best.get(kernel + " rule"), best.get(kernel)
            if rule and top:
                steps, prefetch = ((top["steps"], top["prefetch"]) if kernel == "backward"
                                   else (top["forward_steps"] or 1, top["forward_prefetch"]))
                print(f"{args.op} {shape} {dtype} {kernel}: rule {rule['ms']:.4f} ms ({rule['sol']:.2f}), best "
                      f"{top['ms']:.4f} ms ({top['sol']:.2f}) rows={top['rows']} warps={top['num_warps']} "
                      f"steps={steps} prefetch={prefetch} pieces={top['pieces']}x{top['width']} split={top['split']}",
                      flush=True)


def _compile(op, kernel, launch, args):
    try:
        return jax.jit(kernel_fn(op, kernel, launch)).lower(*args).compile()
    except Exception as err:  # noqa: BLE001 - a setting Triton rejects must not stop the sweep
        print(f"{op} {kernel} {launch}: failed: {type(err).__name__}: {str(err)[:200]}", flush=True)
        return None


if __name__ == "__main__":
    main()
