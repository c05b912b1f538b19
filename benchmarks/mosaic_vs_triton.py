"""Mosaic GPU vs Triton row kernels (issue 21): the layer-norm (and RMS-norm) forward kernel alone
and backward kernel alone, ``jaxrules.mosaic_kernels`` with ``mosaic_rows_launch`` against
``jaxrules.norm_kernels`` with ``dispatch.rows_launch``, side by side in one process, each jitted
on device-resident inputs (float32 weights and statistics), median of ``--repeats`` runs of 10
queued calls (``benchmarks/kernel_ab.py``'s method). Prints a Markdown table; ratio = Mosaic /
Triton (below 1: Mosaic faster). Run on the GPU from the repository root:

    PYTHONPATH=. python3 benchmarks/mosaic_vs_triton.py
"""

from __future__ import annotations

import argparse

CASES = [f"layer_norm {s} {d}" for s in ("8192x768", "16384x4096", "65535x4096", "66850x768", "1000x5120",
                                         "21844x12288") for d in ("float32", "bfloat16")]
CASES += [f"rms_norm {s} {d}" for s in ("16384x4096", "66850x768") for d in ("float32", "bfloat16")]


def _calls(module, launch, x, g, w, b, center):
    """(forward, backward) zero-argument calls of ``module``'s local kernels."""
    import jax
    import jax.numpy as jnp

    fwd = jax.jit(lambda x, w, b: module.local_forward(x, w, b, eps=1e-5, launch=launch))
    out = fwd(x, w, b)
    mean, rstd = (out[1], out[2]) if center else (None, out[1])
    bwd = jax.jit(lambda x, g, w, mean, rstd: module.local_backward(
        x, g, w, mean, rstd, None if mean is None else jnp.zeros_like(mean), jnp.zeros_like(rstd), launch=launch))
    return (lambda: fwd(x, w, b)), (lambda: bwd(x, g, w, mean, rstd))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated 'op MxN dtype'")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--mosaic-launch", default="",
                        help="override MosaicRowsLaunch fields, e.g. rows=4,programs=264")
    args = parser.parse_args(argv)

    import dataclasses

    import jax
    import jax.numpy as jnp

    from jaxrules import bench, dispatch, mosaic_kernels, norm_kernels

    override = {k: int(v) for k, v in (f.split("=") for f in args.mosaic_launch.split(",") if f)}

    def mosaic_launch(m, n, dtype):
        return dataclasses.replace(mosaic_kernels.mosaic_rows_launch(m, n, dtype), **override)

    print(f"device: {jax.devices()[0].device_kind}, jax {jax.__version__}, Mosaic launch override {override}",
          flush=True)
    print("| op | shape | dtype | kernel | Triton ms | Mosaic ms | Mosaic/Triton |")
    print("|---|---|---|---|---:|---:|---:|", flush=True)
    for name in args.cases.split(","):
        op, shape, dtype = name.split()
        m, n = map(int, shape.split("x"))
        center = op == "layer_norm"
        keys = jax.random.split(jax.random.PRNGKey(0), 4)
        x = jax.random.normal(keys[0], (m, n), dtype)
        g = jax.random.normal(keys[1], (m, n), dtype)
        w = jax.random.normal(keys[2], (n,), jnp.float32)
        b = jax.random.normal(keys[3], (n,), jnp.float32) if center else None
        results = {}
        launches = (("triton", norm_kernels, lambda: dispatch.rows_launch(m, n)),
                    ("mosaic", mosaic_kernels, lambda: mosaic_launch(m, n, dtype)))
        for label, module, launch in launches:
            try:
                if label == "mosaic" and (reason := mosaic_kernels.mosaic_supports(m, n, dtype)) is not None:
                    raise ValueError(f"unsupported: {reason}")
                fwd, bwd = _calls(module, launch(), x, g, w, b, center)
                results[label] = (bench.median_ms(fwd, args.repeats), bench.median_ms(bwd, args.repeats))
            except Exception as e:  # report and go on: one failing kernel must not hide the table
                results[label] = (((str(e) or type(e).__name__).splitlines() or [''])[0][:80],) * 2
        for k, kernel in enumerate(("forward", "backward")):
            t, mo = results["triton"][k], results["mosaic"][k]
            ratio = f"{mo / t:.2f}" if isinstance(t, float) and isinstance(mo, float) else "-"
            fmt = lambda v: f"{v:.4f}" if isinstance(v, float) else v
            print(f"| {op} | {shape} | {dtype} | {kernel} | {fmt(t)} | {fmt(mo)} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
