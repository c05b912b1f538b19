"""The namespaces are complete: every public name of the installed JAX's counterpart resolves, as
JAX's own object unless jaxrules defines it. They are generated: each binds what the ops modules
declare for it (``_namespace.exported_as``) and derives its ``__all__``; none lists names by hand."""

import ast
import importlib
import inspect
import pathlib
import subprocess
import sys

import jax.nn
import jax.numpy
import jax.numpy.fft
import jax.numpy.linalg
import jax.scipy.linalg
import jax.scipy.special
import numpy as np
import pytest

import jaxrules.linalg
import jaxrules.nn
import jaxrules.numpy
import jaxrules.numpy.fft
import jaxrules.numpy.linalg
import jaxrules.ops
import jaxrules.scipy.linalg
import jaxrules.scipy.special
from jaxrules import _namespace
from jaxrules._namespace import COUNTERPARTS, EXPORTS, TARGETS, namespaces

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(COUNTERPARTS))
def test_every_jax_name_resolves(name):
    ours, theirs = importlib.import_module(name), importlib.import_module(COUNTERPARTS[name])
    _, own, _ = namespaces()[name]
    listed = dir(ours)
    missing = []
    for attr in (a for a in dir(theirs) if not a.startswith("_")):
        if not hasattr(ours, attr) or attr not in listed or attr not in ours.__all__:
            missing.append(attr)
        elif attr not in own:
            assert getattr(ours, attr) is getattr(theirs, attr), f"{name}.{attr} is not JAX's object"
    assert not missing, f"{name} lacks {missing}"


@pytest.mark.parametrize("name", sorted(COUNTERPARTS))
def test_own_names_are_not_replaced_by_jaxs(name):
    ours, theirs = importlib.import_module(name), importlib.import_module(COUNTERPARTS[name])
    _, own, forwarded = namespaces()[name]
    assert own and not own & forwarded
    for attr in own:
        obj = getattr(ours, attr)
        assert obj is not getattr(theirs, attr, None), f"{name}.{attr} is JAX's"
        home = obj.__name__ if isinstance(obj, type(sys)) else obj.__module__
        assert home.startswith("jaxrules."), f"{name}.{attr} comes from {home}"


def test_known_overrides_and_forwards():
    from jaxrules.ops import activations, linalg, reductions

    assert jaxrules.numpy.sum is reductions.sum and jaxrules.numpy.max is reductions.max
    assert jaxrules.nn.gelu is activations.gelu and jaxrules.nn.softmax is activations.softmax
    assert jaxrules.numpy.linalg.det is linalg.det and jaxrules.scipy.linalg.expm is linalg.expm
    assert jaxrules.numpy.linalg is importlib.import_module("jaxrules.numpy.linalg")
    assert jaxrules.numpy.fft is importlib.import_module("jaxrules.numpy.fft")
    # the array-API spellings of ops jaxrules implements carry its rules
    assert jaxrules.numpy.pow is jaxrules.numpy.power and jaxrules.numpy.atan2 is jaxrules.numpy.arctan2
    from jaxrules.ops import shape  # concat has JAX's own signature (axis keyword-only) over the same op

    assert jaxrules.numpy.concat is shape.concat
    assert jaxrules.numpy.float32 is jax.numpy.float32 and jaxrules.numpy.zeros is jax.numpy.zeros
    assert jaxrules.nn.sigmoid is jax.nn.sigmoid and jaxrules.nn.initializers is jax.nn.initializers
    assert jaxrules.scipy.special.erf is jax.scipy.special.erf
    assert jaxrules.numpy.linalg.matrix_rank is jax.numpy.linalg.matrix_rank
    assert jaxrules.numpy.fft.fftfreq is jax.numpy.fft.fftfreq
    assert jaxrules.scipy.linalg.schur is jax.scipy.linalg.schur
    assert jaxrules.numpy.zeros(2, dtype=jaxrules.numpy.float32).dtype == jax.numpy.float32


