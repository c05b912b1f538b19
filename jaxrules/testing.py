"""The verification harness: the testing contract of ``docs/design.md`` §4, run from an
op's record. Usable on your own ops: build an ``OpRecord`` and call ``check_op(record)``.

Checks (names used by the CLI, the tests and the JSON report):

* ``gradients``   first derivatives (forward and reverse) against central differences on every
  sample; second derivatives (``jax.test_util.check_grads(order=2)``'s comparisons) on the
  record's first sample (every sample with ``full=True``);
* ``jvp_vjp``     the two formulas agree: ``Re<ct, jvp(t)> == Re<vjp(ct), t>``;
* ``formulas``    ``jax.jvp`` ran a JVP formula and no VJP formula; ``jax.vjp`` the converse;
* ``vmap``        every subset of arguments batched (every sample); vmap of grad, grad of vmap,
  vmap of jvp, a batch axis other than 0 and nested vmap (the record's first sample; with
  ``full=True`` the first three on every sample, the last two on each dtype's first) — each
  equal to a loop over the slices;
* ``jit``         jit of the value, the gradient and the JVP equal eager, the gradient of a
  jitted function equals the gradient (the record's first sample; the second on every sample
  with ``full=True``);
* ``torch``       values, gradients (conjugated for complex) and JVPs against torch;
* ``singular``    the record's expected derivatives at its singular points, finite second
  derivatives (forward-over-reverse, reverse-over-reverse, forward-over-forward);
* ``low_precision`` float32/bfloat16 values and gradients against float64 (the first float64
  sample; every float64 one with ``full=True``);
* ``empty``       zero-size inputs (the record's ``empty_samples``, else derived from its samples:
  ``registry.derive_empty_samples``): the value, JVP and VJP, jitted and vmapped over a batch of
  two, run; shapes and dtypes as the primal's, ``<ct, jvp(t)> == <vjp(ct), t>``; value, dtype and
  gradients as torch's where torch accepts the input; where jaxrules refuses it, a ValueError or
  TypeError naming the op, and torch must refuse it too.

Everything runs in float64: enable it first (``jax.config.update("jax_enable_x64", True)``).

Cost (``docs/design.md`` §4): building programs (tracing, lowering, compiling) is most of the
time, so each sample's
derivatives are compiled once, in one program that ``gradients``, ``jvp_vjp``, ``torch``,
``jit`` and ``low_precision`` share (``_shared``; run a record's checks one after the other, as
``check_op`` does, to share it), and repeated evaluations inside a program (the finite-difference
points, the vmap check's slices) are a ``lax.map`` over one copy of the function.

Depth (``python -m jaxrules check`` runs ``full=False``; ``run_check`` and ``check_op`` default to
``full=True``): every sample gets its value, its first derivatives against finite differences and
torch, the formulas that ran, and every subset of its arguments batched. The compositions run on
the record's first sample with a differentiable argument (of its first dtype): second
derivatives, the derivatives of a jitted function, batched derivatives, another batch axis and
nesting (eager evaluation runs there at every depth); low precision on the first float64
sample. ``full=True`` (``python -m jaxrules check --full``, the registry tests) runs every
composition on every sample and the ``sharded`` check's ``Auto`` mesh and ``shard_map``
form (``check_sharded``'s ``full``), about 1.5 times the work.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import itertools
import os
import re
import time
import traceback
import types
import warnings
import zlib
from collections.abc import Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as PSpec

from jaxrules import compat, dispatch
from jaxrules.mechanism import formula_spy, ignores_its_arguments
from jaxrules.registry import OpRecord, Sample

__all__ = ["CHECKS", "OPT_IN_CHECKS", "CheckResult", "check_derivatives", "check_op", "check_strict_promotion",
           "release_programs", "run_check", "strict_promotion"]

HOST_DEVICES = 8  # the JAX devices a CPU is split into for the sharded check (``check --host-devices``)
CHECKS = ("gradients", "jvp_vjp", "formulas", "vmap", "jit", "torch", "singular", "low_precision", "empty", "sharded")

_TOL = {"float64": 1e-9, "complex128": 1e-9, "float32": 2e-4, "complex64": 2e-4, "bfloat16": 6e-2, "float16": 1e-2}


@dataclasses.dataclass
class CheckResult:
    """One check of one op: ``passed``, the largest error seen (relative where it makes sense),
    and a one-line ``detail`` (the first failure, or what was skipped)."""

    op: str
    check: str
    passed: bool
    max_error: float | None = None
    detail: str = ""
    skipped: bool = False
    seconds: float = 0.0  # wall time of the check (the profile of a run: ``check --json``)
    cpu_seconds: float = 0.0  # CPU time of the checking process over the check (``time.process_time``)


class CheckFailure(AssertionError):
    """A check found a wrong result."""


# ----------------------------------------------------------------------------------------------
# Helpers


def _rng(record: OpRecord, salt: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(f"{record.name}/{salt}".encode()))


def _samples(record: OpRecord, dtype: str) -> list[Sample]:
    return record.samples(_rng(record, dtype), np.dtype(dtype))


def _closure(record: OpRecord, sample: Sample) -> tuple[Callable, list]:
    """``f(*diff_args)`` with the other arguments fixed, and the differentiable arguments."""
    idx = sample.diff_argnums()

    def f(*diff):
        args = list(sample.args)
        for i, d in zip(idx, diff):
            args[i] = d
        return record.fn(*args, **sample.kwargs)

    return f, [_on_device(sample.args[i]) for i in idx]


def _on_device(x) -> jax.Array:
    """The host array ``x`` as a JAX array, by a transfer (``jax.device_put``): ``jnp.asarray``
    of a NumPy array compiles an identity program (``stage``) per shape and dtype on jax 0.10."""
    return jax.device_put(np.asarray(x))


def _like(rng: np.random.Generator, x) -> jax.Array:
    """A random array shaped and typed like ``x``."""
    shape, dtype = np.shape(x), np.dtype(x.dtype)
    values = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        values = values + 1j * rng.standard_normal(shape)
    return _on_device(values.astype(dtype))


def _host_pairing(a_tree, b_tree) -> float:
    """``_real_pairing`` of computed results, in NumPy (no compiled program)."""
    return float(sum(np.sum((np.asarray(a) * np.asarray(b)).real)
                     for a, b in zip(jax.tree.leaves(a_tree), jax.tree.leaves(b_tree))))


def _real_pairing(a_tree, b_tree) -> jax.Array:
    """``sum Re(a * b)`` over matching pytrees (the pairing under which JAX's VJP is the
    transpose of its JVP, complex included)."""
    terms = [jnp.sum((a * b).real) for a, b in zip(jax.tree.leaves(a_tree), jax.tree.leaves(b_tree))]
    return sum(terms[1:], terms[0])


def _loss(f: Callable, ct) -> Callable:
    """``L(*args) = sum Re(conj(ct) f(*args))``: a real scalar whose JAX gradient is the
    conjugate of torch's."""
    return lambda *args: _real_pairing(jax.tree.map(jnp.conj, ct), f(*args))


def _error(actual, expected) -> float:
    """Largest ``|a - e| / max(1, |e|)``; matching infinities and NaNs count as equal."""
    worst = 0.0
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
        a = np.asarray(a, dtype=np.complex128 if np.iscomplexobj(a) or np.iscomplexobj(e) else np.float64)
        e = np.asarray(e, dtype=a.dtype)
        if a.shape != e.shape:
            return float("inf")
        same = (a == e) | (np.isnan(a) & np.isnan(e))
        with np.errstate(invalid="ignore"):
            diff = np.where(same, 0.0, np.abs(a - e) / np.maximum(1.0, np.abs(e)))
        diff = np.where(np.isnan(diff), np.inf, diff)
        worst = max(worst, float(diff.max(initial=0.0)))
    return worst


def _expect_close(what: str, actual, expected, tol: float) -> float:
    err = _error(actual, expected)
    if not err <= tol:
        raise CheckFailure(f"{what}: error {err:.3g} > {tol:.1g}")
    return err


def _finite(tree) -> bool:
    return all(bool(np.all(np.isfinite(np.asarray(x)))) for x in jax.tree.leaves(tree))


def _tol(record: OpRecord, key: str, default: float) -> float:
    return float(record.tolerance.get(key, default))


def _each_sample(record: OpRecord, dtypes: Iterable[str] | None = None, with_key: bool = False):
    """``(label, sample)`` for each sample with differentiable arguments (``with_key``: ``(label,
    (dtype, index), sample)``, the key of the sample's shared program)."""
    for dtype in dtypes or record.dtypes:
        for k, sample in enumerate(_samples(record, dtype)):
            if sample.diff_argnums():
                label = f"{dtype} sample {k}"
                yield (label, (dtype, k), sample) if with_key else (label, sample)


def _first_of_dtype(label: str) -> bool:
    """Whether ``label`` names a dtype's first sample (where the checks whose outcome does not
    depend on the values, only on shapes and code paths, run once per dtype)."""
    return label.endswith(" sample 0")


# ----------------------------------------------------------------------------------------------
# The checks. Each raises CheckFailure (or any exception) on failure and returns the max error.


# Finite differences: jax.test_util.check_grads' step and float64 tolerances (|a - e| <= atol +
# rtol |e|), which this check replaces with one compiled program per sample (and a fourth-order
# stencil for check_grads' second-order one).
_FD_EPS = 1e-4
_FD_TOL = 1e-5
_FD_STEPS = np.array([2, 1, -1, -2]) * _FD_EPS


