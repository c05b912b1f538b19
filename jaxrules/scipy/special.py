"""Drop-in replacements for ``jax.scipy.special`` functions (``logit`` adds torch's ``eps``)."""

import jax.scipy.special as _jax_namespace

from jaxrules import _namespace
from jaxrules.ops import elementwise as _elementwise
from jaxrules.ops import reductions as _reductions

_namespace.build(globals(), (_elementwise, _reductions), _jax_namespace)
