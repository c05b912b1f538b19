"""``python benchmarks/bench.py``: forward+backward (``jit`` of ``vjp``) of jaxrules ops against
JAX's own autodiff of the same math, torch eager and ``torch.compile`` (when torch is importable),
in one process on one device; time per call, median of repeated runs of ``CALLS_PER_RUN`` calls
queued back to back, after warm-up, jaxrules' and JAX's runs alternating (``median_ms``,
``interleaved_median_ms``); achieved GB/s (bytes of the inputs,
the output cotangent and the gradients, each read or written once) and its ratio to the device's
measured copy bandwidth; bytes of the residuals kept between forward and backward (from
``jaxrules.differentiate``). Writes a Markdown table and a PNG plot.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

import jaxrules.numpy as rnp
from jaxrules.differentiate import differentiate
from jaxrules.nn import batch_norm, group_norm, layer_norm, log_softmax, logsumexp, softmax


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmark: the jaxrules function, the same math in plain JAX, the same in torch, and
    the input shapes (per device kind). Every function takes the same positional arrays."""

    name: str
    ours: Callable
    plain_jax: Callable
    torch_fn: Callable | None
    shapes: dict  # "gpu"/"cpu" -> list of input shapes
    dtype: str = "float32"
    prepare: Callable | None = None  # NumPy arrays -> the op's inputs (e.g. make them SPD)
    compile: bool = True  # also time torch.compile


def _jax_layer_norm(x, w, b, eps=1e-5):
    mean = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), -1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * w + b


