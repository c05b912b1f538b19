"""Drop-in replacements for ``jax.scipy.special`` functions (``logit`` adds torch's ``eps``)."""

from jaxrules.ops.elementwise import i1, i1e, logit, multigammaln, xlogy
from jaxrules.ops.reductions import logsumexp

__all__ = ["i1", "i1e", "logit", "logsumexp", "multigammaln", "xlogy"]
