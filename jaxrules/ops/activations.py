"""Activations and the softmax family (``jaxrules.nn``, jax.nn's names and signatures, torch's
extra arguments): primal, residuals and record of each; the derivative factors are in
``partials``, the formulas in ``jvp_rules`` / ``vjp_rules``."""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrules import _validate as V
from jaxrules import jvp_rules as J
from jaxrules import partials as P
from jaxrules import vjp_rules as R
from jaxrules.mechanism import define_op
from jaxrules.ops._sampling import f64, normal
from jaxrules.registry import OpRecord, Sample, SingularPoint, register

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _pointwise(name, primal):
    """A one-input op whose derivative factor is ``partials.<name>_derivative``."""
    op = define_op(name, primal, J.pointwise_jvp, R.pointwise_vjp)
    derivative = getattr(P, f"{name}_derivative")
    return lambda x, **params: op(x, derivative=derivative, **params)


def _elu_primal(x, *, alpha, scale, input_scale, **_):
    return scale * jnp.where(x > 0, x, alpha * jnp.expm1(jnp.minimum(x, 0) * input_scale))


def _softplus_primal(x, *, beta, threshold, **_):
    bx = x * beta
    return jnp.where(bx > threshold, x, jax.nn.softplus(jnp.minimum(bx, threshold)) / beta)


_threshold = _pointwise("threshold", lambda x, *, threshold, value, **_: jnp.where(x > threshold, x, value).astype(x.dtype))
_silu = _pointwise("silu", lambda x, **_: jax.nn.silu(x))
_mish = _pointwise("mish", lambda x, **_: x * jnp.tanh(jax.nn.softplus(x)))
_gelu = _pointwise("gelu", lambda x, *, approximate, **_: jax.nn.gelu(x, approximate=approximate))
_elu = _pointwise("elu", _elu_primal)
_softplus = _pointwise("softplus", _softplus_primal)
_log_sigmoid = _pointwise("log_sigmoid", lambda x, **_: jax.nn.log_sigmoid(x))
softmax_op = define_op("softmax", lambda x, *, axis: jax.nn.softmax(x, axis=axis), J.softmax_jvp, R.softmax_vjp,
                       lambda out, x, **_: x)
def _log_softmax_primal(x, *, axis):
    """``x - max x - log(sum exp(x - max x))`` (jax.nn.log_softmax's arithmetic)."""
    _, s = P.softmax_parts(x, axis)
    return x - lax.stop_gradient(P.max_or_neg_inf(x, axis)) - jnp.log(s)


log_softmax_op = define_op("log_softmax", _log_softmax_primal, J.log_softmax_jvp, R.log_softmax_vjp,
                           lambda out, x, *, axis: P.softmax_parts(x, axis))  # the forward's own (XLA: CSE)
glu_op = define_op("glu", lambda x, *, axis: jax.nn.glu(x, axis=axis), J.glu_jvp, R.glu_vjp)
dropout_op = define_op("dropout", lambda x, mask, *, scale: jnp.where(mask, x * scale, 0).astype(x.dtype),
                       J.dropout_jvp, R.dropout_vjp, lambda out, x, mask, **_: mask)


def _real(op, x):
    x = V.array(op, "x", x)
    if jnp.iscomplexobj(x):
        raise TypeError(f"{op}: argument 'x' must be real, got {x.dtype}")
    return x


def _positive(op, name, value):
    if not isinstance(value, numbers.Real) or value <= 0:
        raise ValueError(f"{op}: {name} must be a positive number, got {value!r}")
    return float(value)


def threshold(x, threshold, value):
    """torch.nn.functional.threshold: ``x`` where ``x > threshold``, else ``value``; derivative
    ``[x > threshold]`` (torch ``threshold_backward``, 0 at the threshold)."""
    for name, v in (("threshold", threshold), ("value", value)):
        if not isinstance(v, numbers.Real):
            raise TypeError(f"threshold: {name} must be a real number, got {v!r}")
    return _threshold(_real("threshold", x), threshold=float(threshold), value=float(value))


