"""The ops: each module defines its ops (primal + residuals), their public functions and their
registry records. Importing this package registers every op."""

from jaxrules.ops import (
    activations,
    conv,
    elementwise,
    fft,
    indexing,
    linalg,
    losses,
    nested,
    normalization,
    norms,
    reductions,
    shape,
)

__all__ = ["activations", "conv", "elementwise", "fft", "indexing", "linalg", "losses", "nested", "normalization", "norms", "reductions", "shape"]
