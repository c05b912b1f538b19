"""Modules of this repository's files that are no package (``benchmarks/``), for the tests."""

from __future__ import annotations

import importlib.util
import pathlib


def load(relative: str):
    """The module of the repository file ``relative`` (e.g. ``"benchmarks/record_dispatch.py"``)."""
    path = pathlib.Path(__file__).resolve().parents[1] / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