def _jax_batch_norm(x, w, b, eps=1e-5):
    axes = (0, 2, 3)
    mean = jnp.mean(x, axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axes, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * w[:, None, None] + b[:, None, None]


def _jax_group_norm(x, w, b, groups=32, eps=1e-5):
    g = x.reshape(x.shape[0], groups, -1)
    mean = jnp.mean(g, -1, keepdims=True)
    var = jnp.mean(jnp.square(g - mean), -1, keepdims=True)
    y = ((g - mean) * jax.lax.rsqrt(var + eps)).reshape(x.shape)
    return y * w[:, None, None] + b[:, None, None]


_LN = {"gpu": [(16384, 4096), (4096,), (4096,)], "cpu": [(2048, 1024), (1024,), (1024,)]}
_BN = {"gpu": [(64, 256, 56, 56), (256,), (256,)], "cpu": [(16, 64, 28, 28), (64,), (64,)]}
_MAT = {"gpu": [(16384, 4096)], "cpu": [(2048, 1024)]}

CASES = [
    Case("layer_norm", lambda x, w, b: layer_norm(x, x.shape[-1], w, b), _jax_layer_norm,
         lambda t, x, w, b: t.nn.functional.layer_norm(x, x.shape[-1:], w, b), _LN),
    Case("layer_norm_bf16", lambda x, w, b: layer_norm(x, x.shape[-1], w, b), _jax_layer_norm,
         lambda t, x, w, b: t.nn.functional.layer_norm(x, x.shape[-1:], w, b), _LN, "bfloat16"),
    Case("batch_norm", lambda x, w, b: batch_norm(x, None, None, w, b, training=True)[0], _jax_batch_norm,
         lambda t, x, w, b: t.nn.functional.batch_norm(x, None, None, w, b, training=True), _BN),
    Case("batch_norm_bf16", lambda x, w, b: batch_norm(x, None, None, w, b, training=True)[0], _jax_batch_norm,
         lambda t, x, w, b: t.nn.functional.batch_norm(x, None, None, w, b, training=True), _BN, "bfloat16"),
    Case("group_norm", lambda x, w, b: group_norm(x, 32, w, b), _jax_group_norm,
         lambda t, x, w, b: t.nn.functional.group_norm(x, 32, w, b), _BN),
    Case("group_norm_bf16", lambda x, w, b: group_norm(x, 32, w, b), _jax_group_norm,
         lambda t, x, w, b: t.nn.functional.group_norm(x, 32, w, b), _BN, "bfloat16"),
    Case("logsumexp", lambda x: logsumexp(x, axis=-1), lambda x: jax.nn.logsumexp(x, axis=-1),
         lambda t, x: t.logsumexp(x, -1), _MAT),
    Case("softmax", lambda x: softmax(x, axis=-1), lambda x: jax.nn.softmax(x, axis=-1),
         lambda t, x: t.softmax(x, -1), _MAT),
    Case("log_softmax", lambda x: log_softmax(x, axis=-1), lambda x: jax.nn.log_softmax(x, axis=-1),
         lambda t, x: t.log_softmax(x, -1), _MAT),
    Case("vector_norm", lambda x: rnp.linalg.vector_norm(x, axis=-1), lambda x: jnp.linalg.vector_norm(x, axis=-1),
         lambda t, x: t.linalg.vector_norm(x, dim=-1), _MAT),
    Case("std", lambda x: rnp.std(x, axis=-1), lambda x: jnp.std(x, axis=-1), lambda t, x: t.std(x, -1, correction=0),
         _MAT),
    Case("abs", rnp.abs, jnp.abs, lambda t, x: t.abs(x), _MAT),
    Case("clip", lambda x: rnp.clip(x, -0.5, 0.5), lambda x: jnp.clip(x, -0.5, 0.5), lambda t, x: t.clamp(x, -0.5, 0.5),
         _MAT),
    Case("prod", lambda x: rnp.prod(x, axis=-1), lambda x: jnp.prod(x, axis=-1), lambda t, x: t.prod(x, -1), _MAT),
    Case("cumsum", lambda x: rnp.cumsum(x, axis=-1), lambda x: jnp.cumsum(x, axis=-1), lambda t, x: t.cumsum(x, -1),
         _MAT),
]


# Linear algebra: jit(grad) on a batch of 8192 32x32 matrices (256 on CPU), float32.

_B = {"gpu": 8192, "cpu": 256}
_N = 32


def _batch(*tail):
    return {k: [(b, *t) for t in tail] for k, b in _B.items()}


def _well_conditioned(a, *rest):
    return (a / np.sqrt(_N) + 2 * np.eye(_N), *rest)


def _spd(a, *rest):
    return (a @ np.swapaxes(a, -1, -2) / _N + np.eye(_N), *rest)


def _factor(a, *rest):
    return (np.linalg.cholesky(_spd(a)[0]), *rest)


def _reflectors(a, *rest):
    h, tau = np.linalg.qr(a, mode="raw")
    return (np.swapaxes(h, -1, -2), tau, *rest)


def _torch_cholesky_inverse(t, factor):
    return t.cholesky_inverse(factor)


def _linalg_cases():
    import jax.scipy.linalg as jsl

    import jaxrules.linalg as rl
    import jaxrules.scipy.linalg as rsl
    from jaxrules.nn import linear

    la = jnp.linalg
    sq, sq_rhs = _batch((_N, _N)), _batch((_N, _N), (_N, 4))
    case = lambda *a, **k: Case(*a, compile=False, **k)  # noqa: E731 - torch eager only
    return [
        case("matmul", rnp.matmul, jnp.matmul, lambda t, a, b: a @ b, _batch((_N, _N), (_N, _N))),
        case("linear", linear, lambda x, w, b: x @ w.T + b, lambda t, x, w, b: t.nn.functional.linear(x, w, b),
             {"gpu": [(65536, 512), (512, 512), (512,)], "cpu": [(4096, 256), (256, 256), (256,)]}),
        case("inv", rnp.linalg.inv, la.inv, lambda t, a: t.linalg.inv(a), sq, prepare=_well_conditioned),
        case("det", rnp.linalg.det, la.det, lambda t, a: t.linalg.det(a), sq, prepare=_well_conditioned),
        case("slogdet", lambda a: rnp.linalg.slogdet(a)[1], lambda a: la.slogdet(a)[1],
             lambda t, a: t.linalg.slogdet(a)[1], sq, prepare=_well_conditioned),
        case("solve", rnp.linalg.solve, la.solve, lambda t, a, b: t.linalg.solve(a, b), sq_rhs,
             prepare=_well_conditioned),
        case("solve_triangular", lambda a, b: rsl.solve_triangular(a, b, lower=True),
             lambda a, b: jsl.solve_triangular(a, b, lower=True),
             lambda t, a, b: t.linalg.solve_triangular(a, b, upper=False), sq_rhs, prepare=_well_conditioned),
        case("cholesky", rnp.linalg.cholesky, la.cholesky, lambda t, a: t.linalg.cholesky(a), sq, prepare=_spd),
        case("cho_solve", lambda c, b: rsl.cho_solve((c, True), b), lambda c, b: jsl.cho_solve((c, True), b),
             lambda t, c, b: t.cholesky_solve(b, c), sq_rhs, prepare=_factor),
        case("cholesky_inverse", rl.cholesky_inverse,
             lambda c: jsl.cho_solve((c, True), jnp.broadcast_to(jnp.eye(_N, dtype=c.dtype), c.shape)),
             _torch_cholesky_inverse, sq, prepare=_factor),
        case("eigh", lambda a: rnp.linalg.eigh(a)[1], lambda a: la.eigh(a)[1], lambda t, a: t.linalg.eigh(a)[1], sq,
             prepare=lambda a: ((a + np.swapaxes(a, -1, -2)) / 2,)),
        case("eigvalsh", rnp.linalg.eigvalsh, la.eigvalsh, lambda t, a: t.linalg.eigvalsh(a), sq,
             prepare=lambda a: ((a + np.swapaxes(a, -1, -2)) / 2,)),
        case("svd", lambda a: rnp.linalg.svd(a, full_matrices=False)[0], lambda a: la.svd(a, full_matrices=False)[0],
             lambda t, a: t.linalg.svd(a, full_matrices=False)[0], sq),
        case("svdvals", rnp.linalg.svdvals, la.svdvals, lambda t, a: t.linalg.svdvals(a), sq),
        case("qr", lambda a: rnp.linalg.qr(a)[0], lambda a: la.qr(a)[0], lambda t, a: t.linalg.qr(a)[0], sq),
        case("eigvals", lambda a: rnp.linalg.eigvals(a).real, lambda a: la.eigvals(a).real,
             lambda t, a: t.linalg.eigvals(a).real, sq),
        case("eig", lambda a: jnp.abs(rnp.linalg.eig(a)[1]) ** 2, None, lambda t, a: t.linalg.eig(a)[1].abs() ** 2, sq),
        case("pinv", rnp.linalg.pinv, la.pinv, lambda t, a: t.linalg.pinv(a), sq),
        case("lstsq", lambda a, b: rnp.linalg.lstsq(a, b)[0], jax.vmap(lambda a, b: la.lstsq(a, b)[0]),
             lambda t, a, b: t.linalg.lstsq(a, b).solution, sq_rhs, prepare=_well_conditioned),
        case("lu", lambda a: rsl.lu(a)[1], jax.vmap(lambda a: jsl.lu(a)[1]), lambda t, a: t.linalg.lu(a)[1], sq),
        case("lu_factor", lambda a: rsl.lu_factor(a)[0], lambda a: jsl.lu_factor(a)[0],
             lambda t, a: t.linalg.lu_factor(a)[0], sq),
        case("lu_solve", lambda a, b: rsl.lu_solve(rsl.lu_factor(a), b), lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b),
             lambda t, a, b: t.linalg.lu_solve(*t.linalg.lu_factor(a), b), sq_rhs, prepare=_well_conditioned),
        case("expm", rsl.expm, jsl.expm, lambda t, a: t.linalg.matrix_exp(a), sq,
             prepare=lambda a: (a / np.sqrt(_N),)),
        case("householder_product", rl.householder_product, None,
             lambda t, a, tau: t.linalg.householder_product(a, tau), _batch((_N, _N)), prepare=_reflectors),
        case("ormqr", rl.ormqr, None, lambda t, a, tau, c: t.ormqr(a, tau, c), _batch((_N, _N), (_N, 4)),
             prepare=lambda a, c: (*_reflectors(a), c)),
    ]


