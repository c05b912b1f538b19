"""Drop-in replacements for ``jax.scipy`` functions."""

from jaxrules.scipy import linalg, special

__all__ = ["linalg", "special"]
