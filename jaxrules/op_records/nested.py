"""Registry records of the NestedTensor ops (``jaxrules.nested``).

Each record's function takes the packed ``values`` (and dense operands) plus the integer
``offsets`` and returns the result's packed values (or the dense result). Its reference,
``torch_fn``, is the same computation done per component on dense torch tensors (split by the
lengths, the dense op on each, concatenated), so the harness checks values, gradients and JVPs
against per-component dense math.
"""

from __future__ import annotations

import jax
import numpy as np

from jaxrules import nested as N
from jaxrules.op_records.attention import CUDNN_RECORD
from jaxrules.ops._sampling import normal
from jaxrules.registry import Sample, SingularPoint, record

_LENGTHS = ((2, 0, 3, 1), (1, 4))


def _offsets(lengths) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _rows(lengths) -> int:
    return int(sum(lengths))


def _per_component(torch, offsets, fn, *packed, cat=True):
    """``fn`` on each component of the packed torch tensors, results concatenated (or stacked
    when ``cat`` is False)."""
    lengths = torch.diff(offsets).tolist()
    pieces = [fn(*parts) for parts in zip(*(torch.split(x, lengths) for x in packed))]
    return torch.cat(pieces) if cat else torch.stack(pieces)


def _nt(values, offsets):
    return N.from_jagged(values, offsets)


def _empty_components(samples, no_batch=True):
    """The record's zero-size samples, from its samples: every component empty (offsets all 0,
    the packed arguments, those with ``offsets[-1]`` rows, with none) and, with ``no_batch``, no
    component at all (offsets ``[0]``); dense operands unchanged. (Cutting axes as
    ``derive_empty_samples`` does would cut the offsets too.)"""

    def derive(rng, dt):
        out = []
        for sample in samples(rng, dt):
            where = [i for i, a in enumerate(sample.args)
                     if isinstance(a, np.ndarray) and a.ndim == 1 and a.dtype == np.int64 and a.size and a[0] == 0]
            if not where:
                continue
            offsets = sample.args[where[-1]]
            total = int(offsets[-1])
            for empty in (np.zeros_like(offsets), np.zeros(1, np.int64))[:2 if no_batch else 1]:
                args = [empty if i == where[-1] else
                        a[:0] if isinstance(a, np.ndarray) and a.ndim and a.shape[0] == total and i < where[-1] else a
                        for i, a in enumerate(sample.args)]
                out.append(Sample(tuple(args), sample.kwargs))
        return out

    return derive


def _with_empty_components(samples):
    """A record's ``samples`` and its ``empty_samples``, those samples with their components emptied
    (``_empty_components``): the keywords of most nested records."""
    return {"samples": samples, "empty_samples": _empty_components(samples)}


def _unary_samples(inner=(3,), scale=2.0):
    return lambda rng, dt: [
        Sample((scale * normal(rng, dt, _rows(lengths), *inner), _offsets(lengths))) for lengths in _LENGTHS
    ]


record(
    "nested.gelu", fn=lambda values, offsets: N.gelu(_nt(values, offsets)).values, public=("jaxrules.nested.gelu",),
    formula_ops=("gelu",), seed=("gelu_backwards_nested",), **_with_empty_components(_unary_samples()),
    torch_fn=lambda t, values, offsets: _per_component(t, offsets, lambda x: t.nn.functional.gelu(x, approximate="tanh"), values),
    torch_name="per component: torch.nn.functional.gelu(approximate='tanh')",
)
record(
    "nested.relu", fn=lambda values, offsets: N.relu(_nt(values, offsets)).values, public=("jaxrules.nested.relu",),
    formula_ops=("threshold",), seed=("threshold_backwards_nested",), **_with_empty_components(_unary_samples()),
    torch_fn=lambda t, values, offsets: _per_component(t, offsets, t.relu, values),
    torch_name="per component: torch.relu",
)
record(
    "nested.silu", fn=lambda values, offsets: N.silu(_nt(values, offsets)).values, public=("jaxrules.nested.silu",),
    formula_ops=("silu",), seed=("silu_backward_nested",), **_with_empty_components(_unary_samples()),
    torch_fn=lambda t, values, offsets: _per_component(t, offsets, t.nn.functional.silu, values),
    torch_name="per component: torch.nn.functional.silu",
)