def test_unknown_and_private_names_are_not_forwarded():
    with pytest.raises(AttributeError, match="jaxrules.numpy.*no_such_name"):
        jaxrules.numpy.no_such_name  # noqa: B018
    with pytest.raises(AttributeError):  # jax.nn is a package: its __path__ must not leak
        jaxrules.nn.__path__  # noqa: B018
    assert not hasattr(jaxrules.numpy, "_src")


def test_importing_numpy_is_light():
    # (JAX's own jax.extend, which jaxrules.mechanism uses, loads Pallas' core, not jax.experimental.pallas)
    heavy = ("jaxrules.nested", "jax.experimental.pallas", "jaxrules.nn")
    code = f"import sys, jaxrules.numpy; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_importing_the_library_loads_no_records():
    """``import jaxrules`` and its namespaces load no ``jaxrules.op_records`` module and register no
    record; ``registry.load_records()`` loads them all and leaves ``jaxrules.records`` the
    function (in a fresh interpreter)."""
    code = ("import sys, jaxrules, jaxrules.numpy, jaxrules.numpy.linalg, jaxrules.numpy.fft, jaxrules.nn, "
            "jaxrules.linalg, jaxrules.scipy.special, jaxrules.scipy.linalg, jaxrules.ops.elementwise\n"
            "from jaxrules import registry\n"
            "loaded = lambda: sorted(m for m in sys.modules if m.split('.')[:2] == ['jaxrules', 'op_records'])\n"
            "print(loaded(), len(registry._REGISTRY))\n"
            "registry.load_records()\n"
            "print(len(loaded()), len(registry._REGISTRY), callable(jaxrules.records))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[] 0"
    import jaxrules.op_records

    modules, registered, function = out[1].split()
    assert int(modules) == 1 + len(jaxrules.op_records.__all__)
    assert int(registered) > 0
    assert function == "True"  # the package's name leaves the public function jaxrules.records in place


# Overrides that lack parameters of the JAX function they replace: none; the test below fails when
# a gap appears (add here only with a reason).
KNOWN_SIGNATURE_GAPS: dict[str, str] = {}


def _signature_gaps(ours, theirs) -> list:
    """How ``ours`` fails to accept ``theirs``' parameters as JAX does: each of JAX's parameters
    present, in JAX's order, of the same kind and default; extras keyword-only."""
    mine, jax_params = inspect.signature(ours).parameters, inspect.signature(theirs).parameters
    gaps = [f"missing {n}" for n in jax_params if n not in mine]
    for name, p in jax_params.items():
        q = mine.get(name)
        if q is not None and q.kind != p.kind:
            gaps.append(f"{name} is {q.kind.name}, JAX's {p.kind.name}")
        if q is not None and q.default is not p.default and q.default != p.default:
            gaps.append(f"{name} defaults to {q.default!r}, JAX's to {p.default!r}")
    common = [n for n in jax_params if n in mine]
    if [n for n in mine if n in jax_params] != common:
        gaps.append("parameters in another order")
    gaps += [f"extra {n} not keyword-only" for n, q in mine.items()
             if n not in jax_params and q.kind not in (q.KEYWORD_ONLY, q.VAR_KEYWORD)]
    return gaps


def test_overrides_take_jaxs_parameters():
    found = {}
    for name, counterpart in sorted(COUNTERPARTS.items()):
        ours, theirs = importlib.import_module(name), importlib.import_module(counterpart)
        for attr in sorted(namespaces()[name][1]):
            mine, jax_fn = getattr(ours, attr), getattr(theirs, attr, None)
            if jax_fn is None or mine is jax_fn or isinstance(jax_fn, type) or not callable(jax_fn):
                continue
            try:
                inspect.signature(jax_fn)
            except (TypeError, ValueError):  # a ufunc-like object without a signature
                continue
            if gaps := _signature_gaps(mine, jax_fn):
                found[f"{name}.{attr}"] = gaps
    assert sorted(found) == sorted(KNOWN_SIGNATURE_GAPS), {k: v for k, v in found.items()
                                                         if k not in KNOWN_SIGNATURE_GAPS}


@pytest.mark.parametrize("call", [
    lambda np_: np_.concatenate([np.ones((2, 2)), np.zeros((1, 2))], axis=None),
    lambda np_: np_.concatenate([np.ones(2, np.float32), np.zeros(1, np.float32)], dtype=np.float64),
    lambda np_: np_.concat([np.ones((2, 1)), np.zeros((2, 2))], axis=1),
    lambda np_: np_.stack([np.ones(2), np.zeros(2)], 1, dtype=np.float32),
    lambda np_: np_.linalg.eigvalsh(np.array([[2.0, 1.0], [1.0, 3.0]])),
    lambda np_: np_.linalg.svdvals(np.array([[2.0, 1.0], [1.0, 3.0]])),
    lambda np_: np_.clip(np.arange(4.0), 1, 2),
    lambda np_: np_.take(np.arange(4.0), np.array([5, -1, -6]), mode="clip"),
    lambda np_: np_.take(np.arange(4.0), np.array([5, -1]), fill_value=-7.0),
    lambda np_: np_.take_along_axis(np.arange(6.0).reshape(2, 3), np.array([[2], [0]])),
    lambda np_: np_.pad(np.arange(4.0), (3, 5), "reflect", reflect_type="odd"),
    lambda np_: np_.repeat(np.arange(3.0), np.array([2, 0, 1]), total_repeat_length=5),
    lambda np_: np_.matmul(np.ones((2, 3)), np.ones(3), precision="highest"),
    lambda np_: np_.linalg.slogdet(np.array([[2.0, 1.0], [1.0, 3.0]]), method="qr")[1],
], ids=["concatenate axis=None", "concatenate dtype", "concat", "stack dtype", "eigvalsh", "svdvals", "clip",
        "take clip", "take fill_value", "take_along_axis axis=-1", "pad odd reflect", "repeat total_repeat_length",
        "matmul precision", "slogdet method"])
def test_jax_style_calls_give_jaxs_result(call):
    ours, theirs = call(jaxrules.numpy), call(jax.numpy)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-12)


