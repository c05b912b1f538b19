"""One registration function: every record is declared by ``registry.record(name,
*, fn=..., ...)`` with keywords; no module keeps a private ``_record`` helper or builds an
``OpRecord`` itself."""

import ast
import pathlib

import numpy as np
import pytest

from jaxrules import registry
from jaxrules.registry import Sample

PACKAGE = pathlib.Path(__file__).parent.parent / "jaxrules"
RECORD_MODULES = sorted(f"op_records/{p.name}" for p in (PACKAGE / "op_records").glob("*.py")
                        if p.name != "__init__.py")


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield str(path.relative_to(PACKAGE)), ast.parse(path.read_text())


def _called(node):
    """The called name of a call (``f(...)`` or ``mod.f(...)``), else None."""
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name):
            return node.func.id
        if isinstance(node.func, ast.Attribute):
            return node.func.attr
    return None


def _record_calls(tree):
    return [n for n in ast.walk(tree) if _called(n) == "record"]


def test_no_private_record_helper():
    offenders = []
    for name, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "_record":
                offenders.append(f"{name}:{node.lineno}")
    assert not offenders, f"a private _record helper (use registry.record): {offenders}"


def test_only_the_registry_builds_and_registers_records():
    offenders = [
        f"{name}:{node.lineno} {_called(node)}("
        for name, tree in _modules()
        if name != "registry.py"
        for node in ast.walk(tree)
        if _called(node) in ("OpRecord", "register")
    ]
    assert not offenders, f"OpRecord(...)/register(...) outside registry.py (use registry.record): {offenders}"


def test_record_calls_pass_the_name_then_keywords_at_module_level():
    """``record("name", fn=..., ...)``: one positional argument; and no function wraps ``record``
    (a wrapper would be a second registration function: module defaults are explicit values or
    helpers returning keyword dicts)."""
    offenders = []
    for name, tree in _modules():
        if name == "registry.py":
            continue
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                offenders += [f"{name}:{c.lineno} record() inside a function" for c in _record_calls(fn)]
        for call in _record_calls(tree):
            if len(call.args) != 1 or isinstance(call.args[0], ast.Starred):
                offenders.append(f"{name}:{call.lineno} record() takes the name, then keywords")
    assert not offenders, offenders


def test_every_record_module_registers_through_record():
    """The walk above sees the registrations: each record module calls ``record``."""
    trees = dict(_modules())
    assert not [m for m in RECORD_MODULES if not _record_calls(trees[m])]


def _fields(**overrides):
    fields = dict(fn=np.negative, public=("test.negate",), formula_ops=("negate",), seed=("neg_backward",),
                  samples=lambda rng, dt: [Sample((np.ones(2, dt),))], torch_fn=None, torch_name="")
    return {**fields, **overrides}


@pytest.fixture
def scratch_name():
    name = "test_record_helper.scratch"
    yield name
    registry._REGISTRY.pop(name, None)  # leave the registry as the records modules made it


def test_record_registers_and_returns_the_record(scratch_name):
    rec = registry.record(scratch_name, **_fields(), deviations="none", low_precision=())
    assert registry.get(scratch_name) is rec
    assert (rec.name, rec.public, rec.formula_ops, rec.seed, rec.deviations, rec.low_precision) == (
        scratch_name, ("test.negate",), ("negate",), ("neg_backward",), "none", ())
    assert rec.dtypes == ("float64",)  # an option not given keeps OpRecord's default


def test_record_rejects_positional_fields_unknown_options_and_duplicates(scratch_name):
    with pytest.raises(TypeError):
        registry.record(scratch_name, np.negative, **{k: v for k, v in _fields().items() if k != "fn"})
    with pytest.raises(TypeError, match=r"'test_record_helper\.scratch'.*unknown option\(s\) dtype\b"):
        registry.record(scratch_name, **_fields(), dtype=("float64",))
    with pytest.raises(TypeError, match="torch_name"):
        registry.record(scratch_name, **{k: v for k, v in _fields().items() if k != "torch_name"})
    assert scratch_name not in registry._REGISTRY
    registry.record(scratch_name, **_fields())
    with pytest.raises(ValueError, match="already registered"):
        registry.record(scratch_name, **_fields())
