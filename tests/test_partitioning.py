"""The fused norm kernels under ``jit`` with sharded inputs (issue 19, ``jaxrules.partitioning``):
on 8 forced host devices (a subprocess: JAX starts with one device in the test process), with
the kernels in Pallas interpret mode, values and gradients of ``value_and_grad`` equal the
unsharded ones (float64), gradients keep the batch sharding, and the compiled program gathers
no activation, under ``Auto`` and ``Explicit`` meshes, with replicated and FSDP-sharded weights;
shardings a kernel cannot honour (the normalized or channel axis split, an uneven batch) still
give the unsharded answer."""

import json
import re

import pytest
from _cuda_lowering import for_cuda
from _forced_devices import one_xdist_worker, worker_rows

pytestmark = one_xdist_worker(__name__)  # its module fixture runs once

# (op, mesh axis types, spec of x, spec of the weights): every op in both modes; FSDP weights.
CASES = [
    *[(op, mode, ("data",), weights) for op in ("layer_norm", "rms_norm", "group_norm", "batch_norm")
      for mode, weights in (("auto", None), ("explicit", ("data",)))],
    ("layer_norm", "auto", ("data",), ("data",)),
    ("rms_norm", "auto", ("data",), ("data",)),
    ("rms_norm", "auto", (None, None, "model"), None),  # the normalized axis split
    ("batch_norm", "explicit", ("data",), None),
    # Shardings the kernels cannot honour as they are: a correct program all the same.
    ("layer_norm", "auto", (None, None, "model"), None),  # the normalized axis split
    ("batch_norm", "auto", ("data", "model"), None),  # channels split too (kept: per-channel stats)
    ("group_norm", "auto", ("data", "model"), None),  # channels split across groups' members
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
    from jaxrules import hlo_summary
    from jaxrules.ops.normalization import batch_norm, group_norm, layer_norm, rms_norm

    impl = "pallas_interpret"
    ops = {
        "layer_norm": (lambda x, w, b: layer_norm(x, 8, w, b, impl=impl), (8, 3, 8), 8),
        "rms_norm": (lambda x, w, b: rms_norm(x, 8, w, impl=impl), (8, 3, 8), 8),  # b unused: zero gradient
        "group_norm": (lambda x, w, b: group_norm(x, 2, w, b, impl=impl), (8, 4, 3, 2), 4),
        "batch_norm": (lambda x, w, b: batch_norm(x, None, None, w, b, training=True, impl=impl)[0], (8, 4, 3, 2), 4),
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
    """An unevenly sharded batch (a slice of a sharded array) and the dispatch's view of the
    per-device shape under an Explicit mesh."""
    import functools
    import inspect

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxrules import dispatch, hlo_summary
    from jaxrules.ops.normalization import batch_norm, group_norm, layer_norm, rms_norm

    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((8, 3, 5)), rng.standard_normal(3) + 1

    def loss(x, w):  # 6 of 8 samples: 4 shards of 1.5 samples
        return jnp.sum(batch_norm(x[:6], None, None, w, None, training=True, impl="pallas_interpret")[0] ** 3)

    grad = jax.value_and_grad(loss, (0, 1))
    want = grad(x, w)
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    with jax.set_mesh(mesh):
        args = jax.device_put(x, NamedSharding(mesh, P("data"))), jax.device_put(w, NamedSharding(mesh, P()))
        got = jax.jit(grad)(*args)
    print(json.dumps({"case": "uneven", "error": max_gap(got, want)}), flush=True)

    # Arrays on no mesh (uncommitted) in a process of several devices: jit of the op, its JVP and
    # its gradient lower the kernels (their custom_partitioning needs the program's devices).
    errors, w = {}, rng.standard_normal(5) + 1
    for name, fn in (("layer_norm", lambda x, w: layer_norm(x, 5, w, impl="pallas_interpret")),
                     ("rms_norm", lambda x, w: rms_norm(x, 5, w, impl="pallas_interpret")),
                     ("batch_norm", lambda x, w: batch_norm(x.reshape(8, 5, 3), None, None, w, training=True,
                                                            impl="pallas_interpret")[0])):
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

    # Batch norm's XLA formulas (the dispatch's choice at most shapes): two dependent all-reduces
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

    # Under an Auto mesh the split is XLA's to choose: where the possible shards' plans differ,
    # each device's partition decides on its shard (dispatch.ShardPlan). x (8, 3, 4) or (8, 4, 3, 2)
    # split 4 ways over "data": the shard's features are 6 rows of 4 (layer/RMS norm), 4 groups of
    # 2 rows of 6 (group norm, 2 groups), 4 channels of 2 samples of 6 (batch norm). Plans here:
    # the kernels (interpret mode) at the shard's features and the XLA formulas elsewhere
    # ("shard"), or the reverse ("whole"); answers against the unsharded XLA formulas.
    original = dispatch.layer_norm_plan, dispatch.rms_norm_plan, dispatch.grouped_plan
    shard_features = {"layer_norm": (6, 4), "rms_norm": (6, 4), "group_norm": (4, 2, 6), "batch_norm": (4, 2, 6)}
    for kernel_at in ("shard", "whole"):
        decided = []

        def plan(op, features, launch, kernel_at=kernel_at, decided=decided):
            decided.append((inspect.stack()[2].function, *features))  # shard_plan: tracing; shard_launch: partition
            if (features == shard_features[op]) == (kernel_at == "shard"):
                return dispatch.Plan("pallas", launch, "test")
            return dispatch.Plan("xla", None, "test")

        dispatch.layer_norm_plan = lambda platform, kind, m, n, *a: plan(
            "layer_norm", (m, n), dispatch.rows_launch(m, n, interpret=True))
        dispatch.rms_norm_plan = lambda platform, kind, m, n, *a: plan(
            "rms_norm", (m, n), dispatch.rows_launch(m, n, interpret=True))
        dispatch.grouped_plan = lambda op, platform, kind, *features_and_dtypes: plan(
            op, tuple(features_and_dtypes[:3]), dispatch.GroupedLaunch(interpret=True))
        for name, fn, shape in (
                ("layer_norm", lambda x, w, b, impl=None: layer_norm(x, 4, w, b, impl=impl), (8, 3, 4)),
                ("rms_norm", lambda x, w, b, impl=None: rms_norm(x, 4, w, impl=impl), (8, 3, 4)),
                ("group_norm", lambda x, w, b, impl=None: group_norm(x, 2, w, b, impl=impl), (8, 4, 3, 2)),
                ("batch_norm", lambda x, w, b, impl=None: batch_norm(x, None, None, w, b, training=True,
                                                                     impl=impl)[0], (8, 4, 3, 2))):
            xr, ctr = rng.standard_normal(shape), rng.standard_normal(shape)
            wr, br = rng.standard_normal(shape[1 if len(shape) == 4 else -1]) + 1, rng.standard_normal(
                shape[1 if len(shape) == 4 else -1])

            def loss(x, w, b, impl=None, fn=fn, ct=ctr):
                return jnp.sum(jnp.sin(fn(x, w, b, impl)) * ct)

            want = jax.value_and_grad(functools.partial(loss, impl="xla"), (0, 1, 2))(xr, wr, br)
            mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
            with jax.set_mesh(mesh):
                args = jax.device_put(xr, NamedSharding(mesh, P("data"))), jnp.asarray(wr), jnp.asarray(br)
                got = jax.jit(jax.value_and_grad(loss, (0, 1, 2)))(*args)
            print(json.dumps({"case": f"shard plan {name} {kernel_at}", "error": max_gap(got, want),
                              "decided": sorted(set(decided)), "dx_spec": str(got[1][0].sharding.spec)}), flush=True)
            decided.clear()
    dispatch.layer_norm_plan, dispatch.rms_norm_plan, dispatch.grouped_plan = original

    seen = []
    original = dispatch.layer_norm_plan, dispatch.grouped_plan, dispatch.rms_norm_plan
    dispatch.layer_norm_plan = lambda platform, kind, m, n, *a: seen.append(("layer_norm", m, n)) or original[0](
        platform, kind, m, n, *a)
    dispatch.rms_norm_plan = lambda platform, kind, m, n, *a: seen.append(("rms_norm", m, n)) or original[2](
        platform, kind, m, n, *a)
    dispatch.grouped_plan = lambda op, platform, kind, p, k, length, *a: seen.append((op, p, k, length)) or original[1](
        op, platform, kind, p, k, length, *a)
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
    with jax.set_mesh(mesh):
        xs = jax.device_put(rng.standard_normal((8, 3, 4)), NamedSharding(mesh, P("data")))
        for fn in (lambda x: layer_norm(x, 4), lambda x: rms_norm(x, 4),
                   lambda x: batch_norm(x, None, None, training=True)[0]):
            try:  # on a CPU the dispatch picks the XLA formulas, whose batch-norm statistics do not
                jax.jit(fn).trace(xs)  # trace under an Explicit mesh in jax 0.10 (issue 19 req 2)
            except Exception:  # noqa: BLE001, S110 - only the dispatch's arguments matter here
                pass
    print(json.dumps({"case": "dispatch", "seen": seen}), flush=True)


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


@pytest.mark.parametrize("case", [c for c in CASES if c[2] == ("data",)], ids=lambda c: f"{c[0]}-{c[1]}-w{c[3]}")
def test_a_batch_sharded_input_runs_the_kernels_in_both_mesh_modes(results, case):
    """The kernels, not a fallback to the XLA formulas: group norm under an Explicit mesh ran the
    XLA formulas until its statistics' reshape to (N, C) went in two steps (seen on two H200s:
    0.82 chained efficiency there vs 0.97 with the kernels under Auto)."""
    assert _row(results, case)["kernels"], _row(results, case)


@pytest.mark.parametrize("mode", ["auto", "explicit"])
def test_batch_norm_pays_two_collective_latencies_per_step(results, mode):
    """Batch norm's global statistics in one collective (an all-gather of each device's per-channel
    mean and m2, 2 C float64 = 64 bytes, merged as Chan et al.; two dependent pmeans before), then
    the backward's all-reduces of the group sums (and of dw, db): a chain of two collectives."""
    row = _row(results, ("batch_norm", mode, ("data",), None))
    first = [c for c in row["collectives"] if c[1] == 1]
    assert first == [["all-gather", 1, 2 * row["channels"] * 8]], row
    assert all(kind == "all-reduce" for kind, depth, _ in row["collectives"] if depth > 1), row
    assert row["depth"] == 2, row


def test_batch_norm_xla_formulas_wait_on_two_collectives(results):
    """The XLA formulas (issue 19): the mean's all-reduce, then one more for the variance and every
    backward sum together. It was three before the weight gradients reused the sums of the input
    gradient (``vjp_rules.affine_normalize_vjp``): ``sum g x_hat`` waited for the variance."""
    row = results["batch_norm xla"]
    assert row["error"] <= 1e-12 and row["kinds"] == ["all-reduce"], row
    assert row["depth"] == 2, row


def test_group_norm_partitioned_is_the_one_device_program_plus_one_all_reduce(results):
    """Group norm in data parallelism needs no statistics from other devices: the partitioned
    program makes the one-device program's passes over the activation (no copy, transpose or
    reshard added) and its only collective latency is the all-reduce of dw, db and the loss
    (2 C + 1 float64)."""
    row = _row(results, ("group_norm", "auto", ("data",), None))
    assert all(kind == "all-reduce" and depth == 1 for kind, depth, _ in row["collectives"]), row
    assert sum(size for *_, size in row["collectives"]) == (2 * row["channels"] + 1) * 8, row
    assert row["passes"] == row["single_passes"], row


if __name__ == "__main__":
    _worker(CASES)
    _worker_extras()


def test_an_unevenly_sharded_batch_gets_the_unsharded_statistics(results):
    """Padded shards would enter batch norm's sums: an uneven batch axis is replicated instead."""
    assert results["uneven"]["error"] <= 1e-11, results["uneven"]


def test_jit_lowers_the_kernels_of_arrays_on_no_mesh_in_a_process_of_several_devices(results):
    """``jax.jit(f)(x)`` with ``x`` on the default device (no sharding anywhere): JAX lowers such a
    program without a device assignment unless a primitive in its jaxpr asks for one, and the
    kernels' ``custom_partitioning`` sat hidden in the op's primal primitive ("Please file a bug"
    in jax 0.10); the primal now binds ``mechanism.primal_on_devices_p``."""
    errors = results["uncommitted"]["errors"]
    assert set(errors) == {"layer_norm", "rms_norm", "batch_norm"}
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


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm", "group_norm", "batch_norm"])
@pytest.mark.parametrize("kernel_at", ["shard", "whole"])
def test_under_an_auto_mesh_each_device_decides_on_its_shard(results, op, kernel_at):
    """A batch of 8 over an Auto mesh of 4 x 2 devices, x split 4 ways by its sharding: the plans
    of the possible splits differ, so the partition callbacks decide on each device's shard (only
    they see its features; custom_partitioning also traces the op on the whole batch), the
    kernels there ("shard") or the XLA forms where the kernels were the whole batch's plan
    ("whole"); values and gradients equal the unsharded XLA formulas', dx stays split."""
    row = results[f"shard plan {op} {kernel_at}"]
    shard = {"layer_norm": [6, 4], "rms_norm": [6, 4], "group_norm": [4, 2, 6], "batch_norm": [4, 2, 6]}[op]
    decided = [d for d in row["decided"] if d[0] == "shard_launch"]
    assert row["error"] < 1e-12 and ["shard_launch", *shard] in decided, row
    assert any(d[0] == "shard_plan" for d in row["decided"]), row
    assert row["dx_spec"].startswith("P('data'"), row


def test_the_dispatch_decides_on_each_devices_shard_under_an_explicit_mesh(results):
    """8 x 3 rows of 4 on 4 devices: the layer-norm and RMS-norm dispatches see 6 rows per device;
    batch norm (4 channel groups of N rows) sees 2 samples per device."""
    seen = [tuple(s) for s in results["dispatch"]["seen"]]
    assert ("layer_norm", 6, 4) in seen and ("rms_norm", 6, 4) in seen and ("batch_norm", 3, 2, 4) in seen, seen


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_split_batch_norm_backward_kernels_lower_for_cuda(dtype):
    """The two kernels a batch-sharded batch-norm backward runs around its all-reduce (the sums
    pass, the dx pass) lower to Triton here, without a GPU (export for CUDA, nothing serialized)."""
    import jax
    from jax import export

    from jaxrules import dispatch, norm_kernels

    x = jax.ShapeDtypeStruct((4, 8, 35), dtype)
    rows, per_channel = jax.ShapeDtypeStruct((8, 4), dtype), jax.ShapeDtypeStruct((8,), "float32")
    params = dict(layout="batch", groups=1, launch=dispatch.GroupedLaunch())
    kernels = [
        (lambda x, g, w, m, r: norm_kernels.local_row_sums(x, g, w, m, r, **params), (x, x, rows) + (per_channel,) * 2),
        (lambda x, g, w, m, r, gm, gr, a, c: norm_kernels.local_dx(x, g, w, m, r, gm, gr, a, c, count=280, **params),
         (x, x, rows) + (per_channel,) * 6),
    ]
    for fn, args in kernels:
        lowered = export.export(jax.jit(fn), platforms=["cuda"],
                                disabled_checks=[export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])
        with for_cuda():
            assert "xla.gpu.triton" in lowered(*args).mlir_module()


def _triton_calls(fn, *args, mesh=None):
    """(grid, kernel IR, name) of each Triton kernel of ``fn`` exported for CUDA (no GPU needed;
    ``mesh``: the axes of the context mesh, ``_cuda_lowering.for_cuda``)."""
    import jax
    from jax import export

    with for_cuda(mesh):
        text = export.export(jax.jit(fn), platforms=["cuda"],
                             disabled_checks=[export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])(
            *args).mlir_module()
    return re.findall(r"custom_call @__gpu\$xla.gpu.triton\([^)]*\) \{mhlo.backend_config = \{(.*?), ir = \"(.*?)\", "
                      r"name = \"(\w+)\"", text, re.S)


@pytest.mark.parametrize("kernel", ["group_stats", "group_backward", "batch_stats"])
def test_each_devices_kernels_are_the_one_device_programs_kernels(kernel):
    """The partition callbacks of a batch sharded over 2 devices lower, on each device's shard,
    the same Triton kernels (grid and IR) as the one-device program of that shard's shape: the
    launch follows the shard, not the global batch."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxrules import dispatch
    from jaxrules import partitioning as pt

    launch, mesh = dispatch.GroupedLaunch(), jax.sharding.AbstractMesh((2,), ("data",))
    n, groups, k, length = 4, 2, 4, 35  # each device's shard: 4 of 8 samples

    def sharded(a, split):  # the whole batch, as the partition callback sees it
        whole = (2 * a.shape[0], *a.shape[1:]) if split == 0 else (*a.shape[:1], 2 * a.shape[1], *a.shape[2:])
        entries = [None] * len(whole)
        entries[split] = "data"
        return jax.ShapeDtypeStruct(whole, a.dtype, sharding=NamedSharding(mesh, P(*entries)))

    bf, f32 = jnp.bfloat16, jnp.float32
    if kernel == "group_stats":
        shard = [jax.ShapeDtypeStruct((n, groups, k, length), bf)]
        one = lambda x: pt._gn_stats_impl(x, 1e-5, launch)  # noqa: E731
        lower = pt._gn_stats_partition(1e-5, launch, mesh, [sharded(shard[0], 0)], None)[0]
    elif kernel == "group_backward":
        x, rows, stats = ((n, groups, k, length), bf), ((n, groups, k), bf), ((n, groups), f32)
        shard = [jax.ShapeDtypeStruct(*s) for s in (x, x, rows, stats, stats, stats, stats)]
        one = lambda *a: pt._gn_backward_impl(*a, launch)  # noqa: E731
        lower = pt._gn_backward_partition(launch, mesh, [sharded(a, 0) for a in shard], None)[0]
    else:
        shard = [jax.ShapeDtypeStruct((n, groups * k, length), bf)]
        one = lambda x: pt._bn_stats_impl(x, 1e-5, launch)  # noqa: E731
        lower = pt._bn_stats_partition(1e-5, launch, mesh, [sharded(shard[0], 0)], None)[0]
        # its all-gather needs the mesh axis: a 1-device "data" axis here (only the kernels compared),
        # the context's (_cuda_lowering.for_cuda)
        lower = jax.shard_map(lower, in_specs=P(), out_specs=P(), check_vma=False)
    one_axis = jax.make_mesh((1,), ("data",)) if kernel == "batch_stats" else None
    want, got = _triton_calls(one, *shard), _triton_calls(lower, *shard, mesh=one_axis)
    assert want and [c[0] for c in got] == [c[0] for c in want], (got, want)
    assert [c[1] for c in got] == [c[1] for c in want]


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_the_xla_rows_forms_compute_what_the_kernels_compute(op):
    """``partitioning._XlaRows`` (what a shard whose plan is the XLA formulas runs) against the
    Triton kernels in interpret mode, float64, on a shape with partial tiles: forward outputs,
    and the backward's dx and per-device weight sums with cotangents on every output (y and the
    statistics)."""
    import jax.numpy as jnp
    import numpy as np

    from jaxrules import dispatch
    from jaxrules import partitioning as pt

    rng = np.random.default_rng(5)
    m, n = 37, 45
    x, g = (jnp.asarray(rng.standard_normal((m, n)) * 2 + 1) for _ in range(2))
    w, b = jnp.asarray(rng.standard_normal(n) + 1), jnp.asarray(rng.standard_normal(n))
    g_mean, g_rstd = (jnp.asarray(rng.standard_normal(m)) for _ in range(2))
    kernel = dispatch.rows_launch(m, n, interpret=True)
    results = []
    for launch in (None, kernel):
        if op == "layer_norm":
            y, mean, rstd = pt._ln_forward_impl(x, w, b, 1e-5, launch)
            results.append((y, mean, rstd, *pt._ln_backward_impl(x, g, w, mean, rstd, g_mean, g_rstd, launch)))
        else:
            y, rstd = pt._rms_forward_impl(x, w, 1e-5, launch)
            results.append((y, rstd, *pt._rms_backward_impl(x, g, w, rstd, g_rstd, launch)))
    for got, want in zip(*results, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ["group", "batch"])
def test_the_xla_grouped_forms_compute_what_the_kernels_compute(layout):
    """``partitioning._XlaGrouped`` against the grouped Triton kernels in interpret mode, float64,
    (N, C, L) = (3, 4, 7) with 2 groups: moments, statistics, the backward's per-row sums and dx
    (one fused kernel, and the sums and dx passes apart with the means given) with cotangents on
    y and on both statistics."""
    import jax.numpy as jnp
    import numpy as np

    from jaxrules import dispatch, norm_kernels
    from jaxrules import partitioning as pt

    rng = np.random.default_rng(6)
    groups = 2 if layout == "group" else 1
    x, g = (jnp.asarray(rng.standard_normal((3, 4, 7)) * 2 + 1) for _ in range(2))
    p, k = (6, 2) if layout == "group" else (4, 3)
    w = jnp.asarray(rng.standard_normal((p, k)) + 1)
    g_mean, g_rstd, mean_gw, mean_gwxhat = (jnp.asarray(rng.standard_normal(p)) for _ in range(4))
    params = dict(layout=layout, groups=groups)
    results = []
    for kernels, launch in ((pt._XlaGrouped, None), (norm_kernels, dispatch.GroupedLaunch(interpret=True))):
        mean, rstd = kernels.local_stats(x, eps=1e-5, launch=launch, **params)
        results.append((*kernels.local_moments(x, launch=launch, **params), mean, rstd,
                        *kernels.local_backward_grouped(x, g, w, mean, rstd, g_mean, g_rstd, launch=launch, **params),
                        *kernels.local_row_sums(x, g, w, mean, rstd, launch=launch, **params),
                        kernels.local_dx(x, g, w, mean, rstd, g_mean, g_rstd, mean_gw, mean_gwxhat, count=21,
                                         launch=launch, **params)))
    for got, want in zip(*results, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_each_device_decides_its_rows_kernel_when_xla_splits_the_rows_an_auto_mesh():
    """Under an ``Auto`` mesh the op cannot see the split when tracing, so where the plans of the
    possible shard shapes differ the launch is a ``dispatch.ShardPlan`` and the ``partition``
    callback decides on the shard's rows: the Triton kernels of the shard's shape (here 2048
    rows of a 4096 x 1024 bfloat16 layer norm split over 2 devices: the one-device program's
    kernels and grids), or the XLA forms (the whole batch on one device: no kernel). The shape is
    one where the H200's table plans so (asserted first: a new table may need another)."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxrules import dispatch
    from jaxrules import partitioning as pt

    launch = dispatch.ShardPlan("layer_norm", "gpu", "NVIDIA H200", "bfloat16")
    m, n = 4096, 1024  # 4096 x 4096 until stop 31's training-step times made it a kernel shape
    bf16 = jax.numpy.dtype("bfloat16")
    plans = [dispatch.layer_norm_plan("gpu", "NVIDIA H200", rows, n, bf16, bf16).impl for rows in (m // 2, m)]
    assert plans == ["pallas", "xla"], plans
    mesh = jax.sharding.AbstractMesh((2,), ("data",))
    shard = [jax.ShapeDtypeStruct((m // 2, n), "bfloat16"), *[jax.ShapeDtypeStruct((n,), "bfloat16")] * 2]
    rows = jax.ShapeDtypeStruct((m, n), "bfloat16", sharding=NamedSharding(mesh, P("data")))
    lower = pt._rows_forward_partition(pt._ln_forward_impl, 2)(1e-5, launch, mesh, [rows, *shard[1:]], None)[0]
    on_h200 = dispatch.rows_launch(m // 2, n, dtype=bf16, device_kind="NVIDIA H200")
    one = lambda x, w, b: pt._ln_forward_impl(x, w, b, 1e-5, on_h200)  # noqa: E731
    want, got = _triton_calls(one, *shard), _triton_calls(lower, *shard)
    assert want and [c[0] for c in got] == [c[0] for c in want] and [c[1] for c in got] == [c[1] for c in want]
    whole = jax.ShapeDtypeStruct((m, n), "bfloat16", sharding=NamedSharding(mesh, P()))
    lower = pt._rows_forward_partition(pt._ln_forward_impl, 2)(1e-5, launch, mesh, [whole, *shard[1:]], None)[0]
    assert _triton_calls(lower, jax.ShapeDtypeStruct((m, n), "bfloat16"), *shard[1:]) == []
