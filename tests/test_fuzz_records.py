"""Property-based fuzzing of every registered record.

Each case starts from one of the record's own samples (``record.samples(rng, dtype)``, in a
dtype the record declares) and varies it in one way, drawn by hypothesis:

* ``dtype``     the differentiable arrays cast to float32 / bfloat16 (the record's
                ``low_precision``), compared with torch in float64 on the rounded inputs;
* ``size``      every dimension of size ``n`` (in every array) cut to 0 or 1 (dimensions of the
                same size are usually tied: ``matmul``'s inner one, a loss's batch);
* ``scalar``    the arrays shaped like the first one replaced by their first entry (0-d);
* ``broadcast`` one differentiable array cut to length 1 along an axis, or its leading axis dropped;
* ``axis``      ``axis`` (where the op takes one) replaced by another, negative and out-of-range
                ones included; ``keepdims`` toggled (where the op takes it);
* ``nonfinite`` NaN and +-inf written at random places of the differentiable arrays (values only:
                the gradients' non-finite conventions are tests/test_nonfinite.py's);
* ``integer``   one differentiable array cast to int64 or bool, asked for its VJP (torch's autograd
                refuses integers; jaxrules promotes them as jax.numpy does: bool and integers narrower than
                64 bits to float32, int64 to float64; JAX gives the integer argument a float0 cotangent:
                either that or a clear ``TypeError``).

The property, against torch 2.13 (``record.torch_fn`` through the harness's helpers in
``jaxrules.testing``): the op (value and VJP in a random cotangent, one ``jax.jit`` program) either

* matches torch within the dtype's tolerance (same shapes, same NaN and inf positions, output in
  the input's precision; with non-finite input, the entries where torch is finite), or
* raises the library's own ``ValueError``/``TypeError`` whose message names the op (and, for an
  out-of-range axis, the argument),

never an internal JAX/XLA error or a Python crash (``IndexError``, ``ZeroDivisionError`` ...),
never a NaN where torch gives a number, and never accepts an out-of-range axis torch refuses.
Refusing what torch accepts (clearly) and accepting what torch refuses are counted, not failures.
Known failures are listed with a case that shows each (``FUZZ_OPEN``: jaxrules bugs, open;
``REFERENCE_DIFFERS``: where torch is no reference), reported as warnings and pinned by
``test_known_still_fail``; ``NO_RUN``/``NO_REFERENCE``: cases that hang or crash the process.

Budget (compilation is the cost; the variations reuse the samples' shapes): each run fuzzes a
rotating subset of the records, chosen by ``JAXRULES_FUZZ_SEED`` or else the commit
(``git rev-parse HEAD``; fixed seed 0 outside git), ``FUZZ_SUBSET`` records with
``FUZZ_EXAMPLES`` cases each (72 records x 6 cases took 84 s of pytest time on 2 cores with the
known-failure pins; a run takes 32 records).
``JAXRULES_FUZZ_ALL=1`` fuzzes every record;
``JAXRULES_FUZZ_EXAMPLES=N`` sets the cases per record; ``JAXRULES_FUZZ_RECORDS=glob,...`` picks records
(``registry.records``' patterns, with ``JAXRULES_FUZZ_ALL``); ``JAXRULES_FUZZ_LOG=path`` appends one
JSON line per case (the triage of a full run) and reports failures without failing.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import warnings
import zlib

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from _rotation import commit_seed, rotating_subset
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from jaxrules import registry
from jaxrules.registry import Sample
from jaxrules.testing import _TOL, _error, _from_torch, _like, _to_torch, _torch, _torch_grads

torch = _torch()

FUZZ_EXAMPLES = int(os.environ.get("JAXRULES_FUZZ_EXAMPLES", "6"))
FUZZ_ALL = os.environ.get("JAXRULES_FUZZ_ALL", "") not in ("", "0")
FUZZ_SUBSET = 32  # records per CI run (of 189): 72 took 84 CPU s, over CI's 15 minutes; see the docstring
FUZZ_LOG = os.environ.get("JAXRULES_FUZZ_LOG")
KINDS = ("dtype", "size", "scalar", "broadcast", "axis", "nonfinite", "integer")

# Outcomes: the failures (the property broken) and the others (counted).
FAILURES = ("crash", "unclear error", "value", "silent nan", "vjp", "dtype", "accepted bad axis")

# (kind, record): not run at all (a case that hangs or kills the process). Empty: LAPACK's gesdd
# hangs on +-inf entries, so the SVD-based ops zero the poisoned matrices before the SVD, and their
# non-finite cases (svd, svdvals, pinv, norm, adjugate, det, lstsq) run.
NO_RUN: dict[tuple[str, str], str] = {}

# (kind, record): torch gives no reference there; ours is still run (it must return or refuse clearly).
NO_REFERENCE = {
    ("nonfinite", "eig"): "torch.linalg.eig segfaults on NaN input (MKL: parameter 3 incorrect on entry to DGEBAL)",
    ("nonfinite", "eigvals"): "torch.linalg.eigvals segfaults on NaN input (MKL: DGEBAL)",
    ("size", "pdist"): "torch.pdist of a (0, n) input dies of SIGFPE",
}


@dataclasses.dataclass(frozen=True)
class Case:
    """One variation of sample ``index`` of the record's ``base`` dtype samples: ``kind`` (see the
    module docstring) with its parameters (``arg``: an argument position; ``size``/``to``: the
    dimension cut; ``axis``; ``cast``: a dtype; ``salt``: the seed of random positions)."""

    base: str = "float64"
    index: int = 0
    kind: str = "dtype"
    cast: str | None = None
    arg: int = 0
    size: int = 0
    to: int = 0
    axis: object = None
    salt: int = 0


# Known failures, keyed "record/kind/outcome": (a case that shows it, the reason). A failure of that
# record, kind and outcome is reported (a warning), not failed; ``test_known_still_fail`` runs each
# case and fails once it no longer fails that way (then remove the entry). FUZZ_OPEN: bugs of
# jaxrules, to fix (in the op files, not here); REFERENCE_DIFFERS: torch is no reference there.
_FFT_ZERO = ("a jax.numpy name: jax.numpy.fft's values (XLA's FFT) and numpy.fft's (pocketfft), checked equal to "
             "ours, NaN pattern included (tests/test_fuzzed_edge_cases.py): a NaN or infinite entry of the half "
             "spectrum whose coefficient at an output point is exactly 0 meets that 0 factor (inf * 0 = NaN); torch's "
             "CPU FFT (MKL in this build) gives the finite rest there, the output not depending on that entry (and "
             "+-inf where these give NaN). (Not the DC/Nyquist imaginary parts, whose NaN is ignored as torch's: "
             "pinned in tests/test_fuzzed_edge_cases.py)")
FUZZ_OPEN: dict[str, tuple[Case, str]] = {}
_GRID_NAN = ("a NaN (or reflected infinite) sampling coordinate of a 3-d grid_sample: torch's 3-d CPU kernel "
             "clamps it to the last index (std::min/max order) where its 2-d kernel clamps it to 0, and its 3-d "
             "zero padding gives 0 where the 2-d one gives NaN; ours follows the 2-d kernel in every dimension "
             "(pinned: tests/test_resampling.py, tests/test_fuzzed_edge_cases.py) ")
_KEEPDIMS_NONE = ("a jax.numpy name: axis=None with keepdims=True keeps every axis with length 1 (jax.numpy's and "
                  "numpy's shape (1, 1)); torch's reduction over all entries has no keepdim (0-d)")
REFERENCE_DIFFERS: dict[str, tuple[Case, str]] = {
    "irfftn/nonfinite/silent nan": (Case("float64", 0, "nonfinite", salt=11924),
                                    _FFT_ZERO + " (here a NaN at X[1, 3] of a (4, 10) output: its coefficient "
                                    "cos(2 pi (t1/4 + 3 t2/10)) is 0 at t = (1, 0), (1, 5), (3, 0), (3, 5))"),
    "irfft/nonfinite/silent nan": (Case("float64", 1, "nonfinite", salt=36742),
                                   _FFT_ZERO + " (here X_3 = -inf of n = 12: cos(2 pi 3 t / 12) = 0 at t = 3, 9)"),
    "median/axis/value": (Case("float64", 3, "axis"), _KEEPDIMS_NONE),
    "ctc_loss/size/silent nan": (Case("float64", 0, "size", arg=0, size=4, to=1),
                                 "one class left (the blank) beside targets of classes 1-3: torch's CPU kernel reads "
                                 "log_probs past the class axis (here a loss of -0.82, below the least possible 0); "
                                 "ours refuses the targets when concrete and is NaN traced (inside jaxrules.checked: "
                                 "a ValueError)"),
    "scaled_dot_product_attention/integer/value": (
        Case("float64", 5, "integer", arg=3, cast="bool"),
        "a float attn_mask cast to bool is a boolean mask (True: attend), for torch as for jaxrules; the fuzz's "
        "reference promotes the integer case's argument back to float, a 0/1 additive mask, which means something "
        "else"),
    "scaled_dot_product_attention/nonfinite/silent nan": (
        Case("float64", 1, "nonfinite", arg=0, salt=407),
        "an infinite query entry makes every logit of its row -inf: the row's softmax is undefined, NaN (the "
        "record's documented deviation, pinned in tests/test_attention.py); torch's _safe_softmax gives 0"),
    "nanmedian/axis/value": (Case("float64", 2, "axis"), _KEEPDIMS_NONE),
    "eigvals/dtype/value": (Case("float64", 1, "dtype", cast="float32"),
                            "eigenvalues come in LAPACK's order, which a float32 run need not share with torch's "
                            "float64 one (the harness's low_precision check compares them in one order)"),
    "eigvals/integer/value": (Case("float64", 1, "integer", arg=0, cast="bool"),
                              "a 0/1 matrix computes in float32, as jax.numpy promotes bool; such matrices are "
                              "often defective, their eigenvalues sensitive as sqrt(eps) (2e-4 of them here), "
                              "against torch's float64 reference"),
    "eig/integer/value": (Case("complex128", 1, "integer", arg=0, cast="bool"),
                          "a 0/1 matrix computes in float32, as jax.numpy promotes bool; such matrices are often "
                          "defective (here eigenvectors 0.6 apart), their eigenvectors not determined to float32's "
                          "precision, against torch's float64 reference"),
    "lu/nonfinite/value": (Case("float64", 1, "nonfinite", salt=4008),
                           "the pivot order with +-inf/NaN entries is the LAPACK build's (comparisons with NaN)"),
    "lu_factor/nonfinite/value": (Case("float64", 1, "nonfinite", salt=4008),
                                  "the pivot order with +-inf/NaN entries is the LAPACK build's"),
    "cross_entropy/size/value": (Case("float64", 4, "size", size=4),
                                 "zero classes with probability targets: the loss is a mean of empty sums, 0; torch "
                                 "divides by numel / C = 0 / 0 (NaN)"),
    "block_diag/size/vjp": (Case("complex128", 0, "size", size=3),
                            "a 1-d empty block (shape (0,)) is a 1x0 row in the value (torch's too) and in our VJP; "
                            "torch 2.13's block_diag_backward skips that row and reads the later blocks' gradients "
                            "one row too high (pinned: tests/test_fuzzed_edge_cases.py)"),
    "grid_sample/nonfinite/value": (Case("float64", 4, "nonfinite", salt=5),
                                    _GRID_NAN + "(-inf: the first row read; torch: 0.539, the last row's)"),
    "grid_sample/nonfinite/silent nan": (Case("float64", 4, "nonfinite", salt=7),
                                         _GRID_NAN + "(NaN: the first row's NaN read; torch: 1.21, the last row's)"),
    "interpolate/size/value": (
        Case("float64", 13, "size", size=4, to=1),
        "antialias with an output width of 1: torch 2.13's CPU forward repeats its first output row; ours is the "
        "separable filter (the record's documented deviation, pinned in tests/test_resampling.py)"),
    "scaled_dot_product_attention/size/value": (
        Case("float64", 1, "size", size=3, to=0),
        "an empty query or value axis with broadcast batch axes: the output has the broadcast batch shape, as a "
        "non-empty one has; torch 2.13 returns the query's batch shape there (pinned: tests/test_attention.py)"),
    "group_norm/size/vjp": (Case("float64", 0, "size", size=3), "an empty spatial axis: the weight's gradient is "
                            "an empty sum, 0; torch: NaN (its rstd of an empty group)"),
}
_NONFINITE = "tests/test_nonfinite.py's TORCH_WRONG: "
REFERENCE_DIFFERS.update({
    "sign/nonfinite/silent nan": (Case("float64", 0, "nonfinite", salt=13471),
                                  _NONFINITE + "sign(NaN) = NaN as jax.numpy and NumPy; torch.sign(NaN) = 0"),
    "slogdet/nonfinite/silent nan": (Case("float64", 1, "nonfinite", salt=16384),
                                     _NONFINITE + "the sign of a NaN determinant is NaN; torch: 0"),
    "slogdet/nonfinite/value": (Case("float64", 0, "nonfinite", salt=16384),
                                "a 3x3 matrix whose infinite entries give det = +inf (cofactor expansion): (1, inf); "
                                "torch's LU gives (0, NaN)"),
    "svd/nonfinite/silent nan": (Case("complex128", 1, "nonfinite", salt=5606),
                                 "the SVD of a matrix with infinite entries is undefined: ours is NaN throughout; "
                                 "torch's LAPACK call reports an illegal value (DLASCL) and returns NaN singular "
                                 "values beside finite leftovers in U (1 here); jax.numpy.linalg.svd with the "
                                 "vectors gave no result within 5 minutes on this input (jax 0.10.2, CPU)"),
    "lu_factor/nonfinite/silent nan": (Case("float64", 2, "nonfinite", salt=52),
                                       "a NaN in a pivot column: which row LAPACK's pivot search (i?amax) takes "
                                       "past a NaN is the build's choice; ours is jax.scipy.linalg.lu_factor's "
                                       "result entry for entry (NaN where torch's build pivoted on the infinite "
                                       "entry)"),
    "power/nonfinite/silent nan": (Case("complex128", 0, "nonfinite", salt=218),
                                   "a jax.numpy name: jnp.power's values (NaN for a complex infinite base or exponent; "
                                   "torch: 0 where the modulus tends to 0)"),
    "power_scalar_base/nonfinite/silent nan": (Case("complex128", 0, "nonfinite", salt=2904),
                                               "a jax.numpy name: jnp.power's values (2 ** (-inf + 0j) = NaN; "
                                               "torch: 0)"),
})
# On a GPU the decompositions are cuSOLVER's and the convolutions cuDNN's: with a NaN or infinite
# entry they give NaN at outputs where torch's CPU kernels (LAPACK's; a convolution that leaves out
# the padding's products) give finite values. Known there only; the CPU pins torch's values.
GPU_DIFFERS: dict[str, tuple[Case, str]] = {} if jax.default_backend() != "gpu" else {
    "qr/nonfinite/silent nan": (Case("float64", 3, "nonfinite", salt=225),
                                "cuSOLVER's QR spreads a non-finite entry over more of Q than LAPACK's"),
    "householder_product/nonfinite/silent nan": (Case("float64", 2, "nonfinite", salt=225),
                                                 "cuSOLVER's product of reflectors spreads a non-finite entry"),
    "conv_transpose/nonfinite/silent nan": (Case("float64", 3, "nonfinite", salt=225),
                                            "cuDNN multiplies the padding's zeros by a non-finite entry: NaN"),
    "eigvals/nonfinite/crash": (Case("float64", 2, "nonfinite", salt=12662),
                                "cuSOLVER's geev fails on a non-finite matrix (JAX's INTERNAL error, torch raises "
                                "too); LAPACK's gives NaN"),
    "eig/nonfinite/crash": (Case("float64", 1, "nonfinite", salt=4420),
                            "cuSOLVER's geev fails on a non-finite matrix, as for eigvals"),
}
KNOWN = {**FUZZ_OPEN, **REFERENCE_DIFFERS, **GPU_DIFFERS}
# Entries whose difference is an order the LAPACK build chooses: another machine's build may agree
# with torch's there (eigvals/dtype/value gave "ok" on a machine with numpy 2.4.6 and "value" on
# another, eig/integer/value "ok" after a fresh install of the test dependencies; cuSOLVER's LU
# pivots as torch's CPU on the lu entries' cases; eig's geev failure was seen with jax 0.12.0.1's
# CUDA libraries, and whether another release's fail at that case is unchecked), so
# ``test_known_still_fail`` accepts "ok" for them.
BUILD_DEPENDENT = {"eigvals/dtype/value", "eig/integer/value", "lu_factor/nonfinite/silent nan",
                   "lu/nonfinite/value", "lu_factor/nonfinite/value", "eig/nonfinite/crash"}
# Entries whose reference is a behaviour of torch 2.13, the reference version; another torch may
# agree with jaxrules there (torch 2.11 broadcasts an empty attention's batch axes).
TORCH_2_13_ONLY = {"scaled_dot_product_attention/size/value"}


# ----------------------------------------------------------------------------------------------
# Building a case's call from the record's samples


def _samples(record, dtype: str) -> list[Sample]:
    rng = np.random.default_rng(zlib.crc32(f"{record.name}/fuzz/{dtype}".encode()))
    return record.samples(rng, np.dtype(dtype))


_SAMPLES: dict = {}


def _base_samples(record, dtype: str) -> list[Sample]:
    key = (record.name, dtype)
    if key not in _SAMPLES:
        _SAMPLES[key] = [s for s in _samples(record, dtype) if s.diff_argnums()]
    return _SAMPLES[key]


def _params(record) -> dict:
    try:
        return dict(inspect.signature(record.fn).parameters)
    except (TypeError, ValueError):
        return {}


def _is_array(a) -> bool:
    return isinstance(a, np.ndarray)


def _cut(a: np.ndarray, size: int, to: int) -> np.ndarray:
    """``a`` with every axis of length ``size`` sliced to its first ``to`` entries."""
    return a[tuple(slice(0, to) if n == size else slice(None) for n in a.shape)]


def _cast(a: np.ndarray, dtype: str) -> np.ndarray:
    if np.iscomplexobj(a):
        return a.astype(np.complex64)  # (no complex bfloat16: complex64 for both)
    return a.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)


def build(record, case: Case) -> tuple[Sample, tuple[int, ...], str]:
    """The call of ``case``: the sample, the positions differentiated and the tolerance's dtype."""
    sample = _base_samples(record, case.base)[case.index]
    args, kwargs = list(sample.args), dict(sample.kwargs)
    diff = sample.diff_argnums()
    prec = case.base
    if case.kind == "dtype":
        args = [_cast(a, case.cast) if i in diff else a for i, a in enumerate(args)]
        prec = case.cast if not any(np.iscomplexobj(args[i]) for i in diff) else "complex64"
    elif case.kind == "size":
        # (not unsigned arrays: PRNG keys, as dropout's)
        args = [_cut(a, case.size, case.to) if _is_array(a) and a.dtype.kind != "u" else a for a in args]
    elif case.kind == "scalar":
        shape = args[diff[0]].shape
        args = [a[(0,) * a.ndim] if _is_array(a) and a.shape == shape else a for a in args]
        args = [np.asarray(a) if isinstance(a, np.generic) else a for a in args]
    elif case.kind == "broadcast":
        a = args[case.arg]
        cut = tuple(slice(0, 1) if k == case.axis else slice(None) for k in range(a.ndim))
        args[case.arg] = np.asarray(a[0]) if case.axis is None else a[cut]
    elif case.kind == "axis":
        if case.axis == "keepdims":
            kwargs["keepdims"] = not kwargs.get("keepdims", _params(record)["keepdims"].default)
        else:  # (where the sample passes it: positionally or by keyword)
            bound = inspect.signature(record.fn).bind_partial(*args, **kwargs)
            bound.arguments["axis"] = case.axis
            args, kwargs = list(bound.args), dict(bound.kwargs)
    elif case.kind == "nonfinite":
        rng = np.random.default_rng(case.salt)
        for i in diff:
            a = args[i].copy()
            flat = a.reshape(-1)
            hit = rng.random(flat.shape) < 0.3
            flat[hit] = rng.choice([np.nan, np.inf, -np.inf], size=int(hit.sum()))
            args[i] = a
    elif case.kind == "integer":
        a = args[case.arg]
        args[case.arg] = (a.real > 0) if case.cast == "bool" else np.round(a.real * 2).astype(np.int64)
    return Sample(tuple(args), kwargs), diff, prec


