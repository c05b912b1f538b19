"""Group norm's one-kernel forward (``GroupedLaunch.writes_y``, the H200's launch) under data
parallelism, on 4 forced host devices with the kernels interpreted: values and gradients equal
the unsharded XLA formulas', the gradient of x keeps the batch sharding, and the compiled program
gathers no activation, in both mesh modes (``partitioning._gn_forward``)."""

import json

import pytest
from _forced_devices import one_xdist_worker, worker_rows

pytestmark = one_xdist_worker(__name__)


@pytest.fixture(scope="module")
def rows():
    return worker_rows(__file__, devices=4)


@pytest.mark.parametrize("mode", ["Auto", "Explicit"])
def test_the_one_kernel_forward_runs_on_each_devices_samples(rows, mode):
    (row,) = [r for r in rows if r["mode"] == mode]
    assert row["error"] <= 1e-12, row
    assert 2 in row["samples_traced"], row  # the one-kernel forward ran on a device's 2 samples of 8
    assert row["dx_spec"].startswith("P('data'"), row
    assert "all-gather" not in row["collectives"], row


def _worker():
    import functools

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxrules import dispatch, norm_kernels
    from jaxrules.nn import group_norm

    jax.config.update("jax_enable_x64", True)
    launch = dispatch.GroupedLaunch(interpret=True, writes_y=True, reverse=True, chunk=8, tile_elements=16)
    dispatch.grouped_plan = lambda *_: dispatch.Plan("pallas", launch, "test")
    traced = []
    kernel = norm_kernels.local_forward_grouped
    norm_kernels.local_forward_grouped = lambda *a, **k: traced.append(a[0].shape) or kernel(*a, **k)
    rng = np.random.default_rng(3)
    x, ct = rng.standard_normal((8, 6, 5, 3)) * 2 + 1, rng.standard_normal((8, 6, 5, 3))
    w, b = rng.standard_normal(6) + 1, rng.standard_normal(6)

    def loss(x, w, b, impl=None):
        return jnp.sum(jnp.sin(group_norm(x, 3, w, b, impl=impl)) * ct)

    want = jax.value_and_grad(functools.partial(loss, impl="xla"), (0, 1, 2))(x, w, b)
    for mode in ("Auto", "Explicit"):
        traced.clear()
        mesh = jax.make_mesh((4,), ("data",), axis_types=(getattr(AxisType, mode),))
        with jax.set_mesh(mesh):
            args = jax.device_put(x, NamedSharding(mesh, P("data"))), jnp.asarray(w), jnp.asarray(b)
            compiled = jax.jit(jax.value_and_grad(loss, (0, 1, 2))).lower(*args).compile()
            got = compiled(*args)
        error = max(float(jnp.max(jnp.abs(jnp.asarray(g) - e))) for g, e in zip(jax.tree.leaves(got),
                                                                                  jax.tree.leaves(want)))
        text = compiled.as_text()
        print(json.dumps({"mode": mode, "error": error, "samples_traced": sorted({shape[0] for shape in traced}),
                          "dx_spec": str(got[1][0].sharding.spec),
                          "collectives": sorted({c for c in ("all-gather", "all-reduce", "all-to-all")
                                                 if c in text})}), flush=True)


if __name__ == "__main__":
    _worker()
