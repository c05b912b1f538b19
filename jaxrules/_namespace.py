"""Generated namespaces. An ops module declares each public function's public names beside it
(``@exported_as("jaxrules.nn.relu")``); each namespace module (``jaxrules.numpy``, ``jaxrules.nn``,
...) binds what the ops modules declare for it and derives its ``__all__`` with one call
(``build``), so adding an op edits no namespace file.

Complete namespaces: a jaxrules namespace with a JAX counterpart also exposes every public name of
that counterpart it does not define itself, as JAX's own object (``jaxrules.numpy.float32 is
jax.numpy.float32``), so ``import jaxrules.numpy as jnp`` works in a whole program. The names
jaxrules defines (its declared exports and own definitions) are never replaced."""

from __future__ import annotations

import types
from collections.abc import Callable

# namespace module name -> (JAX module name, jaxrules' own names, names forwarded to JAX)
NAMESPACES: dict[str, tuple[str, frozenset[str], frozenset[str]]] = {}

# The completed namespaces and their JAX counterparts.
COUNTERPARTS = {
    "jaxrules.numpy": "jax.numpy",
    "jaxrules.numpy.linalg": "jax.numpy.linalg",
    "jaxrules.numpy.fft": "jax.numpy.fft",
    "jaxrules.nn": "jax.nn",
    "jaxrules.scipy": "jax.scipy",
    "jaxrules.scipy.special": "jax.scipy.special",
    "jaxrules.scipy.linalg": "jax.scipy.linalg",
}


# The namespaces an ops module may export to (``exported_as``), each a module built by ``build``.
TARGETS = (
    "jaxrules.numpy", "jaxrules.numpy.linalg", "jaxrules.numpy.fft", "jaxrules.nn", "jaxrules.linalg",
    "jaxrules.scipy.special", "jaxrules.scipy.linalg",
)

# namespace module name -> {public name: function}, filled by ``exported_as`` as the ops modules load.
EXPORTS: dict[str, dict[str, Callable]] = {}


def exported_as(*names: str) -> Callable[[Callable], Callable]:
    """Decorator: declare the public names of the function it decorates, each a full dotted name
    ``"<namespace>.<name>"`` whose namespace is one of ``TARGETS`` (``"jaxrules.nn.hardsigmoid"``,
    ``"jaxrules.nn.hard_sigmoid"``; ``"jaxrules.linalg.solve"`` on ``torch_solve``). It returns
    the function unchanged; the namespace module binds it under those names (``build``).

    Args:
        *names: the function's public names, at least one; a namespace may appear with several
            names (an alias: ``"jaxrules.numpy.power"``, ``"jaxrules.numpy.pow"``).

    Returns:
        The decorator, which records the function under every name and returns it.

    Raises:
        ValueError: when no name is given, a name is not ``<one of TARGETS>.<identifier>``, or a
            public name is already declared for another function.
    """
    if not names:
        raise ValueError("exported_as: give at least one public name, e.g. 'jaxrules.nn.relu'")
    targets = []
    for full in names:
        namespace, _, name = str(full).rpartition(".")
        if namespace not in TARGETS or not name.isidentifier() or name.startswith("_"):
            raise ValueError(f"exported_as: names must be '<namespace>.<public name>' with the namespace one of "
                             f"{', '.join(TARGETS)}; got {full!r}")
        targets.append((namespace, name))

    def declare(fn: Callable) -> Callable:
        for namespace, name in targets:  # every name checked before any is recorded
            known = EXPORTS.get(namespace, {}).get(name)
            if known is not None and known is not fn:
                raise ValueError(f"exported_as: {namespace}.{name} is declared for both "
                                 f"{_where(known)} and {_where(fn)}")
        for namespace, name in targets:
            EXPORTS.setdefault(namespace, {})[name] = fn
        return fn

    return declare


