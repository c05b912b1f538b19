"""Parity with torch's own ``OpInfo`` samples: every ``jaxrules.torch`` adapter (and its
``nn.functional`` and ``linalg`` namespaces) that has an OpInfo of the same name in
``torch.testing._internal.common_methods_invocations.op_db`` is called on that OpInfo's
``sample_inputs(device, dtype, requires_grad=True)`` in float64 and complex128 (where the OpInfo's
dtypes include them) and compared with torch 2.13 on the CPU:

- ``value``: the adapter's outputs against ``op(sample.input, *sample.args, **sample.kwargs)``;
- ``vjp``: ``jax.vjp`` against ``torch.autograd.grad`` with the same random cotangent (torch's
  complex convention: ``grad_torch(g) = conj(vjp_jax(conj(g)))``, ``docs/design.md`` §2);
- ``jvp``: ``jax.jvp`` against torch's forward AD where the OpInfo supports it, else
  against central differences of torch's function (step 1e-6).

The OpInfo's ``gradcheck_wrapper`` (a Hermitian or triangular input built from the sample) and the
sample's ``output_process_fn_grad`` (eigenvector phases, ...) are torch functions: they run in torch
on both sides, chained to the JAX derivatives by torch's autograd, so the derivatives compared are
those of the same function. Torch tensors become numpy then JAX arrays; Python scalars and other
arguments pass as they are, a ``torch.dtype`` as the numpy dtype.

This module imports torch and its test-only ``op_db`` (which needs ``expecttest``): only
``python -m jaxrules opinfo`` and ``tests/test_opinfo_parity.py`` import it.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import types

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.autograd.forward_ad as fwad
from torch.testing._internal.common_methods_invocations import op_db

import jaxrules.torch as _torch_ns
import jaxrules.torch.linalg as _linalg_ns
import jaxrules.torch.nn.functional as _functional_ns

__all__ = ["CHECKS", "DEVIATIONS", "DTYPES", "Outcome", "Target", "format_table", "run", "targets"]

CHECKS = ("value", "vjp", "jvp")
DTYPES = ("float64", "complex128")
_TORCH_DTYPES = {"float64": torch.float64, "complex128": torch.complex128}
# (OpInfo name prefix, namespace): an OpInfo named ``nn.functional.relu`` is matched to
# ``jaxrules.torch.nn.functional.relu``, ``linalg.det`` to ``jaxrules.torch.linalg.det``, ``cumsum``
# to ``jaxrules.torch.cumsum``.
_NAMESPACES = (("nn.functional.", _functional_ns), ("linalg.", _linalg_ns), ("", _torch_ns))
_VALUE_TOL = 1e-7  # rtol = atol of the values, float64
_DERIVATIVE_TOL = 1e-6  # rtol = atol of the derivatives (torch's gradcheck uses 1e-5 against differences)
_FD_STEP = 1e-6

# The one table of deliberate deviations: (OpInfo name with its variant, check, dtype) -> why the
# result differs from torch on purpose. ``check`` is one of CHECKS or "*" (all three), ``dtype`` one
# of DTYPES or "*". A failure listed here
# is reported as ``deviation``; tests/test_opinfo_parity.py fails on any other failure and on an
# entry that no longer fails.
_REAL_ONLY = "real inputs only: a complex one is a TypeError naming the op (docs/differences.md, Complex input)"
_RANDOM = ("random: the op needs an explicit jax.random key where torch draws from its global generator "
           "(docs/differences.md, Randomness)")
DEVIATIONS: dict[tuple[str, str, str], str] = {
    ("nn.functional.silu.complex", "*", "complex128"): _REAL_ONLY,
    ("nn.functional.dropout", "*", "*"): _RANDOM,
    ("nn.functional.dropout2d", "*", "*"): _RANDOM,
    ("nn.functional.dropout3d", "*", "*"): _RANDOM,
    ("nn.functional.scaled_dot_product_attention", "*", "*"): _RANDOM,
    ("nn.functional.rrelu", "*", "*"): _RANDOM,
    ("nn.functional.alpha_dropout", "*", "*"): _RANDOM,
    ("nn.functional.feature_alpha_dropout.with_train", "*", "*"): _RANDOM,
    ("nn.functional.triplet_margin_with_distance_loss", "*", "*"): (
        "the samples' distance_function is a torch function, which cannot take JAX arrays; jaxrules' takes a "
        "JAX one (tests/test_torch_ports.py compares one distance written for each library)"),
    **{(f"nn.functional.max_unpool{n}d", "vjp", "float64"): (
        "where overlapping windows chose one position twice, the output keeps one value and only it has a "
        "gradient; torch's backward gathers the gradient into both (docs/differences.md)") for n in (1, 2, 3)},
    ("nn.functional.max_unpool2d", "jvp", "float64"): (
        "where overlapping windows chose one position twice, which of the two is kept is unspecified (torch's "
        "loop keeps the last, XLA's scatter may keep the other) and the JVP is the kept one's tangent"),
    **{(name, "*", "float64"): "of an even count: the mean of the two middle values, as numpy; torch takes the "
                               "lower one (docs/differences.md, Where torch is wrong)"
       for name in ("median", "nanmedian")},
    ("cholesky_inverse", "jvp", "*"): "torch's JVP is wrong; jaxrules uses the correct formula "
                                      "(docs/differences.md, Where torch is wrong)",
    ("logcumsumexp", "jvp", "*"): "torch's forward AD is NaN on complex input and off by 2e-6 at |x| = 1e4 in "
                             "float64 (a long-double reference: jaxrules' JVP within 5e-13; docs/differences.md, "
                             "Where torch is wrong)",
}


@dataclasses.dataclass(frozen=True)
class Target:
    """An OpInfo (``name`` with its ``variant``) and the adapter of the same name."""

    name: str
    variant: str
    adapter: str
    opinfo: object = dataclasses.field(repr=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.name}.{self.variant}" if self.variant else self.name


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One check of one sample: ``status`` is ``pass``, ``fail``, ``deviation`` or ``skip``."""

    target: str
    dtype: str
    check: str
    sample: int
    status: str
    detail: str = ""


