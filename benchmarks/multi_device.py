"""Data-parallel weak scaling of the fused norms (issue 19): ``jit(grad)`` of each op with the batch
sharded over a mesh axis "data", 1 device with half the batch vs 2 devices with the whole batch,
jaxrules vs plain JAX (``jaxrules.bench._plain_norm``, JAX's autodiff).

``--ops`` may also name ``gpt``: the gradient step of ``examples/gpt.py``'s transformer (float32,
batch 32 tokens of 512, d_model 512, 4 layers), the model replicated and the batch sharded, with
jaxrules vs the same file with plain JAX swapped in (``examples/plain.py``); and ``nested_block``:
the ragged block of ``benchmarks/nested_attention_block.py`` (nested attention), each device whole
sequences (``measure_nested_block``), vs the padded block in plain JAX.

For each (op, variant): milliseconds per step on 1 and 2 devices (``jaxrules.bench.median_ms``),
weak-scaling efficiency ``t1 / t2`` (1.0: twice the work in the same time), the all-gathers and
all-reduces in the 2-device compiled program (and the largest all-gather, in elements, against
the activation's), and the sharding of the gradient with respect to x.

Variants (``--variants``): ``jaxrules`` (the dispatch's choice, which the table names, decided on
the half batch and on the whole), ``jaxrules pallas`` / ``jaxrules xla`` (the kernels / the XLA
formulas forced), ``plain JAX``, and ``floor`` (``_floor``: one pass over the activation and one
all-reduce of a scalar, the least a data-parallel step costs, dispatch included; a step near it
measures the host, not the GPUs). ``--chain K`` also times K dependent steps in one program
(``lax.optimization_barrier`` between them), per step: the device time without the per-call
dispatch. A second table describes each compiled program, 1 device vs 2
(``jaxrules.hlo_summary``): its collectives with bytes and depth (how many wait on one another),
custom calls (the Triton kernels), fusions and passes over activation-sized arrays;
``--hlo-dir`` writes each optimized HLO.

``--loss sin`` differentiates ``sum(sin(y) ct)`` instead of ``sum(y ct)``: y's cotangent then
depends on the forward, as behind a network's later layers, so the backward's collectives wait for
the forward's statistics (with ``sum(y ct)`` a program may reduce both at once: plain JAX's batch
norm did on two H100s, one all-reduce in all; on 2 CPU devices the XLA formulas' chain is 2
collectives with ``linear`` and 3 with ``sin``, plain JAX's 4 with both).

GPU (2 devices): ``python benchmarks/multi_device.py --out benchmarks/multi_device.md``.
CPU: ``XLA_FLAGS=--xla_force_host_platform_device_count=2 python benchmarks/multi_device.py
--scale 64 --repeats 3`` (shapes divided by ``--scale`` along the batch and the feature maps;
the kernels run in Pallas interpret mode off the GPU, so CPU times say nothing about speed).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import pathlib
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrules import dispatch, hlo_summary
from jaxrules.bench import _plain_norm, median_ms
from jaxrules.ops.normalization import batch_norm, group_norm, layer_norm


def _shapes(scale: int) -> dict:
    """The issue's shapes, divided by ``scale`` (batch, and the spatial size for the maps)."""
    side = max(2, round(56 / math.sqrt(scale)))
    return {
        "layer_norm": (max(4, 32768 // scale), 4096 if scale == 1 else max(16, 4096 // scale)),
        "group_norm": (max(4, 64 // scale), 256 if scale == 1 else 64, side, side),
        "batch_norm": (max(4, 64 // scale), 256 if scale == 1 else 64, side, side),
    }


def _jaxrules_fn(op: str, impl):
    if op == "layer_norm":
        return lambda x, w, b: layer_norm(x, x.shape[-1], w, b, impl=impl)
    if op == "group_norm":
        return lambda x, w, b: group_norm(x, 32, w, b, impl=impl)
    return lambda x, w, b: batch_norm(x, None, None, w, b, training=True, impl=impl)[0]


LOSSES = {  # y's cotangent: ct (an input), or cos(y) ct (it waits for the forward, as in a network)
    "linear": lambda y, ct: jnp.sum(y * ct),
    "sin": lambda y, ct: jnp.sum(jnp.sin(y) * ct),
}


def _chained(step, chain: int, x_arg: int, dx_out: int):
    """``chain`` dependent calls of ``step`` in one program: each call's argument ``x_arg`` is the
    previous call's output ``dx_out`` (the gradient with respect to that argument), behind an
    ``optimization_barrier``: a real dependence, so no call is dead code, hoisted or overlapped
    (with the gradients merely passed through the barrier, XLA dropped the unused calls: 0.04 ms a
    step where one step took 0.38); the last call's outputs."""

    def run(*args):
        out = step(*args)
        for _ in range(chain - 1):
            args = list(args)
            args[x_arg] = out[dx_out].astype(args[x_arg].dtype)
            args = jax.lax.optimization_barrier(args)
            out = step(*args)
        return out

    return run


def _step(fn, chain: int = 1, loss_name: str = "linear"):
    """``jit(grad)`` of ``sum(fn(x, w, b) * ct)`` (``loss_name`` "sin": ``sum(sin(fn(x, w, b)) ct)``)
    with respect to x, w and b; ``chain`` > 1: that many dependent steps in one program
    (``_chained``)."""

    def loss(x, w, b, ct):
        return LOSSES[loss_name](fn(x, w, b).astype(jnp.float32), ct.astype(jnp.float32))

    return jax.jit(_chained(jax.grad(loss, (0, 1, 2)), chain, 0, 0))


def _floor(x, w, b, ct):
    """The dispatch floor: one elementwise pass over the activation and one all-reduce (of a
    scalar, on 2 devices), what every data-parallel step has at least."""
    return ct * 2, w * 2, b * 2 + jnp.sum(ct[:, :1].astype(jnp.float32)).astype(b.dtype)


def _collectives(hlo: str) -> tuple[int, int, int]:
    """(all-gathers, all-reduces, elements of the largest all-gather) of a compiled program."""
    gathers = [math.prod(int(d) for d in dims.split(",") if d)
               for dims in re.findall(r"= \w+\[([\d,]*)\][^=\n]* all-gather(?:-start)?\(", hlo)]
    reduces = len(re.findall(r" all-reduce(?:-start)?\(", hlo))
    return len(gathers), reduces, max(gathers, default=0)


def _inputs(shape, dtype, rng):
    channels = shape[-1] if len(shape) == 2 else shape[1]
    return (jnp.asarray(rng.standard_normal(shape), dtype), jnp.asarray(rng.standard_normal(channels) + 1, dtype),
            jnp.asarray(rng.standard_normal(channels), dtype), jnp.asarray(rng.standard_normal(shape), dtype))


def _variant_fn(op: str, variant: str, impl):
    """``(x, w, b) -> y`` of a variant (``floor``: the whole step, see ``_floor``)."""
    if variant == "plain JAX":
        return functools_partial_plain(op)
    forced = {"jaxrules pallas": impl or "pallas", "jaxrules xla": "xla"}
    return _jaxrules_fn(op, forced.get(variant))


def dispatch_choice(op: str, shape: tuple, dtype, weight_dtype=None, devices: int = 1) -> str:
    """What ``impl=None`` runs for ``shape`` on this device (``jaxrules.dispatch``), the batch
    split over ``devices`` on an Auto mesh: "per shard" where the whole batch's and a shard's
    plans differ (each device then decides on its shard)."""
    platform, kind = jax.default_backend(), jax.devices()[0].device_kind

    def features(batch):
        if op == "layer_norm":
            return (batch, shape[1])
        c, length = shape[1], math.prod(shape[2:])
        return (c, batch, length) if op == "batch_norm" else (batch * 32, c // 32, length)

    shards = [features(shape[0] // devices)] if devices > 1 else []
    plan = dispatch.shard_plan(op, platform, kind, features(shape[0]), dtype, weight_dtype or dtype, shards)
    return plan.impl


def _timed(step, args, repeats: int, chain: int) -> tuple:
    """(compiled program, ms per step, ms per step when ``chain`` steps run in one program or None)."""
    compiled = step(1).lower(*args).compile()
    t = median_ms(lambda: compiled(*args), repeats)
    if chain <= 1:
        return compiled, t, None
    chained = step(chain).lower(*args).compile()
    return compiled, t, median_ms(lambda: chained(*args), repeats) / chain


def measure(op: str, variant: str, shape: tuple, dtype, repeats: int, impl, axis_type, chain: int = 0,
            hlo_dir: str | None = None, loss_name: str = "linear", timeline_steps: int = 0) -> dict:
    """One row: the step on 1 device (half the batch) and on 2 (the whole batch, sharded), and what
    the two compiled programs contain (``jaxrules.hlo_summary``)."""
    if variant == "floor":
        def step(k):
            return jax.jit(_floor)
    else:
        fn = _variant_fn(op, variant, impl)

        def step(k):
            return _step(fn, k, loss_name)
    rng = np.random.default_rng(0)
    devices = jax.devices()[:2]
    half = (shape[0] // 2, *shape[1:])
    one = [jax.device_put(a, devices[0]) for a in _inputs(half, dtype, rng)]
    compiled1, t1, c1 = _timed(step, one, repeats, chain if variant != "floor" else 0)
    mesh = jax.make_mesh((2,), ("data",), devices=devices, axis_types=(axis_type,))
    x, w, b, ct = _inputs(shape, dtype, rng)
    rows, rep = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    two = [jax.device_put(x, rows), jax.device_put(w, rep), jax.device_put(b, rep), jax.device_put(ct, rows)]
    with jax.set_mesh(mesh):
        compiled, t2, c2 = _timed(step, two, repeats, chain if variant != "floor" else 0)
        grads = compiled(*two)
    gathers, reduces, largest = _collectives(compiled.as_text())
    activation = math.prod(half)  # each device's, in both programs
    programs = {"1 device": hlo_summary.summarize(compiled1.as_text(), activation),
                "2 devices": hlo_summary.summarize(compiled.as_text(), activation)}
    if hlo_dir:
        stem = pathlib.Path(hlo_dir) / f"{op}.{variant.replace(' ', '_')}"
        stem.parent.mkdir(parents=True, exist_ok=True)
        for label, program in (("1dev", compiled1), ("2dev", compiled)):
            pathlib.Path(f"{stem}.{label}.hlo.txt").write_text(program.as_text())
    device_timeline = _load_file("benchmarks/device_timeline.py") if timeline_steps else None
    timelines = "" if not timeline_steps else "\n".join(
        device_timeline.format_timeline(f"{op} {variant} {label}", device_timeline.timeline(
            lambda: program(*args), timeline_steps))
        for label, program, args in (("1 device", compiled1, one), ("2 devices", compiled, two)))
    ran = "" if variant != "jaxrules" else (
        f" ({dispatch_choice(op, half, dtype)} on the half batch, "
        f"{dispatch_choice(op, shape, dtype, devices=2)} on the whole over 2 devices)")
    return {"op": op, "variant": variant + ran, "shape": "x".join(map(str, shape)), "t1": t1, "t2": t2,
            "efficiency": t1 / t2, "all_gathers": gathers, "all_reduces": reduces, "largest_gather": largest,
            "x_size": math.prod(shape), "grad_sharding": str(grads[0].sharding.spec), "programs": programs,
            "chained": None if c1 is None else (c1, c2, c1 / c2), "timeline": timelines}


def _load_file(relative: str):
    """The module of a file of this repository (``examples/`` and ``benchmarks/`` are no packages)."""
    path = pathlib.Path(__file__).resolve().parents[1] / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_example(name: str, plain: bool):
    return _load_file("examples/plain.py").load(name, plain=plain)


def measure_gpt(variant: str, scale: int, repeats: int, axis_type) -> dict:
    """One row for the GPT's gradient step: 1 device with half the batch vs 2 devices with the
    whole batch sharded over "data", the parameters replicated (plain data parallelism)."""
    import equinox as eqx

    gpt = _load_example("gpt", plain=variant == "plain JAX")
    sizes = {"vocab": 1024, "seq_len": max(8, 512 // scale), "d_model": max(32, 512 // scale), "n_heads": 8,
             "n_layers": 4}
    batch = 2 * max(1, 16 // scale)
    params, static = eqx.partition(gpt.GPT(jax.random.PRNGKey(0), **sizes), eqx.is_array)
    tokens = gpt.make_batch(jax.random.PRNGKey(1), batch=batch, seq_len=sizes["seq_len"], vocab=sizes["vocab"])

    def grads(params, tokens):
        return jax.grad(lambda p: gpt.loss_fn(eqx.combine(p, static), tokens))(params)

    devices = jax.devices()[:2]
    one = jax.device_put((params, tokens[: batch // 2]), devices[0])
    step1 = jax.jit(grads)
    t1 = median_ms(lambda: step1(*one), repeats)
    mesh = jax.make_mesh((2,), ("data",), devices=devices, axis_types=(axis_type,))
    two = (jax.device_put(params, NamedSharding(mesh, P())), jax.device_put(tokens, NamedSharding(mesh, P("data"))))
    with jax.set_mesh(mesh):
        compiled = jax.jit(grads).lower(*two).compile()
        t2 = median_ms(lambda: compiled(*two), repeats)
        out = compiled(*two)
    gathers, reduces, largest = _collectives(compiled.as_text())
    activation = batch * sizes["seq_len"] * sizes["d_model"]
    return {"op": "gpt (examples/gpt.py)", "variant": variant,
            "shape": f"{batch}x{sizes['seq_len']} tokens, d {sizes['d_model']}", "t1": t1, "t2": t2,
            "efficiency": t1 / t2, "all_gathers": gathers, "all_reduces": reduces, "largest_gather": largest,
            "x_size": activation, "grad_sharding": str(jax.tree.leaves(out)[0].sharding.spec)}


def measure_nested_block(variant: str, scale: int, repeats: int, dtype, axis_type,
                         lengths_name: str = "long-tail", chain: int = 0) -> dict:
    """One row for ``benchmarks/nested_attention_block.py``'s ragged block (linear, attention within
    each sequence, output projection, residual, layer norm; 64 sequences of at most 2048 tokens, d
    256, 4 heads), ``jit(grad)`` with respect to the parameters and the input, data parallel: each
    device holds whole sequences. ``jaxrules``: the nested block under ``jax.shard_map``, each
    device its own values and local offsets (the parameters' gradients summed over the devices by
    ``shard_map``'s transpose); ``plain JAX``: the padded block (``jax.nn.dot_product_attention``
    with the sequence lengths; cuDNN's flash attention in bfloat16/float16 on a GPU, the strongest a
    user would pick, else JAX's choice), the batch sharded under ``jit``.
    Device 1 holds the lengths of device 0 reversed (the same token count, as ``shard_map``'s equal
    shards need); 1 device runs device 0's half."""
    block = _load_file("benchmarks/nested_attention_block.py")
    rng = np.random.default_rng(0)
    batch, max_len, d, heads = 64, max(16, 2048 // scale), max(16, 256 // scale), 4
    half = block.LENGTH_DISTRIBUTIONS[lengths_name](rng, batch // 2, max_len).astype(np.int32)
    lengths = np.stack([half, half[::-1]])  # (devices, sequences per device)
    params = jax.tree.map(jnp.asarray, block._params(rng, d, dtype))
    devices = jax.devices()[:2]
    mesh = jax.make_mesh((2,), ("data",), devices=devices, axis_types=(axis_type,))
    rep, data = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    if variant == "plain JAX":
        cudnn = jax.default_backend() == "gpu" and jnp.dtype(dtype).name in ("bfloat16", "float16")
        grad = jax.jit(jax.grad(block._padded_loss(heads, "cudnn" if cudnn else None, False), argnums=(0, 1)))
        x = jnp.asarray(rng.standard_normal((batch, max_len, d)), dtype)
        one = jax.device_put((params, x[: batch // 2], jnp.asarray(half)), devices[0])
        two = (jax.device_put(params, rep), jax.device_put(x, data), jax.device_put(jnp.asarray(lengths.ravel()), data))
        step1, step2 = grad, grad
    else:
        loss = block._nested_loss(heads, max_len, False)
        grad = jax.grad(loss, argnums=(0, 1))
        tokens = int(half.sum())
        x = jnp.asarray(rng.standard_normal((2 * tokens, d)), dtype)
        offsets = np.concatenate([np.zeros((2, 1), np.int32), np.cumsum(lengths, axis=1)], axis=1).astype(np.int32)
        one = jax.device_put((params, x[:tokens], jnp.asarray(offsets[0])), devices[0])
        two = (jax.device_put(params, rep), jax.device_put(x, data), jax.device_put(jnp.asarray(offsets), data))
        step1 = jax.jit(grad)
        step2 = jax.jit(jax.shard_map(lambda p, v, o: grad(p, v, o[0]), mesh=mesh, in_specs=(P(), P("data"), P("data")),
                                      out_specs=(P(), P("data"))))
    t1 = median_ms(lambda: step1(*one), repeats)
    with jax.set_mesh(mesh):
        compiled = step2.lower(*two).compile()
        t2 = median_ms(lambda: compiled(*two), repeats)
        grads = compiled(*two)
        c2 = jax.jit(_chained(step2, chain, 1, 1)).lower(*two).compile() if chain > 1 else None
        chained2 = None if c2 is None else median_ms(lambda: c2(*two), repeats) / chain
    chained = None
    if chain > 1:  # per step, K dependent steps in one program (each step's input its input gradient)
        c1 = jax.jit(_chained(step1, chain, 1, 1)).lower(*one).compile()
        chained1 = median_ms(lambda: c1(*one), repeats) / chain
        chained = (chained1, chained2, chained1 / chained2)
    gathers, reduces, largest = _collectives(compiled.as_text())
    activation = int(half.sum()) * d if variant != "plain JAX" else batch // 2 * max_len * d
    return {"op": f"ragged block ({lengths_name})", "variant": variant,
            "shape": f"{batch} sequences <= {max_len}, d {d}, {heads} heads", "t1": t1, "t2": t2,
            "efficiency": t1 / t2, "all_gathers": gathers, "all_reduces": reduces, "largest_gather": largest,
            "x_size": activation, "grad_sharding": str(grads[1].sharding.spec), "chained": chained,
            "programs": {"2 devices": hlo_summary.summarize(compiled.as_text(), activation)}}


def functools_partial_plain(op: str):
    return lambda x, w, b: _plain_norm(op, x, w, b)


def table(rows: list[dict], dtype_name: str, device: str) -> str:
    head = (f"Data parallel, {dtype_name}, `jit(grad)` (x, weight, bias), {device}: 1 device with half the "
            "batch vs 2 devices with the whole batch sharded over \"data\".\n\n"
            "| op | shape (whole batch) | variant | 1 device, half batch ms | 2 devices, full batch ms | "
            "weak-scaling efficiency | chained steps: 1 device, 2 devices ms, efficiency | "
            "all-gathers (largest, elements / activation) | all-reduces | "
            "gradient's sharding |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")

    def chained(r):
        return "" if not r.get("chained") else "{:.3f}, {:.3f}, {:.2f}".format(*r["chained"])

    body = "".join(
        f"| {r['op']} | {r['shape']} | {r['variant']} | failed: {r['error']} | | | | | | |\n" if "error" in r else
        f"| {r['op']} | {r['shape']} | {r['variant']} | {r['t1']:.3f} | {r['t2']:.3f} | {r['efficiency']:.2f} | "
        f"{chained(r)} | {r['all_gathers']} ({r['largest_gather']} / {r['x_size']}) | {r['all_reduces']} | "
        f"{r['grad_sharding']} |\n" for r in rows)
    return head + body


def programs_table(rows: list[dict]) -> str:
    """The compiled programs of each row, 1 device vs 2 (``jaxrules.hlo_summary``)."""
    head = ("| op | variant | program | collectives: kind shapes bytes @depth | longest collective chain | "
            "custom calls | fusions | activation-sized reads, writes, copies/transposes |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- |\n")
    lines = []
    for r in rows:
        for label, s in r.get("programs", {}).items():
            coll = "; ".join(f"{c['kind']} {c['shapes']} {c['bytes']} B @{c['depth']}" for c in s["collectives"])
            calls = sorted(set(s["custom_calls"]))
            lines.append(f"| {r['op']} | {r['variant']} | {label} | {coll or '-'} | {s['depth']} | "
                         f"{len(s['custom_calls'])} {calls or ''} | {s['fusions']} | "
                         f"{s['big_reads']}, {s['big_writes']}, {s['big_copies']} |\n")
    return head + "".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, default=1, help="divide the shapes (CPU smoke runs)")
    parser.add_argument("--batch", type=int, default=1,
                        help="multiply the norms' batch (the issue's shapes' leading axis) by this, for per-device "
                             "work past the host's floor per call")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--ops", default="layer_norm,group_norm,batch_norm,gpt")
    parser.add_argument("--variants", default="jaxrules,plain JAX",
                        help="comma-separated: jaxrules (the dispatch's choice), jaxrules pallas, jaxrules xla, "
                             "plain JAX, floor")
    parser.add_argument("--chain", type=int, default=0, help="also time this many dependent steps in one program")
    parser.add_argument("--hlo-dir", help="write each compiled program's optimized HLO here")
    parser.add_argument("--axis-type", choices=("auto", "explicit"), default="auto",
                        help="the mesh axis type (plain JAX's group norm fails under explicit in jax 0.10)")
    parser.add_argument("--loss", choices=sorted(LOSSES), default="linear",
                        help="the step's loss of y = op(x): sum(y ct), where y's cotangent is an input and the "
                             "backward's sums need not wait for the forward's statistics, or sum(sin(y) ct), where "
                             "it waits, as behind a network's later layers")
    parser.add_argument("--timeline", type=int, default=0, metavar="STEPS",
                        help="also profile this many calls of each norm's programs and print each GPU's "
                             "operations in a step (benchmarks/device_timeline.py)")
    parser.add_argument("--out", help="also write the Markdown tables here")
    args = parser.parse_args(argv)
    if jax.device_count() < 2:
        print("needs 2 devices (on a CPU: XLA_FLAGS=--xla_force_host_platform_device_count=2)", file=sys.stderr)
        return 2
    impl = None if jax.default_backend() == "gpu" else "pallas_interpret"  # the kernels' code path on a CPU
    dtype = jnp.dtype(args.dtype)
    axis_type = {"auto": AxisType.Auto, "explicit": AxisType.Explicit}[args.axis_type]
    rows = []
    for op in args.ops.split(","):
        shape = _shapes(args.scale).get(op, ())
        shape = (shape[0] * args.batch, *shape[1:]) if shape else shape
        for variant in args.variants.split(",") if op not in ("gpt", "nested_block") else ("jaxrules", "plain JAX"):
            try:
                if op == "gpt":
                    rows.append(measure_gpt(variant, args.scale, args.repeats, axis_type))
                elif op == "nested_block":
                    rows.append(measure_nested_block(variant, args.scale, args.repeats, dtype, axis_type,
                                                     chain=args.chain))
                else:
                    rows.append(measure(op, variant, shape, dtype, args.repeats, impl, axis_type, args.chain,
                                        args.hlo_dir, args.loss, args.timeline))
            except Exception as e:  # noqa: BLE001 - reported in the table
                rows.append({"op": op, "variant": variant, "shape": "x".join(map(str, shape)),
                             "error": f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"})
            print({k: v for k, v in rows[-1].items() if k not in ("programs", "timeline")}, file=sys.stderr, flush=True)
    text = table(rows, args.dtype, f"{jax.devices()[0].device_kind} ({jax.default_backend()}), "
                 f"{args.axis_type} mesh axis") + "\n" + programs_table(rows)
    timelines = [r["timeline"] for r in rows if r.get("timeline", "").strip()]
    if timelines:
        text += "\nOne step's operations per GPU (medians over the profiled calls):\n\n```\n" + "\n\n".join(
            timelines) + "\n```\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
