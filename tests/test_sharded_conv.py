"""Convolutions and ``grid_sample`` under ``jit`` with a batch sharded over 8 forced host devices
(a subprocess: JAX starts with one device in the test process), through the harness's
``testing.check_sharded`` on one record sample at a time, float64, ``Auto`` and
``Explicit`` meshes: values, JVP and VJP equal the unsharded program's and batch-sharded
gradients keep the batch sharding (``check_sharded`` raises otherwise).

* ``grid_sample``, every mode of its record's samples, vmapped over a sharded batch: its JVP
  formula's reshape of the grid tangent was refused under an ``Explicit`` mesh.
* ``conv`` / ``conv_transpose`` with a batch-sharded input and replicated weights (data parallel).
* ``conv`` / ``conv_transpose`` vmapped over a sharded batch of inputs *and* weights, and over
  inputs alone (shared weights: the weight gradient sums per-sample gradients): under an
  ``Explicit`` mesh jax 0.10.2's own batching rule of ``lax.conv_general_dilated`` (which
  ``jax.lax.conv_transpose`` binds too) refuses these (it folds the vmapped axis into the
  channels with a ``lax.reshape`` given no ``out_sharding``: "This reshape is not supported");
  ``partials.conv``'s op batches them per device in a ``shard_map``. The row also records what
  JAX's own vmapped convolution does on the same sharding (the reason for that op).
* ``conv`` / ``conv_transpose`` with the input's channels and the weight's first axis sharded
  over a second mesh axis (not vmapped), and vmapped ``conv`` with per-example weights sharded
  over it: JAX's rule for ``lax.conv_general_dilated`` refuses a sharded weight or input channel
  axis unless given an ``out_sharding``; ``partials.conv`` passes one, and its batching rule
  gives the batched output the per-example output's sharding beside the batch.
* That op's derivatives (calls of itself) to third order against finite differences (one
  device, in this process).
"""

import json

import pytest
from _forced_devices import one_xdist_worker, worker_rows
from test_partitioning import max_gap

pytestmark = one_xdist_worker(__name__)  # its module fixture runs once

GRID_SAMPLES = (0, 2, 3, 5)  # the record's bilinear (zeros, reflection), nearest and bicubic samples
DIRECT = [("conv", 0), ("conv", 1), ("conv_transpose", 0), ("conv_transpose", 1)]  # 1-D; 2-D grouped, dilated
VMAPPED = ["conv", "conv_transpose"]


def _check(name, index, forms):
    """``check_sharded`` of record ``name`` restricted to its sample ``index`` (in ``forms``, both
    mesh modes): the worst relative
    difference, a string saying why it does not apply, or ``"<Error>: message"``."""
    import dataclasses

    import numpy as np

    from jaxrules import registry
    from jaxrules.testing import check_sharded

    record = registry.get(name)
    sample = record.samples(np.random.default_rng(0), np.float64)[index]
    one = dataclasses.replace(record, samples=lambda rng, dt: [sample])
    try:
        result = check_sharded(one, forms=forms, modes=("auto", "explicit"))
    except Exception as err:  # noqa: BLE001 - the row reports it; the test decides
        return f"{type(err).__name__}: {err}"
    return result if isinstance(result, float | str) else list(result)


def _conv_case(name):
    """``(ours, jax's)``: the record's function (``stride=2``, ``padding=1``; conv_transpose with
    ``output_padding=1``) and JAX's own convolution of the same arguments (torch's layouts), and
    the arguments: x (2, 3, 7), w (4, 3, 3) for conv, (3, 2, 3) (in, out, k) for conv_transpose."""
    from jax import lax

    from jaxrules.nn import conv, conv_transpose

    if name == "conv":
        return (lambda x, w: conv(x, w, stride=2, padding=1),
                lambda x, w: lax.conv_general_dilated(x, w, (2,), [(1, 1)]), (2, 3, 7), (4, 3, 3))
    return (lambda x, w: conv_transpose(x, w, stride=2, padding=1, output_padding=1),
            lambda x, w: lax.conv_transpose(x, w, (2,), "SAME", dimension_numbers=("NCH", "OIH", "NCH"),
                                            transpose_kernel=True), (2, 3, 4), (3, 2, 3))


