"""Modules of this repository's files that are no package (``benchmarks/``), for the tests."""

from __future__ import annotations

import importlib.util
import pathlib
import sys


def load(relative: str):
    """The module of the repository file ``relative`` (e.g. ``"benchmarks/shapes.py"``), registered
    under its file's stem (its dataclasses need it, and a script importing it by that name, as
    ``benchmarks/norms.py`` imports ``shapes``, gets the same module)."""
    path = pathlib.Path(__file__).resolve().parents[1] / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module
