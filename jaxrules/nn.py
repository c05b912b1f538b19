"""Drop-in replacements for ``jax.nn`` functions, plus torch.nn.functional ops JAX lacks
(normalization and losses with torch's signatures, channels at axis 1; softplus with torch's
``beta`` and ``threshold``; dropout with an explicit key)."""

import jax.nn as _jax_namespace

from jaxrules import _namespace
from jaxrules import ops as _ops

# What the ops modules declare for jaxrules.nn (exported_as), then JAX's other names.
_namespace.build(globals(), _ops, _jax_namespace)
