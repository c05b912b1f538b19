"""Layer norm's XLA path in several algebraically equal forms vs plain JAX autodiff, forward +
backward (gradients only, as the sweep times it), side by side in one process; optionally the
optimized HLO of each form. Used to find why ``impl="xla"`` fell below plain JAX at wide rows
(issue 14).

    python benchmarks/xla_layer_norm_forms.py --shapes 21844x12288:bfloat16,66850x768:float32 --hlo DIR
    python benchmarks/xla_layer_norm_forms.py --shapes 1000x768:float32 --device-time  # us per step

Forms (each a ``jax.custom_vjp`` with residuals x, w, mean, rstd, except ``jaxrules``/``jax``):
``jaxrules``: ``layer_norm(..., impl="xla")``; ``jax``: plain JAX (``bench._plain_norm``);
``same``: the op's math inline; ``raw``: the backward's row sums over x instead of x_hat
(``E[gw x_hat] = rstd (E[gw x] - mean E[gw])``), one fusion fewer of broadcast statistics;
``shift``: ``raw`` over x minus the row's first element (what ``partials.norm_projection`` does
above ``partials.DIRECT_MAX_BYTES``);
``xhat``: residual x_hat in x's dtype instead of x (no recomputation, torch's layout differs);
``onepass``: ``shift`` with the forward's mean and variance from one pass over x minus the row's
first element (no second, centered pass); ``welford``: ``shift`` with the statistics of
``partials.welford_moments`` (what the library runs on a GPU since 2026-11-27 above
``partials.DIRECT_MAX_BYTES``: then ``jaxrules`` is this form; below it, since stop 27, ``same``).

``--op rms_norm`` times RMS norm's forms instead (the same loop): ``jaxrules``: ``rms_norm(...,
impl="xla")``; ``jax``: plain JAX; ``same``: the op's backward inline, ``dx = rstd v - rstd^3 x
E[v x]`` (``v = g w``); ``added``: ``dx = v rstd + x c`` with ``c = -rstd^3 E[v x]`` (plain JAX's
order of terms); ``meansq``: ``added`` with the residual ``a = E[x^2] + eps`` instead of rstd and
``c = -rstd / a E[v x]``, as JAX's autodiff forms it.
"""

from __future__ import annotations

import argparse
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from jaxrules import bench
from jaxrules import partials as P
from jaxrules.nn import layer_norm, rms_norm

EPS = 1e-5


def _stats(x):
    xf = x.astype(jnp.float32)
    mean = xf.mean(-1, keepdims=True)
    return xf, mean, jax.lax.rsqrt(jnp.square(xf - mean).mean(-1, keepdims=True) + EPS)


def _onepass_stats(x):
    """Mean and variance from one pass over x minus the row's first element."""
    xf = x.astype(jnp.float32)
    shift = xf[:, :1]
    d = xf - shift
    m1, m2 = d.mean(-1, keepdims=True), jnp.square(d).mean(-1, keepdims=True)
    return xf, shift + m1, jax.lax.rsqrt(jnp.maximum(m2 - m1 * m1, 0) + EPS)


def _welford_stats(x):
    """Mean and variance from the library's one-pass GPU statistics (``partials.welford_moments``:
    one variadic reduction of (count, mean, M2) over x minus the row's first element)."""
    xf = x.astype(jnp.float32)
    mean, var = P.welford_moments(xf, (-1,))
    return xf, mean, jax.lax.rsqrt(var + EPS)


def _form(backward, residual_xhat=False, stats=_stats):
    @jax.custom_vjp
    def f(x, w, b):
        xf, mean, rstd = stats(x)
        return ((xf - mean) * rstd * w + b).astype(x.dtype)

    def fwd(x, w, b):
        xf, mean, rstd = stats(x)
        y = ((xf - mean) * rstd * w + b).astype(x.dtype)
        kept = ((xf - mean) * rstd).astype(x.dtype) if residual_xhat else x
        return y, (kept, w, mean, rstd)

    def bwd(res, g):
        kept, w, mean, rstd = res
        xhat = kept.astype(jnp.float32) if residual_xhat else (kept.astype(jnp.float32) - mean) * rstd
        gf = g.astype(jnp.float32)
        dx = backward(kept, xhat, mean, rstd, gf * w)
        return dx.astype(kept.dtype), (gf * xhat).sum(0).astype(w.dtype), gf.sum(0).astype(w.dtype)

    f.defvjp(fwd, bwd)
    return f


def _same(x, xhat, mean, rstd, gw):
    return rstd * (gw - gw.mean(-1, keepdims=True) - xhat * (gw * xhat).mean(-1, keepdims=True))


def _raw(x, xhat, mean, rstd, gw):
    e_gw = gw.mean(-1, keepdims=True)
    e_gwx = (gw * x.astype(jnp.float32)).mean(-1, keepdims=True)
    return rstd * (gw - e_gw - xhat * (rstd * (e_gwx - mean * e_gw)))


def _shift(x, xhat, mean, rstd, gw):
    xf = x.astype(jnp.float32)
    shift = xf[:, :1]
    e_gw = gw.mean(-1, keepdims=True)
    centered = (gw * (xf - shift)).mean(-1, keepdims=True) - (mean - shift) * e_gw
    return rstd * (gw - e_gw - xhat * (rstd * centered))


