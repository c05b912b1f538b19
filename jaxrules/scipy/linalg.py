"""Drop-in replacements for ``jax.scipy.linalg`` functions."""

import jax.scipy.linalg as _jax_namespace

from jaxrules import _namespace
from jaxrules import ops as _ops

_namespace.build(globals(), _ops, _jax_namespace)