def suite(name: str):
    """The benchmark cases of a suite: ``default`` (normalization and elementwise/reduction ops),
    ``linalg`` (a batch of 32x32 matrices) or ``all``."""
    if name == "default":
        return CASES
    if name == "linalg":
        return _linalg_cases()
    if name == "all":
        return CASES + _linalg_cases()
    raise ValueError(f"bench: unknown suite {name!r}; choose default, linalg or all")


CALLS_PER_RUN = 10


def median_ms(call: Callable, repeats: int, warmup: int = 3, calls: int = CALLS_PER_RUN,
              wait: Callable = jax.block_until_ready) -> float:
    """Milliseconds per call: the median over ``repeats`` timed runs, a run being ``calls`` calls
    issued back to back and one ``wait`` for the last result. That is the device time of a
    training loop (the host queues the next step while the device runs this one), without the
    host round trip (~0.1 ms on a GPU) that one call and a wait would add to every timing."""
    return interleaved_median_ms({"": call}, repeats, warmup, calls, wait)[""]


def interleaved_times_ms(calls_by_label: dict, repeats: int, warmup: int = 3, calls: int = CALLS_PER_RUN,
                         wait: Callable = jax.block_until_ready) -> dict:
    """``{label: [milliseconds per call of each run]}``: the callables' timed runs alternating, so
    that a drift of the machine's speed during the measurement (seen on a shared 2-core CPU) hits
    all alike. The order rotates from one repeat to the next (repeat ``r`` starts at the ``r``-th
    callable), so that none always runs right after the same other one. Run ``r`` of every label
    belongs to the same repeat (``paired_ratio``)."""
    for call in calls_by_label.values():
        for _ in range(warmup):
            wait(call())
    times = {label: [] for label in calls_by_label}
    labels = list(calls_by_label)
    for r in range(repeats):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            call = calls_by_label[label]
            start = time.perf_counter()
            for _ in range(calls - 1):
                call()
            wait(call())
            times[label].append((time.perf_counter() - start) * 1e3 / calls)
    return times