# ----------------------------------------------------------------------------------------------
# Drawing cases


def _axis_options(record, sample: Sample) -> list:
    params = _params(record)
    options = []
    if "axis" in params:
        ndim = sample.args[sample.diff_argnums()[0]].ndim
        options += list(range(-ndim - 2, ndim + 2))
        if params["axis"].default is None:
            options.append(None)
    if "keepdims" in params:
        options.append("keepdims")
    return options


@st.composite
def cases(draw, record) -> Case:
    bases = [d for d in record.dtypes if _base_samples(record, d)]
    base = draw(st.sampled_from(bases))
    samples = _base_samples(record, base)
    index = draw(st.integers(0, len(samples) - 1))
    sample = samples[index]
    diff = sample.diff_argnums()
    sizes = sorted({n for a in sample.args if _is_array(a) for n in a.shape if n >= 1})
    axes = _axis_options(record, sample)
    first = sample.args[diff[0]]
    excluded = {"dtype": not record.low_precision, "size": not sizes, "axis": not axes,
                "scalar": not (first.ndim and first.size), "broadcast": not any(sample.args[i].ndim for i in diff[1:])}
    kinds = [k for k in KINDS if not excluded.get(k)]
    kind = draw(st.sampled_from(kinds))
    if kind == "dtype":
        return Case(base, index, kind, cast=draw(st.sampled_from(record.low_precision)))
    if kind == "size":
        size = draw(st.sampled_from(sizes))
        return Case(base, index, kind, size=size, to=draw(st.sampled_from([0, 1] if size > 1 else [0])))
    if kind == "broadcast":
        arg = draw(st.sampled_from([i for i in diff[1:] if sample.args[i].ndim]))
        shape = sample.args[arg].shape  # (axis None: the leading axis dropped, where it has an entry)
        axes = [None][: bool(shape[0])] + [*range(len(shape))]
        return Case(base, index, kind, arg=arg, axis=draw(st.sampled_from(axes)))
    if kind == "axis":
        return Case(base, index, kind, axis=draw(st.sampled_from(axes)))
    if kind == "nonfinite":
        return Case(base, index, kind, salt=draw(st.integers(0, 2**16)))
    if kind == "integer":
        return Case(base, index, kind, arg=draw(st.sampled_from(diff)), cast=draw(st.sampled_from(["int64", "bool"])))
    return Case(base, index, kind)


