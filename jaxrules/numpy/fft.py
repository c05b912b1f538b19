"""Drop-in replacements for ``jax.numpy.fft`` functions."""

import jax.numpy.fft as _jax_namespace

from jaxrules import _namespace
from jaxrules import ops as _ops

_namespace.build(globals(), _ops, _jax_namespace)
