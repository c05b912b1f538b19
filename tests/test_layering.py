"""The package's layers (``docs/design.md`` §5): every module of ``jaxrules`` parsed with ``ast``,
its imports of other ``jaxrules`` modules (module-level and inside functions) form a graph with no
cycle in which no module imports one of a higher layer; the imports inside functions are exactly
the lazily loaded dependencies listed here; ``import jaxrules.numpy`` loads no Pallas."""

from __future__ import annotations

import ast
import fnmatch
import graphlib
import pathlib
import subprocess
import sys

import pytest
from _repo_files import ROOT, subprocess_env

PACKAGE = ROOT / "jaxrules"

# Lowest first. A module may import modules of its own layer (the graph has no cycle) and of the
# layers below, never one above.
LAYERS = (
    ("mechanism and compat", ("jaxrules.compat", "jaxrules.mechanism", "jaxrules.checking", "jaxrules.dispatch",
                              "jaxrules.batching", "jaxrules._validate", "jaxrules._namespace",
                              "jaxrules.partitioning", "jaxrules.registry", "jaxrules.function",
                              "jaxrules.differentiate")),
    ("partials (formulas)", ("jaxrules.partials", "jaxrules.partials.*")),
    ("kernels", ("jaxrules.norm_kernels", "jaxrules.nested.kernels")),
    ("nested formulas", ("jaxrules.nested.blocks", "jaxrules.nested.rules")),
    ("ops with their formulas", ("jaxrules.ops", "jaxrules.ops.*", "jaxrules.jvp_rules", "jaxrules.vjp_rules",
                                 "jaxrules.nested.tensor", "jaxrules.nested.cudnn", "jaxrules.nested.ops",
                                 "jaxrules.nested.dense")),
    ("namespaces", ("jaxrules.nn", "jaxrules.numpy", "jaxrules.numpy.*", "jaxrules.scipy", "jaxrules.scipy.*",
                    "jaxrules.linalg", "jaxrules.nested", "jaxrules.op_records", "jaxrules.op_records.*",
                    "jaxrules.torch", "jaxrules.torch.*")),
    ("testing harness", ("jaxrules.testing", "jaxrules.opinfo")),
    ("entry points", ("jaxrules.cli", "jaxrules.__main__", "jaxrules")),
)

# The imports inside functions: (importing module, imported module) -> why it waits for first use.
# Each is a dependency that is optional or costly to load; nothing else is imported late.
LAZY_IMPORTS = {
    ("jaxrules.mechanism", "jax._src.cudnn"): "JAX's cuDNN attention module, used on a GPU only",
    ("jaxrules.norm_kernels", "jax.experimental.pallas"): "Pallas' Triton backend (deprecated, absent from "
                                                          "some JAX builds), when a kernel is traced",
    ("jaxrules.nested.kernels", "jax.experimental.pallas"): "Pallas' Triton backend, when a kernel is traced",
    ("jaxrules.ops.normalization", "jaxrules.norm_kernels"): "the fused Pallas norm kernels, on impl='pallas'",
    ("jaxrules.ops.attention", "jaxrules.nested.dense"): "the Pallas attention kernels, on impl='pallas'",
    ("jaxrules.testing", "torch"): "torch, the optional reference of the torch check",
    ("jaxrules.cli", "jaxrules.opinfo"): "torch's OpInfo database (torch and expecttest), on the opinfo command",
}

