"""Drop-in replacements for ``jax.nn`` functions, plus torch.nn.functional ops JAX lacks
(normalization and losses with torch's signatures, channels at axis 1; softplus with torch's
``beta`` and ``threshold``; dropout with an explicit key)."""

import jax.nn as _jax_namespace

from jaxrules import _namespace
from jaxrules.ops import activations as _activations
from jaxrules.ops import attention as _attention
from jaxrules.ops import conv as _conv
from jaxrules.ops import indexing as _indexing
from jaxrules.ops import linalg as _linalg
from jaxrules.ops import losses as _losses
from jaxrules.ops import normalization as _normalization
from jaxrules.ops import norms as _norms
from jaxrules.ops import reductions as _reductions
from jaxrules.ops import resampling as _resampling

# The names the families declare for jaxrules.nn (exported_as), then JAX's others.
_namespace.build(globals(), (_activations, _attention, _conv, _indexing, _linalg, _losses, _normalization, _norms,
                             _reductions, _resampling), _jax_namespace)
