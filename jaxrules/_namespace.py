"""Complete namespaces: a jaxrules namespace (``jaxrules.numpy``, ``jaxrules.nn``, ...) also
exposes every public name of its JAX counterpart that it does not define itself, as JAX's own
object (``jaxrules.numpy.float32 is jax.numpy.float32``), so ``import jaxrules.numpy as jnp``
works in a whole program. The names jaxrules defines (its ``__all__``) are never replaced."""

from __future__ import annotations

import types

# namespace module name -> (JAX module name, jaxrules' own names, names forwarded to JAX)
NAMESPACES: dict[str, tuple[str, frozenset[str], frozenset[str]]] = {}

# The completed namespaces and their JAX counterparts.
COUNTERPARTS = {
    "jaxrules.numpy": "jax.numpy",
    "jaxrules.numpy.linalg": "jax.numpy.linalg",
    "jaxrules.numpy.fft": "jax.numpy.fft",
    "jaxrules.nn": "jax.nn",
    "jaxrules.scipy.special": "jax.scipy.special",
    "jaxrules.scipy.linalg": "jax.scipy.linalg",
}


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
