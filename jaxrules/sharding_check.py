"""The harness's ``sharded`` check: a record's op under ``jit`` with its inputs sharded
along a batch axis over every device, in both of JAX's mesh modes (``AxisType.Auto`` and
``AxisType.Explicit``), against the same program unsharded.

Two forms per record, from its first sample with a non-empty differentiable argument (float64):

* ``vmap``: every differentiable argument gets a leading batch axis (one entry per device) and
  the op is vmapped over it; all of them are sharded ``P("data")``;
* ``direct``: the first argument's axis 0 is tiled to one entry per device and sharded, the
  other differentiable arguments (weights) stay replicated, as in data-parallel training
  (skipped where the op refuses the longer axis 0, where its first argument is not
  differentiated, and for a vector, whose axis 0 is its data).

and a third, ``shard_map``: the ``vmap`` form under a user's ``jax.shard_map`` (each device runs its
slice of the batch, with JAX's check of varying mesh axes, ``check_vma``), where scans with
constant carries and kernels' output types broke (left out for records that run interpreted
Pallas kernels on a CPU: JAX's interpreter mixes varying and invariant values there).

For each: the outputs, the JVP and the VJP (of ``sum(sin(real(out)))`` over the inexact
outputs) equal the unsharded ones, and the gradient of every batch-sharded argument keeps the
batch sharding, unless it is zero (a constant, which XLA replicates); in the direct form only
under an ``Explicit`` mesh (under ``Auto``, XLA's propagation picks the shardings of a ``jit``'s
un-annotated outputs: replicated after a reduction over the batch). Needs several devices: run
in a process with 8 host devices on a CPU (``HOST_DEVICES``; ``tests/test_sharded.py``); in a
process with one device it is skipped, saying so. ``modes`` (``check --sharded-modes``,
``$JAXRULES_SHARDED_MODES``) picks the mesh modes, both by default; each form compiles one
unsharded program and one per mode (about 0.36 CPU s a record with both, 0.23 with one).
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as PSpec

from jaxrules.cli import HOST_DEVICES
from jaxrules.testing import _closure  # the op as a function of its differentiable arguments

_MODES = {"auto": AxisType.Auto, "explicit": AxisType.Explicit}


class ShardedMismatch(AssertionError):
    """The sharded program differs from the unsharded one (the message says where)."""


def _loss(out):
    leaves = [o for o in jax.tree_util.tree_leaves(out) if jnp.issubdtype(jnp.result_type(o), jnp.inexact)]
    return sum(jnp.sum(jnp.sin(jnp.real(o))) for o in leaves)


def _forms(record, rng, batch):
    """``[(form, sample, diff_args, batched)]``: ``_form_function(record, sample, form)(*diff_args)``
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


def _form_function(record, sample, form):
    """The record's function of the sample's differentiable arguments, vmapped in the ``vmap``
    form."""
    call, _ = _closure(record, sample)
    return jax.vmap(call) if form == "vmap" else call


# Where the record's public function has a namesake in JAX, JAX's own function is what a user
# would otherwise call: a sharding JAX refuses with a ``ShardingTypeError`` (an uneven split of
# a sharded axis under an ``Explicit`` mesh, operands of different shardings) is refused alike.
_JAX_NAMESAKES = {"jaxrules.numpy.": "jax.numpy.", "jaxrules.scipy.": "jax.scipy.",
                  "jaxrules.linalg.": "jax.lax.linalg."}


def _resolve(path: str):
    import importlib

    module, _, attr = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return None


def _jax_namesake(record):
    """``(name, fn)``: the record's function with its public function replaced by JAX's function of
    the same name (``jaxrules.numpy.pad`` -> ``jax.numpy.pad``), or None. The record's function is
    the public one, or a lambda calling it by its name."""
    import types

    public = record.public[0]
    ours = _resolve(public)
    for prefix, theirs in _JAX_NAMESAKES.items():
        name = theirs + public[len(prefix):]
        namesake = _resolve(name) if public.startswith(prefix) else None
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
    import dataclasses

    namesake = _jax_namesake(record)
    if namesake is None:
        return None
    fn = _form_function(dataclasses.replace(record, fn=namesake[1]), sample, form)
    try:
        jax.jit(fn).lower(*args)
    except Exception as err:  # noqa: BLE001 - which error JAX raises is the question
        return namesake[0] if type(err).__name__ == "ShardingTypeError" else None
    return None