# ----------------------------------------------------------------------------------------------
# Running a case: ours (one jitted program per call structure) against torch


def _static_key(sample: Sample, diff) -> str:
    parts = []
    for i, a in enumerate(sample.args):
        if i in diff:
            parts.append("*")
        elif _is_array(a):
            parts.append(f"{a.dtype}{a.shape}:{zlib.crc32(np.ascontiguousarray(a).tobytes())}")
        else:
            parts.append(repr(a))
    return "|".join(parts) + repr(sorted(sample.kwargs.items(), key=lambda kv: kv[0]))


_PROGRAMS: dict = {}


def _program(record, sample: Sample, diff):
    """``program(diff_args, ct) -> (value, vjp)``, jitted; the other arguments fixed (cached by
    their values, so that the jit's own cache reuses the compiled programs across cases). Kept for
    one record at a time: JAX's caches are dropped when the record changes (memory stays flat)."""
    if _PROGRAMS.get("record") != record.name:
        _PROGRAMS.clear()
        _PROGRAMS["record"] = record.name
        jax.clear_caches()
    key = (record.name, _static_key(sample, diff))
    if key not in _PROGRAMS:
        def f(*d):
            args = list(sample.args)
            for i, v in zip(diff, d):
                args[i] = v
            return record.fn(*args, **sample.kwargs)

        def program(d, ct):
            value, pullback = jax.vjp(f, *d)
            return value, pullback(ct)

        _PROGRAMS[key] = (f, jax.jit(program))
    return _PROGRAMS[key]


