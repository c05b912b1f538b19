"""Sweep points timed as three programs, side by side in one process: the gradients only (the
sweep's default), the value and the gradients with the cotangent given (``bench.fwd_bwd`` with
``cotangent_after_value=False``: XLA may fuse the value's pass into the backward), and a training
step (the backward after the value is written, ``bench --with-value``). Prints ms per call and
each variant's ratio to the faster of ``xla`` and ``jax`` per form, and with ``--hlo DIR`` writes
each optimized program's HLO there.

    PYTHONPATH=. python3 benchmarks/step_forms.py --ops "group_norm 64x256x56x56,..." --repeats 15
"""

import argparse
import os

import jax
import numpy as np

from jaxrules import bench

FORMS = {"grads": dict(with_value=False), "value_given_ct": dict(with_value=True, cotangent_after_value=False),
         "step": dict(with_value=True)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", required=True, help="sweep case names (comma-separated substrings)")
    parser.add_argument("--variants", default="default,pallas,xla,jax")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--hlo", help="a folder for the optimized HLO of every program")
    args = parser.parse_args()
    cases = [c for c in bench.sweep_cases() if any(p in c.name for p in args.ops.split(","))]
    variants = args.variants.split(",")
    print(f"{jax.devices()[0].device_kind}, jax {jax.__version__}; ms per call, median of {args.repeats}")
    for case in cases:
        x, w, b, ct = bench._sweep_inputs(case, np.random.default_rng(0))
        compiled = {(form, v): bench.fwd_bwd(bench.sweep_fn(case, v), **kw).lower(ct, x, w, b).compile()
                    for form, kw in FORMS.items() for v in variants if bench.sweep_applies(case, v)}
        if args.hlo:
            os.makedirs(args.hlo, exist_ok=True)
            for (form, v), c in compiled.items():
                name = f"{case.name.replace(' ', '_')}_{form}_{v}.txt"
                with open(os.path.join(args.hlo, name), "w") as f:
                    f.write(c.as_text())
        times = bench.interleaved_median_ms({k: (lambda c=c: c(ct, x, w, b)) for k, c in compiled.items()},
                                            args.repeats)
        plan = bench.sweep_plan(case, "gpu" if jax.default_backend() == "gpu" else "cpu", jax.devices()[0].device_kind)
        print(f"{case.name} (plan {plan.impl})")
        for form in FORMS:
            row = {v: times[(form, v)] for v in variants if (form, v) in times}
            best = min(t for v, t in row.items() if v in ("xla", "jax"))
            cells = "  ".join(f"{v} {t:.3f} ({best / t:.2f}x)" for v, t in row.items())
            print(f"  {form:15s} {cells}")


if __name__ == "__main__":
    main()
