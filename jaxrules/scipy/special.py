"""Drop-in replacements for ``jax.scipy.special`` functions (``logit`` adds torch's ``eps``)."""

import jax.scipy.special as _jax_namespace

from jaxrules import _namespace
from jaxrules.ops.elementwise import i1, i1e, logit, multigammaln, xlogy
from jaxrules.ops.reductions import logsumexp

__all__ = ["i1", "i1e", "logit", "logsumexp", "multigammaln", "xlogy"]

_namespace.forward_jax_names(globals(), _jax_namespace)
