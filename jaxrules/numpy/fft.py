"""Drop-in replacements for ``jax.numpy.fft`` functions."""

import typing as _typing

import jax.numpy.fft as _jax_namespace

from jaxrules import _namespace
from jaxrules import ops as _ops

if _typing.TYPE_CHECKING:  # static tools (mypy, pyright) see the names build binds as Any

    def __getattr__(name: str) -> _typing.Any: ...


_namespace.build(globals(), _ops, _jax_namespace)
