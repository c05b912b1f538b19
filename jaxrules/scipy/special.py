"""Drop-in replacements for ``jax.scipy.special`` functions (``logit`` adds torch's ``eps``)."""

import typing as _typing

import jax.scipy.special as _jax_namespace

from jaxrules import _namespace
from jaxrules import ops as _ops

if _typing.TYPE_CHECKING:  # static tools (mypy, pyright) see the names build binds as Any

    def __getattr__(name: str) -> _typing.Any: ...


_namespace.build(globals(), _ops, _jax_namespace)
