"""Time the fused kernel and the XLA formulas of a few sweep cases in this checkout, for A/B runs
of two commits in one GPU session (the sixth pass found the layer-norm kernel 14-20% slower at
HEAD than at 5e5f889 this way; ``benchmarks/RESULTS.md``). Prints one line per case and repeat;
run it from each tree in turn, alternating, on the same machine:

    for t in old new old new; do (cd /tmp/$t && PYTHONPATH=. python3 benchmarks/kernel_ab.py --label $t); done

with ``/tmp/old`` and ``/tmp/new`` made by ``git archive <commit> | tar x -C /tmp/<name>``. Uses only
``jaxrules.bench.sweep_cases`` and ``run_sweep``, present since the fourth pass. ``--kernels``
times the forward and the backward kernel alone instead (``norm_kernels.local_forward`` /
``local_backward``, or ``forward`` / ``backward`` in trees older than the partitioning), each
jitted on device-resident inputs, median of ``--repeats`` runs of 10 queued calls."""

from __future__ import annotations

import argparse

from jaxrules import bench

DEFAULT_CASES = ("layer_norm 16384x4096 float32", "layer_norm 65535x4096 bfloat16", "layer_norm 16384x4096 bfloat16",
                 "layer_norm 16384x4096 bfloat16+float32-weights")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True, help="the tree's name, printed on each line")
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES), help="comma-separated sweep case names")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--kernels", action="store_true", help="time the forward and backward kernels alone")
    args = parser.parse_args(argv)
    wanted = args.cases.split(",")
    if args.kernels:
        return time_kernels(args.label, wanted, args.repeats)
    cases = [c for c in bench.sweep_cases() if c.name in wanted]
    rows, _ = bench.run_sweep(cases, variants=("pallas", "xla"), repeats=args.repeats)
    for row in rows:  # a case that failed has no row (run_sweep says why on stderr)
        name = f"{row['op']} {'x'.join(map(str, row['shape']))} {row['dtype']} (weights {row['weight_dtype']})"
        print(f"{args.label} {name}: kernel {row['pallas_ms']:.3f} ms, XLA {row['xla_ms']:.3f} ms", flush=True)


def time_kernels(label, wanted, repeats):
    """Print the median ms of the layer-norm forward and backward kernels alone for each case
    named ``layer_norm MxN dtype`` (float32 weights and statistics)."""
    import statistics
    import time

    import jax
    import jax.numpy as jnp

    from jaxrules import dispatch, norm_kernels

    forward = getattr(norm_kernels, "local_forward", norm_kernels.forward)
    backward = getattr(norm_kernels, "local_backward", norm_kernels.backward)
    for name in wanted:
        _, shape, dtype = name.split()[:3]
        m, n = map(int, shape.split("x"))
        launch = dispatch.rows_launch(m, n, interpret=jax.default_backend() == "cpu")
        keys = jax.random.split(jax.random.PRNGKey(0), 4)
        x = jax.random.normal(keys[0], (m, n), dtype)
        g = jax.random.normal(keys[1], (m, n), dtype)
        w = jax.random.normal(keys[2], (n,), jnp.float32)
        b = jax.random.normal(keys[3], (n,), jnp.float32)
        fwd = jax.jit(lambda x, w, b: forward(x, w, b, eps=1e-5, launch=launch))
        _, mean, rstd = fwd(x, w, b)
        bwd = jax.jit(lambda x, g, w, mean, rstd: backward(x, g, w, mean, rstd, jnp.zeros_like(mean),
                                                           jnp.zeros_like(rstd), launch=launch))
        for kernel, call in (("forward", lambda: fwd(x, w, b)), ("backward", lambda: bwd(x, g, w, mean, rstd))):
            jax.block_until_ready(call())
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                jax.block_until_ready([call() for _ in range(10)])
                times.append((time.perf_counter() - start) / 10 * 1e3)
            print(f"{label} {name} {kernel}: {statistics.median(times):.4f} ms", flush=True)


if __name__ == "__main__":
    main()