def _adapter_name(name: str) -> str | None:
    for prefix, namespace in _NAMESPACES:
        rest = name[len(prefix):]
        if name.startswith(prefix) and "." not in rest and rest in namespace.__all__ \
                and rest not in ("nn", "linalg"):
            return f"{namespace.__name__}.{rest}"
    return None


def targets(ops: str | None = None) -> list[Target]:
    """The OpInfos with an adapter: by the OpInfo's name, else its aliases' (``arctan2``), else the
    qualified name of ``op.op`` (``torch.nn.functional.relu``). OpInfos that support none of
    ``DTYPES`` on the CPU (``batch_norm.without_cudnn``, a CUDA-only variant) have no sample to
    check and are left out. ``ops``: comma-separated globs or substrings of the OpInfo name or the
    adapter's name."""
    found = []
    for op in op_db:
        if not any(_TORCH_DTYPES[d] in op.supported_dtypes("cpu") for d in DTYPES):
            continue
        qualified = f"{getattr(op.op, '__module__', '') or ''}.{getattr(op.op, '__name__', '')}"
        qualified = qualified.replace("torch._C._nn.", "torch.nn.functional.").replace("torch._C._linalg.linalg_",
                                                                                      "torch.linalg.")
        candidates = [op.name, *(alias.name for alias in op.aliases),
                      qualified.removeprefix("torch.").removeprefix("torch._C._VariableFunctions.")]
        adapter = next((a for a in map(_adapter_name, candidates) if a), None)
        if adapter is not None:
            found.append(Target(op.name, op.variant_test_name, adapter, op))
    if ops:
        patterns = [p.strip() for p in ops.split(",") if p.strip()]
        found = [t for t in found if any(fnmatch.fnmatchcase(n, p) or p in n
                                         for p in patterns for n in (t.key, t.adapter))]
    return found


def _resolve(adapter: str):
    module, _, name = adapter.rpartition(".")
    namespace = {ns.__name__: ns for _, ns in _NAMESPACES}[module]
    return getattr(namespace, name)


def _jax_callable(target: Target):
    """What the JAX side calls with the sample: the adapter, or, where the OpInfo's ``op`` is a
    function of torch's test suite (``lambda weight, idx: F.embedding(idx, weight)``, ``pinv(a @
    b.mT)``), that function with its global ``torch`` bound to ``jaxrules.torch``."""
    op = target.opinfo.op
    if isinstance(op, types.FunctionType) and op.__module__.startswith("torch.testing._internal"):
        return types.FunctionType(op.__code__, {**op.__globals__, "torch": _torch_ns}, op.__name__,
                                  op.__defaults__, op.__closure__)
    return _resolve(target.adapter)


