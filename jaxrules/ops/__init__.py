"""The ops: each module defines its ops (primal + residuals) and their public functions;
importing one module (``jaxrules.ops.elementwise``) imports only the modules it uses. Their
registry records live in ``jaxrules.op_records.<family>`` (the NestedTensor ops' in
``jaxrules.op_records.nested``), loaded by ``jaxrules.registry.load_records()`` only."""

import importlib

__all__ = ["activations", "attention", "conv", "elementwise", "fft", "indexing", "linalg", "losses", "normalization", "norms", "reductions", "resampling", "shape", "sorting"]


def __getattr__(name: str):
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def formulas(suffix: str) -> dict:
    """``{name: function}`` of every public function named ``*<suffix>`` (``"_jvp"``, ``"_vjp"``)
    that one of the modules above defines: the formulas beside their ops, gathered (with every
    family imported) for ``jaxrules.jvp_rules`` and ``jaxrules.vjp_rules``."""
    found = {}
    for family in __all__:
        module = importlib.import_module(f"{__name__}.{family}")
        found.update({name: fn for name, fn in vars(module).items()
                      if name.endswith(suffix) and not name.startswith("_") and callable(fn)
                      and getattr(fn, "__module__", None) == module.__name__})
    return found
