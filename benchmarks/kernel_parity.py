"""The fused norm kernels against the XLA formulas on the GPU, at awkward shapes (odd row counts,
widths that are not powers of two, small feature maps): values and all three gradients of
``jit(vjp)``, relative to the largest entry. Prints one line per case and exits non-zero past the
tolerance (float32 1e-5, bfloat16 2e-2).

    python benchmarks/kernel_parity.py
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np

from jaxrules.nn import batch_norm, group_norm, layer_norm

CASES = [("layer_norm", s) for s in ((66850, 256), (1000, 768), (3, 5120), (1000, 12288), (7, 64), (4097, 1536))]
CASES += [(op, s) for op in ("batch_norm", "group_norm") for s in ((3, 64, 7, 7), (5, 96, 14, 14), (2, 64, 112, 112))]
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2}


def fn(op, impl):
    if op == "layer_norm":
        return lambda x, w, b: layer_norm(x, x.shape[-1], w, b, impl=impl)
    if op == "batch_norm":
        return lambda x, w, b: batch_norm(x, None, None, w, b, training=True, impl=impl)[0]
    return lambda x, w, b: group_norm(x, 32, w, b, impl=impl)


def main() -> int:
    rng = np.random.default_rng(0)
    worst_ok = True
    for op, shape in CASES:
        channels = shape[-1] if op == "layer_norm" else shape[1]
        arrays = [rng.standard_normal(shape) * 2 + 1, rng.standard_normal(channels) + 1, rng.standard_normal(channels),
                  rng.standard_normal(shape)]
        for dtype in TOLERANCE:
            x, w, b, ct = (jnp.asarray(a, dtype) for a in arrays)
            results = {}
            for impl in ("xla", "pallas"):
                y, pullback = jax.jit(lambda *a, impl=impl: jax.vjp(fn(op, impl), *a))(x, w, b)
                results[impl] = [y, *jax.jit(pullback)(ct)]
            errors = [float(jnp.max(jnp.abs(p.astype(jnp.float32) - e.astype(jnp.float32))))
                      / (float(jnp.max(jnp.abs(e.astype(jnp.float32)))) + 1e-30)
                      for p, e in zip(results["pallas"], results["xla"])]
            ok = max(errors) <= TOLERANCE[dtype]
            worst_ok &= ok
            print(f"{'ok ' if ok else 'BAD'} {op} {'x'.join(map(str, shape))} {dtype}: "
                  f"relative errors y/dx/dw/db {' '.join(f'{e:.1e}' for e in errors)}", flush=True)
    return 0 if worst_ok else 1


if __name__ == "__main__":
    sys.exit(main())
