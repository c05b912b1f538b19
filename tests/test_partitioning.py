"""The fused kernels under ``jit`` with sharded inputs (``jaxrules.partitioning``): on 8 forced
host devices (a subprocess: JAX starts with one device in the test process), with the layer/RMS
norm kernels in Pallas interpret mode, values and gradients of ``value_and_grad`` equal the
unsharded ones (float64), gradients keep the batch sharding, and the compiled program gathers no
activation, under ``Auto`` and ``Explicit`` meshes, with replicated and FSDP-sharded weights;
a sharding the kernels cannot honour (the normalized axis split) still gives the unsharded
answer. Group and batch norm (the XLA formulas) under data parallelism: the collectives they
wait on. The ragged attention kernels run on each device's heads or examples. Lowered for CUDA:
each device runs the kernels of its shard's rows."""

import json
import re

import pytest
from _cuda_lowering import for_cuda
from _forced_devices import one_xdist_worker, worker_rows
from _repo_files import load

pytestmark = one_xdist_worker(__name__)  # its module fixture runs once

ROW_OPS = ("layer_norm", "rms_norm")  # their kernels; group and batch norm run the XLA formulas
# (op, mesh axis types, spec of x, spec of the weights): every op in both modes; FSDP weights.
CASES = [
    *[(op, mode, ("data",), weights) for op in ("layer_norm", "rms_norm", "group_norm")
      for mode, weights in (("auto", None), ("explicit", ("data",)))],
    ("layer_norm", "auto", ("data",), ("data",)),
    ("rms_norm", "auto", ("data",), ("data",)),
    ("rms_norm", "auto", (None, None, "model"), None),  # the normalized axis split
    # A sharding the kernels cannot honour as it is: a correct program all the same.
    ("layer_norm", "auto", (None, None, "model"), None),  # the normalized axis split
]


def _worker(cases):
    """Runs in the subprocess: one line of JSON per case."""
    import math

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_disable_most_optimizations", True)
    hlo_summary = load("benchmarks/hlo_summary.py")
    from jaxrules.ops.normalization import group_norm, layer_norm, rms_norm

    impl = "pallas_interpret"
    ops = {
        "layer_norm": (lambda x, w, b: layer_norm(x, 8, w, b, impl=impl), (8, 3, 8), 8),
        "rms_norm": (lambda x, w, b: rms_norm(x, 8, w, impl=impl), (8, 3, 8), 8),  # b unused: zero gradient
        "group_norm": (lambda x, w, b: group_norm(x, 2, w, b), (8, 4, 3, 2), 4),
    }
    rng = np.random.default_rng(0)
    for op, mode, x_spec, w_spec in cases:
        f, shape, c = ops[op]
        x = rng.standard_normal(shape) * 2 + 3
        w, b, ct = rng.standard_normal(c) + 1, rng.standard_normal(c), rng.standard_normal(shape)

        def loss(x, w, b):
            return jnp.sum(f(x, w, b) * ct)  # noqa: B023

        grad = jax.value_and_grad(loss, (0, 1, 2))
        want = grad(x, w, b)
        kind = AxisType.Explicit if mode == "explicit" else AxisType.Auto
        mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(kind, kind))
        with jax.set_mesh(mesh):
            xs = jax.device_put(x, NamedSharding(mesh, P(*x_spec)))
            ws, bs = (jax.device_put(v, NamedSharding(mesh, P(*(w_spec or ())))) for v in (w, b))
            compiled = jax.jit(grad).lower(xs, ws, bs).compile()
            got = compiled(xs, ws, bs)
            kernels = "pallas_call" in str(jax.make_jaxpr(grad)(xs, ws, bs))
        hlo = compiled.as_text()
        shard = x.size // math.prod(mesh.shape[a] for a in x_spec if a is not None)
        summary = hlo_summary.summarize(hlo, shard)
        single = hlo_summary.summarize(jax.jit(grad).lower(x, w, b).compile().as_text(), x.size)
        gathered = [math_size(s) for s in re.findall(r"= \w+\[([\d,]*)\][^=]* all-gather\(", hlo)]
        print(json.dumps({
            "case": [op, mode, x_spec, w_spec],
            "error": max_gap(got, want),
            "scale": max(float(np.max(np.abs(np.asarray(e)))) for e in [want[0], *want[1]]),
            "dx_spec": str(got[1][0].sharding.spec), "dw_spec": str(got[1][1].sharding.spec),
            "largest_gather": max(gathered, default=0), "x_size": x.size,
            "all_reduces": len(re.findall(r" all-reduce(?:-start)?\(", hlo)),
            "collectives": [(c["kind"], c["depth"], c["bytes"]) for c in summary["collectives"]],
            "depth": summary["depth"], "passes": (summary["big_reads"], summary["big_writes"]),
            "single_passes": (single["big_reads"], single["big_writes"]), "channels": c, "kernels": kernels,
        }), flush=True)


