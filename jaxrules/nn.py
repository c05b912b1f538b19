"""Drop-in replacements for ``jax.nn`` functions, plus torch.nn.functional ops JAX lacks
(normalization and losses with torch's signatures, channels at axis 1; softplus with torch's
``beta`` and ``threshold``; dropout with an explicit key)."""

import typing as _typing

import jax.nn as _jax_namespace

from jaxrules import _namespace
from jaxrules import ops as _ops

if _typing.TYPE_CHECKING:  # static tools (mypy, pyright) see the names build binds as Any

    def __getattr__(name: str) -> _typing.Any: ...


# What the ops modules declare for jaxrules.nn (exported_as), then JAX's other names.
_namespace.build(globals(), _ops, _jax_namespace)