# ---------------------------------------------------------------------------------------------
# Arguments: torch structures <-> JAX structures


class _Slot:
    """The place of the ``index``-th differentiable tensor in an argument structure."""

    def __init__(self, index):
        self.index = index


def _map(fn, obj):
    """``obj`` with ``fn`` applied to each tensor and ``_Slot`` inside tuples, lists and dicts."""
    if isinstance(obj, torch.Tensor | _Slot):
        return fn(obj)
    if isinstance(obj, torch.Size):
        return tuple(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_map(fn, v) for v in obj))
    if isinstance(obj, tuple | list):
        return type(obj)(_map(fn, v) for v in obj)
    if isinstance(obj, dict):
        return {k: _map(fn, v) for k, v in obj.items()}
    return obj


def _differentiable(t) -> bool:
    return isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().resolve_conj().resolve_neg().cpu().numpy()


def _to_jax(obj, slots=()):
    """torch tensors -> JAX arrays, ``_Slot(i)`` -> ``slots[i]``, ``torch.dtype`` -> numpy dtype."""
    def convert(x):
        if isinstance(x, _Slot):
            return slots[x.index]
        return jnp.asarray(_numpy(x))
    if isinstance(obj, torch.dtype):
        return torch.empty((), dtype=obj).numpy().dtype
    if isinstance(obj, tuple | list) and not hasattr(obj, "_fields"):
        return type(obj)(_to_jax(v, slots) for v in obj)
    if isinstance(obj, dict):
        return {k: _to_jax(v, slots) for k, v in obj.items()}
    return _map(convert, obj)


def _to_torch(x) -> torch.Tensor:
    return torch.from_numpy(np.array(x))


def _flat(out) -> list:
    """A single output, or the elements of a tuple / list / named tuple of outputs, in order."""
    if isinstance(out, tuple | list):
        return [leaf for item in out for leaf in _flat(item)]
    return [out]


def _capture(*args, **kwargs):
    return args, kwargs


def _is_identity(fn) -> bool:
    sentinel = object()
    try:
        return fn(sentinel) is sentinel
    except Exception:  # noqa: BLE001 - a function that cannot take an opaque object is no identity
        return False


def _inexact(t) -> bool:
    return isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())


def _compare(actual: list, expected: list, tol: float) -> str:
    """"" when the tensors agree (``torch.testing.assert_close``, NaNs equal, dtypes not compared:
    JAX's indices may be int32), else what differs."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, torch {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if e is None and a is None:
            continue
        a = torch.zeros_like(e) if a is None else a
        e = torch.zeros_like(a) if e is None else e
        a = a if isinstance(a, torch.Tensor) else torch.as_tensor(a)
        e = e if isinstance(e, torch.Tensor) else torch.as_tensor(e)
        try:
            torch.testing.assert_close(a.detach(), e.detach(), rtol=tol, atol=tol, equal_nan=True, check_dtype=False)
        except AssertionError as err:
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            return f"output {i}: " + "; ".join(lines[:4])
    return ""


# ---------------------------------------------------------------------------------------------
# One sample


class _Sample:
    """A sample prepared for both sides: the differentiable leaves, the OpInfo's wrapper
    ``T(leaves) -> (args, kwargs)`` as torch functions, the output processing ``P``."""

    def __init__(self, op, sample):
        self.op = op
        self.sample = sample
        leaves = []

        def tag(t):
            if _differentiable(t):
                leaves.append(t.detach())
                return _Slot(len(leaves) - 1)
            return t.detach()
        self.structure = _map(tag, (sample.input, tuple(sample.args), dict(sample.kwargs)))
        self.leaves = leaves
        self.process = sample.output_process_fn_grad
        self.process_is_identity = _is_identity(self.process)

    def wrapped(self, *leaves):
        """``T``: the OpInfo's gradcheck wrapper applied to the sample with these leaves."""
        def fill(x):
            return leaves[x.index] if isinstance(x, _Slot) else x
        inp, args, kwargs = _map(fill, self.structure)
        return self.op.gradcheck_wrapper(_capture, inp, *args, **kwargs)

    def torch_fn(self, *leaves):
        """``P(op(T(leaves)))``, the function whose derivatives are compared."""
        args, kwargs = self.wrapped(*leaves)
        return self.process(self.op.op(*args, **kwargs))