def _worker_extras():
    """An unevenly sharded batch (a slice of a sharded array), arrays on no mesh, vmap, the ragged
    attention kernels and batch norm's XLA formulas."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    hlo_summary = load("benchmarks/hlo_summary.py")
    from jaxrules.ops.normalization import batch_norm, layer_norm, rms_norm

    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((8, 3, 5)), rng.standard_normal(5) + 1

    def loss(x, w):  # 6 of 8 samples: 4 shards of 1.5 samples
        return jnp.sum(layer_norm(x[:6], 5, w, impl="pallas_interpret") ** 3)

    grad = jax.value_and_grad(loss, (0, 1))
    want = grad(x, w)
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    with jax.set_mesh(mesh):
        args = jax.device_put(x, NamedSharding(mesh, P("data"))), jax.device_put(w, NamedSharding(mesh, P()))
        try:
            row = {"case": "uneven", "error": max_gap(jax.jit(grad)(*args), want)}
        except Exception as err:  # noqa: BLE001 - the outcome is the result; the other cases still run
            row = {"case": "uneven", "failed": f"{type(err).__name__}: {str(err)[-600:]}"}
    print(json.dumps(row), flush=True)

    # Arrays on no mesh (uncommitted) in a process of several devices: jit of the op, its JVP and
    # its gradient lower the kernels (their custom_partitioning needs the program's devices).
    errors, w = {}, rng.standard_normal(5) + 1
    for name, fn in (("layer_norm", lambda x, w: layer_norm(x, 5, w, impl="pallas_interpret")),
                     ("rms_norm", lambda x, w: rms_norm(x, 5, w, impl="pallas_interpret"))):
        y = rng.standard_normal((8, 3, 5))
        programs = (lambda x, w: fn(x, w), lambda x, w: jax.jvp(fn, (x, w), (y, w)),  # noqa: B023
                    jax.grad(lambda x, w: jnp.sum(fn(x, w) ** 3), (0, 1)))  # noqa: B023
        errors[name] = max(max_gap(jax.jit(p)(x, w), p(x, w)) for p in programs)
    print(json.dumps({"case": "uncommitted", "errors": errors}), flush=True)

    # Under vmap with per-example weights (the weights batched too: the kernels under jax.vmap):
    # the vmapped kernels are partitioned along the vmapped axis, in both mesh modes.
    for name, fn in (("layer_norm", lambda x, w: layer_norm(x, 5, w, impl="pallas_interpret")),
                     ("rms_norm", lambda x, w: rms_norm(x, 5, w, impl="pallas_interpret"))):
        xb, wb = rng.standard_normal((8, 3, 5)), rng.standard_normal((8, 5)) + 1
        grad = jax.value_and_grad(lambda x, w: jnp.sum(jnp.sin(jax.vmap(fn)(x, w))), (0, 1))  # noqa: B023
        want = grad(xb, wb)
        for kind in (AxisType.Auto, AxisType.Explicit):
            mesh = jax.make_mesh((8,), ("data",), axis_types=(kind,))
            with jax.set_mesh(mesh):
                args = [jax.device_put(v, NamedSharding(mesh, P("data"))) for v in (xb, wb)]
                compiled = jax.jit(grad).lower(*args).compile()
                got = compiled(*args)
            print(json.dumps({"case": f"vmap {name} {kind}", "error": max_gap(got, want),
                "specs": [str(g.sharding.spec) for g in got[1]],
                "gathers": len(re.findall(r" all-gather(?:-start)?\(", compiled.as_text()))}), flush=True)

    # The ragged attention kernels: independent over heads (sharded heads run on their devices)
    # and over vmap's examples.
    from jaxrules.nn import scaled_dot_product_attention

    def attention(q, k, v):
        return scaled_dot_product_attention(q, k, v, is_causal=True, impl="pallas_interpret")

    qkv = [rng.standard_normal((8, 2, 8, 21, 16)) for _ in range(3)]  # vmapped (8,), then (B, H, L, E)
    for form, fn, spec in (("vmap", jax.vmap(attention), P("data")),
                           ("heads", lambda *a: attention(*(x[0] for x in a)), P(None, None, "data"))):
        grad = jax.value_and_grad(lambda q, k, v: jnp.sum(jnp.sin(fn(q, k, v))), (0, 1, 2))  # noqa: B023
        want = grad(*qkv)
        mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
        with jax.set_mesh(mesh):
            args = [jax.device_put(v, NamedSharding(mesh, spec)) for v in qkv]
            compiled = jax.jit(grad).lower(*args).compile()
            got = compiled(*args)
        gathered = [math_size(d) for d in re.findall(r"= \w+\[([\d,]*)\][^=]* all-gather\(", compiled.as_text())]
        print(json.dumps({"case": f"attention {form}", "error": max_gap(got, want),
            "specs": [str(g.sharding.spec) for g in got[1]], "largest_gather": max(gathered, default=0)}), flush=True)

    # Batch norm's XLA formulas (its only implementation): two dependent all-reduces
    # of the statistics (on a CPU, two passes: the mean, then the variance), and the backward's
    # sums in the second (dw, db from the means B(g) takes: no wait for the variance).
    xb, ctb = rng.standard_normal((8, 4, 3, 2)), rng.standard_normal((8, 4, 3, 2))
    wb = rng.standard_normal(4) + 1
    xla_grad = jax.grad(lambda x, w, b: jnp.sum(batch_norm(x, None, None, w, b, training=True, impl="xla")[0] * ctb),
                        (0, 1, 2))
    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh):
        args = jax.device_put(xb, NamedSharding(mesh, P("data"))), jnp.asarray(wb), jnp.zeros(4)
        compiled = jax.jit(xla_grad).lower(*args).compile()
        got = compiled(*args)
    summary = hlo_summary.summarize(compiled.as_text(), xb.size)
    print(json.dumps({"case": "batch_norm xla", "error": max_gap(got, xla_grad(xb, wb, jnp.zeros(4))),
                      "depth": summary["depth"], "kinds": sorted({c["kind"] for c in summary["collectives"]})}),
          flush=True)


def max_gap(got, want) -> float:
    """The largest absolute difference between two pytrees' leaves."""
    import jax
    import numpy as np

    return max(float(np.max(np.abs(np.asarray(g) - np.asarray(e)))) for g, e in
               zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True))


