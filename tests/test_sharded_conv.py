"""Convolutions and ``grid_sample`` under ``jit`` with a batch sharded over 8 forced host devices
(issue 19; a subprocess: JAX starts with one device in the test process), through the harness's
``sharding_check.check_sharded`` on one record sample at a time, float64, ``Auto`` and
``Explicit`` meshes: values, JVP and VJP equal the unsharded program's and batch-sharded
gradients keep the batch sharding (``check_sharded`` raises otherwise).

* ``grid_sample``, every mode of its record's samples, vmapped over a sharded batch: its JVP
  formula's reshape of the grid tangent was refused under an ``Explicit`` mesh.
* ``conv`` / ``conv_transpose`` with a batch-sharded input and replicated weights (data parallel).
* ``conv`` / ``conv_transpose`` vmapped over a sharded batch of inputs *and* weights: under an
  ``Explicit`` mesh jax 0.10.2's own batching rule of ``lax.conv_general_dilated`` (which
  ``jax.lax.conv_transpose`` binds too) refuses it (it folds the vmapped axis into the channels
  with a ``lax.reshape`` given no ``out_sharding``). Pinned: ours refuses only where JAX's own
  vmapped op refuses, with the same error; when JAX lifts the limit, ours must pass.
"""

import json

import pytest
from _forced_devices import worker_rows

GRID_SAMPLES = (0, 2, 3, 5)  # the record's bilinear (zeros, reflection), nearest and bicubic samples
DIRECT = [("conv", 0), ("conv", 1), ("conv_transpose", 0), ("conv_transpose", 1)]  # 1-D; 2-D grouped, dilated
VMAPPED = ["conv", "conv_transpose"]


def _check(name, index, forms, modes=("auto", "explicit")):
    """``check_sharded`` of record ``name`` restricted to its sample ``index`` (in ``forms`` and
    mesh ``modes``): the worst relative
    difference, a string saying why it does not apply, or ``"<Error>: message"``."""
    import dataclasses

    import numpy as np

    from jaxrules import registry
    from jaxrules.sharding_check import check_sharded

    record = registry.get(name)
    sample = record.samples(np.random.default_rng(0), np.float64)[index]
    one = dataclasses.replace(record, samples=lambda rng, dt: [sample])
    try:
        result = check_sharded(one, forms=forms, modes=modes)
    except Exception as err:  # noqa: BLE001 - the row reports it; the test decides
        return f"{type(err).__name__}: {err}"
    return result if isinstance(result, float | str) else list(result)


def _jax_vmapped_refusal(name):
    """What JAX's own vmapped convolution (every argument batched and sharded over ``data``,
    ``Explicit`` mesh) raises under ``jit``, as ``"<Error>: message"``, or ``"ok"``: the shapes of
    the conv records' first samples (torch's layouts)."""
    import jax
    import numpy as np
    from jax import lax
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    rng = np.random.default_rng(1)
    if name == "conv":  # x (2, 3, 7), w (4, 3, 3), stride 2, padding 1
        shapes = (8, 2, 3, 7), (8, 4, 3, 3)
        fn = lambda x, w: lax.conv_general_dilated(x, w, (2,), [(1, 1)])  # noqa: E731
    else:  # x (2, 3, 4), w (3, 2, 3) (in, out, k), stride 2
        shapes = (8, 2, 3, 4), (8, 3, 2, 3)
        fn = lambda x, w: lax.conv_transpose(x, w, (2,), "SAME", dimension_numbers=("NCH", "IOH", "NCH"),  # noqa: E731
                                             transpose_kernel=True)
    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Explicit,))
    with jax.set_mesh(mesh):
        args = [jax.device_put(rng.standard_normal(s), NamedSharding(mesh, P("data"))) for s in shapes]
        try:
            jax.jit(jax.vmap(fn)).lower(*args)
        except Exception as err:  # noqa: BLE001 - which error JAX raises is the question
            return f"{type(err).__name__}: {err}"
    return "ok"


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
        print(json.dumps({"case": [name, 0, "vmap"], "auto": _check(name, 0, ("vmap",), ("auto",)),
                          "result": _check(name, 0, ("vmap",), ("explicit",)), "jax": _jax_vmapped_refusal(name)}),
              flush=True)


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
def test_vmapped_convolutions_refuse_only_what_jax_own_vmapped_convolution_refuses(results, name):
    """Auto mesh passes; under an Explicit mesh ours may raise only JAX's own error (jax 0.10.2's
    ``_conv_general_dilated_batch_rule``: "This reshape is not supported")."""
    row = _row(results, name, 0, "vmap")
    assert _passed(row["auto"]), row
    if row["jax"] == "ok" or _passed(row["result"]):
        assert _passed(row["result"]), row
        return
    ours, theirs = row["result"], row["jax"]
    assert ours.split(":")[0] == theirs.split(":")[0] == "ShardingTypeError", row
    assert "reshape is not supported" in ours and "reshape is not supported" in theirs, row


if __name__ == "__main__":
    _worker()