def _linear_samples(rng, dt):
    return [
        Sample((normal(rng, dt, 6, 3), normal(rng, dt, 4, 3), normal(rng, dt, 4), _offsets((2, 0, 3, 1)))),
        Sample((normal(rng, dt, 5, 2, 3), normal(rng, dt, 2, 3), None, _offsets((1, 4)))),
    ]


record(
    "nested.linear", fn=lambda values, weight, bias, offsets: N.linear(_nt(values, offsets), weight, bias).values,
    public=("jaxrules.nested.linear",), formula_ops=("linear",), seed=("nested_linear_backward",),
    **_with_empty_components(_linear_samples),
    torch_fn=lambda t, values, weight, bias, offsets: _per_component(
        t, offsets, lambda x: t.nn.functional.linear(x, weight, bias), values
    ),
    torch_name="per component: torch.nn.functional.linear",
    deviations="The bias gradient is defined (torch's nested linear backward leaves it unimplemented).",
)


def _matmul_samples(rng, dt):
    return [
        Sample((normal(rng, dt, 6, 3), normal(rng, dt, 3, 2), _offsets((2, 0, 3, 1))), {"nested_rhs": False}),
        Sample((normal(rng, dt, 5, 2, 3), normal(rng, dt, 5, 3, 4), _offsets((1, 4))), {"nested_rhs": True}),
        Sample((normal(rng, dt, 5, 2, 3), normal(rng, dt, 3, 4), _offsets((1, 4))), {"nested_rhs": False}),
    ]


def _matmul_fn(a, b, offsets, nested_rhs):
    return N.matmul(_nt(a, offsets), _nt(b, offsets) if nested_rhs else b).values


def _matmul_torch(t, a, b, offsets, nested_rhs):
    if nested_rhs:
        return _per_component(t, offsets, t.matmul, a, b)
    return _per_component(t, offsets, lambda x: t.matmul(x, b), a)


record(
    "nested.matmul", fn=_matmul_fn, public=("jaxrules.nested.matmul",), formula_ops=("matmul",),
    seed=("matmul_backward_nested",), **_with_empty_components(_matmul_samples), torch_fn=_matmul_torch,
    torch_name="per component: torch.matmul",
)


def _softmax_samples(rng, dt):
    return [
        Sample((normal(rng, dt, 6, 3), _offsets((2, 0, 3, 1))), {"axis": 1}),
        Sample((normal(rng, dt, 5, 2, 3), _offsets((1, 4))), {"axis": -1}),
        Sample((normal(rng, dt, 5, 2), _offsets((1, 4))), {"axis": 1}),
    ]


record(
    "nested.softmax", fn=lambda values, offsets, axis: N.softmax(_nt(values, offsets), axis).values,
    public=("jaxrules.nested.softmax",), formula_ops=("nested_ragged_softmax", "softmax"),
    seed=("nested_softmax_backward",), **_with_empty_components(_softmax_samples),
    torch_fn=lambda t, values, offsets, axis: _per_component(t, offsets, lambda x: t.softmax(x, axis - 1 if axis > 0 else axis), values),
    torch_name="per component: torch.softmax",
    singular=(SingularPoint(
        "-inf logit in a component", (np.array([[-np.inf], [0.0], [1.0]]), _offsets((2, 1))),
        (np.zeros((3, 1)), None), {"axis": 1},
    ),),
)


def _log_softmax_fn(values, offsets, axis):
    return N.log_softmax(_nt(values, offsets), axis).values


record(
    "nested.log_softmax", fn=_log_softmax_fn, public=("jaxrules.nested.log_softmax",),
    formula_ops=("nested_ragged_log_softmax", "log_softmax"), seed=("nested_softmax_backward",),
    **_with_empty_components(_softmax_samples),
    torch_fn=lambda t, values, offsets, axis: _per_component(
        t, offsets, lambda x: t.log_softmax(x, axis - 1 if axis > 0 else axis), values
    ),
    torch_name="per component: torch.log_softmax", low_precision=("float32", "bfloat16"),
    singular=(SingularPoint(
        "-inf logit in a component", (np.array([[-np.inf], [0.0], [1.0]]), _offsets((2, 1))),
        (np.array([[1.0], [-1.0], [0.0]]), None), {"axis": 1},
    ),),
    deviations="Over the ragged axis torch's jagged layout refuses log_softmax; the reference is per-component "
    "dense torch.log_softmax. Over an inner axis torch 2.13's jagged backward is not implemented "
    "(_log_softmax_backward_data); its forward values agree (tests/test_nested.py).",
)


