"""Check and time launch settings of the batch-norm / group-norm kernels
(``jaxrules.dispatch.GroupedLaunch``) on the GPU, in a training step (``bench.fwd_bwd(...,
with_value=True)``, as ``bench --suite sweep --with-value`` times it): at each shape and dtype,
the XLA formulas, plain JAX and each setting of ``--grid`` run side by side (``bench.interleaved_median_ms``)
after a check of each setting's value and gradients against the XLA formulas.

* ``forms``: the tiles as they are; the second passes walking the tiles last to first
  (``reverse``); group norm's forward as one kernel (``writes_y``); both;
* ``tiles``: ``tile_elements`` 4096-16384 and 4-16 warps, with both forms;
* ``batch``: batch norm's backward split over about 1024 or 4096 programs (``backward_programs``),
  with three tilings.

    PYTHONPATH=. python3 benchmarks/grouped_norm_tuning.py --shapes 64x256x56x56,8x64x112x112 \\
        --grid forms --out grouped.jsonl
    python3 benchmarks/grouped_norm_tuning.py --choose grouped.jsonl
"""

import argparse
import dataclasses
import itertools
import json
import math
import statistics
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

from jaxrules import bench, dispatch

FORMS = [{}, {"reverse": True}, {"writes_y": True}, {"reverse": True, "writes_y": True}]
GRIDS = {
    "forms": FORMS,
    "batch": [{}, *[dict(backward_programs=p, **tiles) for p, tiles in itertools.product(
        (1024, 4096), ({}, dict(tile_elements=8192, num_warps=16), dict(tile_elements=16384, num_warps=8)))]],
    "tiles": [dict(tile_elements=t, chunk=min(t, 4096), num_warps=w, reverse=True, writes_y=True)
              for t, w in itertools.product((4096, 8192, 16384), (4, 8, 16))],
}


def relative_error(got, want) -> float:
    got, want = got.astype(jnp.float32), want.astype(jnp.float32)
    return float(jnp.max(jnp.abs(got - want)) / (1 + jnp.max(jnp.abs(want))))


def lowered_with(setting: dict, case: bench.SweepCase, inputs):
    """The training step of ``case`` on the kernels, with ``GroupedLaunch(**setting)`` as every
    launch, lowered (the launch is read while tracing)."""
    launch_class = dispatch.GroupedLaunch
    dispatch.GroupedLaunch = lambda interpret=False, **_: launch_class(**setting, interpret=interpret)  # no table's
    try:
        return bench.fwd_bwd(bench.sweep_fn(case, "pallas"), with_value=True).lower(*inputs)
    finally:
        dispatch.GroupedLaunch = launch_class


def launch_defaults() -> dict:
    """``GroupedLaunch``'s fields and defaults (the launch a record names, less ``interpret``)."""
    return {f.name: f.default for f in dataclasses.fields(dispatch.GroupedLaunch) if f.name != "interpret"}


def best_setting(records: list[dict]) -> dict:
    """Of the settings timed at every point of ``records`` (this script's JSON lines; a setting
    timed twice at a point counts with its median there), the one with the best geometric mean of
    the faster of the XLA formulas and plain JAX over its time: ``{"launch": its fields that differ
    from the defaults, "geomean": ..., "as_is": the defaults' (None if not timed everywhere)}``."""
    defaults = launch_defaults()
    points = {(r["op"], tuple(r["shape"]), r["dtype"]) for r in records}
    ratios = {}  # setting -> point -> ratios
    for r in records:
        changed = tuple(sorted((k, v) for k, v in r["launch"].items() if defaults.get(k) != v))
        point = (r["op"], tuple(r["shape"]), r["dtype"])
        ratios.setdefault(changed, {}).setdefault(point, []).append(min(r["xla_ms"], r["jax_ms"]) / r["ms"])
    means = {setting: math.exp(statistics.fmean(math.log(statistics.median(v)) for v in at.values()))
             for setting, at in ratios.items() if set(at) == points}
    if not means:
        raise ValueError("grouped_norm_tuning --choose: no setting was timed at every point of the records")
    best = max(means, key=means.get)
    return {"launch": dict(best), "geomean": means[best], "as_is": means.get(())}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="64x256x56x56", help="comma-separated NxCxHxW")
    parser.add_argument("--ops", default="group_norm,batch_norm")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--grid", default="forms", choices=sorted(GRIDS))
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", help="append each shape's times here (JSON lines)")
    parser.add_argument("--choose", metavar="RECORDS", help="instead: print the best setting of these records "
                        "(``best_setting``) as JSON")
    args = parser.parse_args(argv)
    if args.choose:
        with open(args.choose) as f:
            print(json.dumps(best_setting([json.loads(line) for line in f])))
        return
    device = jax.devices()[0].device_kind
    print("device:", device, "jax", jax.__version__)
    for shape, op, dtype in itertools.product(args.shapes.split(","), args.ops.split(","), args.dtypes.split(",")):
        case = bench.SweepCase(op, tuple(map(int, shape.split("x"))), dtype, dtype)
        x, w, b, ct = bench._sweep_inputs(case, np.random.default_rng(0))
        inputs = (ct, x, w, b)
        settings = [s for s in GRIDS[args.grid]  # what the op's kernels read of a launch
                    if not s.get("writes_y" if op == "batch_norm" else "backward_programs")]
        lowered = {v: bench.fwd_bwd(bench.sweep_fn(case, v), with_value=True).lower(*inputs) for v in ("xla", "jax")}
        labels = {" ".join(f"{k}={v}" for k, v in setting.items()) or "as is": setting for setting in settings}
        lowered.update({label: lowered_with(setting, case, inputs) for label, setting in labels.items()})
        with ThreadPoolExecutor(16) as pool:  # XLA compiles off the GIL
            programs = dict(zip(lowered, pool.map(lambda low: low.compile(), lowered.values())))
        want = programs["xla"](*inputs)
        errors = {label: max(relative_error(g, e) for g, e in zip(jax.tree.leaves(programs[label](*inputs)),
                                                                   jax.tree.leaves(want))) for label in labels}
        times = bench.interleaved_median_ms({k: (lambda c=c: c(*inputs)) for k, c in programs.items()}, args.repeats)
        base = min(times["xla"], times["jax"])
        for label in ("xla", "jax", *labels):
            note = f"  error {errors[label]:.1e}" if label in errors else ""
            print(f"{case.name} | {label} | {times[label]:.4f} ms | {base / times[label]:.2f}x{note}", flush=True)
        if args.out:
            defaults = launch_defaults()
            with open(args.out, "a") as f:
                for label, setting in labels.items():
                    f.write(json.dumps({"op": op, "shape": list(case.shape), "dtype": dtype, "device_kind": device,
                                        "launch": {**defaults, **setting}, "ms": times[label], "xla_ms": times["xla"],
                                        "jax_ms": times["jax"], "error": errors[label]}) + "\n")


if __name__ == "__main__":
    main()
