"""Modules of this repository's files that are no package (``benchmarks/``), and the environment
of the processes the tests start."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def subprocess_env(base=None, **overrides) -> dict:
    """The environment of a process a test starts: ``base`` (default: this process's environment)
    with ``overrides``, and ``PYTHONPATH`` this repository followed by this process's
    ``PYTHONPATH``. The JAX under test may come from ``PYTHONPATH`` (wheels unpacked into a folder,
    ``docs/compatibility.md``); a child without it would import another installed JAX."""
    env = dict(os.environ if base is None else base, **overrides)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return env


def load(relative: str):
    """The module of the repository file ``relative`` (e.g. ``"benchmarks/shapes.py"``), registered
    under its file's stem (its dataclasses need it, and a script importing it by that name, as
    ``benchmarks/norms.py`` imports ``shapes``, gets the same module)."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module
