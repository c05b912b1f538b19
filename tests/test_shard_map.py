"""The ops inside a user's ``jax.shard_map`` (``check_vma=True``, JAX's default): each device holds
its own shard and calls the op on it, the other way to train data parallel. On 4 forced
host devices (a subprocess: JAX starts with one device in the test process):

* the norms' XLA formulas and the nested attention's (each device keeps whole sequences: its own
  values and local offsets) equal the same op run on each device's shard alone, value and
  gradients;
* layer and RMS norm's Triton kernels lower for CUDA inside ``shard_map``: their outputs carry
  the shard's varying mesh axes (``mechanism.varying_struct``), and the partitioned kernel ops
  call the kernels directly there (``mechanism.in_shard_map``). Before, every kernel-backed
  op failed to trace ("manual_axis_type on jax.ShapeDtypeStruct must not be None") and the nested
  attention's scans failed on their constant carries ("the manual axis types do not match").

Every record's op under ``shard_map`` (vmapped over each device's slice of a batch) is the
harness's ``sharded`` check's third form (``jaxrules.testing.check_sharded``): it found that the
derivatives of 181 of the 189 records failed there (a vmapped formula's cotangent lost its varying
type and was summed over the devices: ``mechanism._batched_vjp``'s per-example avals).

Not covered: the kernels in Pallas' interpret mode inside ``shard_map``: JAX's interpreter mixes
varying and invariant values in one primitive there ("Primitive pad requires varying manual axes
to match", JAX 0.10.2), a JAX limitation of the test mode only."""

from __future__ import annotations

import json
import re

import pytest
from _cuda_lowering import for_cuda
from _forced_devices import one_xdist_worker, worker_rows

pytestmark = one_xdist_worker(__name__)  # its module fixture runs once

DEVICES = 4
NORMS = ("layer_norm", "rms_norm", "group_norm", "batch_norm")
KERNELS = [(op, "pallas") for op in ("layer_norm", "rms_norm")]


def _norm(op, impl):
    from jaxrules.nn import batch_norm, group_norm, layer_norm, rms_norm

    return {"layer_norm": lambda x: layer_norm(x, 128, impl=impl), "rms_norm": lambda x: rms_norm(x, 128, impl=impl),
            "group_norm": lambda x: group_norm(x, 4, impl=impl),
            "batch_norm": lambda x: batch_norm(x, None, None, training=True, impl=impl)[0]}[op]