def _stencil(p, first: int):
    """The fourth-order central difference on the stacked points ``p[first] .. p[first + 3]``
    (``f`` at ``x + h`` for ``h`` in ``_FD_STEPS``)."""
    return (8 * (p[first + 1] - p[first + 2]) - (p[first] - p[first + 3])) / (12 * _FD_EPS)


def _derivatives_program(f: Callable, jit: bool = True, full: bool = True) -> Callable:
    """``program(args, t, s, c)``: everything ``check_grads(f, order=2, modes=("fwd", "rev"))``
    compares, computed by one jitted program (the checks it replaces compiled about a dozen
    programs per sample): with ``Jt(x) = jvp(f)(x; t)`` and ``Jc(x) = vjp(f)(x)(c)``, their first
    derivatives along ``s`` by JVP, their transposes by VJP, and central differences of ``f``
    (along ``t``), ``Jt`` and ``Jc`` (along ``s``). Also ``jax.jit(f)``'s value, JVP along ``t``
    and VJP of ``c`` at ``args`` (``"jit"``: the ``jit`` check's "grad of jit"), from the same
    ``lax.map`` as the differences.

    ``full=False``: the first order alone (``value``, ``jvp``, ``vjp`` and the differences of
    ``f`` along ``t``), about half the program to trace, lower and compile."""

    jitted = jax.jit(f)

    def central(args, t, s, c):
        # Fourth-order central differences, (8 (g(x+h) - g(x-h)) - (g(x+2h) - g(x-2h))) / 12h: the
        # truncation error of check_grads' two-point rule, h^2 g^(3) / 6, exceeds the tolerance
        # for ops with large third derivatives (lstsq of a badly conditioned system).
        # ``f``, ``Jt`` and ``Jc`` from one linearization of ``jax.jit(f)`` at each of nine points
        # (``args`` itself, four along ``t`` for ``f``, four along ``s`` for ``Jt`` and ``Jc``), by
        # ``lax.map``: one copy of ``f``'s forward pass in the program, not nine. At ``args`` the
        # three are the jitted function's value, JVP and VJP: the derivatives of a jitted ``f``
        # (pjit's JVP and partial evaluation, then the transpose: what ``jax.grad`` of a jitted
        # function runs), compared with ``f``'s by the ``jit`` check.
        def three(a):
            value, lin = jax.linearize(jitted, *a)
            return value, lin(*t), jax.linear_transpose(lin, *a)(c)

        def at(step):
            h, along_s, here = step
            return three([jnp.where(here, a, a + (h * along_s).astype(a.real.dtype) * vs
                                    + (h * (1 - along_s)).astype(a.real.dtype) * vt)
                          for a, vs, vt in zip(args, s, t)])

        n = len(_FD_STEPS)
        steps = np.concatenate([[0.0], _FD_STEPS, _FD_STEPS])
        along_s = np.array([0.0] * (1 + n) + [1.0] * n)
        here = np.arange(1 + 2 * n) == 0  # ``args`` exactly (no ``+ 0 * v``, which turns -0.0 into 0.0)
        values, jts, jcs = jax.lax.map(at, (steps, along_s, here))
        jitted_at_args = jax.tree.map(lambda p: p[0], (values, jts, jcs))
        return (jax.tree.map(lambda p: _stencil(p, 1), values), jax.tree.map(lambda p: _stencil(p, 1 + n), jts),
                jax.tree.map(lambda p: _stencil(p, 1 + n), jcs), jitted_at_args)

    def first_order(args, t, c):
        value, jvp = jax.jvp(f, args, t)
        values = jax.lax.map(lambda h: f(*[a + h.astype(a.real.dtype) * v for a, v in zip(args, t)]), _FD_STEPS)
        fd = jax.tree.map(lambda p: _stencil(p, 0), values)
        return {"value": value, "jvp": jvp, "jvp_fd": fd, "vjp": jax.vjp(f, *args)[1](c)}

    def program(args, t, s, c):
        args, t, s = tuple(args), tuple(t), tuple(s)
        if not full:
            return first_order(args, t, c)

        def jt(*a):  # ``Jt``, with ``f`` as the auxiliary output
            value, tangent = jax.jvp(f, a, t)
            return tangent, value

        jc = lambda *a: jax.vjp(f, *a)[1](c)  # noqa: E731
        # The second derivatives from one linearization of ``Jt`` and one of ``Jc``: JVP by the
        # linear map, VJP by its transpose (what ``jax.vjp`` computes; the forward passes shared).
        # The first-order JVP and VJP (and the value) are the linearizations' primal outputs:
        # ``Jt(x)`` is ``jax.jvp``'s tangent, ``Jc(x)`` ``jax.vjp``'s cotangent.
        jvp, lin_t, value = jax.linearize(jt, *args, has_aux=True)
        vjp, lin_c = jax.linearize(jc, *args)
        fd, fd_t, fd_c, (jit_value, jit_jvp, jit_vjp) = central(args, t, s, c)
        return {
            "value": value, "jvp": jvp, "jvp_fd": fd, "vjp": vjp,
            "jvp_of_jvp": lin_t(*s), "jvp_fd_of_jvp": fd_t, "vjp_of_jvp": jax.linear_transpose(lin_t, *args)(c),
            "jvp_of_vjp": lin_c(*s), "jvp_fd_of_vjp": fd_c, "vjp_of_vjp": jax.linear_transpose(lin_c, *args)(t),
            "jit": {"value": jit_value, "jvp": jit_jvp, "vjp": jit_vjp},
        }

    return jax.jit(program) if jit else program


# The program each sample shares between checks: ``_derivatives_program``'s outputs and the value,
# in the sample's directions ``t``, ``s``, ``c``. ``gradients``, ``jvp_vjp``, ``torch``, ``jit``
# and ``low_precision`` read it: one compilation of the op's derivatives per sample where there
# were five. Its ``vjp`` (of ``c``) is also the gradient of ``_loss(f, conj(c))`` (the loss's
# transpose hands ``f`` the cotangent ``conj(conj(c)) = c``): the loss of the torch and jit checks.
# Kept for one record at a time (the checks of a record run one after the other: ``check_op``,
# the CLI's workers, the registry tests).
_SHARED: dict = {}


@dataclasses.dataclass
class _Shared:
    args: list
    t: list
    s: list
    c: object
    loss_ct: object  # conj(c): ``out["vjp"]`` is the gradient of ``_loss(f, loss_ct)``
    t_torch: list  # ``t`` with zeros for the arguments torch cannot differentiate
    out: dict
    program: Callable  # the compiled program, ``out = program(args, t, s, c, loss_ct, t_torch)``
    full: bool  # ``_derivatives_program``'s full program (second derivatives, "grad of jit"), or the first order


def _representative(record: OpRecord, key: tuple) -> bool:
    """Whether the sample of ``key`` (its dtype and index) is the record's first sample with a
    differentiable argument (the first ``_each_sample`` yields): the sample on which every check
    runs every composition, whatever the depth asked for (``run_check``)."""
    return key == next((k for _, k, _ in _each_sample(record, with_key=True)), None)


def _shared(record: OpRecord, key: tuple, sample: Sample, full: bool) -> _Shared:
    """The shared program's inputs and outputs for ``sample`` (``key``: its dtype and index): the
    full derivatives program where ``full`` or the sample is the record's first, else the first
    order."""
    if _SHARED.get("record") is not record:
        _SHARED.clear()
        _SHARED["record"] = record
    full = full or _representative(record, key)
    if key in _SHARED and _SHARED[key].full >= full:
        return _SHARED[key]
    rng = _rng(record, f"shared/{key[0]}/{key[1]}")
    f, args = _closure(record, sample)
    t, s = [_like(rng, a) for a in args], [_like(rng, a) for a in args]
    c = jax.tree.map(lambda o: _like(rng, o), jax.eval_shape(f, *args))
    t_torch = [_on_device(np.zeros(a.shape, a.dtype)) if i in record.torch_no_grad_args else v
               for i, a, v in zip(sample.diff_argnums(), args, t)]
    derivatives = _derivatives_program(f, jit=False, full=full)
    loss_ct = jax.tree.map(lambda x: _on_device(np.conj(np.asarray(x))), c)

    @jax.jit
    def program(args, t, s, c, loss_ct, t_torch):
        out = derivatives(args, t, s, c)  # with the jit check's gradient of a jitted ``f`` (``out["jit"]``)
        if record.torch_no_grad_args:
            out["jvp_torch"] = jax.jvp(f, tuple(args), tuple(t_torch))[1]
        return out

    out = program(args, t, s, c, loss_ct, t_torch)
    _SHARED[key] = result = _Shared(args, t, s, c, loss_ct, t_torch, out, program, full)
    return result


def _fd_close(what: str, actual, expected, atol: float = _FD_TOL, rtol: float = _FD_TOL) -> float:
    """``actual`` within check_grads' tolerance of ``expected`` (NaNs in the same places)."""
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
        try:
            np.testing.assert_allclose(np.asarray(a), np.asarray(e), atol=atol, rtol=rtol)
        except AssertionError as err:
            raise CheckFailure(f"{what}: {str(err).strip().splitlines()[-1].strip()}") from None
    return _error(actual, expected)