def _vmapped_rows(name):
    """vmap over a sharded batch of inputs with shared (replicated) weights, ``Explicit`` mesh:
    the largest difference of the value and both gradients from the unsharded program (or the
    sharded program's error), the sharding of x's gradient, and what JAX's own vmapped convolution (inputs and weights
    batched, then inputs alone) raises under ``jit`` (``"<Error>: message"`` or ``"ok"``)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    ours, theirs, x_shape, w_shape = _conv_case(name)
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((8, *x_shape)), rng.standard_normal(w_shape)
    program = jax.jit(jax.value_and_grad(lambda x, w: jnp.sum(jnp.sin(jax.vmap(ours, (0, None))(x, w))), (0, 1)))
    want = program(x, w)
    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Explicit,))
    jax_errors = []
    with jax.set_mesh(mesh):
        xs = jax.device_put(x, NamedSharding(mesh, P("data")))
        try:
            got = program(xs, w)
        except Exception as err:  # noqa: BLE001 - the row reports it; the test fails on it
            got = f"{type(err).__name__}: {err}"
        ws = jax.device_put(rng.standard_normal((8, *w_shape)), NamedSharding(mesh, P("data")))
        for fn, args in ((jax.vmap(theirs), (xs, ws)),
                         (jax.grad(lambda x, w: jnp.sum(jnp.sin(jax.vmap(theirs, (0, None))(x, w))), (0, 1)), (xs, w))):
            try:
                jax.jit(fn).lower(*args)
                jax_errors.append("ok")
            except Exception as err:  # noqa: BLE001 - which error JAX raises is the row's content
                jax_errors.append(f"{type(err).__name__}: {err}")
    if isinstance(got, str):
        return {"error": got, "dx_spec": None, "jax": jax_errors}
    return {"error": max_gap(got, want), "dx_spec": str(got[1][0].sharding.spec), "jax": jax_errors}


def _model_sharded_weights_row():
    """vmapped conv with per-example weights sharded over a second mesh axis too (x ``P("data")``,
    w ``P("data", "model")``, Explicit): the gradients' error and shardings (the mechanism's
    batched VJP gives each cotangent its primal's sharding)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    ours, _, x_shape, w_shape = _conv_case("conv")
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((8, *x_shape)), rng.standard_normal((8, *w_shape))
    program = jax.jit(jax.grad(lambda x, w: jnp.sum(jnp.sin(jax.vmap(ours)(x, w))), (0, 1)))
    want = program(x, w)
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
    with jax.set_mesh(mesh):
        try:
            got = program(jax.device_put(x, NamedSharding(mesh, P("data"))),
                          jax.device_put(w, NamedSharding(mesh, P("data", "model"))))
        except Exception as err:  # noqa: BLE001 - the row reports it; the test fails on it
            return {"error": f"{type(err).__name__}: {err}"[:300], "specs": None}
    return {"error": max_gap(got, want), "specs": [str(g.sharding.spec) for g in got]}


def _model_sharded_direct_row(name):
    """conv / conv_transpose (no vmap) with the input's batch and channels and the weight's first
    axis sharded (x ``P("data", "model")``, w ``P("model")``, Explicit): JAX's rule for
    ``lax.conv_general_dilated`` refuses a sharded weight or input channel axis without an
    ``out_sharding``, which ``partials.conv`` passes. The largest difference of the value and both
    gradients from the unsharded program, and the gradients' shardings."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxrules.nn import conv, conv_transpose

    rng = np.random.default_rng(3)
    if name == "conv":  # x (N, C_in, L), w (C_out, C_in, k)
        def fn(x, w):
            return conv(x, w, stride=2, padding=1)
        x, w = rng.standard_normal((8, 4, 7)), rng.standard_normal((6, 4, 3))
    else:  # w (C_in, C_out, k)
        def fn(x, w):
            return conv_transpose(x, w, stride=2, padding=1, output_padding=1)
        x, w = rng.standard_normal((8, 4, 5)), rng.standard_normal((4, 6, 3))
    program = jax.jit(jax.value_and_grad(lambda x, w: jnp.sum(jnp.sin(fn(x, w))), (0, 1)))
    want = program(x, w)
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
    with jax.set_mesh(mesh):
        try:
            got = program(jax.device_put(x, NamedSharding(mesh, P("data", "model"))),
                          jax.device_put(w, NamedSharding(mesh, P("model"))))
        except Exception as err:  # noqa: BLE001 - the row reports it; the test fails on it
            return {"error": f"{type(err).__name__}: {err}"[:300], "specs": None}
    return {"error": max_gap(got, want), "specs": [str(g.sharding.spec) for g in got[1]]}


def _worker():
    """Runs in the subprocess: one line of JSON per case."""
    from jaxrules.cli import use_fast_compile_flags

    use_fast_compile_flags()  # as tests/conftest.py, before JAX's backend starts
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_disable_most_optimizations", True)
    for i in GRID_SAMPLES:
        print(json.dumps({"case": ["grid_sample", i, "vmap"], "result": _check("grid_sample", i, ("vmap",))}),
              flush=True)
    for name, i in DIRECT:
        print(json.dumps({"case": [name, i, "direct"], "result": _check(name, i, ("direct",))}), flush=True)
    for name in VMAPPED:
        print(json.dumps({"case": [name, 0, "vmap"], "result": _check(name, 0, ("vmap",))}), flush=True)
        print(json.dumps({"case": [name, 0, "vmap x"], **_vmapped_rows(name)}), flush=True)
    print(json.dumps({"case": ["conv", 0, "model-sharded weights"], **_model_sharded_weights_row()}), flush=True)
    for name in VMAPPED:
        print(json.dumps({"case": [name, 0, "model-sharded, direct"], **_model_sharded_direct_row(name)}), flush=True)


@pytest.fixture(scope="module")
def results():
    return {json.dumps(r["case"]): r for r in worker_rows(__file__)}


def _row(results, name, index, form):
    return results[json.dumps([name, index, form])]


def _passed(result) -> bool:
    return isinstance(result, float) and result <= 1e-9


@pytest.mark.parametrize("index", GRID_SAMPLES)
def test_grid_sample_vmapped_over_a_sharded_batch_equals_the_unsharded_program(results, index):
    row = _row(results, "grid_sample", index, "vmap")
    assert _passed(row["result"]), row


@pytest.mark.parametrize("name,index", DIRECT, ids=lambda v: str(v))
def test_convolutions_of_a_batch_sharded_input_with_replicated_weights(results, name, index):
    row = _row(results, name, index, "direct")
    assert _passed(row["result"]), row


@pytest.mark.parametrize("name", VMAPPED)
def test_convolutions_vmapped_over_sharded_inputs_and_weights(results, name):
    """The harness's vmap form (every argument batched and sharded), both mesh modes."""
    row = _row(results, name, 0, "vmap")
    assert _passed(row["result"]), row