def _worker():
    from jaxrules.cli import use_fast_compile_flags

    use_fast_compile_flags()  # as tests/conftest.py, before JAX's backend starts
    import jax

    jax.config.update("jax_platforms", "cpu")  # the forced host devices, on a GPU machine too (before any use)
    jax.config.update("jax_disable_most_optimizations", True)  # small programs compiled once: XLA's passes cost more
    import jax.numpy as jnp
    import numpy as np
    from jax import export
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxrules import nested as N

    mesh = jax.make_mesh((DEVICES,), ("data",))
    shard = NamedSharding(mesh, P("data"))
    rng = np.random.default_rng(0)

    def per_device(f, *arrays):
        """``f`` run on each device's shard alone, results concatenated (the reference)."""
        parts = [f(*(a.reshape(DEVICES, -1, *a.shape[1:])[d] for a in arrays)) for d in range(DEVICES)]
        return jax.tree.map(lambda *p: np.concatenate([np.atleast_1d(x) for x in p]), *parts)

    def compare(name, f, *arrays, fixed=()):
        """Value and gradients of ``sum(sin(f))`` under shard_map against each shard alone
        (``fixed``: more arguments, sharded too, not differentiated)."""
        n = len(arrays)
        loss = lambda *a: jnp.sum(jnp.sin(f(*a)))  # noqa: E731
        grad = jax.value_and_grad(loss, tuple(range(n)))
        step = lambda *a: (lambda v, g: (v[None], g))(*grad(*a))  # noqa: E731 - each device's loss as (1,)
        sharded = jax.shard_map(step, mesh=mesh, in_specs=(P("data"),) * (n + len(fixed)),
                                out_specs=(P("data"), P("data")))
        try:
            value, grads = jax.jit(sharded)(*(jax.device_put(a, shard) for a in (*arrays, *fixed)))
            want_value, want_grads = per_device(step, *arrays, *fixed)
            err = max(float(np.max(np.abs(np.asarray(g) - w))) for g, w in zip(grads, want_grads))
            row = {"case": name, "value": float(np.abs(np.asarray(value) - want_value).max()), "grads": err}
        except Exception as e:  # noqa: BLE001 - the outcome is the result
            row = {"case": name, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        print(json.dumps(row), flush=True)

    rows = rng.standard_normal((16, 128))
    maps = rng.standard_normal((8, 64, 3, 5))
    for op in NORMS:
        compare(f"{op} xla", _norm(op, "xla"), rows if op in ("layer_norm", "rms_norm") else maps)

    # Nested attention, each device its own sequences (lengths summing to its 24 tokens).
    lengths = [[5, 0, 7, 12], [3, 3, 3, 15], [10, 2, 0, 12], [1, 1, 1, 21]]
    offsets = np.array([np.concatenate([[0], np.cumsum(n)]) for n in lengths], np.int32)
    q, k, v = (rng.standard_normal((DEVICES * 24, 2, 16)) for _ in range(3))

    def attention(q, k, v, offsets):  # offsets: this device's (1, B + 1) local offsets
        return N.scaled_dot_product_attention(*(N.from_jagged(x, offsets[0]) for x in (q, k, v)), impl="xla").values

    compare("nested attention xla", attention, q, k, v, fixed=(offsets,))

    # bfloat16 weights replicated over the devices: their gradients' all-reduces run in bfloat16
    # (one all-reduce with the other bfloat16 parameters', as plain JAX's), not in the float32 of
    # the formulas' statistics (mechanism._sum_over_varying_axes casts first)
    from jaxrules.nn import group_norm, layer_norm

    def weighted(op):
        norm = {"layer_norm": lambda x, w, b: layer_norm(x, 128, w, b),
                "group_norm": lambda x, w, b: group_norm(x, 4, w, b)}[op]
        x = jnp.asarray(rows if op == "layer_norm" else maps, jnp.bfloat16)
        w, b = (jnp.ones(x.shape[-1] if op == "layer_norm" else x.shape[1], jnp.bfloat16) for _ in range(2))
        loss = lambda w, b, x: jnp.sum(jnp.sin(norm(x, w, b).astype(jnp.float32)))  # noqa: E731
        step = jax.shard_map(jax.grad(loss, (0, 1)), mesh=mesh, in_specs=(P(), P(), P("data")), out_specs=P())
        text = jax.jit(step).lower(w, b, jax.device_put(x, shard)).as_text()
        reduced = re.findall(r'"stablehlo.all_reduce".*?\}\) : \(tensor<[0-9x]*x?(\w+)>\)', text, re.S)
        print(json.dumps({"case": f"{op} bfloat16 weight gradients", "all_reduce_dtypes": reduced}), flush=True)

    for op in ("layer_norm", "group_norm"):
        weighted(op)

    for op, impl in KERNELS:
        f = _norm(op, impl)
        # shard_map over the context's mesh: the same 4-device "data" axis, of H100s (_cuda_lowering)
        step = jax.jit(jax.grad(lambda x: jnp.sum(jnp.sin(jax.shard_map(f, in_specs=P("data"),
                                                                        out_specs=P("data"))(x)))))
        shape = rows.shape
        try:
            with for_cuda(mesh) as cuda_mesh:
                text = export.export(step, platforms=["cuda"],
                                     disabled_checks=[export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])(
                    jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(cuda_mesh, P("data")))
                ).mlir_module()
            row = {"case": f"{op} {impl} export", "kernels": text.count("stablehlo.custom_call @__gpu$xla.gpu.triton")}
        except Exception as e:  # noqa: BLE001
            row = {"case": f"{op} {impl} export", "error": f"{type(e).__name__}: {str(e)[:300]}"}
        print(json.dumps(row), flush=True)


@pytest.fixture(scope="module")
def results():
    return {r["case"]: r for r in worker_rows(__file__, devices=DEVICES, timeout=600)}


@pytest.mark.parametrize("case", [f"{op} xla" for op in NORMS] + ["nested attention xla"])
def test_the_formulas_inside_shard_map_equal_each_shard_alone(results, case):
    row = results[case]
    assert "error" not in row, row
    assert row["value"] <= 1e-4 and row["grads"] <= 1e-4, row


@pytest.mark.parametrize("op", ["layer_norm", "group_norm"])
def test_bfloat16_weight_gradients_are_summed_over_devices_in_bfloat16(results, op):
    row = results[f"{op} bfloat16 weight gradients"]
    assert row["all_reduce_dtypes"] == ["bf16", "bf16"], row  # weight and bias


@pytest.mark.parametrize("op, impl", KERNELS)
def test_the_kernels_lower_for_cuda_inside_shard_map(results, op, impl):
    row = results[f"{op} {impl} export"]
    assert "error" not in row, row
    assert row["kernels"] == 2, row  # forward and backward, on each device's shard


if __name__ == "__main__":
    _worker()