def _sum_samples(rng, dt):
    return [
        Sample((normal(rng, dt, 6, 3), _offsets((2, 0, 3, 1))), {"axis": 1}),
        Sample((normal(rng, dt, 5, 2, 3), _offsets((1, 4))), {"axis": -1}),
        Sample((normal(rng, dt, 5, 2, 3), _offsets((1, 4))), {"axis": (1, 3)}),
    ]


def _reduction_fn(reduce):
    """``reduce(nested, axis)`` as the harness calls it: its values, or the dense result."""

    def fn(values, offsets, axis):
        out = reduce(_nt(values, offsets), axis)
        return out.values if isinstance(out, N.NestedTensor) else out

    return fn


def _reduction_torch(method):
    """torch's ``Tensor.<method>`` over the same (logical) axes of each component."""

    def torch_fn(t, values, offsets, axis):
        axes = axis if isinstance(axis, tuple) else (axis,)
        dims = tuple(a - 1 if a > 0 else a for a in axes)
        return _per_component(t, offsets, lambda x: getattr(x, method)(dims), values, cat=1 not in axes)

    return torch_fn


_sum_fn, _sum_torch = _reduction_fn(N.sum), _reduction_torch("sum")
record(
    "nested.sum", fn=_sum_fn, public=("jaxrules.nested.sum",), formula_ops=("nested_ragged_sum", "sum"),
    seed=("_nested_sum_backward",), **_with_empty_components(_sum_samples), torch_fn=_sum_torch,
    torch_name="per component: torch.sum",
)


def _mean_samples(rng, dt):
    # no empty component here: its mean is NaN (0/0, as torch), tested in tests/test_nested.py
    return [
        Sample((normal(rng, dt, 6, 3), _offsets((2, 1, 3))), {"axis": 1}),
        Sample((normal(rng, dt, 6, 2, 3), _offsets((2, 0, 3, 1))), {"axis": -1}),
        Sample((normal(rng, dt, 5, 2, 3), _offsets((1, 4))), {"axis": (1, 3)}),
    ]


_mean_fn, _mean_torch = _reduction_fn(N.mean), _reduction_torch("mean")


record(
    "nested.mean", fn=_mean_fn, public=("jaxrules.nested.mean",), formula_ops=("nested_ragged_mean", "mean"),
    seed=("mean_backward (per component)",), **_with_empty_components(_mean_samples), torch_fn=_mean_torch,
    torch_name="per component: torch.mean", low_precision=("float32", "bfloat16"),
    deviations="A tuple mixing the ragged axis and inner axes is the mean over those entries of each component "
    "(torch's jagged layout refuses it). torch 2.13's jagged mean over the ragged axis has no working backward "
    "(a SymInt error); the reference is per-component dense torch.mean.",
)


def _dropout_fn(values, key_data, p, offsets):
    return N.dropout(_nt(values, offsets), p, key=jax.random.wrap_key_data(jax.numpy.asarray(key_data))).values


def _dropout_torch(t, values, key_data, p, offsets):
    key = jax.random.wrap_key_data(jax.numpy.asarray(key_data))
    mask = t.tensor(np.asarray(jax.random.bernoulli(key, 1 - p, tuple(values.shape))))
    return _per_component(t, offsets, lambda x, m: x * m / (1 - p), values, mask)


def _dropout_samples(rng, dt):
    key = np.asarray(jax.random.key_data(jax.random.key(int(rng.integers(1 << 30)))))
    return [Sample((normal(rng, dt, 6, 3), key, 0.3, _offsets((2, 0, 3, 1))))]


record(
    "nested.dropout", fn=_dropout_fn, public=("jaxrules.nested.dropout",), formula_ops=("dropout",),
    seed=("infinitely_differentiable_native_dropout_backward",), **_with_empty_components(_dropout_samples),
    torch_fn=_dropout_torch, torch_name="per component: x * mask / (1 - p) (torch's dropout with the same mask)",
    low_precision=("float32", "bfloat16"),
    deviations="A dropped NaN or infinite entry gives 0, as jaxrules.nn.dropout (a select); torch's "
    "x * mask / (1 - p) gives NaN there. The gradients agree.",
)


