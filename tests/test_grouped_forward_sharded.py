"""The H200's grouped launches under data parallelism, on 4 forced host devices with the kernels
interpreted, in both mesh modes: group norm's one-kernel forward (``GroupedLaunch.writes_y``,
``partitioning._gn_forward``) and batch norm's backward split over programs
(``backward_programs``, inside the sharded backward's psum): values and gradients equal the
unsharded XLA formulas', the gradient of x keeps the batch sharding, and group norm's compiled
program gathers nothing. Under an Auto mesh whose shards' plans differ from the whole array's
(a ``dispatch.ShardPlan``), each shard runs the one-kernel forward or its XLA twin
(``partitioning._XlaGrouped.local_forward_grouped``)."""

import json

import pytest
from _forced_devices import one_xdist_worker, worker_rows

pytestmark = one_xdist_worker(__name__)


@pytest.fixture(scope="module")
def rows():
    return worker_rows(__file__, devices=4)


@pytest.mark.parametrize("mode", ["Auto", "Explicit"])
@pytest.mark.parametrize("op", ["group_norm", "batch_norm"])
def test_the_grouped_launches_run_on_each_devices_samples(rows, op, mode):
    (row,) = [r for r in rows if (r["op"], r["mode"]) == (op, mode)]
    assert row["error"] <= 1e-12, row
    assert 2 in row["samples_traced"], row  # the kernel (forward; batch norm: row sums) ran on 2 samples of 8
    assert row["dx_spec"].startswith("P('data'"), row
    if op == "group_norm":
        assert "all-gather" not in row["collectives"], row
    else:  # split in 2 slices of a shard's 2 samples; g's sums all-reduced between, the statistics gathered (2 C)
        assert max(row["splits"]) == 2 and "all-reduce" in row["collectives"], row


@pytest.mark.parametrize("kernel_at", ["shard", "whole"])
def test_a_shard_plan_runs_the_one_kernel_forward_or_its_xla_twin(rows, kernel_at):
    (row,) = [r for r in rows if r["op"] == f"group_norm, kernel at the {kernel_at}"]
    assert row["error"] <= 1e-12 and row["dx_spec"].startswith("P('data'"), row
    # on the shards: the kernel, or the XLA twin (the whole array's 8 samples are traced for shapes only)
    assert (2 in row["samples_traced"]) == (kernel_at == "shard"), row


def _worker():
    import jax
    import numpy as np

    from jaxrules import dispatch, norm_kernels
    from jaxrules.nn import batch_norm, group_norm

    jax.config.update("jax_enable_x64", True)
    launches = {"group_norm": dispatch.GroupedLaunch(interpret=True, writes_y=True, reverse=True, chunk=8,
                                                     tile_elements=16),
                "batch_norm": dispatch.GroupedLaunch(interpret=True, backward_programs=64, chunk=8, tile_elements=16)}
    dispatch.grouped_plan = lambda op, *_: dispatch.Plan("pallas", launches[op], "test")
    traced, splits = [], []
    for name in ("local_forward_grouped", "local_row_sums"):
        kernel = getattr(norm_kernels, name)
        setattr(norm_kernels, name, lambda *a, kernel=kernel, **k: traced.append(a[0].shape) or kernel(*a, **k))
    counted = norm_kernels._backward_splits
    norm_kernels._backward_splits = lambda *a: splits.append(counted(*a)) or splits[-1]
    rng = np.random.default_rng(3)
    x, ct = rng.standard_normal((8, 6, 5, 3)) * 2 + 1, rng.standard_normal((8, 6, 5, 3))
    w, b = rng.standard_normal(6) + 1, rng.standard_normal(6)
    ops = {"group_norm": lambda x, w, b, impl: group_norm(x, 3, w, b, impl=impl),
           "batch_norm": lambda x, w, b, impl: batch_norm(x, None, None, w, b, training=True, impl=impl)[0]}
    for op, fn in ops.items():
        _run(op, fn, x, w, b, ct, traced, splits, ("Auto", "Explicit"))
    # A ShardPlan: the kernel's plan at the shards' features (6 groups of 2 rows of 15 on each of 4
    # devices; 12 on 2) and the XLA formulas' at the whole array's (24), or the reverse.
    dispatch.grouped_launch = lambda op, kind, interpret=False: launches[op]
    for kernel_at in ("shard", "whole"):
        dispatch.grouped_plan = lambda op, platform, kind, groups, *_, kernel_at=kernel_at: (
            dispatch.Plan("pallas", launches[op], "test") if (groups == 24) == (kernel_at == "whole")
            else dispatch.Plan("xla", None, "test"))
        _run(f"group_norm, kernel at the {kernel_at}", ops["group_norm"], x, w, b, ct, traced, splits, ("Auto",))


def _run(op, fn, x, w, b, ct, traced, splits, modes):
    import functools

    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    def loss(x, w, b, impl=None):
        return jnp.sum(jnp.sin(fn(x, w, b, impl)) * ct)

    want = jax.value_and_grad(functools.partial(loss, impl="xla"), (0, 1, 2))(x, w, b)
    for mode in modes:
        traced.clear(), splits.clear()
        mesh = jax.make_mesh((4,), ("data",), axis_types=(getattr(AxisType, mode),))
        with jax.set_mesh(mesh):
            args = jax.device_put(x, NamedSharding(mesh, P("data"))), jnp.asarray(w), jnp.asarray(b)
            compiled = jax.jit(jax.value_and_grad(loss, (0, 1, 2))).lower(*args).compile()
            got = compiled(*args)
        error = max(float(jnp.max(jnp.abs(jnp.asarray(g) - e))) for g, e in zip(jax.tree.leaves(got),
                                                                                  jax.tree.leaves(want)))
        text = compiled.as_text()
        print(json.dumps({"op": op, "mode": mode, "error": error,
                          "samples_traced": sorted({shape[0] for shape in traced}), "splits": splits,
                          "dx_spec": str(got[1][0].sharding.spec),
                          "collectives": sorted({c for c in ("all-gather", "all-reduce", "all-to-all")
                                                 if c in text})}), flush=True)


if __name__ == "__main__":
    _worker()
