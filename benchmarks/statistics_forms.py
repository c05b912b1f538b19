"""The XLA formulas' two statistics forms against plain JAX at a draw of shapes (batch, group and
layer norm up to a size): ``welford`` (one pass, ``partials.welford_moments`` and sums over data
shifted by each group's first element), ``direct`` (two passes, sums centred on the mean) and
plain JAX's autodiff, each in the training-step form and gradients only, interleaved in one
process. On the tuning draw it gave ``partials.normalization``'s ``ONE_PASS_*`` thresholds for
many rows; whole training steps (``models.py --ablate``) gave the rest: no one-pass forms for
batch and group norms.

    PYTHONPATH=. python benchmarks/statistics_forms.py 64 forms.json     # points up to 64 MiB
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import bench  # noqa: E402
import norms  # noqa: E402
import shapes  # noqa: E402

import jaxrules.partials.normalization as forms  # noqa: E402

VARIANTS = ("welford", "direct", "jax")
FORMS = ("train", "grads")


def lower(point, variant, form, args):
    """The jitted step of ``point`` in ``variant``, lowered with the statistics' form forced."""
    original = forms.direct_forms
    if variant != "jax":
        forms.direct_forms = lambda x, axes: variant == "direct"
    try:
        return bench.fwd_bwd(norms.variant_fn(point.op, "jax" if variant == "jax" else "xla"), form == "train").lower(
            *args)
    finally:
        forms.direct_forms = original


def main(max_mib: float, out: str, seed: int = shapes.TUNING_SEED) -> list:
    points = [p for p in shapes.draw(seed, shapes.HELD_OUT_POINTS)
              if p.op != "rms_norm" and shapes.tensor_bytes(p) <= max_mib * 2**20]
    rows = []
    with ThreadPoolExecutor(32) as pool:
        for start in range(0, len(points), 16):
            prepared = []
            for i, p in enumerate(points[start:start + 16]):
                args = norms.inputs(p, i)
                lowered = {(f, v): lower(p, v, f, args) for f in FORMS for v in VARIANTS}
                prepared.append((p, args, {k: pool.submit(low.compile) for k, low in lowered.items()}))
            for p, args, futures in prepared:
                compiled = {k: f.result() for k, f in futures.items()}
                row = {"op": p.op, "shape": list(p.shape), "dtype": p.dtype, "weight_dtype": p.weight_dtype,
                       "mb": shapes.tensor_bytes(p) / 2**20}
                for f in FORMS:
                    times = bench.interleaved_median_ms(
                        {v: (lambda c=compiled[(f, v)]: c(*args)) for v in VARIANTS}, 21, calls=20)
                    row.update({f"{f}_{v}": t for v, t in times.items()})
                rows.append(row)
                print(p.name, {k: round(v, 3) for k, v in row.items() if k.startswith(FORMS)}, flush=True)
    with open(out, "w") as fh:
        json.dump(rows, fh, indent=1)
    return rows


if __name__ == "__main__":
    main(float(sys.argv[1]), sys.argv[2])
