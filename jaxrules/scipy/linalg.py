"""Drop-in replacements for ``jax.scipy.linalg`` functions."""

import jax.scipy.linalg as _jax_namespace

from jaxrules import _namespace
from jaxrules.ops import linalg as _linalg
from jaxrules.ops import shape as _shape

_namespace.build(globals(), (_linalg, _shape), _jax_namespace)