def math_size(dims: str) -> int:
    size = 1
    for d in filter(None, dims.split(",")):
        size *= int(d)
    return size


@pytest.fixture(scope="module")
def results():
    rows = worker_rows(__file__)
    return {r["case"] if isinstance(r["case"], str) else json.dumps(r["case"]): r for r in rows}


def _row(results, case):
    op, mode, x_spec, w_spec = case
    return results[json.dumps([op, mode, list(x_spec), None if w_spec is None else list(w_spec)])]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-x{c[2]}-w{c[3]}")
def test_sharded_values_and_gradients_equal_the_unsharded_ones(results, case):
    row = _row(results, case)
    assert row["error"] <= 1e-12 * (1 + row["scale"]), row


@pytest.mark.parametrize("case", [c for c in CASES if c[2] == ("data",)], ids=lambda c: f"{c[0]}-{c[1]}-w{c[3]}")
def test_batch_sharded_gradients_stay_sharded_and_nothing_gathers_the_activation(results, case):
    row = _row(results, case)
    assert row["dx_spec"].startswith("P('data'"), row
    if case[3] is not None:  # FSDP: the weight's gradient comes back sharded like the weight
        assert row["dw_spec"] == "P('data',)", row
    # Only weights (or per-channel vectors) are gathered, never the activation or a shard of it
    # (a gathered array smaller than one device's shard: 4 "data" shards).
    assert row["largest_gather"] < row["x_size"] // 4, row
    assert row["all_reduces"] >= 1, row  # dw/db (and batch norm's statistics) summed over devices


