"""Registry records of ``jaxrules.ops.fft``, in that module's order: samples, singular points,
torch references. Only ``registry.load_records()`` imports them (``import jaxrules`` and its
namespaces never do)."""

from __future__ import annotations

import numpy as np

from jaxrules.ops import fft as F
from jaxrules.ops._sampling import normal
from jaxrules.registry import Sample, record


def _torch_fft(kind, n_dims):
    def call(torch, a, *args, **kwargs):
        if n_dims:
            s, axes, norm = (list(args) + [None, None, None])[:3]
            return getattr(torch.fft, kind + "n")(a, s=kwargs.get("s", s), dim=kwargs.get("axes", axes),
                                                  norm=kwargs.get("norm", norm))
        n, axis, norm = (list(args) + [None, -1, None])[:3]
        return getattr(torch.fft, kind)(a, n=kwargs.get("n", n), dim=kwargs.get("axis", axis),
                                        norm=kwargs.get("norm", norm))

    return call


def _samples(kind, n_dims):
    complex_input = kind in ("ifft", "irfft")

    def samples(rng, dt):
        dt = np.result_type(dt, np.complex64) if complex_input else dt
        if n_dims:
            return [
                Sample((normal(rng, dt, 4, 6),)),
                Sample((normal(rng, dt, 2, 4, 5),), {"axes": (0, 2), "norm": "ortho"}),
                Sample((normal(rng, dt, 3, 4),), {"s": (4, 6), "norm": "forward"}),
            ]
        return [
            Sample((normal(rng, dt, 8),)),
            Sample((normal(rng, dt, 3, 7),), {"norm": "ortho"}),
            Sample((normal(rng, dt, 5, 3),), {"axis": 0, "n": 7}),
            Sample((normal(rng, dt, 2, 6),), {"n": 4, "norm": "forward"}),
        ]

    return samples


_SEEDS = {"fft": ("fft_c2c (self-transpose)",), "ifft": ("fft_c2c (self-transpose)",),
          "rfft": ("fft_r2c_backward",), "irfft": ("fft_c2r_backward",)}

for _kind in F._KINDS:
    for _n_dims, _fn in ((False, getattr(F, _kind)), (True, getattr(F, _kind + "n"))):
        _name = _kind + ("n" if _n_dims else "")
        record(
            _name, fn=_fn, public=(f"jaxrules.numpy.fft.{_name}",), formula_ops=("fft",), seed=_SEEDS[_kind],
            samples=_samples(_kind, _n_dims), torch_fn=_torch_fft(_kind, _n_dims), torch_name=f"torch.fft.{_name}",
            dtypes=("float64", "complex128") if _kind in ("fft",) else ("float64",), low_precision=("float32",),
            double_backward="linear: the VJP formula is the (linear) transform",
        )
