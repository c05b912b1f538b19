"""``jaxrules.partials`` re-exports its modules' ``__all__``: each helper is listed once, in the
module that defines it, and every ``P.<name>`` the package's code uses resolves."""

import ast
import importlib
import pathlib

import jaxrules.partials as P

PACKAGE = pathlib.Path(__file__).parent.parent / "jaxrules"
MODULES = sorted(p.stem for p in (PACKAGE / "partials").glob("*.py") if p.name != "__init__.py")


def _defined(path):
    """The names a module binds at top level by ``def``, ``class`` or assignment (not imports)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def test_each_module_lists_only_its_own_names_and_the_lists_are_disjoint():
    seen = {}
    for name in MODULES:
        module = importlib.import_module(f"jaxrules.partials.{name}")
        own = _defined(PACKAGE / "partials" / f"{name}.py")
        assert module.__all__, name
        assert not set(module.__all__) - own, (name, sorted(set(module.__all__) - own))
        for attr in module.__all__:
            assert attr not in seen, f"{attr} is listed by both {seen[attr]} and {name}"
            seen[attr] = name
            assert getattr(P, attr) is getattr(module, attr)


def test_every_helper_the_code_uses_through_the_package_resolves():
    """``P.name`` / ``partials.name`` in any module that imports the package as such."""
    missing, checked = [], 0
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        aliases = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                   and node.module == "jaxrules" for alias in node.names if alias.name == "partials"}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                checked += 1
                if not hasattr(P, node.attr):
                    missing.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value.id}.{node.attr}")
    assert checked and not missing, missing