def _where(fn: Callable) -> str:
    """``module.qualname`` of ``fn``, for the error messages."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def build(namespace: dict, ops: types.ModuleType, counterpart: types.ModuleType | None = None) -> None:
    """Make the module whose ``globals()`` is ``namespace`` a jaxrules namespace.

    Loads every ops module of the package ``ops`` (``jaxrules.ops``: each listed in its
    ``__all__``, loaded on first use), binds every function they declare for this namespace
    (``exported_as``), then sets ``__all__`` to those names plus the module's own public
    definitions: the functions defined in it (``jaxrules.numpy.matmul``) and its submodules
    (``jaxrules.numpy.linalg``). With a JAX ``counterpart`` it then completes the namespace with
    JAX's other names (``forward_jax_names``).

    Args:
        namespace: the namespace module's ``globals()``, called as its last statement.
        ops: the ``jaxrules.ops`` package (handed down: this module sits below it).
        counterpart: the JAX module it replaces (``jax.numpy``), or None (``jaxrules.linalg``).

    Raises:
        TypeError: when ``ops`` is not a package of ops modules.
        ValueError: when a declared name is already bound to something else in the module, or
            the module has another public global (an import that would leak into ``__all__``).
    """
    name = namespace["__name__"]
    if not isinstance(ops, types.ModuleType) or not isinstance(getattr(ops, "__all__", None), list):
        raise TypeError(f"{name}: ops must be the jaxrules.ops package, got {ops!r}")
    families = {getattr(ops, family).__name__ for family in ops.__all__}  # loading each registers its declarations
    exports = {n: fn for n, fn in EXPORTS.get(name, {}).items() if fn.__module__ in families}
    own = []
    for attr, obj in namespace.items():
        if attr.startswith("_") or attr in exports:
            continue
        if isinstance(obj, types.ModuleType) and obj.__name__ == f"{name}.{attr}":
            own.append(attr)
        elif callable(obj) and getattr(obj, "__module__", None) == name:
            own.append(attr)
        else:
            raise ValueError(f"{name}: public global {attr!r} is neither declared with exported_as, defined "
                             "in the module nor one of its submodules (import it under a private name)")
    for attr, fn in exports.items():
        if namespace.get(attr, fn) is not fn:
            raise ValueError(f"{name}: {attr!r} is both declared by {_where(fn)} and bound in the module")
    namespace.update(exports)
    namespace["__all__"] = sorted([*exports, *own])
    if counterpart is not None:
        forward_jax_names(namespace, counterpart)


def public_names(module: types.ModuleType) -> list[str]:
    """The public names of ``module``: ``__all__`` if it has one, else every name of ``dir()``
    without a leading underscore (JAX's namespaces define no ``__all__``)."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in dir(module) if not n.startswith("_")]
    return sorted(names)


def forward_jax_names(namespace: dict, jax_module: types.ModuleType) -> None:
    """Complete the module whose ``globals()`` is ``namespace`` with ``jax_module``'s public names.

    Every public name of ``jax_module`` that is not in the namespace's ``__all__`` (jaxrules' own
    names) is bound to JAX's object; ``__all__`` then lists both, so ``dir()``, tab completion and
    ``from ... import *`` see them. Other names (JAX's deprecated ones) are looked up on
    ``jax_module`` on access, with JAX's warning or error.
    """
    name = namespace["__name__"]
    own = frozenset(namespace["__all__"])
    forwarded = frozenset(public_names(jax_module)) - own
    for attr in forwarded:
        namespace[attr] = getattr(jax_module, attr)
    namespace["__all__"] = sorted(own | forwarded)
    NAMESPACES[name] = (jax_module.__name__, own, forwarded)

    def __getattr__(attr: str):
        if not attr.startswith("_"):
            try:
                return getattr(jax_module, attr)
            except AttributeError as err:  # JAX's reason (a removed name's replacement) or "nor has JAX"
                detail = str(err)
                if detail == f"module {jax_module.__name__!r} has no attribute {attr!r}":
                    detail = f"nor has {jax_module.__name__}"
                raise AttributeError(f"module {name!r} has no attribute {attr!r} ({detail})") from None
        raise AttributeError(f"module {name!r} has no attribute {attr!r}")

    namespace["__getattr__"] = __getattr__


def namespaces() -> dict[str, tuple[str, frozenset[str], frozenset[str]]]:
    """Every completed namespace imported so far: ``{name: (JAX module, own names, forwarded
    names)}`` (this module sits below the namespaces and imports none; ``python -m jaxrules list``
    imports them all)."""
    return {name: NAMESPACES[name] for name in COUNTERPARTS if name in NAMESPACES}
