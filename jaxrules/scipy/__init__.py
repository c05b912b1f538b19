"""Drop-in replacements for ``jax.scipy`` functions: ``linalg`` and ``special`` are jaxrules'
namespaces; ``jax.scipy``'s other submodules (``stats``, ``signal``, ``integrate``, ...) are JAX's
own, reached as attributes (``jaxrules.scipy.stats.norm.pdf``)."""

import typing as _typing

import jax.scipy as _jax_namespace

from jaxrules import _namespace
from jaxrules import ops as _ops
from jaxrules.scipy import linalg as linalg  # the submodules: public names of their own
from jaxrules.scipy import special as special

if _typing.TYPE_CHECKING:  # static tools (mypy, pyright) see the names build binds as Any

    def __getattr__(name: str) -> _typing.Any: ...


_namespace.build(globals(), _ops, _jax_namespace)