def interleaved_median_ms(calls_by_label: dict, repeats: int, warmup: int = 3, calls: int = CALLS_PER_RUN,
                          wait: Callable = jax.block_until_ready) -> dict:
    """``median_ms`` of each callable, their runs interleaved (``interleaved_times_ms``)."""
    times = interleaved_times_ms(calls_by_label, repeats, warmup, calls, wait)
    return {label: statistics.median(t) for label, t in times.items()}


def paired_ratio(numerator: list, denominator: list, level: float = 0.95) -> tuple[float, float, float]:
    """``(median, low, high)`` of the per-repeat ratios ``numerator[r] / denominator[r]`` (two
    labels' runs of one repeat, ``interleaved_times_ms``: adjacent in time, so a slow phase of the
    machine moves both), with a distribution-free confidence interval for that median at
    ``level``: the order statistics ``k`` and ``n + 1 - k`` of the ``n`` ratios, ``k`` the largest
    with ``P(Binomial(n, 1/2) < k) <= (1 - level) / 2``. Fewer than 6 ratios give no 95% interval
    (``low`` and ``high`` are the extremes, at a lower level)."""
    ratios = sorted(a / b for a, b in zip(numerator, denominator, strict=True))
    n = len(ratios)
    if n == 0:
        raise ValueError("paired_ratio: no runs")
    tail, k, below = (1 - level) / 2, 0, 0.0
    while k < n and below + math.comb(n, k) / 2 ** n <= tail:  # below = P(Binomial(n, 1/2) < k + 1)
        below += math.comb(n, k) / 2 ** n
        k += 1
    k = max(k, 1)
    return statistics.median(ratios), ratios[k - 1], ratios[n - k]