def _wrapped_slots(prepared: _Sample):
    """The structure of ``T(leaves)`` with the tensors that depend on the leaves replaced by slots."""
    inner = []

    def tag(t):
        if _differentiable(t):
            inner.append(t)
            return _Slot(len(inner) - 1)
        return t.detach()
    with torch.enable_grad():
        args, kwargs = prepared.wrapped(*(leaf.clone().requires_grad_(True) for leaf in prepared.leaves))
        return _map(tag, (args, kwargs))


def _pick(structure, actual, out=None) -> list:
    """The tensors of ``actual`` (a ``T(leaves)``) at the slots of ``structure``, in slot order."""
    out = [] if out is None else out
    if isinstance(structure, _Slot):
        out.append((structure.index, actual))
    elif isinstance(structure, tuple | list):
        for s, a in zip(structure, actual):
            _pick(s, a, out)
    elif isinstance(structure, dict):
        for k in structure:
            _pick(structure[k], actual[k], out)
    return out


def _inner(prepared: _Sample, structure, leaves) -> list:
    return [t for _, t in sorted(_pick(structure, prepared.wrapped(*leaves)), key=lambda p: p[0])]


def _jax_fn(adapter, structure):
    def fn(*xs):
        args, kwargs = _to_jax(structure, xs)
        return tuple(_flat(adapter(*args, **kwargs)))
    return fn


def _torch_jvp(fn, primals, tangents) -> tuple:
    """The tangents of ``fn``'s outputs by torch's forward AD (dual tensors); a zero where an
    output does not depend on the primals."""
    with fwad.dual_level():
        outputs = fn(*(fwad.make_dual(p, t) for p, t in zip(primals, tangents)))
        found = []
        for o in outputs:
            tangent = fwad.unpack_dual(o).tangent
            found.append(torch.zeros_like(o.detach()) if tangent is None else tangent.clone())
    return tuple(found)


def _random_like(t: torch.Tensor, generator) -> torch.Tensor:
    return torch.randn(t.shape, dtype=t.dtype, generator=generator)


def _check_sample(target: Target, adapter, dtype: str, index: int, sample, checks) -> list[Outcome]:
    out = []

    def note(check, status, detail=""):
        if status == "fail":
            for key in ((target.key, c, d) for c in (check, "*") for d in (dtype, "*")):
                if key in DEVIATIONS:
                    status, detail = "deviation", f"{DEVIATIONS[key]} ({detail})"
                    break
        out.append(Outcome(target.key, dtype, check, index, status, detail))

    prepared = _Sample(target.opinfo, sample)
    generator = torch.Generator().manual_seed(index)
    try:
        args, kwargs = prepared.wrapped(*prepared.leaves)
        expected_raw = target.opinfo.op(*args, **kwargs)
    except Exception as err:  # noqa: BLE001 - a sample torch itself refuses is not a parity question
        return [Outcome(target.key, dtype, c, index, "skip", f"torch raises {type(err).__name__}") for c in checks]
    structure = _wrapped_slots(prepared)
    fn = _jax_fn(adapter, structure)
    inner_jax = [jnp.asarray(_numpy(t)) for t in _inner(prepared, structure, prepared.leaves)]
    try:
        actual_raw = fn(*inner_jax)
    except Exception as err:  # noqa: BLE001 - the adapter's refusal is the result
        message = f"adapter raises {type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
        for check in checks:
            note(check, "fail", message)
        return out
    if "value" in checks:
        expected = _flat(prepared.process(expected_raw))
        processed = prepared.process(_restructure(expected_raw, [_to_torch(a) for a in actual_raw]))
        note("value", *_status(_compare(_flat(processed), expected, _VALUE_TOL)))
    derivative_checks = [c for c in checks if c in ("vjp", "jvp")]
    if not derivative_checks:
        return out
    if not prepared.leaves:
        for check in derivative_checks:
            out.append(Outcome(target.key, dtype, check, index, "skip", "no differentiable input"))
        return out
    if not target.opinfo.supports_autograd or _TORCH_DTYPES[dtype] not in target.opinfo.supported_backward_dtypes(
            "cpu"):
        for check in derivative_checks:
            out.append(Outcome(target.key, dtype, check, index, "skip", "the OpInfo has no backward in this dtype"))
        return out
    for check in derivative_checks:
        try:
            detail = (_vjp if check == "vjp" else _jvp)(prepared, structure, fn, expected_raw, generator)
        except Exception as err:  # noqa: BLE001 - reported per check: the table must show every op
            detail = f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
        if detail is None:
            out.append(Outcome(target.key, dtype, check, index, "skip", "no differentiable output"))
        else:
            note(check, *_status(detail))
    return out