@pytest.mark.parametrize("case", [c for c in CASES if c[2] == ("data",) and c[0] in ROW_OPS],
                         ids=lambda c: f"{c[0]}-{c[1]}-w{c[3]}")
def test_a_batch_sharded_input_runs_the_kernels_in_both_mesh_modes(results, case):
    """The kernels, not a fallback to the XLA formulas."""
    assert _row(results, case)["kernels"], _row(results, case)


def test_batch_norm_xla_formulas_wait_on_two_collectives(results):
    """The XLA formulas: the mean's all-reduce, then one more for the variance and every backward
    sum together: the weight gradients reuse the sums of the input gradient
    (``vjp_rules.affine_normalize_vjp``), so ``sum g x_hat`` does not wait for the variance (a third)."""
    row = results["batch_norm xla"]
    assert row["error"] <= 1e-12 and row["kinds"] == ["all-reduce"], row
    assert row["depth"] == 2, row


def test_group_norm_partitioned_is_the_one_device_program_plus_one_all_reduce(results):
    """Group norm (the XLA formulas) in data parallelism needs no statistics from other devices:
    the partitioned program makes the one-device program's passes over the activation (no copy,
    transpose or reshard added) and its only collective latency is one all-reduce (of the weight
    gradients' and the loss's partial sums, at most 2 C + 1 float64)."""
    row = _row(results, ("group_norm", "auto", ("data",), None))
    assert [(kind, depth) for kind, depth, _ in row["collectives"]] == [("all-reduce", 1)], row
    assert row["collectives"][0][2] <= (2 * row["channels"] + 1) * 8, row
    assert row["passes"] == row["single_passes"], row


if __name__ == "__main__":
    _worker(CASES)
    _worker_extras()


@pytest.mark.xfail(strict=True, reason="jaxrules.partitioning: the rows kernels' partition fails on an unevenly "
                   "sharded batch (IndivisibleError in JAX's custom_partitioning)")
def test_an_unevenly_sharded_batch_gets_the_unsharded_weight_gradients(results):
    """Padded rows would enter the weight's gradient sums: an uneven row axis is replicated, and
    the program runs and gives the unsharded values and gradients."""
    row = results["uneven"]
    assert "failed" not in row and row["error"] <= 1e-11, row


def test_jit_lowers_the_kernels_of_arrays_on_no_mesh_in_a_process_of_several_devices(results):
    """``jax.jit(f)(x)`` with ``x`` on the default device (no sharding anywhere): JAX lowers such a
    program without a device assignment unless a primitive in its jaxpr asks for one, and the
    kernels' ``custom_partitioning`` sat hidden in the op's primal primitive ("Please file a bug"
    in jax 0.10); the primal now binds ``mechanism.primal_on_devices_p``."""
    errors = results["uncommitted"]["errors"]
    assert set(errors) == {"layer_norm", "rms_norm"}
    assert all(e < 1e-12 for e in errors.values()), errors


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("mode", ["Auto", "Explicit"])
def test_vmapped_kernels_are_partitioned_along_the_vmapped_axis(results, op, mode):
    """vmap over a batch-sharded axis with per-example weights: the kernels run under jax.vmap (no
    rows fold), each device on its examples: no all-gather, gradients sharded as the inputs."""
    row = results[f"vmap {op} AxisType.{mode}"]
    assert row["error"] < 1e-12, row
    assert row["gathers"] == 0, row
    assert all(spec.startswith("P('data'") for spec in row["specs"]), row


