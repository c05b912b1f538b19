"""The code's layering: formulas are found by explicit references, the formula layer does not
import the ops built on it, and each op's JVP and VJP formulas are defined beside it in its
family's ops module (``jvp_rules`` and ``vjp_rules`` only re-export them)."""

import ast
import importlib
import inspect
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).parent.parent / "jaxrules"
FORMULA_LAYER = ("mechanism.py", "batching.py", "dispatch.py", "norm_kernels.py", "registry.py", "_validate.py",
                 *sorted(str(p.relative_to(PACKAGE)) for p in (PACKAGE / "partials").glob("*.py")))
UPPER = ("jaxrules.ops", "jaxrules.nested", "jaxrules.nn", "jaxrules.numpy", "jaxrules.scipy", "jaxrules.linalg")
# Known upward imports (late, inside functions), to be removed: a formula
# calling an op for its own rules at second order. A new one fails the test.
KNOWN = {("partials/elementwise.py", "jaxrules.ops")}


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


@pytest.mark.parametrize("name, suffix", [("jvp_rules", "_jvp"), ("vjp_rules", "_vjp")])
def test_the_rules_modules_define_no_formula_and_gather_every_one(name, suffix):
    """``jaxrules/jvp_rules.py`` / ``vjp_rules.py`` define no function: each formula is defined
    beside its op in ``jaxrules/ops/<family>.py`` (a building block several families share in
    ``jaxrules/partials``). Each gathers, under its name, every public ``*_jvp`` / ``*_vjp``
    function that an ops module's source defines (counted here from the sources' text)."""
    tree = ast.parse((PACKAGE / f"{name}.py").read_text())
    assert not [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name != "__getattr__"]
    module = importlib.import_module(f"jaxrules.{name}")
    defined = {}
    for path in sorted((PACKAGE / "ops").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.endswith(suffix) and not node.name.startswith("_"):
                defined[node.name] = f"jaxrules.ops.{path.stem}"
    assert len(defined) > 100
    assert {n: getattr(getattr(module, n, None), "__module__", None) for n in defined} == defined
    assert set(defined) <= set(module.__all__)


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


def test_the_nested_records_live_in_the_records_package():
    from jaxrules import registry

    modules = {r.fn.__module__ for r in registry.records("nested.*")}
    assert modules == {"jaxrules.op_records.nested"}, modules


def test_every_ops_module_has_a_records_module_and_only_the_records_package_records():
    """``jaxrules/op_records/<family>.py`` beside each ``jaxrules/ops/<family>.py`` (plus ``nested``),
    all imported by the package; no module outside ``jaxrules/op_records`` calls ``record(...)``."""
    import jaxrules.op_records

    families = {p.stem for p in (PACKAGE / "ops").glob("*.py") if p.name not in ("__init__.py", "_sampling.py")}
    modules = {p.stem for p in (PACKAGE / "op_records").glob("*.py") if p.name != "__init__.py"}
    assert modules == families | {"nested"}
    assert set(jaxrules.op_records.__all__) == modules
    calling = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                     if p.parent.name != "op_records" and "record" in set(_calls(ast.parse(p.read_text())))
                     and p.name != "registry.py")
    assert not calling, f"record(...) outside jaxrules/op_records: {calling}"


@pytest.mark.parametrize("name", sorted(p.stem for p in (PACKAGE / "ops").glob("*.py")
                                         if p.name not in ("__init__.py", "_sampling.py")))
def test_the_records_follow_the_order_of_the_ops_module(name):
    """A record named after a public function of ``jaxrules/ops/<name>`` (``"relu"``,
    ``"layer_norm[pallas]"``) comes in the order that module defines those functions."""
    defined = {node.name: node.lineno for node in ast.parse((PACKAGE / "ops" / f"{name}.py").read_text()).body
               if isinstance(node, ast.FunctionDef)}
    calls = sorted((call.lineno, call.args[0].value.split("[")[0])
                   for call in ast.walk(ast.parse((PACKAGE / "op_records" / f"{name}.py").read_text()))
                   if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "record"
                   and isinstance(call.args[0], ast.Constant))
    order = [op for _, op in calls if op in defined]
    assert order == sorted(order, key=defined.__getitem__), order


def test_every_record_call_of_the_records_package_is_registered():
    """Each ``record("name", ...)`` written in ``jaxrules/op_records`` is in the registry that
    ``registry.load_records()`` fills (the records package imports every records module)."""
    from jaxrules import registry

    trees = [ast.parse(p.read_text()) for p in (PACKAGE / "op_records").glob("*.py")]
    written = {call.args[0].value for tree in trees for call in ast.walk(tree)
               if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "record"
               and isinstance(call.args[0], ast.Constant)}
    registered = {r.name for r in registry.records()}
    assert written and written <= registered, sorted(written - registered)


