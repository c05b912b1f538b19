"""Registry records of ``jaxrules.ops.attention``, in that module's order: samples, singular points,
torch references. Only ``registry.load_records()`` imports them (``import jaxrules`` and its
namespaces never do)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxrules.ops._sampling import f64, normal
from jaxrules.ops.attention import CUDNN_DTYPES, bilinear, scaled_dot_product_attention
from jaxrules.registry import Sample, SingularPoint, record


def _torch_attention(torch, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                     enable_gqa=False):
    return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal,
                                                            scale=scale, enable_gqa=enable_gqa)


def _attention_samples(rng, dt):
    keep = np.array([[True, False, True, True], [False, True, True, False], [True, True, False, True]])
    return [
        Sample((normal(rng, dt, 2, 3, 4), normal(rng, dt, 2, 5, 4), normal(rng, dt, 2, 5, 3))),
        Sample((normal(rng, dt, 1, 2, 3, 2), normal(rng, dt, 2, 1, 4, 2), normal(rng, dt, 2, 1, 4, 3), keep)),
        Sample((normal(rng, dt, 2, 3, 2), normal(rng, dt, 4, 2), normal(rng, dt, 4, 2), normal(rng, dt, 1, 4)),
               {"scale": 0.7}),  # float mask (differentiable), broadcast batch
        Sample((normal(rng, dt, 4, 2), normal(rng, dt, 3, 2), normal(rng, dt, 3, 2)), {"is_causal": True}),  # L > S
        Sample((normal(rng, dt, 2, 3), normal(rng, dt, 4, 3), normal(rng, dt, 4, 1)), {"is_causal": True}),  # L < S
        Sample((normal(rng, dt, 1, 4, 2, 2), normal(rng, dt, 1, 2, 3, 2), normal(rng, dt, 1, 2, 3, 2),
                normal(rng, dt, 4, 1, 3)), {"enable_gqa": True}),
        Sample((normal(rng, dt, 0, 2, 2), normal(rng, dt, 0, 3, 2), normal(rng, dt, 0, 3, 2))),  # empty batch
    ]


def _attention_empty_samples(rng, dt):
    """Zero-size batch, queries, keys (a softmax over no keys) and query/key features (every score
    0: the values' mean, whose gradient is not empty)."""
    return [
        Sample((normal(rng, dt, 0, 3, 4), normal(rng, dt, 0, 5, 4), normal(rng, dt, 0, 5, 3))),
        Sample((normal(rng, dt, 2, 0, 4), normal(rng, dt, 2, 5, 4), normal(rng, dt, 2, 5, 3))),
        Sample((normal(rng, dt, 2, 3, 4), normal(rng, dt, 2, 0, 4), normal(rng, dt, 2, 0, 3))),
        Sample((normal(rng, dt, 2, 3, 0), normal(rng, dt, 2, 5, 0), normal(rng, dt, 2, 5, 3)), {"scale": 0.5}),
    ]


_ALL_MASKED = np.zeros((2, 3), bool)
record(
    "scaled_dot_product_attention", fn=scaled_dot_product_attention,
    public=("jaxrules.nn.scaled_dot_product_attention",), formula_ops=("scaled_dot_product_attention",),
    seed=("_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_efficient_attention_backward"),
    samples=_attention_samples, torch_fn=_torch_attention,
    torch_name="torch.nn.functional.scaled_dot_product_attention", low_precision=("float32", "bfloat16"),
    tolerance={"bfloat16": 0.1}, empty_samples=_attention_empty_samples,
    singular=(
        SingularPoint("every key masked: output 0, zero gradients (torch 2.13 CPU: the same)",
                      (f64(1.0, 2.0).reshape(2, 1), f64(0.5, -1.0, 2.0).reshape(3, 1), f64(3.0, 1.0, -2.0).reshape(3, 1),
                       _ALL_MASKED), (np.zeros((2, 1)), np.zeros((3, 1)), np.zeros((3, 1)))),
        SingularPoint("a row masked by -inf in a float mask",
                      (f64(1.0, 2.0).reshape(2, 1), f64(0.5, -1.0, 2.0).reshape(3, 1), f64(3.0, 1.0, -2.0).reshape(3, 1),
                       np.array([[0.0, 1.0, -np.inf], [-np.inf, -np.inf, -np.inf]])), (None, None, None, None)),
    ),
    deviations="Convention pinned: a row with every key masked gives output 0 and zero gradients (torch 2.13's CPU "
    "flash and math backends agree). A row whose logits are all -inf through infinite query or key entries (no "
    "mask removes its keys) is NaN: its softmax is undefined (the limit depends on how the logits go to -inf); "
    "torch's _safe_softmax gives 0 there, which costs a pass over the logits (pinned in tests/test_attention.py). "
    "Dropout draws its mask from a keyword-only dropout_key. With no queries or no value features the output has "
    "the broadcast batch shape, as for any other size (torch 2.13: the query's batch shape).",
)


def _kernel_attention(query, key, value, is_causal=False):
    """The fused kernels: compiled on a GPU (float32 and narrower), interpreted elsewhere."""
    compiled = jax.default_backend() == "gpu" and query.dtype != np.float64
    return scaled_dot_product_attention(query, key, value, is_causal=is_causal,
                                        impl="pallas" if compiled else "pallas_interpret")


def _kernel_attention_samples(rng, dt):
    # (B, H, L, E) with L = 21: two 16-row blocks, the second partial; E = 16, the kernels' least
    args = tuple(normal(rng, dt, 2, 2, 21, 16) for _ in range(3))
    return [Sample(args), Sample(args, {"is_causal": True})]


record(
    "scaled_dot_product_attention[pallas]", fn=_kernel_attention,
    public=("jaxrules.nn.scaled_dot_product_attention(impl='pallas')",), formula_ops=("nested_attention_fused",),
    seed=("(flash attention's forward and backward kernels)",), samples=_kernel_attention_samples,
    torch_fn=_torch_attention, torch_name="torch.nn.functional.scaled_dot_product_attention",
    # the kernels' float32 dots run in TF32 on a GPU (10-bit mantissa): errors of 4.8e-4 were
    # seen on an H100, above the default 2e-4; the nested kernel records allow 2e-3 likewise
    low_precision=("float32", "bfloat16"), tolerance={"bfloat16": 0.1, "float32": 2e-3},
    no_empty="the kernels need L >= 1 and E >= 16 (the XLA record checks zero sizes)",
    batching="vmapped formulas (the kernels under jax.vmap)",
    double_backward="JAX's derivative of the XLA formula attention_vjp (the kernels are not differentiated)",
    kernel_backed=True,
)


def _cudnn_record_attention(query, key, value, is_causal=False):
    """cuDNN in float16/bfloat16 (the low-precision check, against the float64 result); the XLA
    formulas in float64, which cuDNN does not run."""
    impl = "cudnn" if jnp.dtype(query.dtype).name in CUDNN_DTYPES else "xla"
    return scaled_dot_product_attention(query, key, value, is_causal=is_causal, impl=impl)


def _cudnn_samples(rng, dt):
    # (B, H, L, E): lengths that are not multiples of cuDNN's tiles (even: JAX's cuDNN attention
    # refuses odd ones, which run the XLA formulas); head dims 16 and 64; a 3-d input (one head)
    return [Sample(tuple(normal(rng, dt, 2, 2, 22, 16) for _ in range(3))),
            Sample(tuple(normal(rng, dt, 3, 10, 8) for _ in range(3))),
            Sample(tuple(normal(rng, dt, 1, 3, 40, 64) for _ in range(3)), {"is_causal": True})]


# The fields of a cuDNN record (dense here, ragged in jaxrules/op_records/nested.py): cuDNN checked
# in half precision against the float64 formulas, on a GPU only.
CUDNN_RECORD = dict(
    seed=("(cuDNN's fused flash attention, forward and backward)",), low_precision=("bfloat16", "float16"),
    tolerance={"bfloat16": 0.1},
    needs_gpu="cuDNN's flash attention needs a GPU (the XLA record checks the formulas everywhere)",
    double_backward="JAX's derivative of the XLA formula attention_vjp (cuDNN is not differentiated)",
)

record(
    "scaled_dot_product_attention[cudnn]", fn=_cudnn_record_attention,
    public=("jaxrules.nn.scaled_dot_product_attention(impl='cudnn')",),
    formula_ops=("scaled_dot_product_attention", "scaled_dot_product_attention_cudnn"), samples=_cudnn_samples,
    torch_fn=_torch_attention, torch_name="torch.nn.functional.scaled_dot_product_attention",
    no_empty="cuDNN needs L >= 1 (zero sizes run the XLA formulas: the XLA record checks them)",
    batching="JAX's batching of jax.nn.dot_product_attention (the batch axes flattened into cuDNN's)",
    **CUDNN_RECORD,
)


def _torch_bilinear(torch, input1, input2, weight, bias=None):
    return torch.nn.functional.bilinear(input1, input2, weight, bias)


record(
    "bilinear", fn=bilinear, public=("jaxrules.nn.bilinear",), formula_ops=("bilinear",), seed=("_trilinear_backward",),
    samples=lambda rng, dt: [
        Sample((normal(rng, dt, 3, 2), normal(rng, dt, 3, 4), normal(rng, dt, 5, 2, 4), normal(rng, dt, 5))),
        Sample((normal(rng, dt, 2, 2, 3), normal(rng, dt, 2, 2, 2), normal(rng, dt, 2, 3, 2))),
        # zero-size: torch takes an empty batch or O = 0, whose output is empty (no formula runs,
        # tests/test_attention.py), and rejects H1 = 0
    ],
    torch_fn=_torch_bilinear, torch_name="torch.nn.functional.bilinear",
    deviations="One infinite entry of an input: the other input's gradient is the exact +-inf ((g W) contracted "
    "first); torch's _trilinear gives NaN there. Pinned in tests/test_attention.py.",
)