def _contract_samples(rng, dt):
    return [
        Sample((normal(rng, dt, 6, 3), normal(rng, dt, 6, 2), _offsets((2, 0, 3, 1)))),
        Sample((normal(rng, dt, 5, 2), normal(rng, dt, 5, 4), _offsets((1, 4)))),
    ]


def _contract_fn(a, b, offsets):
    return N.matmul(_nt(a, offsets), _nt(b, offsets), transpose_a=True)


record(
    "nested.matmul_ragged", fn=_contract_fn, public=("jaxrules.nested.matmul(transpose_a=True)",),
    formula_ops=("nested_ragged_contract",), seed=("matmul_backward_nested",),
    **_with_empty_components(_contract_samples),
    torch_fn=lambda t, a, b, offsets: _per_component(t, offsets, lambda x, y: x.mT @ y, a, b, cat=False),
    torch_name="per component: a_i^T @ b_i (torch's jagged (B, D, j) @ (B, j, E))",
)


def _layer_norm_samples(rng, dt):
    return [
        Sample((normal(rng, dt, 6, 4), normal(rng, dt, 4), normal(rng, dt, 4), _offsets((2, 0, 3, 1)))),
        Sample((normal(rng, dt, 5, 2, 3), None, None, _offsets((1, 4)))),
    ]


def _layer_norm_fn(values, weight, bias, offsets):
    return N.layer_norm(_nt(values, offsets), values.shape[-1:], weight, bias).values


record(
    "nested.layer_norm", fn=_layer_norm_fn, public=("jaxrules.nested.layer_norm",), formula_ops=("affine_normalize",),
    seed=("layer_norm_backward_nested",), **_with_empty_components(_layer_norm_samples),
    torch_fn=lambda t, values, weight, bias, offsets: _per_component(
        t, offsets, lambda x: t.nn.functional.layer_norm(x, x.shape[-1:], weight, bias), values
    ),
    torch_name="per component: torch.nn.functional.layer_norm",
    deviations="weight and bias are optional (torch's strided nested layer_norm requires both).",
)


def _arith_samples(rng, dt):
    lengths = (2, 0, 3, 1)
    return [Sample((normal(rng, dt, 6, 3), normal(rng, dt, 6, 3), normal(rng, dt, 3), normal(rng, dt, 4, 1, 3),
                    _offsets(lengths)))]


def _arith_fn(a, b, row, per_component, offsets):
    x, y = _nt(a, offsets), _nt(b, offsets)
    return ((x * y - row) / (2.0 + per_component * per_component) + x).values


def _arith_torch(t, a, b, row, per_component, offsets):
    lengths = t.diff(offsets).tolist()
    expanded = t.cat([p.expand(n, -1) for p, n in zip(per_component, lengths)])
    return _per_component(t, offsets, lambda x, y, c: (x * y - row) / (2.0 + c * c) + x, a, b, expanded)


record(
    "nested.arithmetic", fn=_arith_fn,
    public=tuple(f"jaxrules.nested.NestedTensor.__{op}__" for op in ("add", "sub", "mul", "truediv", "pow")),
    formula_ops=("take",), seed=("index_select_backward (the per-component operand's gather)",), samples=_arith_samples,
    torch_fn=_arith_torch,
    torch_name="per component: * - / + with a row and a per-component (B, 1, *inner) dense operand",
    empty_samples=_empty_components(_arith_samples, no_batch=False),  # the (B, 1, *inner) operand fixes B
    deviations="Elementwise math on the packed values uses JAX's own rules for + - * / ** (exact; the seed "
    "has no nested arithmetic); the per-component dense operand's gather is jaxrules' take.",
)


# float32 matmuls on a GPU run in TF32 (10-bit mantissa): the float32 value of attention is
# off by ~5e-4 there (H100), above the default 2e-4.
_TF32 = {"float32": 2e-3}


def _attention_samples(rng, dt):
    # (B, ragged, heads, dim); the (B, ragged, dim) form is tests/test_nested.py's (CI time).
    # Causal with 4-row blocks: a sequence of 5 spans two blocks (a skipped and a masked pair).
    lengths = (3, 0, 5, 1)
    args = tuple(normal(rng, dt, _rows(lengths), 2, 4) for _ in range(3)) + (_offsets(lengths),)
    return [Sample(args), Sample(args, {"is_causal": True, "block": 4})]


def _attention_fn(q, k, v, offsets, is_causal=False, block=None):
    return N.scaled_dot_product_attention(_nt(q, offsets), _nt(k, offsets), _nt(v, offsets), is_causal=is_causal,
                                          block=block, impl="xla").values


