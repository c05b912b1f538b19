"""Drop-in replacements for ``jax.numpy.fft`` functions."""

import jax.numpy.fft as _jax_namespace

from jaxrules import _namespace
from jaxrules.ops.fft import fft, fftn, ifft, ifftn, irfft, irfftn, rfft, rfftn

__all__ = ["fft", "fftn", "ifft", "ifftn", "irfft", "irfftn", "rfft", "rfftn"]

_namespace.forward_jax_names(globals(), _jax_namespace)
