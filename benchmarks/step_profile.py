"""Where a training step's time goes at sweep points: every kernel and fusion of the compiled
program (``bench.fwd_bwd(..., with_value=True)``: the value and the gradients, as ``bench --suite
sweep --with-value`` times it), its device time from a profiler trace
(``benchmarks/device_timeline.py``, medians of ``--steps`` calls), in microseconds and in
*passes*: the time the copy probe takes to move one activation-sized tensor once (read or write).
A layer norm forward that reads x and writes y should take about 2 passes; the speed-of-light
model (``bench.sweep_bytes``) counts 5 for the whole step. So a point's missing speed shows up
as the operation that takes more passes than the bytes it must move.

    PYTHONPATH=. python3 benchmarks/step_profile.py --ops "group_norm 64x256x56x56 bfloat16" \\
        --variants default,xla --out profile.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import device_timeline  # noqa: E402

from jaxrules import bench  # noqa: E402


def pass_us(case: bench.SweepCase, gbps: float) -> float:
    """Microseconds the copy probe (``gbps``) takes to move one tensor of ``case``'s activation once."""
    return math.prod(case.shape) * np.dtype(case.dtype).itemsize / (gbps * 1e3)


def profile(case: bench.SweepCase, variant: str, gbps: float, steps: int = 5, timeline=None) -> dict:
    """The training step of ``case`` in ``variant``, traced (``timeline``: ``device_timeline.timeline``
    by default): ``{"case", "variant", "span_us", "idle_us", "passes", "ops": [{"name", "us",
    "passes"}, ...]}`` of the first GPU (no GPU plane in the trace: no ``ops``)."""
    x, w, b, ct = bench._sweep_inputs(case, np.random.default_rng(0))
    compiled = bench.fwd_bwd(bench.sweep_fn(case, variant), with_value=True).lower(ct, x, w, b).compile()
    planes = (timeline or device_timeline.timeline)(lambda: compiled(ct, x, w, b), steps)
    one = pass_us(case, gbps)
    row = {"case": case.name, "variant": variant, "pass_us": round(one, 2)}
    if not planes:
        return row
    plane = planes[sorted(planes)[0]]
    ops = [{"name": name, "us": round(us, 2), "passes": round(us / one, 2)} for _, us, name in plane["ops"]]
    return {**row, "span_us": round(plane["span_us"], 2), "idle_us": round(plane["idle_us"], 2),
            "passes": round(plane["span_us"] / one, 2), "ops": ops}


def format_profile(row: dict, width: int = 80) -> str:
    """A Markdown block: the step's span in microseconds and passes, then each operation's."""
    if "ops" not in row:
        return f"{row['case']} [{row['variant']}]: no GPU operations in the trace"
    lines = [f"{row['case']} [{row['variant']}]: step {row['span_us']:.1f} us = {row['passes']:.2f} passes of "
             f"{row['pass_us']:.1f} us, GPU idle {row['idle_us']:.1f} us"]
    lines += [f"    {op['us']:8.1f} us  {op['passes']:5.2f}  {op['name'][:width]}" for op in row["ops"]]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", required=True, help="sweep cases whose name contains this (comma-separated: any)")
    parser.add_argument("--variants", default="default,xla", help="of the sweep's: default, pallas, mosaic, xla, jax")
    parser.add_argument("--steps", type=int, default=5, help="calls traced per program")
    parser.add_argument("--out", help="append each profile here (JSON lines)")
    args = parser.parse_args(argv)
    cases = [c for c in bench.sweep_cases() if any(p in c.name for p in args.ops.split(","))]
    if not cases:
        print(f"step_profile: no sweep case matches {args.ops!r}", file=sys.stderr)
        return 2
    platform = "gpu" if jax.default_backend() == "gpu" else "cpu"
    gbps = bench.copy_probe(platform)["sol_gbps"]
    for case in cases:
        for variant in args.variants.split(","):
            if not bench.sweep_applies(case, variant):
                continue
            row = profile(case, variant, gbps, args.steps)
            print(format_profile(row), flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