def _programs(fn, n):
    """``(values, (loss, jvp), (loss, grads))`` of ``fn`` under ``jit`` for tangents ``ts``."""
    def run(args, tangents):
        loss = lambda *a: _loss(fn(*a))  # noqa: E731
        return fn(*args), jax.jvp(loss, args, tangents), jax.value_and_grad(loss, tuple(range(n)))(*args)

    return jax.jit(run)


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree) if jnp.issubdtype(jnp.result_type(x), jnp.inexact)]


def _compare(label, got, want) -> float:
    worst = 0.0
    for i, (g, w) in enumerate(zip(_leaves(got), _leaves(want))):
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


def modes_in_use() -> tuple[str, ...]:
    """The mesh modes ``check_sharded`` uses by default: ``$JAXRULES_SHARDED_MODES`` (comma-separated;
    ``python -m jaxrules check --sharded-modes`` sets it for its workers), else both."""
    names = tuple(m for m in os.environ.get("JAXRULES_SHARDED_MODES", "").split(",") if m) or tuple(_MODES)
    unknown = set(names) - set(_MODES)
    if unknown:
        raise ValueError(f"check_sharded: unknown mesh modes {sorted(unknown)}; choose from {', '.join(_MODES)}")
    return names


def _interpreted_kernels(record) -> bool:
    """Whether the record runs Pallas kernels in interpret mode here (its ``[pallas]`` /
    ``[mosaic]`` form off a GPU)."""
    return record.name.endswith(("[pallas]", "[mosaic]")) and jax.default_backend() != "gpu"


def _check_shard_map(fn, diff, tangents, want, devices) -> float:
    """The ``vmap`` form's program under ``jax.shard_map`` over ``devices`` against ``want``."""
    mesh = jax.make_mesh((devices,), ("data",), axis_types=(AxisType.Explicit,))
    mapped = jax.shard_map(fn, mesh=mesh, in_specs=(PSpec("data"),) * len(diff), out_specs=PSpec("data"))
    sharding = NamedSharding(mesh, PSpec("data"))
    got = _programs(mapped, len(diff))([jax.device_put(d, sharding) for d in diff],
                                       [jax.device_put(t, sharding) for t in tangents])
    return _compare("vmap form under jax.shard_map", jax.block_until_ready(got), want)


def check_sharded(record, forms=("vmap", "direct", "shard_map"), modes=None) -> float | str:
    """The worst relative difference between the sharded and unsharded programs over ``forms``
    and ``modes`` (default: ``modes_in_use()``, both unless told otherwise), or why the check does
    not apply; raises ``ShardedMismatch`` (or the sharded program's own error) on a failure. Each
    form compiles one unsharded program and one per mode."""
    modes = modes_in_use() if modes is None else tuple(modes)
    devices = jax.device_count()
    if devices < 2:
        return (f"needs several devices ({devices} here); `python -m jaxrules check` splits a CPU into "
                f"{HOST_DEVICES} devices for it")
    rng = np.random.default_rng(19)
    built = [f for f in _forms(record, rng, devices) if f[0] in forms or (f[0] == "vmap" and "shard_map" in forms)]
    if not built:
        return "no sample with a non-empty differentiable argument"
    worst, ran, refused = 0.0, [], []
    for form, sample, diff, batched in built:
        fn = _form_function(record, sample, form)
        tangents = [rng.standard_normal(np.shape(d)).astype(np.asarray(d).dtype) for d in diff]
        program = _programs(fn, len(diff))
        try:
            want = jax.block_until_ready(program(diff, tangents))
        except Exception:  # noqa: BLE001 - the op refuses this form's input (the other checks cover it)
            continue
        if form == "vmap" and "shard_map" in forms and not _interpreted_kernels(record):
            worst = max(worst, _check_shard_map(fn, diff, tangents, want, devices))
            ran.append("shard_map")
        if form not in forms:
            continue
        for mode in modes:
            kind = _MODES[mode]
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
            worst = max(worst, _compare(label, got, want))
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
        return "the op refuses both forms' inputs unsharded"
    return (worst, "; ".join(refused)) if refused else worst
