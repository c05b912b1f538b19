"""Drop-in replacements for ``jax.scipy.special`` functions (``logit`` adds torch's ``eps``)."""

import jax.scipy.special as _jax_namespace

from jaxrules import _namespace
from jaxrules import ops as _ops

_namespace.build(globals(), _ops, _jax_namespace)