def relu(x):
    """``max(x, 0)`` with derivative ``[x > 0]`` (torch's: 0 at 0, as ``jax.nn.relu``)."""
    return _threshold(_real("relu", x), threshold=0.0, value=0.0)


def silu(x):
    """``x sigmoid(x)``; seed ``infinitely_differentiable_silu_backward``."""
    return _silu(_real("silu", x))


swish = silu


def mish(x):
    """``x tanh(softplus(x))``; finite second derivative at large x (torch: NaN at 800)."""
    return _mish(_real("mish", x))


def gelu(x, approximate: bool | str = True):
    """GELU: the tanh approximation for ``approximate=True`` (jax.nn's default) or ``"tanh"``
    (torch's spelling), the exact ``x Phi(x)`` for ``False`` or ``"none"`` (torch's default);
    torch ``gelu_backward``."""
    return _gelu(_real("gelu", x), approximate=_gelu_approximate(approximate))


def _gelu_approximate(approximate) -> bool:
    """``approximate`` as a bool: JAX's booleans or torch's ``"none"`` / ``"tanh"`` (a non-empty
    string must not silently mean True)."""
    if isinstance(approximate, (bool, np.bool_)):
        return bool(approximate)
    if isinstance(approximate, str) and approximate in ("none", "tanh"):
        return approximate == "tanh"
    raise ValueError(f"gelu: approximate must be True, False, 'tanh' or 'none' (torch's spellings), got {approximate!r}")


def elu(x, alpha=1.0):
    """``x`` for x > 0, ``alpha (exp(x) - 1)`` otherwise; torch's derivative at 0 (the alpha
    branch) and second derivative at 0 (0; JAX gives alpha)."""
    return _elu(_real("elu", x), alpha=float(alpha), scale=1.0, input_scale=1.0)


def selu(x):
    """``scale elu(x, alpha)`` with the SELU constants; torch's derivatives at 0."""
    return _elu(_real("selu", x), alpha=_SELU_ALPHA, scale=_SELU_SCALE, input_scale=1.0)


def celu(x, alpha=1.0):
    """``max(0, x) + min(0, alpha (exp(x/alpha) - 1))``; torch's second derivative at 0 (0; JAX
    gives 1/alpha)."""
    alpha = _positive("celu", "alpha", alpha)
    return _elu(_real("celu", x), alpha=alpha, scale=1.0, input_scale=1 / alpha)


def softplus(x, beta=1, threshold=20):
    """torch's softplus: ``log(1 + exp(beta x)) / beta``, linear where ``beta x > threshold``;
    torch ``softplus_backward`` / ``softplus_double_backward``."""
    beta = _positive("softplus", "beta", beta)
    if not isinstance(threshold, numbers.Real):
        raise TypeError(f"softplus: threshold must be a number, got {threshold!r}")
    return _softplus(_real("softplus", x), beta=beta, threshold=float(threshold))


def log_sigmoid(x):
    """``log(sigmoid(x))``; derivative ``sigmoid(-x)``, stable at +-800."""
    return _log_sigmoid(_real("log_sigmoid", x))


def softmax(x, axis=-1):
    """Softmax over ``axis`` (one int); VJP torch's ``_softmax_backward_data``, double backward
    seed ``softmax_double_backward``; -inf logits are fine."""
    x = _real("softmax", x)
    return softmax_op(x, axis=V.single_axis("softmax", x.ndim, axis))


def log_softmax(x, axis=-1):
    """Log-softmax over ``axis``; VJP torch's ``_log_softmax_backward_data``."""
    x = _real("log_softmax", x)
    return log_softmax_op(x, axis=V.single_axis("log_softmax", x.ndim, axis))


def glu(x, axis=-1):
    """``a sigmoid(b)`` with ``a, b`` the halves of ``x`` along ``axis``; torch ``glu_backward``
    (double backward: its derivative)."""
    x = _real("glu", x)
    ax = V.single_axis("glu", x.ndim, axis)
    if x.shape[ax] % 2:
        raise ValueError(f"glu: the size of axis {axis} must be even, got {x.shape[ax]}")
    return glu_op(x, axis=ax)


