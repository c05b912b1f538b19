"""Time the fused kernel and the XLA formulas of a few sweep cases in this checkout, for A/B runs
of two commits in one GPU session (the sixth pass found the layer-norm kernel 14-20% slower at
HEAD than at 5e5f889 this way; ``benchmarks/RESULTS.md``). Prints one line per case and repeat;
run it from each tree in turn, alternating, on the same machine:

    for t in old new old new; do (cd /tmp/$t && PYTHONPATH=. python3 benchmarks/kernel_ab.py --label $t); done

with ``/tmp/old`` and ``/tmp/new`` made by ``git archive <commit> | tar x -C /tmp/<name>``. Uses only
``jaxrules.bench.sweep_cases`` and ``run_sweep``, present since the fourth pass."""

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
    args = parser.parse_args(argv)
    wanted = args.cases.split(",")
    cases = [c for c in bench.sweep_cases() if c.name in wanted]
    rows, _ = bench.run_sweep(cases, variants=("pallas", "xla"), repeats=args.repeats)
    for row in rows:  # a case that failed has no row (run_sweep says why on stderr)
        name = f"{row['op']} {'x'.join(map(str, row['shape']))} {row['dtype']} (weights {row['weight_dtype']})"
        print(f"{args.label} {name}: kernel {row['pallas_ms']:.3f} ms, XLA {row['xla_ms']:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
