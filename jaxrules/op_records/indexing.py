"""Registry records of ``jaxrules.ops.indexing``, in that module's order: samples, singular points,
torch references. Only ``registry.load_records()`` imports them (``import jaxrules`` and its
namespaces never do)."""

from __future__ import annotations

import numpy as np

from jaxrules.ops._sampling import distinct, normal
from jaxrules.ops.indexing import _REDUCES, embedding, embedding_bag, index_reduce, scatter_reduce
from jaxrules.registry import Sample, SingularPoint, record


def _torch_embedding(torch, indices, weight, padding_idx=None, scale_grad_by_freq=False):
    return torch.nn.functional.embedding(indices, weight, padding_idx, scale_grad_by_freq=scale_grad_by_freq)


record(
    "embedding", fn=embedding, public=("jaxrules.nn.embedding",), formula_ops=("embedding",),
    seed=("embedding_backward", "embedding_dense_double_backward"),
    samples=lambda rng, dt: [
        Sample((np.array([[0, 2, 4], [2, 2, 1]]), normal(rng, dt, 5, 3))),
        Sample((np.array([3, 0, 3]), normal(rng, dt, 4, 2)), {"padding_idx": 1}),  # padding row unused
    ],
    torch_fn=_torch_embedding, torch_name="torch.nn.functional.embedding",
    deviations="torch's conventions (not the lookup's derivative): no gradient into padding_idx, and "
    "scale_grad_by_freq divides by the index counts; pinned against torch in tests/test_indexing.py.",
)


def _embedding_bag_entry(input, weight, per_sample_weights=None, offsets=None, **kwargs):  # noqa: A002
    """The record's entry: ``per_sample_weights`` positional, so the harness differentiates it."""
    return embedding_bag(input, weight, offsets, per_sample_weights=per_sample_weights, **kwargs)


def _torch_embedding_bag(torch, input, weight, per_sample_weights=None, offsets=None, **kwargs):  # noqa: A002
    # torch 2.13 segfaults on offsets that make no bag: none, or only the last offset
    if offsets is not None and offsets.numel() <= int(kwargs.get("include_last_offset", False)):
        raise RuntimeError("embedding_bag: offsets that make no bag (torch 2.13 crashes on them)")
    return torch.nn.functional.embedding_bag(input, weight, offsets, per_sample_weights=per_sample_weights, **kwargs)


_BAG_INPUT = np.array([1, 2, 4, 4, 0, 5, 2])
_BAG_OFFSETS = np.array([0, 2, 2, 5])  # the second bag is empty

record(
    "embedding_bag", fn=_embedding_bag_entry, public=("jaxrules.nn.embedding_bag",),
    formula_ops=("embedding_bag_sum", "embedding_bag_max"),
    seed=("_embedding_bag_backward", "_embedding_bag_dense_backward", "_embedding_bag_per_sample_weights_backward"),
    samples=lambda rng, dt: [
        Sample((_BAG_INPUT, distinct(rng, dt, 6, 3), None, _BAG_OFFSETS)),
        Sample((_BAG_INPUT, distinct(rng, dt, 6, 2), normal(rng, dt, 7), _BAG_OFFSETS), {"mode": "sum", "padding_idx": 2}),
        Sample((np.array([[0, 3, 3], [2, 1, 3]]), distinct(rng, dt, 4, 3)), {"mode": "max"}),
        Sample((_BAG_INPUT, distinct(rng, dt, 6, 2), None, np.array([0, 2, 2, 5, 7])),
               {"mode": "max", "include_last_offset": True, "padding_idx": 5}),
        Sample((np.array([[1, 1, 3], [0, 1, 1]]), distinct(rng, dt, 4, 2)), {"padding_idx": 0}),  # mean
        Sample((np.zeros(0, int), normal(rng, dt, 3, 2), None, np.array([0, 0])), {"mode": "sum"}),  # empty bags: 0
    ],
    torch_fn=_torch_embedding_bag, torch_name="torch.nn.functional.embedding_bag",
    singular=(SingularPoint("max: ties go to the first maximum in bag order",
                            (np.array([[0, 1, 2], [2, 1, 0]]), np.array([[1.0, 5.0], [3.0, 5.0], [3.0, 0.0], [0.0, 0.0]])),
                            (np.array([[0.0, 1.0], [1.0, 1.0], [1.0, 0.0], [0.0, 0.0]]),), {"mode": "max"}),),
    deviations="scale_grad_by_freq divides each row's gradient by its index's count, as documented and as torch's "
    "embedding (torch 2.13's CPU embedding_bag divides some rows by another index's count); max_norm is not "
    "supported (ValueError); include_last_offset needs offsets[-1] == len(input) (torch's float32 and float64 CPU "
    "kernels disagree otherwise); pinned in tests/test_embedding_bag.py.",
)