@pytest.mark.parametrize("form", ["vmap", "heads"])
def test_ragged_attention_kernels_run_on_each_devices_examples_or_heads(results, form):
    """The ragged attention kernels under vmap over a sharded axis, and with the heads sharded:
    each device runs its share (no all-gather of q, k, v), gradients keep the sharding."""
    row = results[f"attention {form}"]
    assert row["error"] < 1e-12, row
    assert row["largest_gather"] == 0, row
    want = "P('data'" if form == "vmap" else "P(None, None, 'data'"
    assert all(spec.startswith(want) for spec in row["specs"]), row


def _triton_calls(fn, *args, mesh=None):
    """(grid, kernel IR, name) of each Triton kernel of ``fn`` exported for CUDA (no GPU needed;
    ``mesh``: the axes of the context mesh, ``_cuda_lowering.for_cuda``)."""
    import jax
    from jax import export

    jax.clear_caches()  # the kernel IR's debug locations name the first traceback of a cached trace
    with for_cuda(mesh):
        text = export.export(jax.jit(fn), platforms=["cuda"],
                             disabled_checks=[export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])(
            *args).mlir_module()
    return re.findall(r"custom_call @__gpu\$xla.gpu.triton\([^)]*\) \{mhlo.backend_config = \{(.*?), ir = \"(.*?)\", "
                      r"name = \"(\w+)\"", text, re.S)


@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_each_devices_rows_kernels_are_the_one_device_programs_kernels(op, direction):
    """The partition callbacks of 43689 rows of 5120 (bfloat16) sharded over 3 devices lower, on
    each device's 14563 rows, the Triton kernels (grid and IR) of the one-device program of that
    shard's shape, not of the whole array's rows (whose launch differs); the backward sums the
    weight gradients in one all-reduce and gathers nothing."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxrules import dispatch, norm_kernels

    m, n, devices, bf16, f32 = 14563, 5120, 3, "bfloat16", "float32"
    whole, local = dispatch.rows_launch(devices * m, n), dispatch.rows_launch(m, n)
    assert whole.steps != local.steps
    center = op == "layer_norm"
    stats = (4 if center else 2) if direction == "backward" else 0
    shard = [jax.ShapeDtypeStruct(s, t) for s, t in ([((m, n), bf16)] * (2 if direction == "backward" else 1)
                                                     + [((n,), bf16)] * (2 if center and not stats else 1)
                                                     + [((m,), f32)] * stats)]
    mesh = jax.sharding.AbstractMesh((devices,), ("data",))
    sharded = [jax.ShapeDtypeStruct((devices * a.shape[0], *a.shape[1:]) if a.shape[0] == m else a.shape, a.dtype,
                                    sharding=NamedSharding(mesh, P("data") if a.shape[0] == m else P()))
               for a in shard]
    if direction == "forward":
        impl = norm_kernels._ln_forward_impl if center else norm_kernels._rms_forward_impl
        lower = norm_kernels._rows_forward_partition(impl, 2 if center else 1)(1e-5, whole, mesh, sharded, None)[0]
        one = lambda *a: impl(*a, 1e-5, local)  # noqa: E731
        one_axis = None
    else:
        impl = norm_kernels._ln_backward_impl if center else norm_kernels._rms_backward_impl
        lower = norm_kernels._rows_backward_partition(impl, stats, 2 if center else 1)(whole, mesh, sharded, None)[0]
        lower = jax.shard_map(lower, in_specs=P(), out_specs=P(), check_vma=False)  # its psum's axis (1 device here)
        one = lambda *a: impl(*a, local)  # noqa: E731
        one_axis = jax.make_mesh((1,), ("data",))
    want, got = _triton_calls(one, *shard), _triton_calls(lower, *shard, mesh=one_axis)
    assert [c[2] for c in want] == [f"{op}_{'fwd' if direction == 'forward' else 'bwd'}"]
    assert [c[0] for c in got] == [c[0] for c in want] and [c[1] for c in got] == [c[1] for c in want]
    programs = local.forward_programs(m) if direction == "forward" else local.backward_programs(m)
    assert f"grid_x = {programs} : i32" in want[0][0]