_DUNDER = {"__add__": "add", "__sub__": "subtract", "__mul__": "multiply", "__truediv__": "divide",
           "__pow__": "power"}


def _names(record) -> set[str]:
    """The names a clear error of ``record`` may give: the record's, its public functions' (the
    nested records build their arguments with ``from_jagged``: its errors name it)."""
    names = {record.name, record.name.split("[")[0].split(".")[-1]}
    for public in record.public:
        name = public.split("(")[0].split(".")[-1]
        names.add(_DUNDER.get(name, name))
    if record.name.startswith("nested."):
        names.add("from_jagged")
    return names


def _clear(record, err: Exception) -> bool:
    return isinstance(err, ValueError | TypeError) and any(n in str(err) for n in _names(record))


def _upcast(sample: Sample, promote=(), base="float64") -> Sample:
    """``sample`` in float64/complex128 (and the integer arrays at ``promote`` in ``base``: float64,
    or complex128 beside complex arguments, the values jaxrules computes with once it promotes
    them and meets the other arguments; torch's integer arithmetic and mixed dtypes are not the
    reference)."""
    def up(i, a):
        if not _is_array(a) or not (_inexact(a) or i in promote):
            return a
        return a.astype(base if i in promote else np.complex128 if np.iscomplexobj(a) else np.float64)

    return Sample(tuple(up(i, a) for i, a in enumerate(sample.args)), sample.kwargs)


