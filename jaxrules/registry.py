"""The op registry: one record per public op (PyTorch's OpInfo is the model).

The records live in ``jaxrules.op_records`` (one module per ops family), out of the run-time
import path: ``load_records()`` imports them. The tests, ``python -m jaxrules check``, ``python -m
jaxrules list`` (and ``COVERAGE.md``) and the benchmarks all read these records; adding an op means
one primal, two formulas and one record.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["Sample", "SingularPoint", "OpRecord", "derive_empty_samples", "record", "register", "load_records",
           "records", "get"]


@dataclasses.dataclass(frozen=True)
class Sample:
    """One call: ``fn(*args, **kwargs)``. NumPy arrays of inexact dtype are the differentiable
    arguments; everything else (Python scalars, integer arrays, keywords) is held fixed."""

    args: tuple
    kwargs: dict = dataclasses.field(default_factory=dict)

    def diff_argnums(self) -> tuple[int, ...]:
        return tuple(
            i
            for i, a in enumerate(self.args)
            if isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.inexact)
        )


@dataclasses.dataclass(frozen=True)
class SingularPoint:
    """A point where the derivative needs a convention.

    ``grad`` is the expected gradient of ``sum(real(fn(*args)))`` with respect to each
    differentiable argument (a tuple, one entry per argument; an entry may be ``None`` to check
    finiteness only); ``jvp``, if given, the expected output tangent for all-ones tangents.
    ``finite_second`` asks that second derivatives (forward-over-reverse and
    reverse-over-reverse) be finite. ``torch_differs`` is empty when torch (2.13) gives the same
    first derivative, else the reason jaxrules deliberately differs.
    """

    label: str
    args: tuple
    grad: tuple | None = None
    kwargs: dict = dataclasses.field(default_factory=dict)
    finite_second: bool = True
    torch_differs: str = ""
    jvp: Any = None

    def sample(self) -> Sample:
        return Sample(self.args, self.kwargs)


SampleFn = Callable[[np.random.Generator, np.dtype], list[Sample]]


@dataclasses.dataclass(frozen=True)
class OpRecord:
    """Everything the harness, the CLI and the coverage table need to know about an op. The
    ``jaxrules.op_records`` modules declare them with ``record(name, fn=..., ...)``, which builds and
    registers it.

    * ``fn``: the public function; ``public``: its public names.
    * ``formula_ops``: names of the mechanism ops whose formulas carry its derivatives (the op
      itself, or the ops it is composed of).
    * ``seed``: the seed functions it mirrors (the PyTorch functions whose formulas it ports;
      ``docs/design.md`` §1).
    * ``samples(rng, dtype)``: sample inputs of that dtype, away from singular points.
    * ``torch_fn(torch, *args, **kwargs)``: the same computation in torch (``None``: no torch
      equivalent); ``torch_name`` for the table.
    * ``dtypes``: float64 and, where torch supports it, complex128; ``low_precision``: dtypes
      checked against the float64 result.
    * ``deviations``: where and why jaxrules deliberately differs from torch (COVERAGE.md).
    * ``batching`` / ``double_backward``: how vmap and second-order reverse mode are handled
      (for the coverage table).
    * ``empty_samples(rng, dtype)``: zero-size inputs (empty batches, reduced axes, 0x0 and
      (0, n) matrices, empty index arrays) for the harness's ``empty`` check; ``None``: derived
      from ``samples`` (``derive_empty_samples``). ``no_empty``: instead of samples, why no
      zero-size input makes sense for the op (torch and jax.numpy refuse them all); the check
      reports it.
    * ``kernel_backed``: the record runs the fused Pallas kernels of the Triton backend (their
      ``impl="pallas"`` path): in a JAX without that backend the op falls back to its XLA
      formulas, so the harness skips the record's checks, saying why (another record checks
      those formulas).
    * ``needs_gpu``: why the record runs only on a GPU (cuDNN); elsewhere its checks are skipped
      with that reason.
    * ``rank_promotion``: why the public signature broadcasts arguments of different ranks (as
      ``jax.numpy``'s does, which a user under ``jax_numpy_rank_promotion="raise"`` must avoid):
      the harness's ``strict_promotion`` check gives the samples' lower-rank arguments leading
      unit axes, as that user would.
    """

    name: str
    fn: Callable
    public: tuple[str, ...]
    formula_ops: tuple[str, ...]
    seed: tuple[str, ...]
    samples: SampleFn
    torch_fn: Callable | None
    torch_name: str
    dtypes: tuple[str, ...] = ("float64",)
    low_precision: tuple[str, ...] = ("float32",)
    singular: tuple[SingularPoint, ...] = ()
    deviations: str = ""
    tolerance: dict[str, Any] = dataclasses.field(default_factory=dict)
    torch_no_grad_args: tuple[int, ...] = ()  # argument positions torch cannot differentiate
    torch_jvp_differs: str = ""  # non-empty: torch's forward AD is wrong here, not compared
    batching: str = "vmapped formulas"
    double_backward: str = "JAX's derivative of the VJP formula"
    kernel_backed: bool = False
    needs_gpu: str = ""
    empty_samples: SampleFn | None = None
    no_empty: str = ""
    rank_promotion: str = ""

    @property
    def complex_support(self) -> bool:
        return any(d.startswith("complex") for d in self.dtypes)

    def zero_size_samples(self, rng: np.random.Generator, dtype: np.dtype) -> list[Sample]:
        """The record's zero-size samples: declared (``empty_samples``), else derived from its
        samples (``derive_empty_samples``); none where ``no_empty`` says why."""
        if self.no_empty:
            return []
        if self.empty_samples is not None:
            return self.empty_samples(rng, dtype)
        return derive_empty_samples(self.samples(rng, dtype))


_MAX_DERIVED = 4  # zero-size samples derived per record (each is compiled: the check stays cheap)


def _cut(sample: Sample, size: int) -> Sample | None:
    """``sample`` with every axis of length ``size``, of every array argument, cut to length 0
    (arrays that share a dimension share its length in the samples, so they stay consistent); None
    where a signed integer array (indices, offsets) keeps elements: its values could point past
    the cut axis. Unsigned integer arrays (PRNG keys) are kept whole."""
    args = []
    for a in sample.args:
        if isinstance(a, np.ndarray) and a.ndim >= 1 and size in a.shape and not _is_key(a):
            a = a[tuple(slice(0, 0) if n == size else slice(None) for n in a.shape)]
        elif isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.signedinteger) and a.size:
            return None
        args.append(a)
    return Sample(tuple(args), dict(sample.kwargs))


def _is_key(a: np.ndarray) -> bool:
    """Unsigned integers: PRNG key data, never cut."""
    return np.issubdtype(a.dtype, np.unsignedinteger)


def derive_empty_samples(samples: list[Sample], limit: int = _MAX_DERIVED) -> list[Sample]:
    """Zero-size samples derived from ``samples``: for each length of an axis of a sample's array
    arguments (the first argument's first), every axis of that length cut to 0 (``(3, 4)``'s rows:
    an empty batch, ``(0, 4)``; its columns: an empty reduced axis, ``(3, 0)``; a square ``(3,
    3)``: ``(0, 0)``; a contraction ``(3, 4) @ (4, 2)``: ``(3, 0) @ (0, 2)``; indices ``(4,)``
    with their values ``(4, 2)``: no indices). The samples taken in turn (their first cut each,
    then their second ...), duplicates dropped, at most ``limit``."""
    per_sample = []
    for sample in samples:
        shapes = [a.shape for a in sample.args if isinstance(a, np.ndarray)]
        sizes = list(dict.fromkeys(n for shape in shapes for n in shape if n > 1))  # 1: broadcasting
        per_sample.append([c for c in (_cut(sample, n) for n in sizes) if c is not None])
    out, seen = [], set()
    for k in range(max(map(len, per_sample), default=0)):
        for cuts in per_sample:
            if k < len(cuts):
                key = repr([(np.shape(a), getattr(a, "dtype", type(a))) if isinstance(a, np.ndarray) else a
                            for a in cuts[k].args]) + repr(cuts[k].kwargs)
                if key not in seen:
                    seen.add(key)
                    out.append(cuts[k])
    return out[:limit]


_REGISTRY: dict[str, OpRecord] = {}


def register(record: OpRecord) -> OpRecord:
    """Add ``record`` to the registry (names are unique)."""
    if record.name in _REGISTRY:
        raise ValueError(f"register: an op named {record.name!r} is already registered")
    _REGISTRY[record.name] = record
    return record


def record(
    name: str,
    *,
    fn: Callable,
    public: tuple[str, ...],
    formula_ops: tuple[str, ...],
    seed: tuple[str, ...],
    samples: SampleFn,
    torch_fn: Callable | None,
    torch_name: str,
    **options: Any,
) -> OpRecord:
    """Register the op ``name``'s record and return it: the one way the ``jaxrules.op_records``
    modules declare a record.

    Everything after the name is a keyword:

    * ``fn``: the function the harness calls (the public function, or an entry that adapts its
      signature); ``public``: the public names it is reached by (``"jaxrules.nn.silu"``).
    * ``formula_ops``: the names of the mechanism ops (``define_op``) whose formulas carry its
      derivatives: the op itself, or the ops it is composed of (the ``formulas`` check spies on
      them).
    * ``seed``: the seed functions it mirrors: the functions of PyTorch's
      ``torch/csrc/autograd/FunctionsManual.cpp`` (or ``derivatives.yaml``, functorch's batching
      rules, ``NestedTensorBackward.cpp``) whose formulas it ports (``docs/design.md`` §1).
    * ``samples(rng, dtype)``: sample inputs of that dtype, away from singular points.
    * ``torch_fn(torch, *args, **kwargs)``: the same computation in torch (``None``: no torch
      equivalent); ``torch_name``: the torch function, for the coverage table.
    * ``options``: the rest of ``OpRecord``'s fields (``dtypes``, ``low_precision``,
      ``singular``, ``deviations``, ``tolerance``, ``torch_no_grad_args``,
      ``torch_jvp_differs``, ``batching``, ``double_backward``, ``kernel_backed``, ``needs_gpu``,
      ``empty_samples``, ``no_empty``); see ``OpRecord``.

    A name already registered, or an option ``OpRecord`` has no field for, is an error.
    """
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise TypeError(f"record: {name!r} got unknown option(s) {', '.join(unknown)}; OpRecord's options are "
                        f"{', '.join(sorted(_OPTIONS))}")
    return register(OpRecord(name=name, fn=fn, public=public, formula_ops=formula_ops, seed=seed, samples=samples,
                             torch_fn=torch_fn, torch_name=torch_name, **options))


_OPTIONS = frozenset(f.name for f in dataclasses.fields(OpRecord) if f.default is not dataclasses.MISSING
                     or f.default_factory is not dataclasses.MISSING)


# Importing ``jaxrules.op_records`` registers every record. ``load_records()`` does it through the
# loader the package root installs (``use_loader``): the registry sits below the ops and their
# records and names none of them.
_LOADERS: list[Callable[[], None]] = []


def use_loader(load: Callable[[], None]) -> None:
    """``load()`` imports the records package (``jaxrules.op_records``); ``load_records()`` calls it."""
    _LOADERS[:] = [load]


def _load_all() -> None:
    for load in _LOADERS:
        load()


def load_records() -> None:
    """Register every record: import ``jaxrules.op_records`` (one module per ops family, and the
    NestedTensor ops'), which imports the ops it checks. The one way records are loaded:
    ``records()``, ``get()``, the harness, the CLI and the tests call it; ``import jaxrules`` and
    its namespaces do not."""
    _load_all()


def records(pattern: str | None = None) -> list[OpRecord]:
    """Registered records, sorted by name; ``pattern`` is a shell-style glob or a substring, or
    several of them separated by commas (a record matching any is kept)."""
    load_records()
    out = sorted(_REGISTRY.values(), key=lambda r: r.name)
    if pattern:
        globs = [p if any(c in p for c in "*?[") else f"*{p}*" for p in pattern.split(",")]
        out = [r for r in out if any(fnmatch.fnmatch(r.name, g) for g in globs)]
    return out


def get(name: str) -> OpRecord:
    """The record named ``name``."""
    load_records()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"get: no op named {name!r} is registered") from None