def _status(detail: str) -> tuple[str, str]:
    return ("fail", detail) if detail else ("pass", "")


def _restructure(like, flat: list):
    """``flat`` in the structure of torch's output ``like``: a tuple where torch returns a tuple
    or list (what ``output_process_fn_grad`` indexes), the one tensor where it returns one."""
    if isinstance(like, tuple | list):
        return tuple(flat)
    return flat[0] if len(flat) == 1 else tuple(flat)


def _differentiable_outputs(outputs) -> list[int]:
    return [i for i, o in enumerate(outputs) if _inexact(o) and o.requires_grad]


def _vjp(prepared: _Sample, structure, fn, expected_raw, generator) -> str | None:
    """torch's gradient of ``P(op(T(x)))`` for a random cotangent, against the same chain with
    ``op`` replaced by ``jax.vjp`` of the adapter; ``None`` without a differentiable output."""
    leaves = [leaf.clone().requires_grad_(True) for leaf in prepared.leaves]
    outputs = _flat(prepared.torch_fn(*leaves))
    chosen = _differentiable_outputs(outputs)
    if not chosen:
        return None
    cotangents = [_random_like(outputs[i], generator) for i in chosen]
    expected = torch.autograd.grad([outputs[i] for i in chosen], leaves, cotangents, allow_unused=True)
    # The same chain through JAX: T and P in torch, the op's derivative from jax.vjp.
    leaves2 = [leaf.clone().requires_grad_(True) for leaf in prepared.leaves]
    inner = _inner(prepared, structure, leaves2)
    inner_jax = [jnp.asarray(_numpy(t)) for t in inner]
    raw, pullback = jax.vjp(fn, *inner_jax)
    inexact = [i for i, r in enumerate(raw) if jnp.issubdtype(r.dtype, jnp.inexact)]
    raw_torch = [_to_torch(r).requires_grad_(i in inexact) for i, r in enumerate(raw)]
    processed = _flat(prepared.process(_restructure(expected_raw, raw_torch)))
    used = [(processed[i], c) for i, c in zip(chosen, cotangents) if processed[i].requires_grad]
    raw_grads = dict.fromkeys(inexact)
    if used and inexact:
        grads = torch.autograd.grad([m for m, _ in used], [raw_torch[i] for i in inexact], [c for _, c in used],
                                    allow_unused=True)
        raw_grads.update(zip(inexact, grads))
    raw_cts = [np.zeros(r.shape, jax.dtypes.float0) if i not in inexact
               else jnp.zeros(r.shape, r.dtype) if raw_grads[i] is None
               else jnp.conj(jnp.asarray(_numpy(raw_grads[i]))).astype(r.dtype) for i, r in enumerate(raw)]
    inner_cts = [_to_torch(jnp.conj(g)) for g in pullback(tuple(raw_cts))]
    actual = torch.autograd.grad(inner, leaves2, inner_cts, allow_unused=True)
    return _compare(list(actual), list(expected), _DERIVATIVE_TOL)


def _jvp(prepared: _Sample, structure, fn, expected_raw, generator) -> str | None:
    """torch's forward AD (or central differences where the OpInfo has no forward AD) of
    ``P(op(T(x)))`` for a random tangent, against the chain with ``op``'s by ``jax.jvp``."""
    leaves = [leaf.detach() for leaf in prepared.leaves]
    tangents = tuple(_random_like(leaf, generator) for leaf in leaves)
    with torch.enable_grad():
        probe = _flat(prepared.torch_fn(*[leaf.clone().requires_grad_(True) for leaf in leaves]))
    chosen = _differentiable_outputs(probe)
    if not chosen:
        return None

    def torch_fn(*xs):
        outputs = _flat(prepared.torch_fn(*xs))
        return tuple(outputs[i] for i in chosen)
    if prepared.op.supports_forward_ad:
        expected = _torch_jvp(torch_fn, leaves, tangents)
    else:
        with torch.no_grad():
            plus = torch_fn(*(x + _FD_STEP * t for x, t in zip(leaves, tangents)))
            minus = torch_fn(*(x - _FD_STEP * t for x, t in zip(leaves, tangents)))
        expected = tuple((p - m) / (2 * _FD_STEP) for p, m in zip(plus, minus))

    def inner_of(*xs):
        return tuple(_inner(prepared, structure, xs))
    inner = inner_of(*leaves)
    inner_tangents = _torch_jvp(inner_of, leaves, tangents)
    raw, raw_tangents = jax.jvp(fn, tuple(jnp.asarray(_numpy(t)) for t in inner),
                                tuple(jnp.asarray(_numpy(t)) for t in inner_tangents))

    def processed(*raw_torch):
        outputs = _flat(prepared.process(_restructure(expected_raw, list(raw_torch))))
        return tuple(outputs[i] for i in chosen)
    inexact = [i for i, r in enumerate(raw) if jnp.issubdtype(r.dtype, jnp.inexact)]

    def processed_of_inexact(*xs):
        full = [_to_torch(r) for r in raw]
        for i, x in zip(inexact, xs):
            full[i] = x
        return processed(*full)
    actual = _torch_jvp(processed_of_inexact, [_to_torch(raw[i]) for i in inexact],
                        [_to_torch(raw_tangents[i]) for i in inexact])
    return _compare(list(actual), list(expected), _DERIVATIVE_TOL)