# ---- Every ops module has the same layout (CONTRIBUTING.md "Layout of an ops module") ----

OPS_MODULES = sorted(p.name for p in (PACKAGE / "ops").glob("*.py") if p.name not in ("__init__.py", "_sampling.py"))
_HEADER = re.compile(r"(Ops|Public functions)(: \S.*)?")
_FORMULA = re.compile(r".*_(jvp|vjp|primal|save|batch)")  # a formula or op helper: goes with its op


def _calls(node):
    """The names called anywhere in ``node`` (``f(...)`` and ``module.f(...)``)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            if isinstance(func, ast.Name):
                yield func.id
            elif isinstance(func, ast.Attribute):
                yield func.attr


def _op_factories(trees):
    """``define_op`` and every top-level function of the ops modules that calls an op factory
    (``pointwise_op``, ...), found by a fixpoint."""
    factories = {"define_op"}
    while True:
        found = {node.name for tree in trees for node in tree.body
                 if isinstance(node, ast.FunctionDef) and factories & set(_calls(node))}
        if found <= factories:
            return factories
        factories |= found


def _sections(lines):
    """``[(line, header)]``: a header is the comment line right under a ``# ----`` rule."""
    return [(i + 1, lines[i][2:].strip()) for i in range(1, len(lines))
            if lines[i - 1].startswith("# ---") and lines[i].startswith("# ") and not lines[i].startswith("# ---")]


def _names(nodes):
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}


def _layout_errors(name, factories):
    """What in ``jaxrules/ops/<name>`` (and its records, ``jaxrules/op_records/<name>``) breaks the
    layout (CONTRIBUTING.md), one line each."""
    source = (PACKAGE / "ops" / name).read_text()
    tree, lines = ast.parse(source), source.splitlines()
    sections = _sections(lines)
    errors = [f"line {line}: section header {text!r} is none of 'Ops[: topic]', 'Public functions[: topic]'"
              for line, text in sections if not _HEADER.fullmatch(text)]
    kinds = [text.split(":")[0] for _, text in sections]
    ranks = [{"Ops": 0, "Public functions": 1}.get(k, -1) for k in kinds]
    if ranks != sorted(ranks):
        errors.append(f"the sections are out of order (Ops, then Public functions): {kinds}")
    records = ast.parse((PACKAGE / "op_records" / name).read_text())
    records_names = _names([records]) | {alias.asname or alias.name for node in records.body
                                         if isinstance(node, ast.ImportFrom) for alias in node.names}
    aliases = {alias.asname for node in records.body if isinstance(node, ast.ImportFrom)
               and node.module == "jaxrules.ops" for alias in node.names if alias.name == name[:-3]}
    records_names |= {n.attr for n in ast.walk(records) if isinstance(n, ast.Attribute)
                      and isinstance(n.value, ast.Name) and n.value.id in aliases}  # ops.<name>

    for node in tree.body:
        where = next((k for (line, _), k in zip(sections[::-1], kinds[::-1], strict=True) if line < node.lineno),
                     None)
        calls = set(_calls(node))
        is_def = isinstance(node, ast.FunctionDef)
        what = f"line {node.lineno} ({node.name if is_def else type(node).__name__})"
        is_op = (node.name in factories or _FORMULA.fullmatch(node.name)) if is_def else bool(calls & factories)
        public = is_def and not node.name.startswith("_") and not is_op
        if "record" in calls:
            errors.append(f"{what}: a record(...) call: records go in jaxrules/op_records/{name}")
        if is_op and where != "Ops":
            errors.append(f"{what}: an op (a define_op call, an op factory or a formula) outside an Ops section")
        if public and where != "Public functions":
            errors.append(f"{what}: a public function outside a Public functions section")
        if where is None and not isinstance(node, ast.Import | ast.ImportFrom | ast.Assign | ast.Expr):
            errors.append(f"{what}: before the first section (only the docstring and imports go there)")
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            errors.append(f"{what}: an __all__: the public names are declared beside each function (exported_as)")
        if (is_def and node.name.startswith("_") and node.name in records_names and not is_op
                and not any(node.name in _names([other]) for other in tree.body if other is not node)):
            errors.append(f"{what}: used by the records only, so it goes in jaxrules/op_records/{name}")
    for node in records.body:
        is_def = isinstance(node, ast.FunctionDef)
        if not (is_def or isinstance(node, ast.Import | ast.ImportFrom | ast.Assign | ast.AnnAssign | ast.Expr
                                     | ast.For)):
            errors.append(f"jaxrules/op_records/{name} line {node.lineno}: only records, the sample helpers and "
                          "torch references they use, and constants")
        if (is_def or isinstance(node, ast.Expr) and not isinstance(node.value, ast.Constant)) and set(
                _calls(node)) & factories:
            errors.append(f"jaxrules/op_records/{name} line {node.lineno}: an op defined among the records")
    return errors