def fwd_bwd(fn: Callable, with_value: bool = False, cotangent_after_value: bool = True):
    """``jit`` of forward + backward: the gradients of ``sum(fn(*args) * ct)``, and with
    ``with_value`` the value ``fn(*args)`` with them, as a training step keeps it. There the
    cotangent comes from the layers that read the value, so the backward starts after the value is
    written: ``ct`` passes an ``optimization_barrier`` with the value (``cotangent_after_value``).
    Without it XLA fuses the value's elementwise pass into the backward's first pass over x and
    the given ct, which a training step cannot."""

    def step(ct, *args):
        value, pullback = jax.vjp(fn, *args)
        if not with_value:
            return pullback(ct)
        if cotangent_after_value:
            value, ct = jax.lax.optimization_barrier((value, ct))
        return value, pullback(ct)

    return jax.jit(step)


def copy_bandwidth(platform: str, repeats: int = 30) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read plus bytes written) of a jitted
    elementwise op over 1 GiB (32 MiB on a CPU), after half a second of warm-up so the clocks have
    risen (one short warm-up read 2230 GB/s on an H100 that copies at 2900-3000)."""
    n = (256 if platform == "gpu" else 8) * 2**20
    x = jnp.ones(n, jnp.float32)
    copy = jax.jit(lambda v: v + 1.0)
    start = time.perf_counter()
    while time.perf_counter() - start < 0.5:
        jax.block_until_ready(copy(x))
    ms = median_ms(lambda: copy(x), repeats)
    return 2 * x.nbytes / (ms * 1e-3) / 1e9


def torch_copy_bandwidth(repeats: int = 30) -> float | None:
    """The same probe through torch (``dst.copy_(src)`` on the GPU), or None without torch/CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    src = torch.ones(256 * 2**20, device="cuda")
    dst = torch.empty_like(src)
    start = time.perf_counter()
    while time.perf_counter() - start < 0.5:
        dst.copy_(src)
        torch.cuda.synchronize()
    ms = median_ms(lambda: dst.copy_(src), repeats, wait=lambda _: torch.cuda.synchronize())
    return 2 * src.nbytes / (ms * 1e-3) / 1e9


def copy_probe(platform: str) -> dict:
    """Both copy probes in one process; the speed of light is the faster of them."""
    jax_gbps = copy_bandwidth(platform)
    torch_gbps = torch_copy_bandwidth() if platform == "gpu" else None
    return {"jax_copy_gbps": jax_gbps, "torch_copy_gbps": torch_gbps, "sol_gbps": max(jax_gbps, torch_gbps or 0)}


def _inputs(case: Case, platform: str, rng: np.random.Generator):
    shapes = case.shapes[platform]
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    if case.prepare is not None:
        arrays = [np.asarray(a, np.float32) for a in case.prepare(*arrays)]
    elif len(arrays) > 1:  # weight near 1
        arrays[1] = arrays[1] + 1
    return [jnp.asarray(a, case.dtype) for a in arrays]


