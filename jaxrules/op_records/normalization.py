"""Registry records of ``jaxrules.ops.normalization``, in that module's order: samples, singular points,
torch references. Only ``registry.load_records()`` imports them (``import jaxrules`` and its
namespaces never do)."""

from __future__ import annotations

import jax
import numpy as np

from jaxrules.ops._sampling import normal
from jaxrules.ops.normalization import batch_norm, group_norm, instance_norm, layer_norm, rms_norm
from jaxrules.registry import Sample, SingularPoint, record

_NN = "jaxrules.nn."
_SEED_SHARED = ("_norm_jvp", "_invstd_jvp", "_affine_jvp")
_FORMULAS = ("affine_normalize", "normalize_backward")


def _kernel_mode(x):
    """The fused kernels compiled on a GPU (float32 and narrower), interpreted elsewhere."""

    return "pallas" if jax.default_backend() == "gpu" and x.dtype != np.float64 else "pallas_interpret"


def _fused_layer_norm_fn(x, weight, bias):
    return layer_norm(x, x.shape[-1:], weight, bias, impl=_kernel_mode(x))  # (0-d x: () refused, as torch)


def _fused_rms_norm_fn(x, weight, eps=None):
    return rms_norm(x, x.shape[-1:], weight, eps, impl=_kernel_mode(x))  # (0-d x: () refused, as torch)


_KERNEL_DOUBLE = "JAX's derivative of the jnp form of the kernel's backward (the kernel is not differentiated)"
_RMS_SEEDS = ("rms_norm_jvp", "rms_norm_rstd_jvp", "_fused_rms_norm_backward",
              "infinitely_differentiable_native_rms_norm_backward")
record(
    "layer_norm[pallas]", fn=_fused_layer_norm_fn, public=(_NN + "layer_norm(impl='pallas')",),
    formula_ops=("layer_norm_rows",), seed=("layer_norm_jvp", "native_layer_norm_backward", "layer_norm_double_backward"),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 8, 128), normal(rng, dt, 128) + 1, normal(rng, dt, 128))),
                             Sample((normal(rng, dt, 5, 24), normal(rng, dt, 24) + 1, normal(rng, dt, 24)))],
    torch_fn=lambda torch, x, w, b: torch.nn.functional.layer_norm(x, x.shape[-1:], w, b),
    torch_name="torch.nn.functional.layer_norm", low_precision=("float32", "bfloat16"),
    double_backward=_KERNEL_DOUBLE, batching="Pallas' Triton backend; primal: vmap folded into the rows (one launch) "
    "when weight and bias are shared; formulas: the kernels under jax.vmap",
    kernel_backed=True,
)


record(
    "layer_norm", fn=layer_norm, public=(_NN + "layer_norm",), formula_ops=_FORMULAS,
    seed=("layer_norm_jvp", "layer_norm_double_backward", *_SEED_SHARED),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 4, 3, 5), (5,), normal(rng, dt, 5) + 1, normal(rng, dt, 5))),
        Sample((normal(rng, dt, 2, 3, 4), (3, 4))),
        Sample((normal(rng, dt, 6), 6, normal(rng, dt, 6)), {"eps": 1e-3}),
    ],
    torch_fn=lambda torch, x, shape, w=None, b=None, eps=1e-5: torch.nn.functional.layer_norm(
        x, (shape,) if isinstance(shape, int) else shape, w, b, eps),
    torch_name="torch.nn.functional.layer_norm", low_precision=("float32", "bfloat16"),
    batching="own rule: B0 folded into the leading axis (native_layer_norm_batch_rule); batched weights after",
    double_backward="normalize_backward op: seed layer_norm_double_backward (weight terms by the product rule)",
    singular=(SingularPoint("constant rows", (np.full((2, 3), 4.0), (3,)), (np.zeros((2, 3)),)),),
)
record(
    "group_norm", fn=group_norm, public=(_NN + "group_norm",), formula_ops=_FORMULAS,
    seed=("group_norm_jvp", "infinitely_differentiable_native_group_norm_backward", *_SEED_SHARED),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 2, 6, 3, 2), 3, normal(rng, dt, 6) + 1, normal(rng, dt, 6))),
        Sample((normal(rng, dt, 3, 4, 5), 2)),
        Sample((normal(rng, dt, 2, 4), 4, normal(rng, dt, 4) + 1)),
    ],
    torch_fn=lambda torch, x, g, w=None, b=None, eps=1e-5: torch.nn.functional.group_norm(x, g, w, b, eps),
    torch_name="torch.nn.functional.group_norm", low_precision=("float32", "bfloat16"),
    batching="own rule: B0 folded into N (native_group_norm_plumbing); batched weights after",
    double_backward="normalize_backward op: the seed's group-norm double backward "
    "(infinitely_differentiable_native_group_norm_backward's math, weight by the product rule)",
    singular=(SingularPoint("constant groups", (np.full((2, 4, 3), 1.5), 2), (np.zeros((2, 4, 3)),)),),
)


def _batch_norm_train(x, weight=None, bias=None, eps=1e-5):
    return batch_norm(x, None, None, weight, bias, training=True, eps=eps)[0]