# ---- Generated namespaces: declared beside each function, bound by _namespace.build ----

def _families():
    """Every ops module, imported (each registers its declarations as it loads)."""
    return [importlib.import_module(f"jaxrules.ops.{family}") for family in jaxrules.ops.__all__]


def _own_definitions(module) -> set[str]:
    """The names a namespace module defines itself: its functions and its submodules."""
    return {n for n in module.__all__ if not n.startswith("_") and (
        inspect.ismodule(getattr(module, n)) and getattr(module, n).__name__ == f"{module.__name__}.{n}"
        or getattr(getattr(module, n), "__module__", None) == module.__name__)}


@pytest.mark.parametrize("name", TARGETS)
def test_each_namespace_is_exactly_its_declarations_and_own_definitions(name):
    """Every name an ops module declares for ``name`` is bound there to the declared function,
    and jaxrules' own names of the namespace are those plus what the module defines itself."""
    _families()
    module = importlib.import_module(name)
    own = namespaces()[name][1] if name in COUNTERPARTS else frozenset(module.__all__)
    declared = EXPORTS[name]
    unbound = sorted(n for n, fn in declared.items() if getattr(module, n, None) is not fn)
    assert unbound == [], f"declared for {name} but not bound there"
    assert set(own) == set(declared) | _own_definitions(module)


def test_the_own_definitions_are_the_namespace_wrappers_and_submodules():
    assert _own_definitions(jaxrules.numpy) == {"fft", "linalg", "matmul"}
    assert _own_definitions(jaxrules.numpy.linalg) == {"slogdet"}
    assert all(not _own_definitions(importlib.import_module(n)) for n in TARGETS
               if n not in ("jaxrules.numpy", "jaxrules.numpy.linalg"))


NAMESPACE_FILES = {name: ROOT / (name.replace(".", "/") + ".py") if (ROOT / (name.replace(".", "/") + ".py")).exists()
                   else ROOT / name.replace(".", "/") / "__init__.py" for name in (*TARGETS, "jaxrules.scipy")}


