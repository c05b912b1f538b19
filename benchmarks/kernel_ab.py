"""Time the fused kernel and the XLA formulas of a few sweep cases in this checkout, for A/B runs
of two commits in one GPU session (the sixth pass found the layer-norm kernel 14-20% slower at
HEAD than at 5e5f889 this way; ``benchmarks/RESULTS.md``). Prints one line per case and repeat;
run it from each tree in turn, alternating, on the same machine:

    for t in old new old new; do (cd /tmp/$t && PYTHONPATH=. python3 benchmarks/kernel_ab.py --label $t); done

with ``/tmp/old`` and ``/tmp/new`` made by ``git archive <commit> | tar x -C /tmp/<name>``. Uses only
``jaxrules.bench.sweep_cases`` and ``run_sweep``, present since the fourth pass. ``--kernels``
times the forward and the backward kernel alone instead (``norm_kernels.local_forward`` /
``local_backward``, or ``forward`` / ``backward`` in trees older than the partitioning), each
jitted on device-resident inputs, median of ``--repeats`` runs of 10 queued calls, with its
bandwidth as a fraction of the copy probe's (the forward moves two tensors, x and y; the backward
three: x, the cotangent, dx). ``--launch FIELD=VALUE,...`` overrides fields of the rows kernels'
launch (``dispatch.RowsLaunch``), to compare launches in one tree:

    PYTHONPATH=. python3 benchmarks/kernel_ab.py --kernels --label fetch --launch prefetch=1"""

from __future__ import annotations

import argparse
import dataclasses

from jaxrules import bench, dispatch

DEFAULT_CASES = ("layer_norm 16384x4096 float32", "layer_norm 65535x4096 bfloat16", "layer_norm 16384x4096 bfloat16",
                 "layer_norm 16384x4096 bfloat16+float32-weights")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True, help="the tree's name, printed on each line")
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES), help="comma-separated sweep case names")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--kernels", action="store_true", help="time the forward and backward kernels alone")
    parser.add_argument("--launch", help="FIELD=VALUE,...: override these fields of the rows kernels' launch")
    parser.add_argument("--rule", action="store_true", help="--kernels: the launch rule, not this GPU's tuned launch")
    args = parser.parse_args(argv)
    wanted = args.cases.split(",")
    if args.launch:
        override_rows_launch(dict(item.split("=") for item in args.launch.split(",")))
    if args.kernels:
        return time_kernels(args.label, wanted, args.repeats, args.rule)
    cases = [c for c in bench.sweep_cases() if c.name in wanted]
    rows, _ = bench.run_sweep(cases, variants=("pallas", "xla"), repeats=args.repeats)
    for row in rows:  # a case that failed has no row (run_sweep says why on stderr)
        name = f"{row['op']} {'x'.join(map(str, row['shape']))} {row['dtype']} (weights {row['weight_dtype']})"
        print(f"{args.label} {name}: kernel {row['pallas_ms']:.3f} ms, XLA {row['xla_ms']:.3f} ms", flush=True)


def override_rows_launch(fields: dict) -> None:
    """Make ``dispatch.rows_launch`` return its launch with ``fields`` (strings, converted to the
    fields' types) replaced."""
    rows_launch = dispatch.rows_launch
    types = {f.name: f.type for f in dataclasses.fields(dispatch.RowsLaunch)}
    values = {k: (v.lower() not in ("0", "false")) if types[k] in (bool, "bool") else int(v)
              for k, v in fields.items()}
    dispatch.rows_launch = lambda *a, **k: dataclasses.replace(rows_launch(*a, **k), **values)


def time_kernels(label, wanted, repeats, rule=False):
    """Print the median ms of the forward and backward kernels alone for each case named
    ``layer_norm MxN dtype`` or ``rms_norm MxN dtype`` (float32 weights and statistics), and the
    fraction of the copy probe's bandwidth each reaches."""
    import math
    import statistics
    import time

    import jax
    import jax.numpy as jnp

    from jaxrules import norm_kernels

    forward = getattr(norm_kernels, "local_forward", norm_kernels.forward)
    backward = getattr(norm_kernels, "local_backward", norm_kernels.backward)
    gbps = bench.copy_probe("gpu" if jax.default_backend() == "gpu" else "cpu")["sol_gbps"]
    for name in wanted:
        op, shape, dtype = name.split()[:3]
        m, n = map(int, shape.split("x"))
        gpu = jax.default_backend() == "gpu"
        kind = jax.devices()[0].device_kind if gpu and not rule else None
        try:  # trees before the tuned launches take no dtype or device kind
            launch = dispatch.rows_launch(m, n, interpret=not gpu, dtype=jnp.dtype(dtype), device_kind=kind)
        except TypeError:
            launch = dispatch.rows_launch(m, n, interpret=not gpu)
        keys = jax.random.split(jax.random.PRNGKey(0), 4)
        x = jax.random.normal(keys[0], (m, n), dtype)
        g = jax.random.normal(keys[1], (m, n), dtype)
        w = jax.random.normal(keys[2], (n,), jnp.float32)
        b = jax.random.normal(keys[3], (n,), jnp.float32) if op == "layer_norm" else None
        fwd = jax.jit(lambda x, w, b: forward(x, w, b, eps=1e-5, launch=launch))
        _, *stats = fwd(x, w, b)
        zeros = [jnp.zeros_like(s) for s in stats]
        if op == "layer_norm":
            bwd = jax.jit(lambda x, g, w, mean, rstd: backward(x, g, w, mean, rstd, *zeros, launch=launch))
        else:
            bwd = jax.jit(lambda x, g, w, rstd: backward(x, g, w, None, rstd, None, zeros[0], launch=launch))
        tensor = math.prod(x.shape) * x.dtype.itemsize
        for kernel, call, tensors in (("forward", lambda: fwd(x, w, b), 2), ("backward", lambda: bwd(x, g, w, *stats),
                                                                            3)):
            jax.block_until_ready(call())
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                jax.block_until_ready([call() for _ in range(10)])
                times.append((time.perf_counter() - start) / 10 * 1e3)
            ms = statistics.median(times)
            sol = tensors * tensor / (ms * 1e-3) / 1e9 / gbps
            print(f"{label} {name} {kernel}: {ms:.4f} ms, {sol:.2f} of copy", flush=True)


if __name__ == "__main__":
    main()