def _torch_reference(record, sample: Sample, ct, with_grads: bool):
    """torch's value and gradients (the harness's conventions), or the exception it raised."""
    try:
        if with_grads:
            return _torch_grads(torch, record, sample, ct)
        with torch.no_grad():
            return _from_torch(record.torch_fn(torch, *_to_torch(torch, sample, False), **sample.kwargs)), None
    except Exception as err:  # torch's refusals: RuntimeError, IndexError, ValueError ...
        return err


def _where(err: BaseException) -> str:
    import traceback

    tb = traceback.extract_tb(err.__traceback__)
    return f"{tb[-1].filename.split('/')[-1]}:{tb[-1].lineno}" if tb else "?"


def _axis_out_of_range(case: Case, sample: Sample, diff) -> bool:
    if case.kind != "axis" or not isinstance(case.axis, int) or isinstance(case.axis, bool):
        return False
    ndim = sample.args[diff[0]].ndim
    return not (-max(ndim, 1) <= case.axis < max(ndim, 1))


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def _inexact(x) -> bool:
    return np.issubdtype(x.dtype, np.inexact) or x.dtype == ml_dtypes.bfloat16


def run_case(record, case: Case) -> tuple[str, str]:
    """The outcome of ``case`` (a category: one of ``FAILURES`` or ``ok``, ``refused``,
    ``both refuse``, ``accepted``) and a detail."""
    if (case.kind, record.name) in NO_RUN:
        return "not run", NO_RUN[case.kind, record.name]
    sample, diff, prec = build(record, case)
    f, program = _program(record, sample, diff)
    d_args = [jnp.asarray(sample.args[i]) for i in diff]
    try:
        out_shape = jax.eval_shape(f, *d_args)
        rng = np.random.default_rng(zlib.crc32(repr(case).encode()))
        ct = jax.tree.map(lambda o: _like(rng, o) if jnp.issubdtype(o.dtype, jnp.inexact)
                          else np.zeros(o.shape, jax.dtypes.float0), out_shape)
        value, grads = program(d_args, ct)
        value, grads = jax.tree.map(np.asarray, (value, grads))
        ours = None
    except Exception as err:  # classified below
        ours = err
    # Integer input: torch on the float64 promotion (as jaxrules promotes it), unless the op kept the integer
    # dtype (pad, tile ...: then torch on the same integers)
    promote = case.kind == "integer" and (ours is not None or all(_inexact(x) for x in _leaves(value)))
    others = [sample.args[i].dtype for i in diff if _inexact(sample.args[i])]
    up = _upcast(sample, diff if promote else (), np.result_type(np.float64, *others))
    finite = all(np.isfinite(np.asarray(sample.args[i], np.complex128)).all() for i in diff)
    with_grads = case.kind != "integer" and finite and ours is None
    loss_ct = None
    if ours is None:
        loss_ct = jax.tree.map(lambda c: np.conj(np.asarray(c, np.complex128 if np.iscomplexobj(c) else np.float64))
                               if c.dtype != jax.dtypes.float0 else np.zeros(c.shape), ct)
    ref = None
    if record.torch_fn is not None and (case.kind, record.name) not in NO_REFERENCE:
        ref = _torch_reference(record, up, loss_ct, with_grads)
    bad_axis = _axis_out_of_range(case, sample, diff)
    if ours is not None:
        what = f"{type(ours).__name__} at {_where(ours)}: {str(ours).splitlines()[0][:300] if str(ours) else ''}"
        if not isinstance(ours, ValueError | TypeError) or type(ours).__module__.split(".")[0] in ("jax", "jaxlib"):
            return "crash", what
        if not _clear(record, ours):
            return "unclear error", what
        if bad_axis and "axis" not in str(ours):
            return "unclear error", f"out-of-range axis, message does not name it: {what}"
        return ("both refuse" if isinstance(ref, Exception) else "refused"), what
    if ref is None:
        return "ok", "no torch reference"
    if isinstance(ref, Exception):
        if bad_axis:
            return "accepted bad axis", f"torch: {type(ref).__name__}: {str(ref)[:200]}"
        return "accepted", f"torch: {type(ref).__name__}: {str(ref).splitlines()[0][:200]}"
    t_value, t_grads = ref
    tol = float(record.tolerance.get("torch" if prec in ("float64", "complex128") else prec,
                                     _TOL.get(prec, 1e-9)))
    narrow = (np.dtype(np.float32), np.dtype(np.complex64))
    if case.kind == "integer" and any(_inexact(x) and np.dtype(x.dtype) in narrow for x in _leaves(value)):
        tol = max(tol, _TOL["float32"])  # bool and narrow integers compute in float32, as in jax.numpy
    if prec not in ("float64", "complex128"):
        tol = max(tol, _TOL[prec])
        # (the input's precision; complex64 for complex output of real input, as eig's; float32 for real
        # output of complex input, as irfft's)
        allowed = {np.dtype(ml_dtypes.bfloat16) if prec == "bfloat16" else np.dtype(np.float32), np.dtype(np.complex64)}
        wrong = [x.dtype for x in _leaves(value) if _inexact(x) and np.dtype(x.dtype) not in allowed]
        if wrong:
            return "dtype", f"{prec} input gave {wrong}"
    ours_v, ref_v = _leaves(value), [np.asarray(x) for x in jax.tree.leaves(t_value)]
    if len(ours_v) != len(ref_v):
        return "value", f"{len(ours_v)} outputs, torch {len(ref_v)}"
    for k, (a, e) in enumerate(zip(ours_v, ref_v)):
        a = a.astype(np.complex128 if np.iscomplexobj(a) else np.float64) if _inexact(a) else a
        if a.shape != e.shape:
            return "value", f"output {k}: shape {a.shape}, torch {e.shape}"
        if _inexact(a) and np.issubdtype(e.dtype, np.inexact):
            silent = np.isnan(a) & np.isfinite(e)
            if silent.any():
                return "silent nan", f"output {k}: NaN where torch gives {e[silent][:3]}"
        if case.kind == "nonfinite" and _inexact(a):  # (where torch is not finite: tests/test_nonfinite.py's)
            a, e = np.where(np.isfinite(e), a, 0), np.where(np.isfinite(e), e, 0)
        err = _error(a, e)
        if not err <= tol:
            return "value", f"output {k}: error {err:.3g} > {tol:.1g}"
    if t_grads is None:
        return "ok", "values"
    for k, (g, tg) in enumerate(zip(_leaves(grads), t_grads)):
        if tg is False:
            continue
        g = g.astype(np.complex128 if np.iscomplexobj(g) else np.float64)
        tg = np.zeros_like(g) if tg is None else tg
        if np.isnan(g).any() and not np.isnan(tg).any():
            return "silent nan", f"vjp {k}: NaN where torch's gradient is finite"
        err = _error(g, tg)
        if not err <= tol:
            return "vjp", f"vjp {k}: error {err:.3g} > {tol:.1g}"
    return "ok", "values and vjp"