@pytest.mark.parametrize("name", sorted(NAMESPACE_FILES))
def test_namespace_modules_list_no_names_by_hand(name):
    """No ``__all__`` written in the module, no name imported from an ops module (a module the
    namespace's own functions call is imported under a private name), and the module ends with
    its one ``_namespace.build(globals(), _ops, ...)`` call."""
    tree = ast.parse(NAMESPACE_FILES[name].read_text())
    assigned = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign)
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(target, ast.Name) and target.id == "__all__"]
    assert assigned == [], f"{name} writes __all__ at lines {assigned}"
    by_name = [f"{node.module}: {alias.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and (node.module or "").startswith("jaxrules.ops.") for alias in node.names]
    by_name += [f"jaxrules.ops: {alias.name} as {alias.asname}" for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module == "jaxrules.ops" for alias in node.names
                if not (alias.asname or "").startswith("_")]
    assert by_name == [], f"{name} imports names from the ops modules by hand: {by_name}"
    builds = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "build" and getattr(node.func.value, "id", None) == "_namespace"]
    assert len(builds) == 1 and [ast.unparse(a) for a in builds[0].args[:2]] == ["globals()", "_ops"], name
    last = tree.body[-1]
    assert isinstance(last, ast.Expr) and last.value is builds[0], f"{name}: build is not the last statement"
    # static tools cannot run build: a module __getattr__ declared for them types its names as Any
    stubs = [node for node in tree.body
             if isinstance(node, ast.If) and ast.unparse(node.test) == "_typing.TYPE_CHECKING"
             and any(isinstance(s, ast.FunctionDef) and s.name == "__getattr__" for s in node.body)]
    assert len(stubs) == 1, f"{name}: no __getattr__ declared under TYPE_CHECKING"


def test_exported_as_refuses_bad_names_and_a_second_function():
    from jaxrules.ops import reductions

    with pytest.raises(ValueError, match="exported_as: names must be"):
        _namespace.exported_as("jaxrules.nunpy.sum")
    with pytest.raises(ValueError, match="exported_as: names must be"):
        _namespace.exported_as("jaxrules.numpy._private")
    with pytest.raises(ValueError, match="at least one"):
        _namespace.exported_as()
    before = {k: dict(v) for k, v in EXPORTS.items()}
    with pytest.raises(ValueError, match=r"jaxrules\.numpy\.sum is declared for both"):
        _namespace.exported_as("jaxrules.nn.not_yet_a_name", "jaxrules.numpy.sum")(lambda x: x)
    assert EXPORTS == before  # nothing recorded from a refused declaration
    assert _namespace.exported_as("jaxrules.numpy.sum")(reductions.sum) is reductions.sum  # the same function: fine


def test_build_refuses_a_stray_public_global_and_a_wrong_ops_package():
    with pytest.raises(ValueError, match="public global 'Array' is neither declared"):
        _namespace.build({"__name__": "jaxrules.linalg", "Array": jax.Array}, jaxrules.ops)
    with pytest.raises(ValueError, match="'det' is both declared by jaxrules.ops.linalg.det and bound"):
        _namespace.build({"__name__": "jaxrules.linalg", "det": jax.numpy.linalg.det}, jaxrules.ops)
    with pytest.raises(TypeError, match="ops must be the jaxrules.ops package"):
        _namespace.build({"__name__": "jaxrules.linalg"}, "jaxrules.ops")


def test_build_binds_what_the_ops_modules_declare_even_when_none_was_imported():
    """A namespace lists no ops module: ``build`` loads them all, so a new op's declaration
    reaches its namespace whatever its family (in a fresh interpreter)."""
    code = ("import sys, jaxrules.linalg as L\n"
            "print(L.cdist.__module__, L.solve.__name__, 'jaxrules.ops.activations' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.split() == ["jaxrules.ops.norms", "torch_solve", "True"]