def _derivative_comparisons(d: dict, t, s, c) -> list:
    """``(what, actual, expected)`` for each comparison of ``check_grads(order=2, modes=("fwd",
    "rev"))`` (without its derivatives with respect to the tangent itself, linear by construction)
    among ``_derivatives_program``'s outputs ``d`` in the directions ``t``, ``s``, ``c``."""
    pair = _host_pairing
    first = [
        ("jvp vs finite differences", d["jvp"], d["jvp_fd"]),
        ("<vjp(c), t> vs <c, finite differences>", pair(d["vjp"], t), pair(c, d["jvp_fd"])),
    ]
    if "jvp_of_jvp" not in d:  # the first-order program (``_derivatives_program(full=False)``)
        return first
    return first + [
        ("jvp of jvp vs finite differences", d["jvp_of_jvp"], d["jvp_fd_of_jvp"]),
        ("<vjp of jvp (c), s> vs <c, finite differences of jvp>", pair(d["vjp_of_jvp"], s),
         pair(c, d["jvp_fd_of_jvp"])),
        ("jvp of vjp vs finite differences", d["jvp_of_vjp"], d["jvp_fd_of_vjp"]),
        ("<vjp of vjp (t), s> vs <t, finite differences of vjp>", pair(d["vjp_of_vjp"], s),
         pair(t, d["jvp_fd_of_vjp"])),
    ]


def check_derivatives(f: Callable, args, atol: float = _FD_TOL, rtol: float = _FD_TOL, seed: int = 0) -> float:
    """``jax.test_util.check_grads(f, args, order=2, modes=("fwd", "rev"))`` from one compiled
    program: ``f``'s JVP, VJP and their JVPs and VJPs (second order) against fourth-order central
    differences with step ``1e-4`` (float64 arguments), in random directions drawn from ``seed``.

    Returns the largest error ``|a - e| / max(1, |e|)``; raises ``AssertionError`` naming the
    first comparison outside ``|a - e| <= atol + rtol |e|``, ``TypeError`` for an argument that
    is not float64 or complex128.

    >>> import jax, jax.numpy as jnp
    >>> from jaxrules.testing import check_derivatives
    >>> with jax.enable_x64(True):
    ...     print(check_derivatives(jnp.sin, (jnp.linspace(0.0, 1.0, 4),)) < 1e-8)
    True
    """
    rng = np.random.default_rng(seed)
    args = [_on_device(a) for a in args]
    for i, a in enumerate(args):
        if a.dtype not in (np.float64, np.complex128):
            raise TypeError(f"check_derivatives: argument {i} is {a.dtype}; finite differences of step "
                            f"{_FD_EPS} need float64 or complex128 (turn on jax_enable_x64)")
    t, s = [_like(rng, a) for a in args], [_like(rng, a) for a in args]
    c = jax.tree.map(lambda o: _like(rng, o), jax.eval_shape(f, *args))
    d = _derivatives_program(f)(args, t, s, c)
    worst = 0.0
    for what, actual, expected in _derivative_comparisons(d, t, s, c):
        worst = max(worst, _fd_close(what, actual, expected, atol, rtol))
    return worst


def _check_gradients(record: OpRecord, full: bool) -> float:
    """First (every sample) and second derivatives (where the shared program is full) against
    central differences, and the transposes against the JVPs, in random directions
    (``_derivative_comparisons``), from one compiled program per sample."""
    worst = 0.0
    for label, key, sample in _each_sample(record, with_key=True):
        shared = _shared(record, key, sample, full)
        for what, actual, expected in _derivative_comparisons(shared.out, shared.t, shared.s, shared.c):
            worst = max(worst, _fd_close(f"{label} {sample.kwargs}: {what}", actual, expected))
    return worst


def _check_jvp_vjp(record: OpRecord, full: bool) -> float:
    worst = 0.0
    for label, key, sample in _each_sample(record, with_key=True):
        # The JVP and VJP of the sample's shared program (compiled: eager dispatch of every
        # formula op dominates otherwise; jit vs eager is the ``jit`` check).
        shared = _shared(record, key, sample, full)
        lhs, rhs = _host_pairing(shared.c, shared.out["jvp"]), _host_pairing(shared.out["vjp"], shared.t)
        err = abs(lhs - rhs) / max(1.0, abs(lhs))
        if not err <= _tol(record, "jvp_vjp", 1e-10):
            raise CheckFailure(f"{label}: <ct, jvp(t)> = {float(lhs):.12g} but <vjp(ct), t> = {float(rhs):.12g}")
        worst = max(worst, err)
    return worst


def _ran(calls, kind: str, names) -> bool:
    return any(k == kind and n in names for k, n in calls)


def _check_formulas(record: OpRecord) -> float:
    """Which formulas ``jax.jvp`` and ``jax.vjp`` run, seen while lowering them (a formula is
    traced when its program is lowered: no compilation or execution is needed to see it)."""
    rng = _rng(record, "formulas")
    for label, sample in _each_sample(record):
        f, args = _closure(record, sample)
        tangents = [_like(rng, a) for a in args]
        with formula_spy() as calls:
            jax.jit(lambda a, t: jax.jvp(f, a, t)).lower(args, tangents)
        ct = jax.tree.map(lambda o: _like(rng, o), jax.eval_shape(f, *args))
        with formula_spy() as vjp_calls:
            jax.jit(lambda a, c: jax.vjp(f, *a)[1](c)).lower(args, ct)
        if all(a.size == 0 for a in args):
            # Zero-size: the derivative is the zero map and no formula runs (docs/design.md §1).
            if calls or vjp_calls:
                raise CheckFailure(f"{label}: zero-size arguments, yet formulas ran: {calls + vjp_calls}")
            continue
        if not calls and ignores_its_arguments(lambda t: jax.jvp(f, args, t)[1], tangents):
            # Under jax_custom_jvp3 an output the primal computes without the differentiated
            # arguments gets a zero tangent, not the formula's (mechanism._outputs_moved_by):
            # no JVP formula runs, and the JVP must then be the zero map in the traced program.
            continue
        if not _ran(calls, "jvp", record.formula_ops) or any(k == "vjp" for k, _ in calls):
            raise CheckFailure(f"{label}: jax.jvp ran {calls}, expected JVP formulas of {record.formula_ops}")
        if not _ran(vjp_calls, "vjp", record.formula_ops) or any(k == "jvp" for k, _ in vjp_calls):
            raise CheckFailure(f"{label}: jax.vjp ran {vjp_calls}, expected VJP formulas of {record.formula_ops}")
    return 0.0


_SCALES = (1.0, 0.97, 0.94)


def _batch(x, axis: int = 0, scales=_SCALES):
    x = np.asarray(x)  # NumPy: no compiled program per shape
    return np.stack([x * np.asarray(s, x.real.dtype) for s in scales], axis=axis)


def _stack(outs: list, shape: tuple = ()):
    """Per-slice results (pytrees) stacked along new leading axes of ``shape`` (default: one)."""
    shape = shape or (len(outs),)
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]).reshape(shape + np.shape(xs[0])), *outs)


class _Reference:
    """The vmap check's references: the value, gradient (of ``_loss(f, shared.loss_ct)``) and JVP
    at each slice, one slice at a time, by the sample's shared program (already compiled: a call
    on new values of the same shapes compiles nothing; the loop involves no batching rule)."""

    def __init__(self, shared: _Shared):
        self.shared = shared
        self.memo: dict = {}

    def at(self, args, t=None) -> dict:
        sh = self.shared
        args = [np.asarray(a) for a in args]
        t = [np.asarray(v) for v in (sh.t if t is None else t)]
        key = tuple(a.tobytes() for a in args + t)
        if key not in self.memo:
            self.memo[key] = sh.program(args, t, sh.s, sh.c, sh.loss_ct, sh.t_torch)
        return self.memo[key]

    def loop(self, what: str, batched: list, in_axes: list, t_batched: list | None = None):
        """``what`` (``"value"``, ``"vjp"`` or ``"value_jvp"``) on each slice of ``batched``
        along ``in_axes``, stacked."""
        n = next(np.shape(b)[d] for b, d in zip(batched, in_axes) if d is not None)
        outs = []
        for k in range(n):
            args = [b if d is None else np.take(b, k, axis=d) for b, d in zip(batched, in_axes)]
            out = self.at(args, None if t_batched is None else [v[k] for v in t_batched])
            outs.append((out["value"], out["jvp"]) if what == "value_jvp" else out[what])
        return _stack(outs)