# ----------------------------------------------------------------------------------------------
# The tests


RUN_SEED = commit_seed("JAXRULES_FUZZ_SEED")


def _fuzzed_records():
    """Every record (``JAXRULES_FUZZ_ALL``) or this run's rotating subset, ``FUZZ_SUBSET`` of
    them ordered by a hash of the run's seed and their name."""
    records = [r for r in registry.records(os.environ.get("JAXRULES_FUZZ_RECORDS"))
               if not r.kernel_backed or _kernels_run()]
    if FUZZ_ALL:
        return records
    by_name = {r.name: r for r in records}
    return [by_name[n] for n in rotating_subset(list(by_name), FUZZ_SUBSET, RUN_SEED)]


@functools.cache
def _kernels_run() -> bool:
    from jaxrules import dispatch

    return dispatch.triton_backend_missing() is None


RECORDS = _fuzzed_records()
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, phases=(Phase.explicit, Phase.generate),
                suppress_health_check=list(HealthCheck))


def _log(record, case: Case, outcome: tuple[str, str]) -> None:
    with open(FUZZ_LOG, "a") as log:
        log.write(json.dumps({"record": record.name, "case": dataclasses.asdict(case), "outcome": outcome[0],
                              "detail": outcome[1]}, default=repr) + "\n")


