"""Hides Pallas' Triton backend from every Python process started with this folder first on
``PYTHONPATH`` (worker processes included), as a JAX that removed the backend would:
importing ``jax.experimental.pallas.triton`` raises ``ModuleNotFoundError``. Usage, from the
repository root::

    PYTHONPATH=benchmarks/without_triton:. python -m jaxrules check

``tests/test_backend_fallback.py`` hides it in-process the same way (``sys.modules`` entry None)."""

import importlib.abc
import sys

HIDDEN = "jax.experimental.pallas.triton"


class _HideTriton(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == HIDDEN or name.startswith(HIDDEN + "."):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by benchmarks/without_triton)", name=name)
        return None


sys.meta_path.insert(0, _HideTriton())