def _vmap_cases(label, f, shared: _Shared, compositions: bool) -> list:
    """``(what, batched function, its arguments, the expected result)`` for every vmap the check
    compares: every non-empty subset of the arguments batched at axis 0; with ``compositions``
    (the record's first sample; every sample at full depth), vmap of grad, grad of vmap (the last
    argument unbatched when there are several), vmap of jvp, and on a dtype's first sample another
    axis and nesting. The expected results are loops over
    the slices (``_Reference``)."""
    args, ref = shared.args, _Reference(shared)
    cases = []
    for r in range(1, len(args) + 1):
        for subset in itertools.combinations(range(len(args)), r):
            in_axes = [0 if i in subset else None for i in range(len(args))]
            batched = [_batch(a) if d == 0 else a for a, d in zip(args, in_axes)]
            cases.append((f"vmap in_axes={in_axes}", jax.vmap(f, in_axes=in_axes), batched,
                          ref.loop("value", batched, in_axes)))
    if compositions and _first_of_dtype(label):
        # A batch axis other than 0 (the last) on the first argument.
        last = args[0].ndim
        in_axes = [last] + [None] * (len(args) - 1)
        batched = [_batch(args[0], last)] + args[1:]
        cases.append((f"vmap in_axes={in_axes}", jax.vmap(f, in_axes=in_axes), batched,
                      ref.loop("value", batched, in_axes)))
        # Nested vmap over a (2, 3) batch of the first argument.
        nested = np.stack([_batch(args[0]), _batch(args[0], scales=(0.99, 0.96, 0.93))])
        flat = nested.reshape((nested.shape[0] * nested.shape[1],) + nested.shape[2:])
        expected = ref.loop("value", [flat, *args[1:]], [0] + [None] * (len(args) - 1))
        expected = jax.tree.map(lambda x: x.reshape(nested.shape[:2] + x.shape[1:]), expected)
        rest = lambda b: f(b, *args[1:])  # noqa: E731
        cases.append(("nested vmap", jax.vmap(jax.vmap(rest)), [nested], expected))
    if not compositions:
        return cases
    loss = _loss(f, shared.loss_ct)  # its gradient is the shared program's ``vjp``
    grad = jax.jit(jax.grad(loss, argnums=tuple(range(len(args)))))  # traced once, called many times
    every = [0] * len(args)
    batched = [_batch(a) for a in args]
    cases.append(("vmap of grad", jax.vmap(grad), batched, ref.loop("vjp", batched, every)))
    in_axes = [0] * (len(args) - 1) + [None] if len(args) > 1 else [0]
    batched = [_batch(a) if d == 0 else a for a, d in zip(args, in_axes)]
    summed = lambda *a: jnp.sum(jax.vmap(loss, in_axes=in_axes)(*a))  # noqa: E731
    looped = ref.loop("vjp", batched, in_axes)  # every gradient, stacked
    expected = [g if d == 0 else np.sum(g, axis=0) for g, d in zip(looped, in_axes)]
    cases.append(("grad of vmap", jax.grad(summed, argnums=tuple(range(len(args)))), batched, expected))
    tangents = [_batch(v) for v in shared.t]
    jvp = jax.jit(lambda *at: jax.jvp(f, at[: len(args)], at[len(args) :]))
    batched = [_batch(a) for a in args]
    cases.append(("vmap of jvp", jax.vmap(jvp), batched + tangents,
                  ref.loop("value_jvp", batched, every, t_batched=tangents)))
    return cases


def _check_vmap(record: OpRecord, full: bool) -> float:
    tol = _tol(record, "vmap", 1e-10)
    worst = 0.0
    for label, key, sample in _each_sample(record, with_key=True):
        shared = _shared(record, key, sample, full)
        f = jax.jit(_closure(record, sample)[0])  # compiled once, evaluated many times
        cases = _vmap_cases(label, f, shared, full or _representative(record, key))
        # Every batched function of the sample in one compiled program.
        fns = [fn for _, fn, _, _ in cases]
        results = jax.jit(lambda arglists: [fn(*a) for fn, a in zip(fns, arglists)])([a for _, _, a, _ in cases])
        for (what, _, _, expected), got in zip(cases, results):
            worst = max(worst, _expect_close(f"{label}: {what}", got, expected, tol))
    return worst


