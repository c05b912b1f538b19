"""Drop-in replacements for ``jax.numpy.fft`` functions."""

from jaxrules.ops.fft import fft, fftn, ifft, ifftn, irfft, irfftn, rfft, rfftn

__all__ = ["fft", "fftn", "ifft", "ifftn", "irfft", "irfftn", "rfft", "rfftn"]
