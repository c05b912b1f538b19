"""Drop-in replacements for ``jax.scipy`` functions."""

from jaxrules import _namespace
from jaxrules import ops as _ops
from jaxrules.scipy import linalg as linalg  # the submodules: public names of their own
from jaxrules.scipy import special as special

_namespace.build(globals(), _ops)
