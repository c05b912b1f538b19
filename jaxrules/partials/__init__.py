"""Partial derivatives shared by the JVP formulas (``jvp_rules``) and the VJP formulas
(``vjp_rules``): each helper computes, from the residuals, the factor that both formulas apply
(one to a tangent, the other to a cotangent), so the two formulas cannot drift apart.

Every helper is branch-free (masks, not ``if``) so it works under jit and vmap, and uses the
double-``where`` guard so that JAX's derivative of the helper (second order) has no NaN at the
masked points.

One module per family, mirroring ``jaxrules.ops``: ``elementwise`` (guards and elementwise
factors), ``reductions``, ``normalization``, ``activations``, ``losses``, ``linalg``, ``fft``,
``indexing``, ``conv`` (convolution and pooling), ``sorting``. This package re-exports the names
each module lists in its ``__all__`` (star imports: a helper is listed once, beside its
definition), so formulas write ``P.name``; ``tests/test_partials_exports.py`` keeps the modules'
lists disjoint.
"""

from jaxrules.checking import runtime_check  # noqa: F401 (re-exported: the formulas call P.runtime_check)
from jaxrules.partials.activations import *  # noqa: F403
from jaxrules.partials.conv import *  # noqa: F403
from jaxrules.partials.elementwise import *  # noqa: F403
from jaxrules.partials.fft import *  # noqa: F403
from jaxrules.partials.indexing import *  # noqa: F403
from jaxrules.partials.linalg import *  # noqa: F403
from jaxrules.partials.losses import *  # noqa: F403
from jaxrules.partials.normalization import *  # noqa: F403
from jaxrules.partials.reductions import *  # noqa: F403
from jaxrules.partials.sorting import *  # noqa: F403