def dropout(x, p=0.5, training=True, *, key=None):
    """torch's dropout with an explicit PRNG ``key``: zero each entry with probability ``p`` and
    scale the rest by ``1/(1 - p)`` (all zero when p = 1); identity when not training. Saves the
    boolean mask only (seed ``infinitely_differentiable_native_dropout_backward``)."""
    x = _real("dropout", x)
    if not isinstance(p, numbers.Real) or not 0 <= p <= 1:
        raise ValueError(f"dropout: p must be a probability in [0, 1], got {p!r}")
    if not training or p == 0:
        return x
    if key is None:
        raise ValueError("dropout: key (a jax.random key) is required when training with p > 0")
    mask = jax.random.bernoulli(key, 1 - p, x.shape) if p < 1 else jnp.zeros(x.shape, bool)
    return dropout_op(x, mask, scale=0.0 if p == 1 else 1 / (1 - p))


# ----------------------------------------------------------------------------------------------
# Records

_NN = "jaxrules.nn."


def _record(name, fn, seed, samples, torch_fn, torch_name, **kw):
    return register(OpRecord(name, fn, (_NN + name,), kw.pop("formula_ops", (name,)), seed, samples, torch_fn,
                             torch_name, **kw))


def _samples(scale=2.0):
    return lambda rng, dt: [Sample((scale * normal(rng, dt, 3, 4),)), Sample((scale * normal(rng, dt, 5),))]


_F = "torch.nn.functional."
_record("silu", silu, ("infinitely_differentiable_silu_backward",), _samples(),
        lambda t, x: t.nn.functional.silu(x), _F + "silu", low_precision=("float32", "bfloat16"),
        singular=(SingularPoint("saturation", (f64(-800.0, 800.0),), (f64(0, 1),)),))
_record("relu", relu, ("threshold_backward",), _samples(),
        lambda t, x: t.relu(x), "torch.relu", formula_ops=("threshold",), low_precision=("float32", "bfloat16"),
        singular=(SingularPoint("kink", (f64(0.0, -1.0, 2.0),), (f64(0, 0, 1),)),))
_record("threshold", threshold, ("threshold_backward",),
        lambda rng, dt: [Sample((2 * normal(rng, dt, 3, 4) + 0.01, 0.5, -2.0))],
        lambda t, x, th, value: t.nn.functional.threshold(x, th, value), _F + "threshold",
        singular=(SingularPoint("at the threshold", (f64(0.5, 1.0), 0.5, -2.0), (f64(0, 1),)),))
_record("mish", mish, ("infinitely_differentiable_mish_backward",), _samples(),
        lambda t, x: t.nn.functional.mish(x), _F + "mish",
        singular=(SingularPoint("large x", (f64(800.0),), (f64(1),),
                                torch_differs="torch's second derivative at 800 is NaN (exp overflows); the "
                                "first derivative agrees, and jaxrules' second is 0."),),
        deviations="Finite second derivative at large x (torch: NaN at 800).")
_record("gelu", gelu, ("gelu_double_backward", "gelu_backward (derivatives.yaml)"),
        lambda rng, dt: [Sample((2 * normal(rng, dt, 3, 4),)), Sample((2 * normal(rng, dt, 5),), {"approximate": False})],
        lambda t, x, approximate=True: t.nn.functional.gelu(x, approximate="tanh" if approximate else "none"),
        _F + "gelu", low_precision=("float32", "bfloat16"))
_record("elu", elu, ("elu_double_backward", "elu_backward"),
        lambda rng, dt: [Sample((2 * normal(rng, dt, 3, 4) + 0.01,)), Sample((2 * normal(rng, dt, 5),), {"alpha": 1.5})],
        lambda t, x, alpha=1.0: t.nn.functional.elu(x, alpha), _F + "elu", formula_ops=("elu",),
        singular=(SingularPoint("kink", (f64(0.0),), (f64(1.5),), {"alpha": 1.5}),),
        deviations="Second derivative 0 at x = 0 (torch's; JAX gives alpha).")