@pytest.mark.skipif(torch is None, reason="torch is the reference")
@pytest.mark.parametrize("record", RECORDS, ids=[r.name for r in RECORDS])
@seed(RUN_SEED)
@FUZZ
@given(data=st.data())
def test_fuzz_record(record, data):
    case = data.draw(cases(record), "case")
    outcome = run_case(record, case)
    if FUZZ_LOG:
        _log(record, case, outcome)
        return
    key = f"{record.name}/{case.kind}/{outcome[0]}"
    if key in KNOWN:
        warnings.warn(f"fuzz: {key} {case}: {outcome[1]} ({KNOWN[key][1]})", stacklevel=1)
        return
    assert outcome[0] not in FAILURES, f"{record.name} {case}: {outcome[0]}: {outcome[1]}"


@pytest.mark.skipif(torch is None, reason="torch is the reference")
@pytest.mark.parametrize("key", sorted(KNOWN))
def test_known_still_fail(key):
    """Each known failure's case still fails that way (remove the entry once it does not)."""
    name, kind, category = key.split("/")
    case, reason = KNOWN[key]
    assert case.kind == kind and category in FAILURES
    record = registry.get(name)
    if record.kernel_backed and not _kernels_run():
        pytest.skip("the record runs the Pallas kernels, which this JAX cannot (its records are not fuzzed)")
    outcome = run_case(record, case)
    version_dependent = key in TORCH_2_13_ONLY and not torch.__version__.startswith("2.13.")
    allowed = {category, "ok"} if key in BUILD_DEPENDENT or version_dependent else {category}
    assert outcome[0] in allowed, f"{key} gives {outcome} now; update or remove the entry ({reason})"
