"""Drop-in replacements for ``jax.numpy.fft`` functions."""

import jax.numpy.fft as _jax_namespace

from jaxrules import _namespace
from jaxrules.ops import fft as _fft

_namespace.build(globals(), (_fft,), _jax_namespace)