# ---------------------------------------------------------------------------------------------
# Runs and the table


def run(found: list[Target], dtypes=DTYPES, checks=CHECKS, max_samples: int | None = None,
        progress=None) -> list[Outcome]:
    """Every check of ``checks`` on up to ``max_samples`` samples of each target in each dtype of
    ``dtypes`` its OpInfo supports on the CPU. Needs float64 (``jax_enable_x64``)."""
    if not jax.config.jax_enable_x64:
        raise RuntimeError('opinfo.run: enable float64 first: jax.config.update("jax_enable_x64", True)')
    unknown = set(checks) - set(CHECKS) or set(dtypes) - set(DTYPES)
    if unknown:
        raise ValueError(f"opinfo.run: unknown checks or dtypes {sorted(unknown)}; checks are {CHECKS}, "
                         f"dtypes {DTYPES}")
    outcomes = []
    for target in found:
        adapter = _jax_callable(target)
        supported = target.opinfo.supported_dtypes("cpu")
        for dtype in dtypes:
            if _TORCH_DTYPES[dtype] not in supported:
                continue
            samples = target.opinfo.sample_inputs("cpu", _TORCH_DTYPES[dtype], requires_grad=True)
            for index, sample in enumerate(samples):
                if max_samples is not None and index >= max_samples:
                    break
                outcomes.extend(_check_sample(target, adapter, dtype, index, sample, checks))
            if progress is not None:
                progress(target, dtype)
    return outcomes


def format_table(outcomes: list[Outcome], checks=CHECKS, dtypes=DTYPES) -> str:
    """One line an OpInfo, a column a (check, dtype): ``passed/run`` with ``F`` (failures) or
    ``D`` (deviations) marked, ``-`` where the dtype is not the OpInfo's, ``s`` where every sample
    skipped; then the failures, deviations and skips with their reasons."""
    columns = [(c, d) for d in dtypes for c in checks]
    names = list(dict.fromkeys(o.target for o in outcomes))
    width = max([len(n) for n in names] + [10])
    header = f"{'OpInfo':<{width}} " + " ".join(f"{c + ':' + d[:1] + d[-2:]:>11}" for c, d in columns)
    lines = [header]
    for name in names:
        cells = []
        for check, dtype in columns:
            mine = [o for o in outcomes if o.target == name and o.check == check and o.dtype == dtype]
            ran = [o for o in mine if o.status != "skip"]
            if not mine:
                cells.append("-")
            elif not ran:
                cells.append("s")
            else:
                passed = sum(o.status == "pass" for o in ran)
                mark = "F" if any(o.status == "fail" for o in ran) else "D" if passed < len(ran) else ""
                cells.append(f"{mark}{passed}/{len(ran)}")
        lines.append(f"{name:<{width}} " + " ".join(f"{c:>11}" for c in cells))
    for status in ("fail", "deviation", "skip"):
        seen = {}
        for o in outcomes:
            if o.status == status:
                seen.setdefault((o.target, o.check, o.dtype, o.detail), []).append(o.sample)
        if seen:
            lines.append(f"\n{status}s:")
            lines.extend(f"  {t} {c} {d} samples {s}: {detail}" for (t, c, d, detail), s in seen.items())
    return "\n".join(lines)
