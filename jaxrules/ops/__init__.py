"""The ops: each module defines its ops (primal + residuals), their public functions and their
registry records. ``jaxrules.registry.records()`` imports them all (which registers every op);
importing one module (``jaxrules.ops.elementwise``) imports only the modules it uses. The
NestedTensor ops' records live beside them, in ``jaxrules.nested.records``."""

import importlib

__all__ = ["activations", "attention", "conv", "elementwise", "fft", "indexing", "linalg", "losses", "normalization", "norms", "reductions", "resampling", "shape", "sorting"]


def __getattr__(name: str):
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