def _torch_times(torch, case, arrays, ct, repeats):
    """(eager ms, compiled ms or None) of forward + backward in torch on the same device."""
    device = "cuda" if jax.default_backend() == "gpu" and torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, case.dtype)
    targs = [torch.tensor(np.asarray(a, np.float32), device=device, dtype=dtype, requires_grad=True) for a in arrays]
    tct = torch.tensor(np.asarray(ct, np.float32), device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def step(fn):
        return lambda: torch.autograd.grad(fn(torch, *targs), targs, tct)

    eager = median_ms(step(case.torch_fn), repeats, wait=lambda _: sync())
    if not case.compile:
        return eager, None
    try:
        compiled_fn = torch.compile(case.torch_fn)
        compiled = median_ms(step(compiled_fn), repeats, wait=lambda _: sync())
    except Exception as err:  # torch.compile needs a working compiler toolchain
        print(f"  torch.compile failed for {case.name}: {type(err).__name__}: {err}", file=sys.stderr)
        compiled = None
    return eager, compiled


def run(cases=CASES, repeats: int = 30, pattern: str | None = None, with_torch: bool = True, on_row=None,
        with_value: bool = False):
    """Benchmark ``cases`` (those whose name contains ``pattern``, or one of its comma-separated
    parts) on the default device: ``(rows, meta)``. A case that fails (e.g. an op the device's
    JAX or torch lacks) is reported on stderr and left out. ``on_row(rows, meta)`` is called after
    each case (so a run cut short still leaves its results). ``with_value``: the JAX programs also
    return the forward value (torch computes it either way)."""
    platform = "gpu" if jax.default_backend() == "gpu" else "cpu"
    bandwidth = copy_bandwidth(platform)
    try:
        import torch
    except ImportError:
        torch = None
    rows = []
    meta = {"platform": platform, "device": jax.devices()[0].device_kind, "jax": jax.__version__,
            "torch": getattr(torch, "__version__", None), "copy_gbps": bandwidth, "repeats": repeats,
            "with_value": with_value, "cotangent_after_value": with_value}
    rng = np.random.default_rng(0)
    wanted = pattern.split(",") if pattern else None
    for case in cases:
        if wanted and not any(w in case.name for w in wanted):
            continue
        try:
            rows.append(_run_case(case, platform, rng, repeats, bandwidth, torch if with_torch else None, with_value))
        except Exception as err:  # noqa: BLE001 - one broken case must not lose the others
            print(f"  {case.name}: failed: {type(err).__name__}: {str(err)[:300]}", file=sys.stderr)
            continue
        if on_row is not None:
            on_row(rows, meta)
    return rows, meta


def _run_case(case, platform, rng, repeats, bandwidth, torch, with_value=False):
    arrays = _inputs(case, platform, rng)
    ct = jnp.asarray(rng.standard_normal(jax.eval_shape(case.ours, *arrays).shape), case.dtype)
    steps = {label: fwd_bwd(fn, with_value) for label, fn in (("jaxrules", case.ours), ("jax", case.plain_jax))
             if fn is not None}  # plain_jax is None where JAX cannot differentiate the op
    timings = {"jax": None, **interleaved_median_ms(
        {label: (lambda step=step: step(ct, *arrays)) for label, step in steps.items()}, repeats)}
    residuals = {label: None if fn is None else differentiate(fn, *arrays).residual_bytes for label, fn in
                 (("jaxrules", case.ours), ("jax", case.plain_jax))}
    eager = compiled = None
    if torch is not None and case.torch_fn is not None:
        eager, compiled = _torch_times(torch, case, arrays, ct, repeats)
    moved = 2 * sum(a.nbytes for a in arrays) + ct.nbytes  # read inputs and ct, write gradients
    if with_value:
        moved += ct.nbytes  # write the value
    gbps = moved / (timings["jaxrules"] * 1e-3) / 1e9
    print(f"  {case.name}: jaxrules {timings['jaxrules']:.3f} ms, jax {_fmt(timings['jax'])} ms", file=sys.stderr)
    return {
        "op": case.name, "dtype": case.dtype, "shape": "x".join(map(str, arrays[0].shape)),
        "jaxrules_ms": timings["jaxrules"], "jax_ms": timings["jax"], "torch_ms": eager, "compile_ms": compiled,
        "gbps": gbps, "bandwidth_fraction": gbps / bandwidth,
        "residual_bytes": residuals["jaxrules"], "jax_residual_bytes": residuals["jax"],
    }


def _fmt(v, digits=3):
    return "—" if v is None else f"{v:.{digits}f}"


def markdown(rows, meta) -> str:
    """The results as a Markdown section (ratios > 1 mean jaxrules is faster)."""
    lines = [
        f"Device: {meta['device']} ({meta['platform']}), jax {meta['jax']}, torch {meta['torch']}; "
        f"time per call, median of {meta['repeats']} runs of {CALLS_PER_RUN} back-to-back calls after warm-up "
        "(jaxrules' and JAX's runs alternating); "
        f"JAX programs time {_program_form(meta)}; "
        f"measured copy bandwidth {meta['copy_gbps']:.0f} GB/s.",
        "",
        "| op | dtype | shape | jaxrules ms | JAX autodiff ms | torch eager ms | torch.compile ms | "
        "vs JAX | vs eager | vs compile | GB/s | of copy bw | residual MB (jaxrules / JAX) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        ratio = lambda other: None if other is None else other / r["jaxrules_ms"]  # noqa: E731
        lines.append(
            f"| {r['op']} | {r['dtype']} | {r['shape']} | {_fmt(r['jaxrules_ms'])} | {_fmt(r['jax_ms'])} | "
            f"{_fmt(r['torch_ms'])} | {_fmt(r['compile_ms'])} | {_fmt(ratio(r['jax_ms']), 2)} | "
            f"{_fmt(ratio(r['torch_ms']), 2)} | {_fmt(ratio(r['compile_ms']), 2)} | {r['gbps']:.0f} | "
            f"{r['bandwidth_fraction']:.0%} | {_fmt(r['residual_bytes'] / 1e6, 1)} / "
            f"{_fmt(None if r['jax_residual_bytes'] is None else r['jax_residual_bytes'] / 1e6, 1)} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows, meta, path: str) -> None:
    """Bar chart of the time of each op, relative to jaxrules (higher = slower than jaxrules)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["op"] for r in rows]
    series = [("JAX autodiff", "jax_ms"), ("torch eager", "torch_ms"), ("torch.compile", "compile_ms")]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.9), 3.5))
    for k, (label, key) in enumerate(series):
        values = [math.nan if r[key] is None else r[key] / r["jaxrules_ms"] for r in rows]
        ax.bar(np.arange(len(rows)) + k * width, values, width, label=label)
    ax.axhline(1.0, color="k", lw=1)
    ax.set_xticks(np.arange(len(rows)) + width, labels, rotation=30, ha="right")
    ax.set(ylabel="time / jaxrules time", title=f"forward+backward on {meta['device']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _program_form(meta) -> str:
    """What the timed programs return (``fwd_bwd``)."""
    if not meta.get("with_value"):
        return "the gradients only"
    return "a training step: the value, then the gradients from a cotangent that waits for it"


def _run(args) -> int:
    """Run the suite ``args`` ask for; print (and write, and plot) its table. 2 when no case matches."""

    def write(rows, meta):  # after every case, so a run cut short keeps what it measured
        if args.out:
            with open(args.out, "w") as fh:
                fh.write(markdown(rows, meta))

    cases = suite(args.suite)
    rows, meta = run(cases, repeats=args.repeats, pattern=args.ops, with_torch=not args.no_torch, on_row=write,
                     with_value=args.with_value)
    if not rows:
        print(f"bench: no benchmark matches {args.ops!r}", file=sys.stderr)
        return 2
    print(markdown(rows, meta))
    if args.plot:
        plot(rows, meta, args.plot)
    return 0


def main(argv=None) -> int:
    """The command line: ``python benchmarks/bench.py [--suite S] [--ops ...] [--out F] [--plot F]``."""
    parser = argparse.ArgumentParser(prog="python benchmarks/bench.py", description=__doc__)
    parser.add_argument("--ops", help="only benchmarks whose name contains this (comma-separated: any of them)")
    parser.add_argument("--suite", default="default", choices=("default", "linalg", "all"),
                        help="default: normalization and elementwise ops; linalg: 8192 32x32 matrices "
                        "(the normalizations over shapes of real models: benchmarks/norms.py)")
    parser.add_argument("--repeats", type=int, default=30, help="timed runs per measurement (median)")
    parser.add_argument("--out", help="write the Markdown table here")
    parser.add_argument("--plot", help="write a PNG plot here")
    parser.add_argument("--no-torch", action="store_true", help="skip torch eager and torch.compile")
    parser.add_argument("--with-value", action="store_true",
                        help="the JAX programs return the forward value with the gradients (a training step)")
    return _run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