def _fused_attention_fn(q, k, v, offsets, is_causal=False, block=None):
    """The fused kernels: compiled on a GPU (float32 and narrower), interpreted elsewhere."""
    compiled = jax.default_backend() == "gpu" and q.dtype != np.float64
    impl = "pallas" if compiled else "pallas_interpret"
    return N.scaled_dot_product_attention(_nt(q, offsets), _nt(k, offsets), _nt(v, offsets), is_causal=is_causal,
                                          block=block, impl=impl).values


def _attention_torch(t, q, k, v, offsets, is_causal=False, block=None):
    def one(qi, ki, vi):
        heads = qi.ndim == 3
        qi, ki, vi = (x if heads else x[:, None] for x in (qi, ki, vi))
        s = t.einsum("qhd,khd->hqk", qi, ki) / qi.shape[-1] ** 0.5
        if is_causal:  # torch's is_causal: top-left aligned lower triangle
            s = s.masked_fill(~t.ones(s.shape[-2:], dtype=t.bool).tril(), float("-inf"))
        out = t.einsum("hqk,khd->qhd", t.softmax(s, -1), vi)
        return out if heads else out[:, 0]

    return _per_component(t, offsets, one, q, k, v)


record(
    "nested.scaled_dot_product_attention", fn=_attention_fn, public=("jaxrules.nested.scaled_dot_product_attention",),
    formula_ops=("nested_attention",), seed=("(flash attention's backward per block pair)",),
    **_with_empty_components(_attention_samples), torch_fn=_attention_torch,
    torch_name="per component: softmax(q k^T / sqrt(d)) v", low_precision=("float32", "bfloat16"), tolerance=_TF32,
)


def _fused_samples(rng, dt):
    lengths = (19, 0, 3, 33)  # several 16-row blocks per sequence
    args = tuple(normal(rng, dt, _rows(lengths), 2, 16) for _ in range(3)) + (_offsets(lengths),)
    return [Sample(args, {"block": 16}), Sample(args, {"is_causal": True, "block": 16})]


record(
    "nested.scaled_dot_product_attention[pallas]", fn=_fused_attention_fn,
    public=("jaxrules.nested.scaled_dot_product_attention(impl='pallas')",), formula_ops=("nested_attention_fused",),
    seed=("(flash attention's forward and backward kernels)",), samples=_fused_samples, torch_fn=_attention_torch,
    torch_name="per component: softmax(q k^T / sqrt(d)) v", low_precision=("float32", "bfloat16"), tolerance=_TF32,
    batching="vmapped formulas (the kernels under jax.vmap)",
    double_backward="JAX's derivative of the XLA formula attention_vjp (the kernels are not differentiated)",
    kernel_backed=True, empty_samples=_empty_components(_fused_samples),
)


def _cudnn_attention_fn(q, k, v, offsets, is_causal=False):
    """cuDNN in float16/bfloat16 (the low-precision check, against the float64 result); the XLA
    formulas in float64, which cuDNN does not run."""
    impl = "cudnn" if np.dtype(q.dtype).name in ("float16", "bfloat16") else "xla"
    return N.scaled_dot_product_attention(_nt(q, offsets), _nt(k, offsets), _nt(v, offsets), is_causal=is_causal,
                                          impl=impl).values


def _cudnn_samples(rng, dt):
    lengths = (37, 1, 0, 64, 2)  # an empty and a one-row sequence; head dims 16 and 64, with and without heads
    return [Sample(tuple(normal(rng, dt, _rows(lengths), 2, 16) for _ in range(3)) + (_offsets(lengths),)),
            Sample(tuple(normal(rng, dt, _rows(lengths), 64) for _ in range(3)) + (_offsets(lengths),),
                   {"is_causal": True})]


record(
    "nested.scaled_dot_product_attention[cudnn]", fn=_cudnn_attention_fn,
    public=("jaxrules.nested.scaled_dot_product_attention(impl='cudnn')",),
    formula_ops=("nested_attention", "nested_attention_cudnn"), samples=_cudnn_samples,
    torch_fn=_attention_torch, torch_name="per component: softmax(q k^T / sqrt(d)) v",
    no_empty="cuDNN needs rows (no rows run the XLA formulas: the XLA record checks them)",
    batching="JAX's batching of its cuDNN attention", **CUDNN_RECORD,
)
