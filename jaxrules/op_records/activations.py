"""Registry records of ``jaxrules.ops.activations``, in that module's order: samples, singular points,
torch references. Only ``registry.load_records()`` imports them (``import jaxrules`` and its
namespaces never do)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxrules.ops import activations as ops
from jaxrules.ops._sampling import f64, normal
from jaxrules.ops.activations import (
    _SELU_ALPHA,
    _SELU_SCALE,
    celu,
    dropout,
    elu,
    gelu,
    glu,
    hardswish,
    hardtanh,
    leaky_relu,
    log_sigmoid,
    log_softmax,
    mish,
    prelu,
    relu,
    relu6,
    selu,
    silu,
    softmax,
    softplus,
    threshold,
)
from jaxrules.registry import Sample, SingularPoint, record

_NN = "jaxrules.nn."


def _samples(scale=2.0):
    return lambda rng, dt: [Sample((scale * normal(rng, dt, 3, 4),)), Sample((scale * normal(rng, dt, 5),))]


_F = "torch.nn.functional."
record(
    "threshold", fn=threshold, public=(_NN + "threshold",), formula_ops=("threshold",), seed=("threshold_backward",),
    samples=lambda rng, dt: [Sample((2 * normal(rng, dt, 3, 4) + 0.01, 0.5, -2.0))],
    torch_fn=lambda t, x, th, value: t.nn.functional.threshold(x, th, value), torch_name=_F + "threshold",
    singular=(SingularPoint("at the threshold", (f64(0.5, 1.0), 0.5, -2.0), (f64(0, 1),)),),
)
record(
    "relu", fn=relu, public=(_NN + "relu",), formula_ops=("threshold",), seed=("threshold_backward",),
    samples=_samples(), torch_fn=lambda t, x: t.relu(x), torch_name="torch.relu", low_precision=("float32", "bfloat16"),
    singular=(SingularPoint("kink", (f64(0.0, -1.0, 2.0),), (f64(0, 0, 1),)),),
)
record(
    "hardtanh", fn=hardtanh, public=(_NN + "hardtanh", _NN + "hard_tanh"), formula_ops=("hardtanh",),
    seed=("hardtanh_backward (derivatives.yaml)",),
    samples=lambda rng, dt: [Sample((2 * normal(rng, dt, 3, 4) + 0.01,)), Sample((3 * normal(rng, dt, 5), -0.5, 2.0))],
    torch_fn=lambda t, x, lo=-1.0, hi=1.0: t.nn.functional.hardtanh(x, lo, hi), torch_name=_F + "hardtanh",
    low_precision=("float32", "bfloat16"),
    singular=(SingularPoint("at the bounds", (f64(-1.0, 1.0, 0.5, 3.0),), (f64(0, 0, 1, 0),)),),
)
record(
    "relu6", fn=relu6, public=(_NN + "relu6",), formula_ops=("hardtanh",),
    seed=("hardtanh_backward (derivatives.yaml)",), samples=lambda rng, dt: [Sample((4 * normal(rng, dt, 3, 4) + 3,))],
    torch_fn=lambda t, x: t.nn.functional.relu6(x), torch_name=_F + "relu6",
    singular=(SingularPoint("at 0 and 6", (f64(0.0, 6.0, 3.0, 7.0),), (f64(0, 0, 1, 0),)),),
)
record(
    "leaky_relu", fn=leaky_relu, public=(_NN + "leaky_relu",), formula_ops=("leaky_relu",),
    seed=("leaky_relu_backward (derivatives.yaml)",),
    samples=lambda rng, dt: [Sample((2 * normal(rng, dt, 3, 4),)), Sample((2 * normal(rng, dt, 5), 0.2))],
    torch_fn=lambda t, x, slope=0.01: t.nn.functional.leaky_relu(x, slope), torch_name=_F + "leaky_relu",
    low_precision=("float32", "bfloat16"),
    singular=(SingularPoint("at 0", (f64(0.0, -1.0, 2.0), 0.1), (f64(0.1, 0.1, 1),)),),
)
record(
    "hardsigmoid", fn=ops.hardsigmoid, public=(_NN + "hardsigmoid", _NN + "hard_sigmoid"), formula_ops=("hardsigmoid",),
    seed=("hardsigmoid_backward (derivatives.yaml)",), samples=_samples(3.0),
    torch_fn=lambda t, x: t.nn.functional.hardsigmoid(x), torch_name=_F + "hardsigmoid",
    low_precision=("float32", "bfloat16"), tolerance={"torch": 1e-7},
    deviations="The slope is 1/6 exactly; torch's CPU kernel multiplies by the float32 constant "
    "1.0f/6.0f (3e-8 relative off in float64), so the torch check's tolerance is 1e-7.",
    singular=(SingularPoint("at +-3", (f64(-3.0, 3.0, 0.0),), (f64(0, 0, 1 / 6),)),),
)
record(
    "hardswish", fn=hardswish, public=(_NN + "hardswish", _NN + "hard_swish"), formula_ops=("hardswish",),
    seed=("hardswish_backward (derivatives.yaml)",), samples=_samples(3.0),
    torch_fn=lambda t, x: t.nn.functional.hardswish(x), torch_name=_F + "hardswish",
    low_precision=("float32", "bfloat16"),
    singular=(SingularPoint("at +-3", (f64(-3.0, 3.0, 0.0, -4.0),), (f64(0, 1, 0.5, 0),)),),
)
record(
    "prelu", fn=prelu, public=(_NN + "prelu",), formula_ops=("prelu",),
    seed=("_prelu_kernel_backward (derivatives.yaml)",),
    samples=lambda rng, dt: [Sample((2 * normal(rng, dt, 3, 4, 2), normal(rng, dt, 4))),
                             Sample((2 * normal(rng, dt, 5), normal(rng, dt, 1)))],
    torch_fn=lambda t, x, w: t.nn.functional.prelu(x, w), torch_name=_F + "prelu",
    low_precision=("float32", "bfloat16"),
    singular=(SingularPoint("at 0", (f64(0.0, -1.0, 2.0), f64(0.25)), (f64(0.25, 0.25, 1), f64(-1.0))),),
)
record(
    "silu", fn=silu, public=(_NN + "silu",), formula_ops=("silu",), seed=("infinitely_differentiable_silu_backward",),
    samples=_samples(), torch_fn=lambda t, x: t.nn.functional.silu(x), torch_name=_F + "silu",
    low_precision=("float32", "bfloat16"), singular=(SingularPoint("saturation", (f64(-800.0, 800.0),), (f64(0, 1),)),),
)
record(
    "mish", fn=mish, public=(_NN + "mish",), formula_ops=("mish",), seed=("infinitely_differentiable_mish_backward",),
    samples=_samples(), torch_fn=lambda t, x: t.nn.functional.mish(x), torch_name=_F + "mish",
    singular=(SingularPoint("large x", (f64(800.0),), (f64(1),),
                            torch_differs="torch's second derivative at 800 is NaN (exp overflows); the "
                            "first derivative agrees, and jaxrules' second is 0."),),
    deviations="Finite second derivative at large x (torch: NaN at 800).",
)
record(
    "gelu", fn=gelu, public=(_NN + "gelu",), formula_ops=("gelu",),
    seed=("gelu_double_backward", "gelu_backward (derivatives.yaml)"),
    samples=lambda rng, dt: [Sample((2 * normal(rng, dt, 3, 4),)), Sample((2 * normal(rng, dt, 5),), {"approximate": False})],
    torch_fn=lambda t, x, approximate=True: t.nn.functional.gelu(x, approximate="tanh" if approximate else "none"),
    torch_name=_F + "gelu", low_precision=("float32", "bfloat16"),
)
record(
    "elu", fn=elu, public=(_NN + "elu",), formula_ops=("elu",), seed=("elu_double_backward", "elu_backward"),
    samples=lambda rng, dt: [Sample((2 * normal(rng, dt, 3, 4) + 0.01,)), Sample((2 * normal(rng, dt, 5),), {"alpha": 1.5})],
    torch_fn=lambda t, x, alpha=1.0: t.nn.functional.elu(x, alpha), torch_name=_F + "elu",
    singular=(SingularPoint("kink", (f64(0.0),), (f64(1.5),), {"alpha": 1.5}),),
    deviations="Second derivative 0 at x = 0 (torch's; JAX gives alpha).",
)
record(
    "selu", fn=selu, public=(_NN + "selu",), formula_ops=("elu",), seed=("elu_double_backward", "elu_backward"),
    samples=_samples(), torch_fn=lambda t, x: t.nn.functional.selu(x), torch_name=_F + "selu",
    singular=(SingularPoint("kink", (f64(0.0),), (f64(_SELU_ALPHA * _SELU_SCALE),)),),
)
record(
    "celu", fn=celu, public=(_NN + "celu",), formula_ops=("elu",), seed=("elu_double_backward", "elu_backward"),
    samples=lambda rng, dt: [Sample((2 * normal(rng, dt, 3, 4),), {"alpha": 2.0})],
    torch_fn=lambda t, x, alpha=1.0: t.nn.functional.celu(x, alpha), torch_name=_F + "celu",
    singular=(SingularPoint("kink", (f64(0.0),), (f64(1.0),), {"alpha": 2.0}),),
)
record(
    "softplus", fn=softplus, public=(_NN + "softplus",), formula_ops=("softplus",),
    seed=("softplus_double_backward", "softplus_backward"),
    samples=lambda rng, dt: [Sample((3 * normal(rng, dt, 3, 4),)), Sample((3 * normal(rng, dt, 5),), {"beta": 2, "threshold": 5})],
    torch_fn=lambda t, x, beta=1, threshold=20: t.nn.functional.softplus(x, beta, threshold),
    torch_name=_F + "softplus",
    singular=(SingularPoint("at the threshold", (f64(10.0),), (f64(1 / (1 + math.exp(-20))),), {"beta": 2}),),
)
record(
    "log_sigmoid", fn=log_sigmoid, public=(_NN + "log_sigmoid",), formula_ops=("log_sigmoid",),
    seed=("log_sigmoid_double_backward",), samples=_samples(3.0), torch_fn=lambda t, x: t.nn.functional.logsigmoid(x),
    torch_name=_F + "logsigmoid", singular=(SingularPoint("saturation", (f64(-800.0, 800.0),), (f64(1, 0),)),),
)


def _axis_samples(rng, dt):
    return [Sample((normal(rng, dt, 3, 4),)), Sample((normal(rng, dt, 3, 4),), {"axis": 0})]


record(
    "softmax", fn=softmax, public=(_NN + "softmax",), formula_ops=("softmax",),
    seed=("softmax_double_backward", "_softmax_backward_data"), samples=_axis_samples,
    torch_fn=lambda t, x, axis=-1: t.softmax(x, axis), torch_name=_F + "softmax", low_precision=("float32", "bfloat16"),
    singular=(SingularPoint("-inf logit", (f64(-np.inf, 0.0, 1.0),), (f64(0, 0, 0),)),),
)
record(
    "log_softmax", fn=log_softmax, public=(_NN + "log_softmax",), formula_ops=("log_softmax",),
    seed=("_log_softmax_backward_data",), samples=_axis_samples, torch_fn=lambda t, x, axis=-1: t.log_softmax(x, axis),
    torch_name=_F + "log_softmax",
    singular=(SingularPoint("-inf logit", (f64(-np.inf, 0.0, 1.0),),
                            (f64(1, 1 - 3 / (1 + math.e), 1 - 3 * math.e / (1 + math.e)),)),),
)
record(
    "glu", fn=glu, public=(_NN + "glu",), formula_ops=("glu",),
    seed=("glu_double_backward", "glu_double_backward_grad_output"),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 3, 4),)), Sample((normal(rng, dt, 4, 3),), {"axis": 0})],
    torch_fn=lambda t, x, axis=-1: t.nn.functional.glu(x, axis), torch_name=_F + "glu",
)


def _dropout_record_fn(x, key_data, p):
    return dropout(x, p, key=jax.random.wrap_key_data(jnp.asarray(key_data)))


def _dropout_torch(t, x, key_data, p):
    mask = np.asarray(jax.random.bernoulli(jax.random.wrap_key_data(jnp.asarray(key_data)), 1 - p, tuple(x.shape)))
    return x * t.tensor(mask) / (1 - p)


record(
    "dropout", fn=_dropout_record_fn, public=(_NN + "dropout",), formula_ops=("dropout",),
    seed=("infinitely_differentiable_native_dropout_backward", "native_dropout_double_backward"),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 4, 5), np.asarray(jax.random.key_data(jax.random.key(int(rng.integers(1 << 30))))), 0.3))],
    torch_fn=_dropout_torch, torch_name="x * mask / (1 - p) (torch's dropout with the same mask)",
    low_precision=("float32", "bfloat16"),
)