def _scatter_samples(reduce):
    def samples(rng, dt):
        index = np.array([[0, 2, 0], [3, 3, 3], [1, 0, 1]])  # duplicates in every row
        out = []
        for include_self in (True, False):
            x, src = distinct(rng, dt, 3, 4), distinct(rng, dt, 3, 3)  # torch's backward rejects a larger src
            out.append(Sample((x, 1, index, src, reduce), {"include_self": include_self}))
        out.append(Sample((distinct(rng, dt, 4, 2), 0, np.array([[1, 0], [1, 3]]), distinct(rng, dt, 2, 2), reduce)))
        return out

    return samples


def _torch_scatter_reduce(torch, x, axis, index, src, reduce, include_self=True):
    return torch.scatter_reduce(x, axis, index, src, reduce, include_self=include_self)


_PROD_ZEROS = (
    SingularPoint("one zero in a slot", (np.array([[1.0, 2.0]]), 1, np.array([[0, 0, 1]]), np.array([[0.0, 3.0, 4.0]]), "prod")),
    SingularPoint("two zeros in a slot", (np.array([[0.0, 2.0]]), 1, np.array([[0, 0, 1]]), np.array([[0.0, 3.0, 4.0]]), "prod")),
)
_TIES = (
    SingularPoint("ties with self", (np.array([[3.0, 2.0]]), 1, np.array([[0, 0, 1]]), np.array([[3.0, 3.0, 1.0]]), "amax")),
)

for _reduce in _REDUCES:
    record(
        f"scatter_reduce_{_reduce}", fn=scatter_reduce, public=("jaxrules.numpy.scatter_reduce",),
        formula_ops=("scatter_reduce",), seed=("scatter_reduce_backward", "scatter_reduce_jvp"),
        samples=_scatter_samples(_reduce), torch_fn=_torch_scatter_reduce,
        torch_name="torch.scatter_reduce",  # complex sum/mean work, but torch cannot differentiate them to compare
        torch_jvp_differs="torch's forward AD of scatter_reduce(prod) gives a wrong tangent (the seed's "
        "scatter_reduce_jvp leaves prod undefined)" if _reduce == "prod" else "",
        singular={"prod": _PROD_ZEROS, "amax": _TIES}.get(_reduce, ()),
        deviations="prod: forward-mode and higher derivatives are defined (torch: not implemented / "
        "DelayedError with two zeros)." if _reduce == "prod" else "",
        double_backward="JAX's derivative of the saved products of the others (segmented scans)"
        if _reduce == "prod" else "JAX's derivative of the VJP formula",
    )


def _index_reduce_samples(rng, dt):
    index = np.array([2, 0, 2, 2])
    return [
        # prod and mean here; amax/amin are scatter_reduce's records and tests/test_indexing.py's (CI time)
        Sample((distinct(rng, dt, 3, 2), 0, index, distinct(rng, dt, 4, 2), reduce), {"include_self": k % 2 == 0})
        for k, reduce in enumerate(("prod", "mean"))
    ]


def _torch_index_reduce(torch, x, axis, index, source, reduce, include_self=True):
    return x.index_reduce(axis, index, source, reduce, include_self=include_self)


record(
    "index_reduce", fn=index_reduce, public=("jaxrules.numpy.index_reduce",), formula_ops=("scatter_reduce",),
    seed=("index_reduce_backward",), samples=_index_reduce_samples, torch_fn=_torch_index_reduce,
    torch_name="torch.Tensor.index_reduce",
    torch_jvp_differs="torch's forward AD of index_reduce(prod) is not the derivative (as scatter_reduce's)",
    singular=(SingularPoint("prod with a zero in a slot", (np.array([[1.0, 2.0], [3.0, 4.0]]), 0, np.array([0, 0]),
                                                          np.array([[0.0, 2.0], [5.0, 0.5]]), "prod")),),
    deviations="prod: forward-mode and higher derivatives are defined (as scatter_reduce's).",
)