def test_every_ops_module_has_the_same_layout():
    """Each ``jaxrules/ops`` module: docstring, imports (no ``__all__``); ``# Ops`` sections
    (``define_op`` calls, op factories and their private helpers); ``# Public functions`` sections
    (each function with its ``exported_as`` declaration); no record. Its records, and the sample
    helpers only they use, are in ``jaxrules/op_records/<family>.py`` (CONTRIBUTING.md, "Layout
    of an ops module")."""
    trees = [ast.parse((PACKAGE / "ops" / name).read_text()) for name in OPS_MODULES]
    factories = _op_factories(trees)
    errors = {name: e for name in OPS_MODULES if (e := _layout_errors(name, factories))}
    assert not errors, "\n".join(f"jaxrules/ops/{name}: {line}" for name, e in errors.items() for line in e)


# Public functions of the ops modules that no namespace exports, and why; every other public
# function declares its public names beside it (``@exported_as("jaxrules.nn.relu")``).
NOT_EXPORTED = {
    "jaxrules.ops.linalg.matmul": "the op under jaxrules.numpy.matmul's argument handling (and nested's matmul)",
    "jaxrules.ops.reductions.nan_of_empty": "reductions' NaN of an empty reduction, shared with sorting's nanmedian",
    "jaxrules.ops.normalization.normalize_backward": "the op the normalizations' VJP formulas call (double backward)",
    "jaxrules.ops.normalization.rms_norm_backward": "the op rms_norm's VJP formula calls (double backward)",
}


def test_every_public_function_of_the_ops_modules_declares_its_public_names():
    """Each public function of ``jaxrules/ops`` (not an op factory or formula helper) reaches
    its namespaces through its ``exported_as`` declaration, or is listed in ``NOT_EXPORTED``;
    every declared function is an ops module's."""
    from jaxrules import _namespace

    trees = [ast.parse((PACKAGE / "ops" / name).read_text()) for name in OPS_MODULES]
    factories = _op_factories(trees)
    modules = [importlib.import_module(f"jaxrules.ops.{name[:-3]}") for name in OPS_MODULES]
    declared = {id(fn): fn for names in _namespace.EXPORTS.values() for fn in names.values()}
    undeclared, listed = [], []
    for module in modules:
        for attr, obj in vars(module).items():
            if (attr.startswith("_") or not inspect.isfunction(obj) or obj.__module__ != module.__name__
                    or attr in factories or _FORMULA.fullmatch(attr)):
                continue
            where = f"{module.__name__}.{attr}"
            if where in NOT_EXPORTED:
                listed.append(where)
                assert id(obj) not in declared, f"{where} is declared: drop it from NOT_EXPORTED"
            elif id(obj) not in declared:
                undeclared.append(where)
    assert undeclared == [], f"public functions without @exported_as(...): {undeclared}"
    assert sorted(listed) == sorted(NOT_EXPORTED)
    assert sorted({fn.__module__ for fn in declared.values()}) == sorted(m.__name__ for m in modules)


def test_the_contributing_walk_through_shows_the_real_op_in_three_places():
    """CONTRIBUTING.md's table lists three places, none a namespace file, and the code of its
    walk-through (the op with its factor, the public function with its declaration) is the
    code of ``jaxrules/ops/activations.py``, line for line (a ``...`` line abbreviates)."""
    text = (PACKAGE.parent / "CONTRIBUTING.md").read_text()
    guide = text[:text.index("3. **The record**")]
    rows = [line for line in guide.splitlines() if re.match(r"\| \d+ \|", line)]
    assert [row.split("|")[1].strip() for row in rows] == ["1", "2", "3"]
    assert not any(ns in row for row in rows for ns in ("nn.py", "numpy/", "scipy/", "linalg.py", "partials/"))
    source = [line.strip() for line in (PACKAGE / "ops" / "activations.py").read_text().splitlines()]
    for block in re.findall(r"```python\n(.*?)```", guide, re.S):
        lines = [line.strip() for line in block.splitlines() if line.strip()]
        at = source.index(lines[0])
        for line in lines[1:]:  # in order, each next line the next non-empty one, past an abbreviated docstring
            if "..." in line:
                at = next(i for i in range(at + 1, len(source)) if source[i].endswith('"""'))
                continue
            at = next(i for i in range(at + 1, len(source)) if source[i])
            assert source[at] == line, f"CONTRIBUTING.md shows {line!r}, jaxrules/ops/activations.py has {source[at]!r}"
