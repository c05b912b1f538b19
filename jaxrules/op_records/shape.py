"""Registry records of ``jaxrules.ops.shape``, in that module's order: samples, singular points,
torch references. Only ``registry.load_records()`` imports them (``import jaxrules`` and its
namespaces never do)."""

from __future__ import annotations

import numpy as np

from jaxrules.ops._sampling import normal
from jaxrules.ops.shape import (
    array_split,
    block_diag,
    concatenate,
    masked_fill,
    pad,
    repeat,
    split,
    stack,
    take,
    take_along_axis,
    tile,
    unstack,
)
from jaxrules.registry import Sample, record

_C = ("float64", "complex128")

record(
    "concatenate", fn=lambda *xs, axis=0: concatenate(xs, axis), public=("jaxrules.numpy.concatenate",),
    formula_ops=("concatenate",), seed=("cat_tensors_backward",),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 2, 3), normal(rng, dt, 1, 3))),
                             Sample((normal(rng, dt, 2, 3), normal(rng, dt, 2, 2), normal(rng, dt, 2, 1)), {"axis": 1})],
    torch_fn=lambda torch, *xs, axis=0: torch.cat(xs, axis), torch_name="torch.cat", dtypes=_C,
)
record(
    "stack", fn=lambda *xs, axis=0: stack(xs, axis), public=("jaxrules.numpy.stack",), formula_ops=("stack",),
    seed=("stack_tensors_backward",),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 2, 3), normal(rng, dt, 2, 3))),
                             Sample((normal(rng, dt, 3), normal(rng, dt, 3), normal(rng, dt, 3)), {"axis": 1})],
    torch_fn=lambda torch, *xs, axis=0: torch.stack(xs, axis), torch_name="torch.stack", dtypes=_C,
)
record(
    "take_along_axis", fn=take_along_axis, public=("jaxrules.numpy.take_along_axis",), formula_ops=("take_along_axis",),
    seed=("gather_backward",),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 3, 4), np.array([[0, 0, 3], [1, 2, 1], [3, 3, 3]]), 1)),
                             Sample((normal(rng, dt, 3, 2), np.array([[2, 0], [2, 2]]), 0))],
    torch_fn=lambda torch, x, indices, axis: torch.gather(x, axis, indices), torch_name="torch.gather", dtypes=_C,
)
record(
    "masked_fill", fn=masked_fill, public=("jaxrules.numpy.masked_fill",),
    formula_ops=("masked_fill", "masked_fill_array"), seed=("masked_fill (derivatives.yaml)", "masked_fill_backward"),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 3, 4), np.array([True, False, False, True]), 0.5)),
                             Sample((normal(rng, dt, 2, 3), np.array([[True, False, True], [False, False, True]]), -2.0)),
                             Sample((normal(rng, dt, 3, 4), np.array([[True], [False], [True]]), normal(rng, dt)))],
    torch_fn=lambda torch, x, mask, value: torch.masked_fill(x, torch.as_tensor(mask), value),
    torch_name="torch.masked_fill", dtypes=_C, low_precision=("float32", "bfloat16"),
)
record(
    "pad", fn=pad, public=("jaxrules.numpy.pad",), formula_ops=("pad",), seed=("constant_pad_nd_backward",),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 3, 4), ((1, 2), (0, 3)))),
                             Sample((normal(rng, dt, 2, 3), 1), {"constant_values": 1.5})],
    torch_fn=lambda torch, x, pad_width, constant_values=0: torch.nn.functional.pad(
        x, tuple(v for lo_hi in reversed(np.broadcast_to(np.asarray(pad_width), (x.ndim, 2)).tolist()) for v in lo_hi),
        value=constant_values,
    ),
    torch_name="torch.nn.functional.pad", dtypes=_C,
)
record(
    "split", fn=lambda x, sections, axis=0: split(x, sections, axis), public=("jaxrules.numpy.split",),
    formula_ops=("split",), seed=("split_backward",),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 6, 2), 3)), Sample((normal(rng, dt, 2, 5), [1, 3], 1))],
    torch_fn=lambda torch, x, sections, axis=0: torch.tensor_split(x, sections, axis), torch_name="torch.tensor_split",
    dtypes=_C,
)
record(
    "array_split", fn=lambda x, sections, axis=0: array_split(x, sections, axis),
    public=("jaxrules.numpy.array_split",), formula_ops=("split",), seed=("split_backward",),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 7, 2), 3)), Sample((normal(rng, dt, 2, 4), [-1], 1))],
    torch_fn=lambda torch, x, sections, axis=0: torch.tensor_split(x, sections, axis), torch_name="torch.tensor_split",
    dtypes=_C,
)
record(
    "unstack", fn=unstack, public=("jaxrules.numpy.unstack",), formula_ops=("unstack",), seed=("unbind_backward",),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 3, 2),)), Sample((normal(rng, dt, 2, 4),), {"axis": 1})],
    torch_fn=lambda torch, x, axis=0: torch.unbind(x, axis), torch_name="torch.unbind", dtypes=_C,
)
record(
    "block_diag", fn=block_diag, public=("jaxrules.scipy.linalg.block_diag",), formula_ops=("block_diag",),
    seed=("block_diag_backward",),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 2, 3), normal(rng, dt, 1, 1), normal(rng, dt, 3), normal(rng, dt, 2, 2)))],
    torch_fn=lambda torch, *xs: torch.block_diag(*xs), torch_name="torch.block_diag", dtypes=_C,
    # Zero-size blocks; an empty 1-d block (a 1 x 0 one) only last: torch 2.13's block_diag_backward
    # then takes the later blocks' gradients one row too high (tests/test_empty.py pins ours, JAX's).
    empty_samples=lambda rng, dt: [
        Sample((normal(rng, dt, 2, 0), normal(rng, dt, 1, 1), normal(rng, dt, 0, 3), normal(rng, dt, 2, 2))),
        Sample((normal(rng, dt, 0, 0),)), Sample((normal(rng, dt, 2, 2), normal(rng, dt, 0))),
    ],
)
record(
    "tile", fn=tile, public=("jaxrules.numpy.tile",), formula_ops=("tile",), seed=("repeat_backward",),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 2, 3), (2, 1, 3))), Sample((normal(rng, dt, 3), 2))],
    torch_fn=lambda torch, x, reps: x.repeat(*((1,) * (x.ndim - len(np.atleast_1d(reps))) + tuple(np.atleast_1d(reps)))),
    torch_name="torch.Tensor.repeat", dtypes=_C,
)
record(
    "repeat", fn=repeat, public=("jaxrules.numpy.repeat",), formula_ops=("repeat",),
    seed=("repeat_interleave (derivatives.yaml)",),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 3, 2), 2), {"axis": 0}),
                             Sample((normal(rng, dt, 2, 3), np.array([0, 2, 1])), {"axis": 1})],
    torch_fn=lambda torch, x, repeats, axis=None: torch.repeat_interleave(x, torch.as_tensor(repeats), axis),
    torch_name="torch.repeat_interleave", dtypes=_C,
)
def _torch_take(torch, x, indices, axis=None):
    """torch's take (``axis`` None) or index_select with jax.numpy.take's values (the convention for
    a jax.numpy name): negative indices count from the end, out-of-range ones give NaN rows
    (``mode="fill"``; torch raises there)."""
    if axis is None:
        return torch.take(x, torch.as_tensor(indices))
    axis = axis % x.ndim
    n, indices = x.shape[axis], np.asarray(indices)
    valid = (indices >= -n) & (indices < n)
    out = torch.index_select(x, axis, torch.as_tensor(np.where(valid, indices % max(n, 1), 0)).reshape(-1))
    out = out.reshape(x.shape[:axis] + indices.shape + x.shape[axis + 1:])
    mask = torch.as_tensor(~valid).reshape((1,) * axis + indices.shape + (1,) * (x.ndim - axis - 1))
    return torch.where(mask, torch.full((), float("nan"), dtype=out.dtype), out)


record(
    "take", fn=take, public=("jaxrules.numpy.take",), formula_ops=("take",),
    seed=("index_select_backward", "take_backward"),
    samples=lambda rng, dt: [Sample((normal(rng, dt, 4, 3), np.array([3, 0, 3, -1]), 0)),
                             Sample((normal(rng, dt, 2, 5), np.array([[1, 1], [4, 0]]), 1)),
                             Sample((normal(rng, dt, 3, 2), np.array([5, 0, 5])))],
    torch_fn=_torch_take, torch_name="torch.index_select / torch.take", dtypes=_C,
)
