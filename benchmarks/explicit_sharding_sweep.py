"""Every registered op under ``jit(value_and_grad)`` with a batch-sharded input on 8 forced host
devices, in ``Auto`` and ``Explicit`` mesh modes (issue 19, requirement 2): a sweep, not a test.

Two forms per record (its first sample, float32):

* ``vmap``: every differentiable argument gets a leading batch axis of 8 and the op is vmapped
  over it; the inputs are sharded ``P("data")``.
* ``direct``: the first argument's axis 0 is tiled to length 8 and sharded ``P("data")``; the
  other differentiable arguments (weights) stay unbatched and replicated, as in data-parallel
  training. Skipped where the op refuses the longer axis 0.

Per case: ``ok``, ``FAIL`` (the sharded program raises), ``MISMATCH`` (values or gradients differ
from the unsharded ones) or ``UNSHARDED-GRAD`` (a batched argument's gradient lost the batch
sharding). Usage::

    python benchmarks/explicit_sharding_sweep.py [pattern] [--form vmap|direct] [--mode auto|explicit]
"""

import os

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"

import argparse  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # this checkout's jaxrules
from jaxrules import registry  # noqa: E402

B = 8


def _loss_of(out):
    leaves = [o for o in jax.tree_util.tree_leaves(out) if jnp.issubdtype(jnp.result_type(o), jnp.inexact)]
    return sum(jnp.sum(jnp.sin(jnp.real(o))) for o in leaves)


def build(record, form, rng):
    """``(loss, diff_args, batched)``: the loss of the differentiable arguments, their values,
    and which of them carry the batch axis at 0; ``None`` when the form does not apply."""
    samples = [s for s in record.samples(rng, np.float32)
               if s.diff_argnums() and all(np.size(s.args[i]) > 0 for i in s.diff_argnums())]
    if not samples:
        return None
    sample = samples[0]
    argnums = sample.diff_argnums()
    args = list(sample.args)

    def call(*diff):
        full = list(args)
        for i, d in zip(argnums, diff):
            full[i] = d
        return record.fn(*full, **sample.kwargs)

    if form == "vmap":
        diff = [np.asarray(args[i])[None] * (1 + 0.01 * rng.standard_normal((B, *np.shape(args[i]))))
                .astype(args[i].dtype) for i in argnums]
        return (lambda *d: _loss_of(jax.vmap(call)(*d))), diff, [True] * len(diff)
    if argnums[0] != 0 or np.ndim(args[0]) == 0:
        return None
    x = np.asarray(args[0])
    noise = 1 + 0.01 * rng.standard_normal((B, *x.shape[1:]))
    x8 = np.concatenate([x] * -(-B // x.shape[0]))[:B] * noise
    diff = [x8.astype(x.dtype)] + [np.asarray(args[i]) for i in argnums[1:]]
    return (lambda *d: _loss_of(call(*d))), diff, [True] + [False] * (len(diff) - 1)


def run_case(record, form, mode, rng):
    built = build(record, form, rng)
    if built is None:
        return "skip", "form does not apply"
    loss, diff, batched = built
    grad = jax.value_and_grad(loss, tuple(range(len(diff))))
    try:
        want = jax.jit(grad)(*diff)
        jax.block_until_ready(want)
    except Exception as e:  # noqa: BLE001
        return "skip", f"unsharded fails: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
    kind = AxisType.Explicit if mode == "explicit" else AxisType.Auto
    mesh = jax.make_mesh((B,), ("data",), axis_types=(kind,))
    try:
        with jax.set_mesh(mesh):
            sharded = [jax.device_put(d, NamedSharding(mesh, P("data") if b else P())) for d, b in zip(diff, batched)]
            got = jax.jit(grad)(*sharded)
            jax.block_until_ready(got)
    except Exception as e:  # noqa: BLE001
        msg = str(e).strip().splitlines()
        frames = [f for f in traceback.extract_tb(e.__traceback__) if "/jaxrules/" in f.filename]
        inner = [f for f in frames if not f.filename.endswith("mechanism.py")] or frames
        where = f"{inner[-1].filename.split('/jaxrules/')[-1]}:{inner[-1].lineno} {inner[-1].name}" if inner else ""
        return "FAIL", f"{type(e).__name__}: {(msg or [''])[0][:160]} @ {where}"
    errors = []
    for g, w in zip([got[0], *got[1]], [want[0], *want[1]]):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if not np.allclose(g, w, rtol=2e-4, atol=2e-4 * (1 + np.max(np.abs(w), initial=0)), equal_nan=True):
            errors.append(float(np.nanmax(np.abs(g - w))))
    if errors:
        return "MISMATCH", f"max error {max(errors):.3g}"
    specs = [str(g.sharding.spec) if hasattr(g.sharding, "spec") else str(g.sharding) for g in got[1]]
    lost = [s for s, b in zip(specs, batched) if b and not s.startswith("P('data'")]
    if lost:
        return "UNSHARDED-GRAD", f"gradient specs {specs}"
    return "ok", ""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("pattern", nargs="?")
    parser.add_argument("--form", choices=["vmap", "direct"], action="append")
    parser.add_argument("--mode", choices=["auto", "explicit"], action="append")
    parser.add_argument("--quiet", action="store_true", help="print only the cases that are not ok")
    opts = parser.parse_args()
    counts = {}
    for record in registry.records(opts.pattern):
        for form in opts.form or ["vmap", "direct"]:
            for mode in opts.mode or ["auto", "explicit"]:
                status, detail = run_case(record, form, mode, np.random.default_rng(0))
                counts[status] = counts.get(status, 0) + 1
                if not opts.quiet or status not in ("ok", "skip"):
                    print(f"{status:15s} {record.name:40s} {form:7s} {mode:9s} {detail}", flush=True)
    print(counts)


if __name__ == "__main__":
    main()