@pytest.mark.parametrize("name", VMAPPED)
def test_convolutions_vmapped_over_sharded_inputs_with_shared_weights(results, name):
    """Per-sample programs with one weight (its gradient the sum over the sharded samples)."""
    row = _row(results, name, 0, "vmap x")
    assert isinstance(row["error"], float) and row["error"] <= 1e-12, row
    assert row["dx_spec"].startswith("P('data'"), row


@pytest.mark.parametrize("name", VMAPPED)
def test_jax_own_vmapped_convolution_refuses_these_shardings(results, name):
    """Why ``partials.conv`` batches its convolutions itself (jax 0.10.2). When this fails, JAX
    batches them under an ``Explicit`` mesh: ``_bilinear_batch`` may then leave them to JAX."""
    both, inputs = _row(results, name, 0, "vmap x")["jax"]
    assert both.startswith("ShardingTypeError") and "reshape is not supported" in both, both
    assert inputs.startswith("ShardingTypeError"), inputs


def test_gradients_of_per_example_weights_sharded_over_two_mesh_axes_keep_their_sharding(results):
    row = _row(results, "conv", 0, "model-sharded weights")
    assert isinstance(row["error"], float) and row["error"] < 1e-12, row
    assert row["specs"][0].startswith("P('data'") and row["specs"][1].startswith("P('data', 'model'"), row


@pytest.mark.parametrize("name", VMAPPED)
def test_convolutions_of_channel_sharded_inputs_and_weights_equal_the_unsharded_program(results, name):
    row = _row(results, name, 0, "model-sharded, direct")
    assert isinstance(row["error"], float) and row["error"] < 1e-12, row
    assert row["specs"][0].startswith("P('data', 'model'") and row["specs"][1].startswith("P('model'"), row


@pytest.mark.parametrize("name", VMAPPED)
def test_convolution_derivatives_to_third_order_against_finite_differences(name):
    """The convolutions' derivatives are calls of ``partials.conv``'s bilinear op, whose own
    derivatives are calls of itself: every kind (``out``, ``input``, ``weight``) and both of its
    transposes enter at third order (one device, in this process; grouped and strided)."""
    import numpy as np
    from jax.test_util import check_grads

    from jaxrules.nn import conv, conv_transpose

    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 4, 5))
    if name == "conv":
        fn, w = (lambda x, w: conv(x, w, stride=2, padding=1, groups=2)), rng.standard_normal((2, 2, 3))
    else:
        fn, w = (lambda x, w: conv_transpose(x, w, stride=2, padding=1, output_padding=1, groups=2),
                 rng.standard_normal((4, 1, 3)))
    check_grads(fn, (x, w), order=3, modes=("fwd", "rev"), atol=1e-5, rtol=1e-5)


if __name__ == "__main__":
    _worker()