_record("selu", selu, ("elu_double_backward", "elu_backward"), _samples(),
        lambda t, x: t.nn.functional.selu(x), _F + "selu", formula_ops=("elu",),
        singular=(SingularPoint("kink", (f64(0.0),), (f64(_SELU_ALPHA * _SELU_SCALE),)),))
_record("celu", celu, ("elu_double_backward", "elu_backward"),
        lambda rng, dt: [Sample((2 * normal(rng, dt, 3, 4),), {"alpha": 2.0})],
        lambda t, x, alpha=1.0: t.nn.functional.celu(x, alpha), _F + "celu", formula_ops=("elu",),
        singular=(SingularPoint("kink", (f64(0.0),), (f64(1.0),), {"alpha": 2.0}),))
_record("softplus", softplus, ("softplus_double_backward", "softplus_backward"),
        lambda rng, dt: [Sample((3 * normal(rng, dt, 3, 4),)), Sample((3 * normal(rng, dt, 5),), {"beta": 2, "threshold": 5})],
        lambda t, x, beta=1, threshold=20: t.nn.functional.softplus(x, beta, threshold), _F + "softplus",
        singular=(SingularPoint("at the threshold", (f64(10.0),), (f64(1 / (1 + math.exp(-20))),), {"beta": 2}),))
_record("log_sigmoid", log_sigmoid, ("log_sigmoid_double_backward",), _samples(3.0),
        lambda t, x: t.nn.functional.logsigmoid(x), _F + "logsigmoid",
        singular=(SingularPoint("saturation", (f64(-800.0, 800.0),), (f64(1, 0),)),))


def _axis_samples(rng, dt):
    return [Sample((normal(rng, dt, 3, 4),)), Sample((normal(rng, dt, 3, 4),), {"axis": 0})]


_record("softmax", softmax, ("softmax_double_backward", "_softmax_backward_data"), _axis_samples,
        lambda t, x, axis=-1: t.softmax(x, axis), _F + "softmax", low_precision=("float32", "bfloat16"),
        singular=(SingularPoint("-inf logit", (f64(-np.inf, 0.0, 1.0),), (f64(0, 0, 0),)),))
_record("log_softmax", log_softmax, ("_log_softmax_backward_data",), _axis_samples,
        lambda t, x, axis=-1: t.log_softmax(x, axis), _F + "log_softmax",
        singular=(SingularPoint("-inf logit", (f64(-np.inf, 0.0, 1.0),),
                                (f64(1, 1 - 3 / (1 + math.e), 1 - 3 * math.e / (1 + math.e)),)),))
_record("glu", glu, ("glu_double_backward", "glu_double_backward_grad_output"),
        lambda rng, dt: [Sample((normal(rng, dt, 3, 4),)), Sample((normal(rng, dt, 4, 3),), {"axis": 0})],
        lambda t, x, axis=-1: t.nn.functional.glu(x, axis), _F + "glu")


def _dropout_record_fn(x, key_data, p):
    return dropout(x, p, key=jax.random.wrap_key_data(jnp.asarray(key_data)))


def _dropout_torch(t, x, key_data, p):
    mask = np.asarray(jax.random.bernoulli(jax.random.wrap_key_data(jnp.asarray(key_data)), 1 - p, tuple(x.shape)))
    return x * t.tensor(mask) / (1 - p)


_record("dropout", _dropout_record_fn, ("infinitely_differentiable_native_dropout_backward", "native_dropout_double_backward"),
        lambda rng, dt: [Sample((normal(rng, dt, 4, 5), np.asarray(jax.random.key_data(jax.random.key(int(rng.integers(1 << 30))))), 0.3))],
        _dropout_torch, "x * mask / (1 - p) (torch's dropout with the same mask)",
        low_precision=("float32", "bfloat16"))