FORMS = {
    "jaxrules": lambda x, w, b: layer_norm(x, x.shape[-1], w, b, impl="xla"),
    "jax": functools.partial(bench._plain_norm, "layer_norm"),
    "same": _form(_same),
    "raw": _form(_raw),
    "xhat": _form(_same, residual_xhat=True),
    "shift": _form(_shift),
    "onepass": _form(_shift, stats=_onepass_stats),
    "welford": _form(_shift, stats=_welford_stats),
}


RMS_EPS = float(jnp.finfo(jnp.float32).eps)  # torch's (and bench._plain_norm's) default


def _rms_form(dx_of, keep_meansq=False):
    """RMS norm (b ignored) as a ``jax.custom_vjp`` with ``dx = dx_of(x, rstd, a, v)``, ``v = g w``,
    ``a = E[x^2] + eps``; the residual is ``a`` (``keep_meansq``) or ``rstd``."""
    def stats(x):
        xf = x.astype(jnp.float32)
        a = jnp.square(xf).mean(-1, keepdims=True) + RMS_EPS
        return xf, a, jax.lax.rsqrt(a)

    @jax.custom_vjp
    def f(x, w, b):
        xf, _, rstd = stats(x)
        return (xf * rstd * w).astype(x.dtype)

    def fwd(x, w, b):
        xf, a, rstd = stats(x)
        return (xf * rstd * w).astype(x.dtype), (x, w, b, a if keep_meansq else rstd)

    def bwd(res, g):
        x, w, b, kept = res
        xf, gf = x.astype(jnp.float32), g.astype(jnp.float32)
        a, rstd = (kept, jax.lax.rsqrt(kept)) if keep_meansq else (None, kept)
        dx = dx_of(xf, rstd, a, gf * w)
        return dx.astype(x.dtype), (gf * xf * rstd).sum(0).astype(w.dtype), jnp.zeros_like(b)

    f.defvjp(fwd, bwd)
    return f


RMS_FORMS = {
    "jaxrules": lambda x, w, b: rms_norm(x, x.shape[-1], w, impl="xla"),
    "jax": functools.partial(bench._plain_norm, "rms_norm"),
    "same": _rms_form(lambda x, rstd, a, v: rstd * v - rstd ** 3 * x * (v * x).mean(-1, keepdims=True)),
    "added": _rms_form(lambda x, rstd, a, v: v * rstd + x * (-rstd ** 3 * (v * x).mean(-1, keepdims=True))),
    "meansq": _rms_form(lambda x, rstd, a, v: v * rstd + x * (-rstd / a * (v * x).mean(-1, keepdims=True)),
                        keep_meansq=True),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="21844x12288:bfloat16,66850x768:float32")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--hlo", help="write each form's optimized HLO here")
    parser.add_argument("--op", choices=("layer_norm", "rms_norm"), default="layer_norm")
    parser.add_argument("--device-time", action="store_true",
                        help="us of device time per step (bench.looped: STEP_LOOP steps in one program, one CUDA "
                             "graph) instead of ms per call")
    args = parser.parse_args()
    forms = FORMS if args.op == "layer_norm" else RMS_FORMS
    rng = np.random.default_rng(0)
    unit = "us/step" if args.device_time else "ms"
    print("| shape | dtype | " + " | ".join(f"{f} {unit}" for f in forms) + " | jaxrules / jax |")
    print("|" + " --- |" * (len(forms) + 3))
    for spec in args.shapes.split(","):
        shape, dtype, *weight_dtype = spec.split(":")  # shape:dtype[:weight dtype]
        weight_dtype = weight_dtype[0] if weight_dtype else dtype
        m, n = map(int, shape.split("x"))
        x = jnp.asarray(rng.standard_normal((m, n)), dtype)
        w = jnp.asarray(1 + 0.1 * rng.standard_normal(n), weight_dtype)
        b = jnp.asarray(0.1 * rng.standard_normal(n), weight_dtype)
        ct = jnp.asarray(rng.standard_normal((m, n)), dtype)
        steps = {name: bench.fwd_bwd(fn) for name, fn in forms.items()}
        reference = steps["jax"](ct, x, w, b)
        for name, step in steps.items():  # every form computes the same gradients
            for got, want in zip(step(ct, x, w, b), reference):
                err = float(jnp.max(jnp.abs(got.astype(jnp.float32) - want.astype(jnp.float32))))
                scale = float(jnp.max(jnp.abs(want.astype(jnp.float32))))
                assert err <= 0.05 * scale + 1e-3, (name, err, scale)
            if args.hlo:
                os.makedirs(args.hlo, exist_ok=True)
                text = step.lower(ct, x, w, b).compile().as_text()
                with open(os.path.join(args.hlo, f"{name}_{m}x{n}_{dtype}_{weight_dtype}.hlo"), "w") as f:
                    f.write(text)
        if args.device_time:
            options = bench.STEP_COMPILE_OPTIONS["gpu" if jax.default_backend() == "gpu" else "cpu"]
            steps = {k: bench.looped(s, bench.STEP_LOOP).lower(ct, x, w, b).compile(options) for k, s in steps.items()}
        ms = bench.interleaved_median_ms({k: (lambda s=s: s(ct, x, w, b)) for k, s in steps.items()},
                                         args.repeats, calls=1 if args.device_time else bench.CALLS_PER_RUN)
        if args.device_time:
            ms = {k: t * 1e3 / bench.STEP_LOOP for k, t in ms.items()}  # us per step
        cells = " | ".join(f"{ms[f]:.3f}" for f in forms)
        print(f"| {m}x{n} | {dtype}/{weight_dtype} | {cells} | {ms['jax'] / ms['jaxrules']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
