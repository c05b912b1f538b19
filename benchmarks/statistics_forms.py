"""The XLA formulas' two statistics forms against plain JAX at a draw of shapes (batch, group and
layer norm up to a size): ``welford`` (one pass, ``partials.welford_moments`` and sums over data
shifted by each group's first element), ``direct`` (two passes, sums centred on the mean) and
plain JAX's autodiff, each in the training-step form and gradients only, interleaved in one
process. On the tuning draw it gave ``partials.normalization``'s ``ONE_PASS_*`` thresholds for
many groups, on the long-rows grid (``shapes.long_rows_grid``: layer norms of 1024-6144 rows of
4096-16384, the training-step form) the one for long rows, on the many-rows grid
(``shapes.many_rows_grid``: 4096-8192 rows of 512-6144) the one for many rows; whole training
steps (``models.py --ablate``) gave the rest: no one-pass forms for batch and group norms.

    PYTHONPATH=. python benchmarks/statistics_forms.py 64 forms.json              # the tuning draw up to 64 MiB
    PYTHONPATH=. python benchmarks/statistics_forms.py long-rows long_rows.json   # the long-rows grid
    PYTHONPATH=. python benchmarks/statistics_forms.py many-rows many_rows.json   # the many-rows grid
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


def tuning_points(max_mib: float, seed: int = shapes.TUNING_SEED) -> list:
    """The tuning draw's batch, group and layer norms of at most ``max_mib`` MiB (RMS norm has no
    mean: one form)."""
    return [p for p in shapes.draw(seed, shapes.HELD_OUT_POINTS)
            if p.op != "rms_norm" and shapes.tensor_bytes(p) <= max_mib * 2**20]


def main(points: list, out: str, forms=FORMS) -> list:
    rows = []
    with ThreadPoolExecutor(32) as pool:
        for start in range(0, len(points), 16):
            prepared = []
            for i, p in enumerate(points[start:start + 16]):
                args = norms.inputs(p, i)
                lowered = {(f, v): lower(p, v, f, args) for f in forms for v in VARIANTS}
                prepared.append((p, args, {k: pool.submit(low.compile) for k, low in lowered.items()}))
            # every compile of the chunk ends before the first timing (as in norms.run)
            prepared = [(p, args, {k: f.result() for k, f in futures.items()}) for p, args, futures in prepared]
            for p, args, compiled in prepared:
                row = {"op": p.op, "shape": list(p.shape), "dtype": p.dtype, "weight_dtype": p.weight_dtype,
                       "mb": shapes.tensor_bytes(p) / 2**20}
                for f in forms:
                    times = bench.interleaved_median_ms(
                        {v: (lambda c=compiled[(f, v)]: c(*args)) for v in VARIANTS}, 21, calls=20)
                    row.update({f"{f}_{v}": t for v, t in times.items()})
                rows.append(row)
                print(p.name, {k: round(v, 3) for k, v in row.items() if k.startswith(forms)}, flush=True)
    with open(out, "w") as fh:
        json.dump(rows, fh, indent=1)
    return rows


if __name__ == "__main__":
    # the rule's long-rows and many-rows clauses were chosen on the training step
    grids = {"long-rows": shapes.long_rows_grid, "many-rows": shapes.many_rows_grid}
    if sys.argv[1] in grids:
        main(grids[sys.argv[1]](), sys.argv[2], forms=("train",))
    else:
        main(tuning_points(float(sys.argv[1])), sys.argv[2])