# Modules that import others by name (``importlib.import_module``), and why.
IMPORTS_BY_NAME = {
    "jaxrules": "the package root: the namespaces on first use, the records package for the registry",
    "jaxrules.op_records": "its records modules, one per ops family (importing one registers its records)",
    "jaxrules.ops": "its own submodules on first use",
    "jaxrules.dispatch": "whether Pallas' Triton backend imports",
    "jaxrules.testing": "the public functions a record names (the sharded check's JAX namesakes)",
}


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _targets(module: str, node: ast.Import | ast.ImportFrom, is_package: bool) -> list[str]:
    """The modules ``node`` imports: a ``jaxrules`` module where the name is one (``from
    jaxrules.ops import shape`` imports ``jaxrules.ops.shape``), else the named module."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[:len(package) - node.level + 1]
        base = ".".join(package + ([node.module] if node.module else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def _imports() -> list[tuple[str, str, bool]]:
    """``(importer, imported, inside a function)`` for every import statement of the package."""
    found = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"

        def visit(node, in_function, module=module, is_package=is_package):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Import | ast.ImportFrom):
                    found.extend((module, t, in_function) for t in _targets(module, child, is_package))
                visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))

        visit(tree, False)
    return found


IMPORTS = _imports()


def _own(name: str) -> str | None:
    """The ``jaxrules`` module ``name`` is or lies in (``jaxrules.ops.shape.take`` -> ``jaxrules.ops.shape``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _layer(module: str) -> int:
    (index,) = [i for i, (_, patterns) in enumerate(LAYERS) if any(fnmatch.fnmatchcase(module, p) for p in patterns)]
    return index


def _graph() -> dict[str, set[str]]:
    graph = {m: set() for m in MODULES}
    for importer, imported, _ in IMPORTS:
        own = _own(imported) if imported.startswith("jaxrules") else None
        if own is not None and own != importer:
            graph[importer].add(own)
    return graph


def test_every_module_is_in_exactly_one_layer():
    unplaced = {m: [name for name, patterns in LAYERS if any(fnmatch.fnmatchcase(m, p) for p in patterns)]
                for m in MODULES}
    assert {m: layers for m, layers in unplaced.items() if len(layers) != 1} == {}


def test_the_import_graph_has_no_cycle():
    try:
        tuple(graphlib.TopologicalSorter(_graph()).static_order())
    except graphlib.CycleError as err:
        pytest.fail(f"import cycle: {' -> '.join(err.args[1])}")


def test_no_module_imports_a_higher_layer():
    upward = sorted(f"{importer} ({LAYERS[_layer(importer)][0]}) imports {imported} ({LAYERS[_layer(imported)][0]})"
                    for importer, targets in _graph().items() for imported in targets
                    if _layer(imported) > _layer(importer))
    assert upward == []


def test_imports_inside_functions_are_exactly_the_lazy_ones():
    late = {(importer, _own(imported) if imported.startswith("jaxrules") else imported)
            for importer, imported, in_function in IMPORTS if in_function}
    listed = set()
    for importer, imported in late:  # a submodule of a listed module counts as it (jax.experimental.pallas.triton)
        listed.add(next(((i, m) for i, m in LAZY_IMPORTS if i == importer and (imported == m or
                                                                                imported.startswith(m + "."))),
                        (importer, imported)))
    assert listed == set(LAZY_IMPORTS)


def test_only_the_listed_modules_import_by_name():
    by_name = set()
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "import_module"):
                by_name.add(module)
    assert by_name == set(IMPORTS_BY_NAME)


def test_the_layers_are_written_in_the_design_notes():
    text = (ROOT / "docs" / "design.md").read_text()
    section = text[text.index("## 5. Layers"):]
    section = section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section
    missing = [name for name, _ in LAYERS if f"**{name}**" not in section]
    missing += [f"{i} -> {m}" for i, m in LAZY_IMPORTS if f"`{i}` -> `{m}`" not in section]
    assert missing == []


@pytest.mark.parametrize("namespace", ["jaxrules.numpy", "jaxrules.nn", "jaxrules.torch.nn.functional"])
def test_importing_a_namespace_loads_no_pallas(namespace):
    """A fresh interpreter (this one has loaded everything): Pallas and its kernels wait for a
    kernel to be asked for."""
    code = (f"import sys, {namespace}; "
            "print(sorted(m for m in sys.modules if m.startswith(('jax.experimental.pallas', 'jaxrules.norm_kernels', "
            "'jaxrules.nested'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env=subprocess_env({"PATH": "/usr/bin:/bin"}, JAX_PLATFORMS="cpu"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
