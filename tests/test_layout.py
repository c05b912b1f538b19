"""The code's layering (issue 15): formulas are found by explicit references, and the formula
layer does not import the ops built on it."""

import ast
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).parent.parent / "jaxrules"
FORMULA_LAYER = ("jvp_rules.py", "vjp_rules.py", "mechanism.py", "batching.py", "dispatch.py", "norm_kernels.py",
                 "registry.py", "_validate.py",
                 *sorted(str(p.relative_to(PACKAGE)) for p in (PACKAGE / "partials").glob("*.py")))
UPPER = ("jaxrules.ops", "jaxrules.nested", "jaxrules.nn", "jaxrules.numpy", "jaxrules.scipy", "jaxrules.linalg")
# Known upward imports (late, inside functions), to be removed by issue 15's restructuring: a
# formula calling an op for its own rules at second order. A new one fails the test.
KNOWN = {("vjp_rules.py", "jaxrules.ops.normalization"), ("partials/elementwise.py", "jaxrules.ops")}


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


@pytest.mark.parametrize("name", FORMULA_LAYER)
def test_the_formula_layer_imports_no_op_module(name):
    upward = {m for m in _imports(PACKAGE / name) if m.startswith(UPPER)}
    assert {(name, m) for m in upward} <= KNOWN, f"{name} imports {sorted(upward)}"


def test_no_formula_is_found_by_a_name_lookup():
    """``getattr(J, f"{name}_jvp")`` hides an op's formula from a search: ops name them."""
    lookup = re.compile(r"getattr\(\s*(J|R|P|jvp_rules|vjp_rules|partials)\b")
    offenders = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if lookup.search(p.read_text())]
    assert not offenders


def test_the_namespaces_load_no_kernels_and_no_nested_tensors():
    """``import jaxrules.numpy`` (or ``nn``, ``linalg``, ``scipy``) loads neither the Pallas norm
    kernels nor ``jaxrules.nested`` (checked in a fresh interpreter)."""
    import subprocess
    import sys

    code = ("import sys, jaxrules.numpy, jaxrules.nn, jaxrules.linalg, jaxrules.scipy.special, jaxrules.scipy.linalg; "
            "print(sorted(m for m in sys.modules if m.startswith(('jaxrules.nested', 'jaxrules.norm_kernels'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_nested_records_live_in_the_nested_package():
    from jaxrules import registry

    modules = {r.fn.__module__ for r in registry.records("nested.*")}
    assert modules == {"jaxrules.nested.records"}, modules
