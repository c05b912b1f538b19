"""Drop-in replacements for ``jax.scipy`` functions."""

from jaxrules.scipy import special

__all__ = ["special"]
