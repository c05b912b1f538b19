"""Drop-in replacements for ``jax.scipy`` functions."""

import typing as _typing

from jaxrules import _namespace
from jaxrules import ops as _ops
from jaxrules.scipy import linalg as linalg  # the submodules: public names of their own
from jaxrules.scipy import special as special

if _typing.TYPE_CHECKING:  # static tools (mypy, pyright) see the names build binds as Any

    def __getattr__(name: str) -> _typing.Any: ...


_namespace.build(globals(), _ops)
