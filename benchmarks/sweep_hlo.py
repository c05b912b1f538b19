"""Write the optimized HLO of sweep cases' forward+backward programs (``bench.fwd_bwd`` of
``bench.sweep_fn``, the programs the sweep times) for each variant, to read offline why one
variant is slower than another (issue 14: rms_norm's XLA formulas vs plain JAX).

    PYTHONPATH=. python3 benchmarks/sweep_hlo.py --cases "rms_norm 21844x12288 bfloat16" --out hlo/
"""

from __future__ import annotations

import argparse
import pathlib

import numpy as np

from jaxrules import bench


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", required=True, help="comma-separated sweep case names")
    parser.add_argument("--variants", default="xla,jax")
    parser.add_argument("--out", required=True, help="folder for <case>.<variant>.hlo.txt")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wanted = args.cases.split(",")
    for case in (c for c in bench.sweep_cases() if c.name in wanted):
        x, w, b, ct = bench._sweep_inputs(case, np.random.default_rng(0))
        for variant in args.variants.split(","):
            compiled = bench.fwd_bwd(bench.sweep_fn(case, variant)).lower(ct, x, w, b).compile()
            path = out / f"{case.name.replace(' ', '_')}.{variant}.hlo.txt"
            path.write_text(compiled.as_text())
            print(path, flush=True)


if __name__ == "__main__":
    main()
