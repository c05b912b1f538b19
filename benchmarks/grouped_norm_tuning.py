"""Check and tune the fused batch-norm / group-norm kernels on the GPU
(``jaxrules.dispatch.GroupedLaunch``): for 64x256x56x56 (group norm: 32 groups), float32
and bfloat16,

* the compiled kernels against the jnp formulas (``impl="xla"``): value and gradients;
* ``jit(vjp)`` (gradients only, as ``python -m jaxrules bench``) and ``jit`` of value and
  gradients (a training step keeps y), median of ``--repeats`` runs, XLA path and kernels, for
  each launch setting.

    python benchmarks/grouped_norm_tuning.py [--repeats 30] [--quick]
"""

import argparse
import dataclasses
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np

from jaxrules import dispatch
from jaxrules.bench import fwd_bwd, median_ms
from jaxrules.nn import batch_norm, group_norm

SHAPE = (64, 256, 56, 56)
OPS = {
    "batch_norm": lambda impl: lambda x, w, b: batch_norm(x, None, None, w, b, training=True, impl=impl)[0],
    "group_norm": lambda impl: lambda x, w, b: group_norm(x, 32, w, b, impl=impl),
}


def inputs(dtype):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal(SHAPE) + 0.5, dtype)
    w = jnp.asarray(rng.standard_normal(SHAPE[1]) + 1, dtype)
    b = jnp.asarray(rng.standard_normal(SHAPE[1]), dtype)
    g = jnp.asarray(rng.standard_normal(SHAPE), dtype)
    return g, x, w, b


def with_value(fn):
    def step(g, *args):
        y, pullback = jax.vjp(fn, *args)
        return y, pullback(g)

    return jax.jit(step)


def relative_error(got, want):
    got, want = got.astype(jnp.float32), want.astype(jnp.float32)
    return float(jnp.max(jnp.abs(got - want)) / (1 + jnp.max(jnp.abs(want))))


def check(dtype):
    args = inputs(dtype)
    for name, make in OPS.items():
        want = with_value(make("xla"))(*args)
        got = with_value(make("pallas"))(*args)
        errors = [relative_error(a, b) for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want))]
        print(f"check {name} {jnp.dtype(dtype).name}: relative max errors (y, dx, dw, db) vs xla: "
              + ", ".join(f"{e:.1e}" for e in errors), flush=True)


def times(dtype, impl, repeats):
    args = inputs(dtype)
    out = {}
    for name, make in OPS.items():
        for label, wrap in (("grads", fwd_bwd), ("value+grads", with_value)):
            step = wrap(make(impl))
            out[name, label] = median_ms(lambda step=step: step(*args), repeats)
    return out


def row(label, result):
    return label + " | " + " | ".join(f"{result[k]:.3f}" for k in sorted(result))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="only the current setting")
    args = parser.parse_args()
    print("device:", jax.devices()[0].device_kind, "jax", jax.__version__)
    for dtype in (jnp.float32, jnp.bfloat16):
        check(dtype)
    keys = sorted(times(jnp.float32, "xla", 1))
    print("setting | dtype | " + " | ".join(f"{op} {label} ms" for op, label in keys))
    for dtype in (jnp.float32, jnp.bfloat16):
        print(row(f"xla | {jnp.dtype(dtype).name}", times(dtype, "xla", args.repeats)), flush=True)
    launch = dispatch.GroupedLaunch
    default = {f.name: f.default for f in dataclasses.fields(launch) if f.name != "interpret"}
    grid = [default] if args.quick else [
        dict(default, chunk=c, tile_elements=t, num_warps=w)
        for c, t, w in itertools.product((1024, 2048, 4096), (4096, 8192), (4, 8))
    ] + [dict(default, stat_programs=p) for p in (256, 4096)]
    for setting in grid:
        dispatch.GroupedLaunch = functools.partial(launch, **setting)
        jax.clear_caches()
        label = " ".join(f"{k}={v}" for k, v in setting.items() if k != "num_stages")
        for dtype in (jnp.float32, jnp.bfloat16):
            try:
                print(row(f"{label} | {jnp.dtype(dtype).name}", times(dtype, "pallas", args.repeats)), flush=True)
            except Exception as err:  # noqa: BLE001 - a setting Triton rejects must not stop the sweep
                print(f"{label} | {jnp.dtype(dtype).name} | failed: {type(err).__name__}: {str(err)[:200]}", flush=True)
    dispatch.GroupedLaunch = launch
    for dtype in (jnp.float32, jnp.bfloat16):  # the baseline again: how far the machine drifted
        print(row(f"xla (again) | {jnp.dtype(dtype).name}", times(dtype, "xla", args.repeats)), flush=True)


if __name__ == "__main__":
    main()