record(
    "batch_norm", fn=_batch_norm_train, public=(_NN + "batch_norm",), formula_ops=_FORMULAS,
    seed=("batch_norm_jvp", "batchnorm_double_backward", *_SEED_SHARED),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 4, 3, 5), normal(rng, dt, 3) + 1, normal(rng, dt, 3))),
        Sample((normal(rng, dt, 3, 2, 2, 3),)),
        Sample((normal(rng, dt, 5, 4), normal(rng, dt, 4) + 1), {"eps": 1e-3}),
    ],
    torch_fn=lambda torch, x, w=None, b=None, eps=1e-5: torch.nn.functional.batch_norm(x, None, None, w, b, training=True, eps=eps),
    torch_name="torch.nn.functional.batch_norm (training)", low_precision=("float32", "bfloat16"),
    batching="own rule: B0 folded into the channels, weights tiled (batch_norm_batch_rule); batched weights after; "
    "batched input with unbatched running stats allowed (new stats come back batched)",
    double_backward="normalize_backward op: seed batchnorm_double_backward (weight terms by the product rule)",
    singular=(SingularPoint("constant channels", (np.full((3, 2, 2), -1.0),), (np.zeros((3, 2, 2)),)),),
)


def _instance_norm_train(x, weight=None, bias=None, eps=1e-5):
    return instance_norm(x, None, None, weight, bias, eps=eps)[0]


record(
    "instance_norm", fn=_instance_norm_train, public=(_NN + "instance_norm",), formula_ops=_FORMULAS,
    seed=("batch_norm_jvp", "batchnorm_double_backward", *_SEED_SHARED),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 4, 3, 5), normal(rng, dt, 3) + 1, normal(rng, dt, 3))),
        Sample((normal(rng, dt, 2, 3, 2, 3),)),
        Sample((normal(rng, dt, 3, 2, 4), normal(rng, dt, 2) + 1), {"eps": 1e-3}),
    ],
    torch_fn=lambda torch, x, w=None, b=None, eps=1e-5: torch.nn.functional.instance_norm(x, None, None, w, b, eps=eps),
    torch_name="torch.nn.functional.instance_norm", low_precision=("float32", "bfloat16"),
    batching="affine_normalize's rule: B0 folded into N (statistics per sample and channel); batched weights "
    "after; batched input with unbatched running stats gives batched new stats",
    double_backward="normalize_backward op: seed batchnorm_double_backward (weight terms by the product rule)",
    deviations="zero-size input with N = 0 and running statistics: returned unchanged (torch: NaN, the mean of "
    "no per-sample updates)",
    singular=(SingularPoint("constant maps", (np.full((2, 3, 4), 1.5), np.ones(3), np.zeros(3)),
                            (np.zeros((2, 3, 4)), np.zeros(3), np.full(3, 8.0))),),
)
record(
    "rms_norm[pallas]", fn=_fused_rms_norm_fn, public=(_NN + "rms_norm(impl='pallas')",),
    formula_ops=("rms_norm_rows",), seed=_RMS_SEEDS,
    samples=lambda rng, dt: [Sample((normal(rng, dt, 5, 24), normal(rng, dt, 24) + 1))],
    torch_fn=lambda torch, x, w, eps=None: torch.nn.functional.rms_norm(x, x.shape[-1:], w, eps),
    torch_name="torch.nn.functional.rms_norm", low_precision=("float32", "bfloat16"),
    double_backward=_KERNEL_DOUBLE, batching="Pallas' Triton backend; primal: vmap folded into the rows (one launch) "
    "when the weight is shared; formulas: the kernels under jax.vmap",
    # rstd = rsqrt(0 + eps) = 2, x_hat = 0: dx = rstd w, dw = 0 (as the XLA path's record).
    singular=(SingularPoint("all-zero rows, eps=0.25", (np.zeros((2, 3)), np.arange(1.0, 4.0)),
                            (np.tile(np.arange(2.0, 8.0, 2.0), (2, 1)), np.zeros(3)), {"eps": 0.25},
                            jvp=np.tile(np.arange(2.0, 8.0, 2.0), (2, 1))),),
    kernel_backed=True,
)
record(
    "rms_norm", fn=rms_norm, public=(_NN + "rms_norm",), formula_ops=("rms_norm", "rms_norm_backward"), seed=_RMS_SEEDS,
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 4, 3, 5), (5,), normal(rng, dt, 5) + 1)),
        Sample((normal(rng, dt, 2, 3, 4), (3, 4))),
        Sample((normal(rng, dt, 6), 6, normal(rng, dt, 6)), {"eps": 1e-3}),
    ],
    torch_fn=lambda torch, x, shape, w=None, eps=None: torch.nn.functional.rms_norm(
        x, (shape,) if isinstance(shape, int) else shape, w, eps),
    torch_name="torch.nn.functional.rms_norm", low_precision=("float32", "bfloat16"),
    batching="vmapped primal and formulas (reductions over trailing axes: no fold needed)",
    double_backward="rms_norm_backward op: its own JVP/VJP formulas (weight terms by the product rule)",
    singular=(
        # rstd = rsqrt(0 + eps) = 2, x_hat = 0: dx = rstd w, dw = sum g x_hat = 0; dy(1, 1) = rstd w.
        SingularPoint("all-zero rows, eps=0.25", (np.zeros((2, 3)), 3, np.array([1.0, 2.0, 3.0])),
                      (np.tile([2.0, 4.0, 6.0], (2, 1)), np.zeros(3)), {"eps": 0.25},
                      jvp=np.tile([2.0, 4.0, 6.0], (2, 1))),
        # Default eps of float64: 2^-52, rstd = 2^26.
        SingularPoint("all-zero row, default eps", (np.zeros((1, 4)), 4), (np.full((1, 4), 2.0 ** 26),)),
    ),
)
