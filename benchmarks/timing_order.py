"""Does a variant's place in the sweep's alternating order change its time? The sweep times
``default``, ``xla`` and ``jax`` alternating (``jaxrules.bench.interleaved_median_ms``); where the
dispatch plans the XLA formulas, ``default`` and ``xla`` are the same program, so any gap between
them is the method's. Each case is timed with the three fixed orders (each variant first once)
and with the rotating order the bench uses; the table gives each variant's median per order.

    python benchmarks/timing_order.py --ops "layer_norm 1000x12288 bfloat16,layer_norm 1000x16384 float32"
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np

from jaxrules import bench

VARIANTS = ("default", "xla", "jax")


def _fixed_order_ms(calls: dict, repeats: int) -> dict:
    """Medians with the labels always in ``calls``' order (the bench's order before the rotation)."""
    times = {label: [] for label in calls}
    for _ in range(repeats):
        for label, call in calls.items():
            start = time.perf_counter()
            for _ in range(bench.CALLS_PER_RUN - 1):
                call()
            jax.block_until_ready(call())
            times[label].append((time.perf_counter() - start) * 1e3 / bench.CALLS_PER_RUN)
    return {label: statistics.median(t) for label, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", required=True, help="sweep case names (substrings), comma-separated")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    cases = [c for c in bench.sweep_cases() if any(p in c.name for p in args.ops.split(","))]
    print(f"{jax.devices()[0].device_kind}, jax {jax.__version__}, {args.repeats} repeats of "
          f"{bench.CALLS_PER_RUN} queued calls\n")
    print("| case | plan | order | default ms | xla ms | jax ms | default / xla |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for case in cases:
        x, w, b, ct = bench._sweep_inputs(case, rng)
        compiled = {v: bench.fwd_bwd(bench.sweep_fn(case, v)).lower(ct, x, w, b).compile() for v in VARIANTS}
        calls = {v: (lambda c=c: c(ct, x, w, b)) for v, c in compiled.items()}
        for label in calls.values():
            jax.block_until_ready(label())
        plan = bench.sweep_plan(case, "gpu" if jax.default_backend() == "gpu" else "cpu",
                                jax.devices()[0].device_kind).impl
        orders = {" ".join(VARIANTS[i:] + VARIANTS[:i]): None for i in range(len(VARIANTS))}
        for order in orders:
            orders[order] = _fixed_order_ms({v: calls[v] for v in order.split()}, args.repeats)
        orders["rotating (the bench)"] = bench.interleaved_median_ms(calls, args.repeats)
        for order, ms in orders.items():
            print(f"| {case.name} | {plan} | {order} | {ms['default']:.4f} | {ms['xla']:.4f} | {ms['jax']:.4f} "
                  f"| {ms['default'] / ms['xla']:.3f} |")


if __name__ == "__main__":
    main()