def _check_jit(record: OpRecord, full: bool) -> float:
    tol = _tol(record, "jit", 1e-10)
    worst = 0.0
    first = None
    for label, key, sample in _each_sample(record, with_key=True):
        first = first or label
        shared = _shared(record, key, sample, full)
        if label == first:  # eager evaluation is slow: jit vs eager on the record's first sample
            # The shared program's jitted value, gradient and JVP against eager evaluation.
            # The eager gradient is ``jax.vjp``'s pullback of ``c`` (the gradient of the loss,
            # without the loss's own eager operations, each of which compiles a program).
            f, args = _closure(record, sample)[0], shared.args  # the shared program's arguments
            eager = f(*args), jax.vjp(f, *args)[1](shared.c), jax.jvp(f, tuple(args), tuple(shared.t))[1]
            jitted = shared.out["value"], shared.out["vjp"], shared.out["jvp"]
            for what, a, e in zip(("value", "grad", "jvp"), jitted, eager):
                worst = max(worst, _expect_close(f"{label}: jit {what}", a, e, tol))
        # Differentiating a jitted function (partial evaluation of the jaxpr, where the fixed
        # arguments become literals) must agree too (computed in the shared program where it is
        # full: the record's first sample, every sample at full depth).
        for what in ("value", "jvp", "vjp") if "jit" in shared.out else ():
            name = "grad" if what == "vjp" else what
            worst = max(worst, _expect_close(f"{label}: {name} of jit", shared.out["jit"][what], shared.out[what], tol))
    return worst


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _torch_reference(record: OpRecord, torch, *args, **kwargs):
    """``record.torch_fn`` on ``args``, its ``UserWarning``s silenced: the references run torch at
    the samples' edges on purpose (zero degrees of freedom, beta ops, changed defaults), and the
    check reports its own results, not torch's advice about them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return record.torch_fn(torch, *args, **kwargs)


def _to_torch(torch, sample: Sample, requires_grad: bool, no_grad=()):
    idx = set(sample.diff_argnums()) - set(no_grad)
    return [
        torch.tensor(np.asarray(a), requires_grad=requires_grad and i in idx) if isinstance(a, np.ndarray) else a
        for i, a in enumerate(sample.args)
    ]


def _from_torch(value):
    if isinstance(value, tuple | list):
        return tuple(_from_torch(v) for v in value)
    return value.numpy(force=True)


def _torch_grads(torch, record, sample, ct):
    """torch's value and gradient of ``sum Re(conj(ct) f)``; gradients conjugated to JAX's
    convention (``None`` where torch gives none)."""
    targs = _to_torch(torch, sample, True, record.torch_no_grad_args)
    out = _torch_reference(record, torch, *targs, **sample.kwargs)
    outs = out if isinstance(out, tuple | list) else (out,)
    cts = jax.tree.leaves(ct)
    loss = sum((torch.conj(torch.tensor(np.asarray(c))) * o).real.sum() for c, o in zip(cts, outs))
    diff = [targs[i] for i in sample.diff_argnums() if i not in record.torch_no_grad_args]
    grads = iter(torch.autograd.grad(loss, diff, allow_unused=True))
    # ``False`` marks an argument torch cannot differentiate: not compared.
    grads = [False if i in record.torch_no_grad_args else next(grads) for i in sample.diff_argnums()]
    grads = [g if g is None or g is False else np.conj(g.numpy(force=True)) for g in grads]
    return _from_torch(out), grads


def _torch_jvp(torch, record, sample, tangents):
    targs = _to_torch(torch, sample, False)
    idx = sample.diff_argnums()

    def fn(*diff):
        args = list(targs)
        for i, d in zip(idx, diff):
            args[i] = d
        return _torch_reference(record, torch, *args, **sample.kwargs)

    primals = tuple(targs[i] for i in idx)
    tans = tuple(torch.tensor(np.asarray(t)) for t in tangents)
    return _from_torch(torch.func.jvp(fn, primals, tans)[1])


def _check_torch(record: OpRecord, full: bool) -> float | str:
    torch = _torch()
    if torch is None:
        return "skipped: torch is not installed"
    if record.torch_fn is None:
        return "skipped: no torch equivalent"
    tol = _tol(record, "torch", 1e-9)
    worst = 0.0
    notes = []
    points = list(_each_sample(record, with_key=True)) + [
        (f"singular point {p.label!r}", i, p.sample()) for i, p in enumerate(record.singular) if not p.torch_differs
    ]
    for label, key, sample in points:
        if isinstance(key, tuple):  # the sample's shared program (value, gradients and JVP)
            shared = _shared(record, key, sample, full)
            ct, tangents = shared.loss_ct, shared.t_torch
            out, grads = shared.out["value"], shared.out["vjp"]
            jvp_out = shared.out["jvp_torch" if record.torch_no_grad_args else "jvp"]
        else:  # the singular point's program
            ct, out, grads = _singular(record, key)[1]["torch"]
        t_out, t_grads = _torch_grads(torch, record, sample, ct)
        worst = max(worst, _expect_close(f"{label}: value vs torch", out, t_out, tol))
        for i, (g, tg) in enumerate(zip(grads, t_grads)):
            if tg is False:
                continue
            expected = np.zeros_like(np.asarray(g)) if tg is None else tg
            worst = max(worst, _expect_close(f"{label}: gradient {i} vs torch", g, expected, tol))
        if label.startswith("singular"):
            continue
        if record.torch_jvp_differs:
            notes.append(f"JVP not compared: {record.torch_jvp_differs}")
            continue
        try:
            t_jvp = _torch_jvp(torch, record, sample, tangents)
        except (NotImplementedError, RuntimeError) as err:
            notes.append(f"torch has no forward AD here ({type(err).__name__})")
            continue
        worst = max(worst, _expect_close(f"{label}: jvp vs torch", jvp_out, t_jvp, tol))
    return worst if not notes else (worst, "; ".join(sorted(set(notes))))


def _singular(record: OpRecord, index: int) -> tuple[list, dict]:
    """The arguments of ``record.singular[index]`` and everything the ``singular`` and ``torch``
    checks need there, from one compiled program (kept with the record's shared programs): the
    gradient of ``sum Re f`` and the JVP along ones, the three second derivatives (where the
    point expects them finite), and the value and gradient of ``_loss(f, ct)`` in a random ``ct``
    for torch (where torch's derivatives are compared there)."""
    key = ("singular", index)
    if _SHARED.get("record") is not record:
        _SHARED.clear()
        _SHARED["record"] = record
    if key in _SHARED:
        return _SHARED[key]
    point = record.singular[index]
    f, args = _closure(record, point.sample())
    argnums = tuple(range(len(args)))

    def loss(*a):  # ``sum Re f``, with ``f`` traced once
        out = f(*a)
        return _real_pairing(jax.tree.map(jnp.ones_like, out), out)

    ones = [_on_device(np.ones(a.shape, a.dtype)) for a in args]
    rng = _rng(record, f"singular/{index}")
    ct = jax.tree.map(lambda o: _like(rng, o), jax.eval_shape(f, *args))
    with_torch = record.torch_fn is not None and not point.torch_differs

    @jax.jit
    def program(args, ct):
        out = {"grads": jax.grad(loss, argnums=argnums)(*args), "jvp": jax.jvp(f, tuple(args), tuple(ones))[1],
               "second": {}}
        if with_torch:
            out["torch"] = ct, f(*args), jax.grad(_loss(f, ct), argnums=argnums)(*args)
        if point.finite_second:
            real_loss, real_args = _as_real(loss, args)
            real_argnums = tuple(range(len(real_args)))
            first = jax.grad(real_loss, argnums=real_argnums)
            out["second"] = {
                "fwd-over-rev": jax.jacfwd(first, argnums=real_argnums)(*real_args),
                "rev-over-rev": jax.jacrev(first, argnums=real_argnums)(*real_args),
                "fwd-over-fwd": jax.jacfwd(jax.jacfwd(real_loss, argnums=real_argnums),
                                           argnums=real_argnums)(*real_args),
            }
        return out

    _SHARED[key] = result = (args, program(args, ct))
    return result


def _check_singular(record: OpRecord) -> float | str:
    if not record.singular:
        return "skipped: the record lists no singular points"
    worst = 0.0
    tol = _tol(record, "singular", 1e-9)
    for index, point in enumerate(record.singular):
        label = f"{point.label!r} {point.kwargs}"
        args, out = _singular(record, index)
        grads, out_t, second = out["grads"], out["jvp"], out["second"]
        if point.grad is not None:
            for i, (g, e) in enumerate(zip(grads, point.grad)):
                if e is not None:
                    worst = max(worst, _expect_close(f"{label}: gradient {i}", g, e, tol))
        if point.jvp is not None:
            worst = max(worst, _expect_close(f"{label}: jvp", out_t, point.jvp, tol))
        if _finite(grads) and _finite(out_t):
            lhs = _host_pairing([np.ones(np.shape(o)) for o in jax.tree.leaves(out_t)], out_t)
            rhs = _host_pairing(grads, [np.ones(np.shape(a)) for a in args])
            worst = max(worst, _expect_close(f"{label}: <1, jvp(1)> vs <grad, 1>", lhs, rhs, tol))
        for how, hess in second.items():
            if not _finite(hess):
                raise CheckFailure(f"{label}: {how} second derivative is not finite: {hess}")
    return worst


def _as_real(loss, args):
    """``loss`` as a function of real arrays (complex arguments split into real and imaginary
    parts), so that ``jacfwd``/``jacrev`` apply."""
    split = [jnp.iscomplexobj(a) for a in args]
    real_args = []
    for a, c in zip(args, split):
        real_args += [a.real, a.imag] if c else [a]

    def real_loss(*parts):
        it = iter(parts)
        rebuilt = [next(it) + 1j * next(it) if c else next(it) for c in split]
        return loss(*rebuilt)

    return real_loss, real_args


def _check_low_precision(record: OpRecord, full: bool) -> float | str:
    if not record.low_precision:
        return "skipped: no low-precision dtypes listed"
    worst = 0.0
    for i, (label, key, sample) in enumerate(_each_sample(record, ("float64",), with_key=True)):
        if not (full or i == 0):  # the first float64 sample at the default depth
            continue
        shared = _shared(record, key, sample, full)  # the float64 value and VJP
        f, args = _closure(record, sample)[0], shared.args
        ct, out, grads = shared.c, shared.out["value"], shared.out["vjp"]

        @jax.jit  # every low dtype in one compiled program (jit vs eager is the ``jit`` check)
        def value_and_grads(lows, c):
            results = []
            for a in lows:
                value, pullback = jax.vjp(f, *a)
                results.append((value, pullback(jax.tree.map(lambda ci, o: ci.astype(o.dtype), c, value))))
            return results

        def cast(a, dtype):  # on the host (an eager cast compiles a program per shape)
            a = np.asarray(a)
            return a.astype(jnp.result_type(dtype, jnp.complex64) if np.iscomplexobj(a) else dtype)

        lows = [[cast(a, dtype) for a in args] for dtype in record.low_precision]
        for dtype, (low_out, low_grads) in zip(record.low_precision, value_and_grads(lows, ct)):
            # Outputs keep the input's precision (complex outputs of real input, as eig's: its
            # complex counterpart).
            allowed = {jnp.dtype(dtype), jnp.result_type(dtype, jnp.complex64)}
            if any(o.dtype not in allowed for o in jax.tree.leaves(low_out)):
                raise CheckFailure(f"{label}: {dtype} input gave {[o.dtype for o in jax.tree.leaves(low_out)]}")
            tol = _tol(record, dtype, _TOL[dtype])
            worst = max(worst, _expect_close(f"{label}: {dtype} value", low_out, out, tol))
            worst = max(worst, _expect_close(f"{label}: {dtype} gradient", low_grads, grads, tol))
    return worst


def _op_names(record: OpRecord) -> set[str]:
    """The names an error message of ``record``'s op may start with: the record's, its public
    functions' and its formula ops'."""
    public = {p.split("(")[0].rsplit(".", 1)[-1] for p in record.public}
    return {record.name, record.name.split("[")[0], *record.formula_ops, *public}


def _names_the_op(record: OpRecord, err: BaseException) -> bool:
    """Whether ``err`` is the library's own clear refusal: a ValueError or TypeError whose message
    names the op (``"<op>: ..."``)."""
    text = str(err)
    return isinstance(err, ValueError | TypeError) and any(f"{n}:" in text for n in _op_names(record))


def _shapes(sample: Sample) -> str:
    return ", ".join(f"{a.dtype}{list(a.shape)}" if isinstance(a, np.ndarray) else repr(a)
                     for a in sample.args) + (f" {sample.kwargs}" if sample.kwargs else "")


def _empty_program(f: Callable) -> Callable:
    """``program(args, t, c)``: the value, ``jax.jvp`` along ``t``, ``jax.vjp`` of ``c`` and both
    vmapped over a batch of two copies of the arguments, in one jitted program."""

    def value_and_vjp(args, c):
        value, pullback = jax.vjp(f, *args)
        return value, pullback(c)

    @jax.jit
    def program(args, t, c):
        value, jvp = jax.jvp(f, tuple(args), tuple(t))
        grads = value_and_vjp(args, c)[1]
        if args:
            batched = jax.vmap(lambda a: value_and_vjp(a, c))([jnp.stack([a, a]) for a in args])
        else:  # nothing to batch
            batched = jax.tree.map(lambda x: jnp.stack([x, x]), (value, grads))
        return {"value": value, "jvp": jvp, "vjp": grads, "vmap": batched}

    return program


def _torch_on(torch, record: OpRecord, sample: Sample, ct=None):
    """torch's value on ``sample`` and its gradients of ``_loss(f, ct)`` (``_torch_grads``), or
    the exception it raised on the value. The gradients are ``None`` (not compared) where ``ct`` is
    None or only the value works, and zero (not asked of torch: its ``pdist`` backward crashes the
    process on an empty input) where every output is empty."""
    try:
        value = _from_torch(_torch_reference(record, torch, *_to_torch(torch, sample, False), **sample.kwargs))
    except Exception as err:  # torch refuses the input
        return err
    if ct is None:
        return value, None
    if all(np.size(v) == 0 for v in jax.tree.leaves(value)):
        return value, [np.zeros(np.shape(sample.args[i]), sample.args[i].dtype) for i in sample.diff_argnums()]
    try:
        return _torch_grads(torch, record, sample, ct)
    except Exception:  # torch's refusal of the gradient: the value alone
        return value, None


def _check_empty_sample(record: OpRecord, label: str, sample: Sample, torch, notes: list) -> float:
    """The ``empty`` check of one zero-size sample (``notes``: what was seen besides passing)."""
    f, args = _closure(record, sample)
    with_torch = torch is not None and record.torch_fn is not None
    try:
        out_shape = jax.eval_shape(f, *args)
    except Exception as err:  # jaxrules refuses the input: clearly, and as torch
        if not _names_the_op(record, err):
            raise CheckFailure(f"{label}: {type(err).__name__} not naming the op: {str(err)[:300]}") from None
        if with_torch and not isinstance(_torch_on(torch, record, sample), BaseException):
            raise CheckFailure(f"{label}: torch accepts it, jaxrules raises {type(err).__name__}: {err}") from None
        notes.append("refused as torch")
        return 0.0
    rng = _rng(record, f"empty/{label}")
    t = [_like(rng, a) for a in args]
    c = jax.tree.map(lambda o: _like(rng, o) if jnp.issubdtype(o.dtype, jnp.inexact)
                     else np.zeros(o.shape, jax.dtypes.float0), out_shape)
    try:
        out = _empty_program(f)(args, t, c)
    except Exception as err:  # the value traced, so its derivatives must run too
        where = traceback.extract_tb(err.__traceback__)[-1]
        raise CheckFailure(f"{label}: derivatives: {type(err).__name__}: {str(err)[:300]} "
                           f"({where.filename.split('/')[-1]}:{where.lineno})") from None
    value, jvp, grads = out["value"], out["jvp"], out["vjp"]
    inexact = [o for o in jax.tree.leaves(value) if jnp.issubdtype(o.dtype, jnp.inexact)]
    tangents = [o for o in jax.tree.leaves(jvp) if o.dtype != jax.dtypes.float0]
    if [(o.shape, o.dtype) for o in tangents] != [(o.shape, o.dtype) for o in inexact]:
        raise CheckFailure(f"{label}: JVP {[o.shape for o in tangents]} for the value {[o.shape for o in inexact]}")
    if [(g.shape, g.dtype) for g in grads] != [(a.shape, a.dtype) for a in args]:
        raise CheckFailure(f"{label}: VJP {[g.shape for g in grads]} for the arguments {[a.shape for a in args]}")
    cts = [x for x in jax.tree.leaves(c) if x.dtype != jax.dtypes.float0]
    lhs, rhs = _host_pairing(cts, tangents), _host_pairing(grads, t)
    worst = abs(lhs - rhs) / max(1.0, abs(lhs))
    if not worst <= 1e-9:
        raise CheckFailure(f"{label}: <ct, jvp(t)> = {lhs:.12g} but <vjp(ct), t> = {rhs:.12g}")
    twice = jax.tree.map(lambda x: np.stack([np.asarray(x)] * 2), (value, grads))
    worst = max(worst, _expect_close(f"{label}: vmap over two copies", out["vmap"], twice, 1e-10))
    if not with_torch:
        return worst
    theirs = _torch_on(torch, record, sample, jax.tree.map(lambda x: np.conj(np.asarray(x)), cts))
    if isinstance(theirs, BaseException):
        notes.append("accepted where torch refuses")
        return worst
    t_value, t_grads = theirs
    ours_leaves, their_leaves = jax.tree.leaves(value), jax.tree.leaves(t_value)
    if [(np.shape(o), np.dtype(o.dtype)) for o in ours_leaves] != [(np.shape(o), o.dtype) for o in their_leaves]:
        raise CheckFailure(f"{label}: value {[(o.shape, str(o.dtype)) for o in ours_leaves]} but torch's "
                           f"{[(o.shape, str(o.dtype)) for o in their_leaves]}")
    tol = _tol(record, "torch", 1e-9)
    worst = max(worst, _expect_close(f"{label}: value vs torch", value, t_value, tol))
    for i, (g, tg) in enumerate(zip(grads, t_grads or ())):
        if tg is not False:
            expected = np.zeros_like(np.asarray(g)) if tg is None else tg
            worst = max(worst, _expect_close(f"{label}: gradient {i} vs torch", g, expected, tol))
    return worst


def _check_empty(record: OpRecord) -> float | str | tuple:
    if record.no_empty:
        return f"skipped: no zero-size input: {record.no_empty}"
    samples = record.zero_size_samples(_rng(record, "empty"), np.dtype("float64"))
    if not samples:
        raise CheckFailure("no zero-size samples: none derived from the samples (integer arrays keep their "
                           "elements); declare the record's empty_samples, or no_empty with the reason")
    torch = _torch()
    worst, notes = 0.0, []
    for k, sample in enumerate(samples):
        label = f"zero-size sample {k} ({_shapes(sample)})"
        worst = max(worst, _check_empty_sample(record, label, sample, torch, notes))
    summary = f"{len(samples)} zero-size samples" + "".join(
        f"; {notes.count(n)} {n}" for n in dict.fromkeys(notes))
    return worst, summary


def _check_sharded(record: OpRecord, full: bool) -> float | str:
    """``check_sharded``: the op on batch-sharded inputs over every device, under an
    ``Explicit`` mesh (both modes and ``shard_map`` with ``full``), equals it unsharded (skipped
    in a process with one device: ``python -m jaxrules check --checks sharded --host-devices 8``
    on a CPU)."""
    try:
        return check_sharded(record, full=full)
    except ShardedMismatch as err:
        raise CheckFailure(str(err)) from None


# ----------------------------------------------------------------------------------------------
# The ``strict_promotion`` check (opt-in: ``check --strict-promotion``)
#
# A user may run JAX with ``jax_numpy_rank_promotion="raise"`` and
# ``jax_numpy_dtype_promotion="strict"``; the op's primal and formulas must then promote nothing
# implicitly. For each sample (the record's dtypes, and float32 where it is a low-precision dtype):
# the value (eager and jitted), the JVP, the VJP and vmap of the three, under both settings,
# equal the same program under JAX's defaults. The samples are made what such a user passes:
# every floating argument in the sample's precision (complex ones complex), and, for a record
# whose public signature broadcasts arguments of different ranks (``OpRecord.rank_promotion``
# says why), the lower-rank arguments given leading unit axes. Two compilations per sample.


def strict_promotion():
    """The context of a user who forbids implicit promotion: ``jax.numpy_rank_promotion("raise")``
    and ``jax.numpy_dtype_promotion("strict")``, together."""
    stack = contextlib.ExitStack()
    stack.enter_context(jax.numpy_rank_promotion("raise"))
    stack.enter_context(jax.numpy_dtype_promotion("strict"))
    return stack


def _strict_sample(record: OpRecord, sample: Sample, dtype: str) -> Sample:
    """``sample`` as a user under strict promotion passes it: floating arrays in ``dtype``'s
    precision (a complex one complex, a real one real), and where the record's signature
    broadcasts ranks (``rank_promotion``), every array argument of lower rank than the
    differentiable ones given leading unit axes."""
    real = np.finfo(np.dtype(dtype)).dtype

    def cast(a):
        if isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.inexact):
            return a.astype(np.result_type(real, np.complex64) if np.iscomplexobj(a) else real)
        return a

    args = [cast(a) for a in sample.args]
    if record.rank_promotion:
        rank = max((args[i].ndim for i in sample.diff_argnums()), default=0)
        args = [a.reshape((1,) * (rank - a.ndim) + a.shape) if isinstance(a, np.ndarray) and a.ndim < rank else a
                for a in args]
    return Sample(tuple(args), sample.kwargs)


def _strict_program(f: Callable) -> Callable:
    """The value, JVP and VJP of ``f`` at ``args``, and the same three vmapped over a batch."""

    def three(args, t, c):
        value, vjp = jax.vjp(f, *args)
        return value, jax.jvp(f, tuple(args), tuple(t))[1], vjp(c)

    def program(args, t, c, b_args, b_t, b_c):
        return three(args, t, c), jax.vmap(three)(b_args, b_t, b_c)

    return jax.jit(program)


def check_strict_promotion(record: OpRecord) -> float | str:
    """The record's samples under ``strict_promotion()``: the eager value and the jitted value,
    JVP, VJP and their vmap equal the same computations under JAX's default promotion (relative
    error 1e-12), or the jitted ones compile to the same program under both: the op promotes
    nothing implicitly, and making that explicit changed no result."""
    rng = _rng(record, "strict_promotion")
    dtypes = tuple(record.dtypes) + (("float32",) if "float32" in record.low_precision else ())
    worst, count, same_program = 0.0, 0, []
    for label, sample in _each_sample(record, dtypes):
        if label.startswith("float32") and not _first_of_dtype(label):
            continue  # float32: the first sample (the code paths are float64's)
        sample = _strict_sample(record, sample, label.split()[0])
        f, args = _closure(record, sample)
        t = [_like(rng, a) for a in args]
        c = jax.tree.map(lambda o: _like(rng, o), jax.eval_shape(f, *args))
        batch = ([_batch(a) for a in args], [_batch(v) for v in t], jax.tree.map(_batch, c))
        inputs = (args, t, c, *batch)
        expected, eager_expected = _strict_program(f)(*inputs), f(*args)
        with strict_promotion():
            eager = f(*args)
            got = _strict_program(f)(*inputs)
        worst = max(worst, _expect_close(f"{label} under strict promotion: eager value", eager, eager_expected, 1e-12))
        try:
            worst = max(worst, _expect_close(f"{label} under strict promotion: value, jvp, vjp and their vmap",
                                             got, expected, 1e-12))
        except CheckFailure:
            # One compiled program under both promotions computes the same thing; its values may
            # still differ from run to run where the platform's kernels are not deterministic
            # (a GPU's atomic accumulations).
            default = _program_text(_strict_program(f).lower(*inputs).compile())
            with strict_promotion():
                strict = _program_text(_strict_program(f).lower(*inputs).compile())
            if strict != default:
                raise
            same_program.append(f"{label} ({_error(got, expected):.1g})")
        count += 1
    if not count:
        return "skipped: no sample with differentiable arguments"
    if same_program:
        return worst, (f"{count} samples; one compiled program under both promotions, whose values differ from "
                       f"run to run at {', '.join(same_program)}")
    return worst, f"{count} samples"


def _program_text(compiled) -> str:
    """A compiled program's optimized HLO computations without their source metadata (the Python
    frames that staged each operation, which differ between two call sites of one program)."""
    text = re.sub(r", metadata=\{[^}]*\}", "", compiled.as_text())
    return "\n".join(line for line in text.splitlines() if line.startswith(("HloModule", "%", "ENTRY", "}", " ")))


_RUNNERS = {
    "gradients": _check_gradients,
    "jvp_vjp": _check_jvp_vjp,
    "formulas": _check_formulas,
    "vmap": _check_vmap,
    "jit": _check_jit,
    "torch": _check_torch,
    "singular": _check_singular,
    "low_precision": _check_low_precision,
    "empty": _check_empty,
    "sharded": _check_sharded,
    "strict_promotion": check_strict_promotion,
}
# The checks that read a sample's shared program, whose depth ``run_check``'s ``full`` sets.
_DEPTH_CHECKS = ("gradients", "jvp_vjp", "vmap", "jit", "torch", "low_precision", "sharded")
# Checks run only on request (``check --strict-promotion``, ``--checks``): not part of ``CHECKS``.
OPT_IN_CHECKS = ("strict_promotion",)


def run_check(record: OpRecord, check: str, full: bool = True) -> CheckResult:
    """Run one check on one record; failures come back as a result, never raise. ``full``:
    every composition on every sample, else the compositions on the record's first sample (the
    module docstring's "Depth"; ``python -m jaxrules check`` without ``--full``)."""
    if check not in _RUNNERS:
        raise ValueError(f"run_check: unknown check {check!r}; choose from {CHECKS}")
    if not jax.config.jax_enable_x64:
        raise RuntimeError('run_check: enable float64 first: jax.config.update("jax_enable_x64", True)')
    start, cpu = time.perf_counter(), time.process_time()
    result = _run(record, check, full)
    result.seconds = time.perf_counter() - start
    result.cpu_seconds = time.process_time() - cpu
    return result


# Checks whose programs a platform computes wrongly outside jaxrules (docs/compatibility.md):
# (record, check) -> (whether the bug applies here, what it is). Such a check still runs: its
# failure is reported as skipped with the bug's description, and its pass as a failure, so the
# entry goes once a release fixes the bug.
PLATFORM_BUGS: dict[tuple[str, str], tuple[Callable[[], bool], str]] = {
    ("scaled_dot_product_attention", "vmap"): (
        compat.triton_gemm_float64_bug,
        "jax 0.12's CUDA backend computes the float64 batched product of an unbatched query wrongly under jit "
        "(XLA's Triton GEMM; XLA_FLAGS=--xla_gpu_enable_triton_gemm=false avoids it)"),
}


def _run(record: OpRecord, check: str, full: bool) -> CheckResult:
    result = _run_unguarded(record, check, full)
    applies, bug = PLATFORM_BUGS.get((record.name, check), (lambda: False, ""))
    if not applies() or result.skipped:
        return result
    if result.passed:
        return CheckResult(record.name, check, False, result.max_error,
                           f"a known platform bug no longer shows: {bug}; remove its entry in PLATFORM_BUGS")
    return CheckResult(record.name, check, True, None, f"known platform bug: {bug} (the check: {result.detail[:200]})",
                       skipped=True)


def _run_unguarded(record: OpRecord, check: str, full: bool) -> CheckResult:
    if record.needs_gpu and jax.default_backend() != "gpu":
        return CheckResult(record.name, check, True, None, f"not applicable: {record.needs_gpu}", skipped=True)
    if record.kernel_backed:
        if missing := dispatch.triton_backend_missing():
            return CheckResult(record.name, check, True, None, f"not applicable: {missing}", skipped=True)
    try:
        outcome = _RUNNERS[check](record, full) if check in _DEPTH_CHECKS else _RUNNERS[check](record)
    except CheckFailure as err:
        return CheckResult(record.name, check, False, None, str(err))
    except Exception as err:  # a crash is a failure too, reported with where it happened
        where = traceback.extract_tb(err.__traceback__)[-1]
        detail = f"{type(err).__name__}: {err} ({where.filename.split('/')[-1]}:{where.lineno})"
        return CheckResult(record.name, check, False, None, detail.replace("\n", " ")[:500])
    if isinstance(outcome, str):
        return CheckResult(record.name, check, True, None, outcome, skipped=True)
    if isinstance(outcome, tuple):
        return CheckResult(record.name, check, True, outcome[0], outcome[1])
    return CheckResult(record.name, check, True, outcome)


def release_programs() -> None:
    """Drop the harness's compiled programs and JAX's caches (``jax.clear_caches``): a process
    that checks many records one after the other (the CLI's workers, the registry tests) calls
    it between records, which keeps its memory flat (about 1.5 GB -> 0.8 GB over 18 records) at
    no cost in time (records rarely share programs)."""
    _SHARED.clear()
    jax.clear_caches()


def check_op(record: OpRecord, checks: Iterable[str] = CHECKS, full: bool = True) -> list[CheckResult]:
    """Run ``checks`` (all by default) on ``record``; ``full``: every composition on every
    sample, else the compositions on the record's first sample (the module docstring's
    "Depth")."""
    return [run_check(record, c, full) for c in checks]


# ----------------------------------------------------------------------------------------------
# The ``sharded`` check (``check_sharded``)
#
# The harness's ``sharded`` check: a record's op under ``jit`` with its inputs sharded
# along a batch axis over every device, in both of JAX's mesh modes (``AxisType.Auto`` and
# ``AxisType.Explicit``), against the same program unsharded.
#
# Two forms per record, from its first sample with a non-empty differentiable argument (float64):
#
# * ``vmap``: every differentiable argument gets a leading batch axis (one entry per device) and
#   the op is vmapped over it; all of them are sharded ``P("data")``;
# * ``direct``: the first argument's axis 0 is tiled to one entry per device and sharded, the
#   other differentiable arguments (weights) stay replicated, as in data-parallel training
#   (skipped where the op refuses the longer axis 0, where its first argument is not
#   differentiated, and for a vector, whose axis 0 is its data).
#
# and a third, ``shard_map``: the ``vmap`` form under a user's ``jax.shard_map`` (each device runs its
# slice of the batch, with JAX's check of varying mesh axes, ``check_vma``), where scans with
# constant carries and kernels' output types broke (left out for records that run interpreted
# Pallas kernels on a CPU: JAX's interpreter mixes varying and invariant values there).
#
# For each: the outputs, the JVP and the VJP (of ``sum(sin(real(out)))`` over the inexact
# outputs) equal the unsharded ones, and the gradient of every batch-sharded argument keeps the
# batch sharding, unless it is zero (a constant, which XLA replicates); in the direct form only
# under an ``Explicit`` mesh (under ``Auto``, XLA's propagation picks the shardings of a ``jit``'s
# un-annotated outputs: replicated after a reduction over the batch). Needs several devices: run
# in a process with 8 host devices on a CPU (``HOST_DEVICES``; ``tests/test_sharded.py``); in a
# process with one device it is skipped, saying so. ``modes`` (``check --sharded-modes``,
# ``$JAXRULES_SHARDED_MODES``) picks the mesh modes, both by default; each form compiles one
# unsharded program and one per mode (about 0.36 CPU s a record with both, 0.23 with one).

_SHARDED_MODES = {"auto": AxisType.Auto, "explicit": AxisType.Explicit}


class ShardedMismatch(AssertionError):
    """The sharded program differs from the unsharded one (the message says where)."""


def _sharded_loss(out):
    leaves = [o for o in jax.tree_util.tree_leaves(out) if jnp.issubdtype(jnp.result_type(o), jnp.inexact)]
    return sum(jnp.sum(jnp.sin(jnp.real(o))) for o in leaves)


def _sharded_forms(record, rng, batch):
    """``[(form, sample, diff_args, batched)]``: ``_sharded_form_function(record, sample, form)(*diff_args)``
    the op's outputs."""
    samples = [s for s in record.samples(rng, np.float64)
               if s.diff_argnums() and all(np.size(s.args[i]) > 0 for i in s.diff_argnums())]
    if not samples:
        return []
    sample = samples[0]
    argnums = sample.diff_argnums()

    def jitter(shape):
        return 1 + 0.01 * rng.standard_normal(shape)

    forms = [("vmap", sample,
              [np.asarray(sample.args[i])[None] * jitter((batch, *np.shape(sample.args[i]))) for i in argnums],
              [True] * len(argnums))]
    first = np.asarray(sample.args[0])
    if argnums[0] == 0 and first.ndim >= 2 and first.shape[0]:  # a vector's axis 0 is its data, not a batch
        tiled = np.concatenate([first] * -(-batch // first.shape[0]))[:batch] * jitter((batch, *first.shape[1:]))
        forms.append(("direct", sample, [tiled] + [np.asarray(sample.args[i]) for i in argnums[1:]],
                      [True] + [False] * (len(argnums) - 1)))
    return forms


def _sharded_form_function(record, sample, form):
    """The record's function of the sample's differentiable arguments, vmapped in the ``vmap``
    form."""
    call, _ = _closure(record, sample)
    return jax.vmap(call) if form == "vmap" else call


# Where the record's public function has a namesake in JAX, JAX's own function is what a user
# would otherwise call: a sharding JAX refuses with a ``ShardingTypeError`` (an uneven split of
# a sharded axis under an ``Explicit`` mesh, operands of different shardings) is refused alike.
_JAX_NAMESAKES = {"jaxrules.numpy.": "jax.numpy.", "jaxrules.scipy.": "jax.scipy.",
                  "jaxrules.linalg.": "jax.lax.linalg."}


def _resolve_public(path: str):
    module, _, attr = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return None


def _jax_namesake(record):
    """``(name, fn)``: the record's function with its public function replaced by JAX's function of
    the same name (``jaxrules.numpy.pad`` -> ``jax.numpy.pad``), or None. The record's function is
    the public one, or a lambda calling it by its name."""
    public = record.public[0]
    ours = _resolve_public(public)
    for prefix, theirs in _JAX_NAMESAKES.items():
        name = theirs + public[len(prefix):]
        namesake = _resolve_public(name) if public.startswith(prefix) else None
        if namesake is None or ours is None:
            continue
        fn = record.fn
        if fn is ours:
            return name, namesake
        attr = public.rpartition(".")[2]
        if getattr(fn, "__globals__", {}).get(attr) is ours:  # a lambda calling it
            swapped = types.FunctionType(fn.__code__, {**fn.__globals__, attr: namesake}, fn.__name__,
                                         fn.__defaults__, fn.__closure__)
            swapped.__kwdefaults__ = fn.__kwdefaults__
            return name, swapped
    return None


def _jax_refuses_too(record, sample, form, args) -> str | None:
    """The name of JAX's namesake of the record's function when it, too, raises a
    ``ShardingTypeError`` on ``args`` (already sharded) under ``jit``; else None."""
    namesake = _jax_namesake(record)
    if namesake is None:
        return None
    fn = _sharded_form_function(dataclasses.replace(record, fn=namesake[1]), sample, form)
    try:
        jax.jit(fn).lower(*args)
    except Exception as err:  # noqa: BLE001 - which error JAX raises is the question
        return namesake[0] if type(err).__name__ == "ShardingTypeError" else None
    return None


def _sharded_programs(fn, n):
    """``(values, (loss, jvp), (loss, grads))`` of ``fn`` under ``jit`` for tangents ``ts``: one
    ``jax.linearize`` of the loss with the values as its auxiliary output (one forward pass, not
    three), the JVP its linear map, the gradient its transpose (what ``jax.grad`` computes)."""
    def run(args, tangents):
        def loss(*a):
            out = fn(*a)
            return _sharded_loss(out), out

        value, lin, out = jax.linearize(loss, *args, has_aux=True)
        grads = jax.linear_transpose(lin, *args)(jnp.ones_like(value))
        return out, (value, lin(*tangents)), (value, tuple(grads))

    return jax.jit(run)


def _sharded_leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree) if jnp.issubdtype(jnp.result_type(x), jnp.inexact)]


def _sharded_compare(label, got, want) -> float:
    worst = 0.0
    for i, (g, w) in enumerate(zip(_sharded_leaves(got), _sharded_leaves(want))):
        if g.shape != w.shape:
            raise ShardedMismatch(f"{label}: output {i} has shape {g.shape}, unsharded {w.shape}")
        finite = np.isfinite(w)
        if not np.array_equal(finite, np.isfinite(g)) or not np.array_equal(g[~finite], w[~finite], equal_nan=True):
            raise ShardedMismatch(f"{label}: output {i}'s non-finite entries differ from the unsharded program's")
        scale = 1.0 + np.max(np.abs(w[finite]), initial=0.0)
        err = float(np.max(np.abs(g[finite] - w[finite]), initial=0.0)) / scale
        if not err <= 1e-9:
            raise ShardedMismatch(f"{label}: output {i} differs from the unsharded program's by {err:.3g} (relative)")
        worst = max(worst, err)
    return worst


def modes_in_use(full: bool = True) -> tuple[str, ...]:
    """The mesh modes ``check_sharded`` uses by default: ``$JAXRULES_SHARDED_MODES`` (comma-separated;
    ``python -m jaxrules check --sharded-modes`` sets it for its workers), else both (``full``) or
    ``explicit`` alone, the kind of mesh ``jax.make_mesh`` makes by default."""
    default = tuple(_SHARDED_MODES) if full else ("explicit",)
    names = tuple(m for m in os.environ.get("JAXRULES_SHARDED_MODES", "").split(",") if m) or default
    unknown = set(names) - set(_SHARDED_MODES)
    if unknown:
        raise ValueError(f"check_sharded: unknown mesh modes {sorted(unknown)}; choose from "
                         f"{', '.join(_SHARDED_MODES)}")
    return names


def interpreted_kernels(record) -> bool:
    """Whether the record runs the fused Pallas kernels in interpret mode here: a
    ``kernel_backed`` record off a GPU."""
    return record.kernel_backed and jax.default_backend() != "gpu"


def _check_shard_map(fn, diff, tangents, want, devices) -> float:
    """The ``vmap`` form's program under ``jax.shard_map`` over ``devices`` against ``want``."""
    mesh = jax.make_mesh((devices,), ("data",), axis_types=(AxisType.Explicit,))
    mapped = jax.shard_map(fn, mesh=mesh, in_specs=(PSpec("data"),) * len(diff), out_specs=PSpec("data"))
    sharding = NamedSharding(mesh, PSpec("data"))
    got = _sharded_programs(mapped, len(diff))([jax.device_put(d, sharding) for d in diff],
                                       [jax.device_put(t, sharding) for t in tangents])
    return _sharded_compare("vmap form under jax.shard_map", jax.block_until_ready(got), want)


def check_sharded(record, forms=("vmap", "direct", "shard_map"), modes=None, full: bool = True) -> float | str:
    """The worst relative difference between the sharded and unsharded programs over ``forms``
    and ``modes`` (default: ``modes_in_use(full)``, both unless told otherwise), or why the check does
    not apply; raises ``ShardedMismatch`` (or the sharded program's own error) on a failure. Each
    form compiles one unsharded program and one per mode. ``full=False`` leaves out the
    ``shard_map`` form and the ``Auto`` mesh unless asked for (``modes_in_use``)."""
    modes = modes_in_use(full) if modes is None else tuple(modes)
    devices = jax.device_count()
    if devices < 2:
        return (f"needs several devices ({devices} here); `python -m jaxrules check` splits a CPU into "
                f"{HOST_DEVICES} devices for it")
    rng = np.random.default_rng(19)
    built = [f for f in _sharded_forms(record, rng, devices)
             if f[0] in forms or (f[0] == "vmap" and "shard_map" in forms)]
    if not built:
        return "no sample with a non-empty differentiable argument"
    worst, ran, refused, unsharded_errors = 0.0, [], [], []
    for form, sample, diff, batched in built:
        fn = _sharded_form_function(record, sample, form)
        tangents = [rng.standard_normal(np.shape(d)).astype(np.asarray(d).dtype) for d in diff]
        program = _sharded_programs(fn, len(diff))
        try:
            want = jax.block_until_ready(program(diff, tangents))
        except Exception as err:  # noqa: BLE001 - the op refuses this form's input (the other checks cover it)
            first_line = (str(err).splitlines() or [""])[0][:200]
            unsharded_errors.append(f"{form}: {type(err).__name__}: {first_line}")
            continue
        if form == "vmap" and "shard_map" in forms and full and not interpreted_kernels(record):
            worst = max(worst, _check_shard_map(fn, diff, tangents, want, devices))
            ran.append("shard_map")
        if form not in forms:
            continue
        for mode in modes:
            kind = _SHARDED_MODES[mode]
            label = f"{form} form, {mode} mesh"
            mesh = jax.make_mesh((devices,), ("data",), axis_types=(kind,))
            with jax.set_mesh(mesh):
                specs = [NamedSharding(mesh, PSpec("data") if b else PSpec()) for b in batched]
                args = [jax.device_put(d, s) for d, s in zip(diff, specs)]
                ts = [jax.device_put(t, s) for t, s in zip(tangents, specs)]
                try:
                    got = jax.block_until_ready(program(args, ts))
                except Exception as err:
                    refusal = type(err).__name__ == "ShardingTypeError"
                    namesake = refusal and _jax_refuses_too(record, sample, form, args)
                    if not namesake:
                        raise
                    refused.append(f"{label}: refused (ShardingTypeError), as {namesake} refuses it")
                    continue
            worst = max(worst, _sharded_compare(label, got, want))
            if form == "direct" and mode == "auto":
                continue  # XLA's propagation picks un-annotated outputs' shardings (a reduction's: replicated)
            for i, (g, w, b) in enumerate(zip(got[2][1], want[2][1], batched)):
                spec = getattr(g.sharding, "spec", None)
                zero = not np.any(np.asarray(w))  # a zero gradient is a constant: XLA replicates it
                if b and not zero and (spec is None or not spec or spec[0] != "data"):
                    raise ShardedMismatch(f"{label}: the gradient of batch-sharded argument {i} lost the batch "
                                          f"sharding ({g.sharding})")
        ran.append(form)
    if not ran:
        return f"the op refuses both forms' inputs unsharded ({'; '.join(unsharded_errors)})"
    return (worst, "; ".join(refused)) if refused else worst
