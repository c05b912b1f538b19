"""Ops under ``jit(value_and_grad)`` with a batch-sharded input, on 8
forced host devices (a subprocess: JAX starts with one device in the test process), under
``Auto`` and ``Explicit`` meshes: values and gradients equal the unsharded ones (float64) and
the gradients of batch-sharded arguments stay sharded ``P("data", ...)`` (and, for the ops
called directly, the output tangent of a batch-sharded tangent too).

Two kinds of cases: the ops that failed under an ``Explicit`` mesh (linear, conv, max pooling,
the determinants and the inverse, eigh, batch norm's XLA formulas), called on an input whose
axis 0 is the batch, weights replicated; and a sample of registry records with every
differentiable argument given a vmapped batch of 8 (``testing.check_sharded``'s vmap form;
``tests/test_sharded.py`` runs both of its forms over the whole registry)."""

import json

import pytest
from _forced_devices import one_xdist_worker, worker_rows

pytestmark = one_xdist_worker(__name__)  # its module fixture runs once

# name -> (input shape); the functions are built in the worker (JAX is not imported here).
DIRECT = {
    "linear": (8, 3),  # x only differentiated: the weight's gradient is not needed
    "linear_xw": (8, 3),  # x, w and b differentiated: dw sums over the sharded batch
    "conv2d": (8, 2, 5, 5),
    "max_pool2d": (8, 2, 4, 4),
    "slogdet": (16, 4, 4),
    "det": (16, 4, 4),
    "inv": (16, 4, 4),
    "eigh": (16, 4, 4),
    "batch_norm": (8, 3, 4),
    "cummax": (8, 5),  # a scatter-add along the other axis in the VJP
    "matmul": (8, 3),  # b's gradient sums over the sharded rows
}
RECORDS = ["deg2rad", "softmax", "cumsum", "kthvalue", "sort", "tile", "lu", "svd", "cross_entropy", "layer_norm"]
MODES = ["auto", "explicit"]


def _worker():
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxrules.cli import configure_check_process

    configure_check_process()  # the harness's settings (float64, XLA's optimizations off), before the backend starts
    from jaxrules import registry
    from jaxrules.ops.conv import conv, max_pool
    from jaxrules.ops.linalg import det, eigh, inv, linear, matmul, slogdet
    from jaxrules.ops.normalization import batch_norm
    from jaxrules.ops.sorting import cummax
    from jaxrules.testing import check_sharded

    rng = np.random.default_rng(0)
    w_lin, b_lin, w_conv = rng.standard_normal((4, 3)), rng.standard_normal(4), rng.standard_normal((3, 2, 3, 3))
    shift = 4 * np.eye(4)
    direct = {  # (function of the differentiable arguments, the extra (replicated) arguments)
        "linear": (lambda x: linear(x, w_lin, b_lin), ()),
        "linear_xw": (lambda x, w, b: linear(x, w, b), (w_lin, b_lin)),
        "conv2d": (lambda x, w: conv(x, w, padding=1), (w_conv,)),
        "max_pool2d": (lambda x: max_pool(x, 2), ()),
        "slogdet": (lambda a: slogdet(a + shift)[1], ()),
        "det": (lambda a: det(a + shift), ()),
        "inv": (lambda a: inv(a + shift), ()),
        "eigh": (lambda a: eigh(a + jnp.swapaxes(a, -1, -2))[1], ()),
        "batch_norm": (lambda x: batch_norm(x, None, None, training=True)[0], ()),
        "cummax": (lambda x: cummax(x, axis=1)[0], ()),
        "matmul": (lambda x, b: matmul(x, b), (w_lin.T,)),
    }
    for name in RECORDS:  # both modes, the vmapped batch
        try:
            row = {"case": f"record-{name}", "result": str(check_sharded(registry.get(name), forms=("vmap",)))}
        except Exception as e:  # noqa: BLE001 - reported by the test
            row = {"case": f"record-{name}", "failure": f"{type(e).__name__}: {str(e)[:300]}"}
        print(json.dumps(row), flush=True)
    for kind, name, shape, spec in [("direct", name, DIRECT[name], direct[name]) for name in DIRECT]:
        fn, extra = spec
        x = rng.standard_normal(shape)
        diff, batched = [x, *extra], [True] + [False] * len(extra)

        def loss(*d, fn=fn):
            return jnp.sum(jnp.sin(fn(*d)))

        grad = jax.jit(jax.value_and_grad(loss, tuple(range(len(diff)))))
        want = grad(*diff)
        for mode in MODES:
            axis_type = AxisType.Explicit if mode == "explicit" else AxisType.Auto
            mesh = jax.make_mesh((8,), ("data",), axis_types=(axis_type,))
            row = {"case": f"{kind}-{name}-{mode}"}
            try:
                with jax.set_mesh(mesh):
                    args = [jax.device_put(d, NamedSharding(mesh, P("data") if b else P()))
                            for d, b in zip(diff, batched)]
                    got = jax.jit(jax.value_and_grad(loss, tuple(range(len(diff)))))(*args)
                pairs = list(zip([got[0], *got[1]], [want[0], *want[1]]))
                row["error"] = max(float(np.max(np.abs(np.asarray(g) - np.asarray(e)), initial=0)) for g, e in pairs)
                row["scale"] = max(float(np.max(np.abs(np.asarray(e)), initial=0)) for _, e in pairs)
                row["specs"] = [str(g.sharding.spec) for g, b in zip(got[1], batched) if b]
                if kind == "direct":  # forward mode too: the output tangent of a tangent of x
                    t = rng.standard_normal(diff[0].shape)
                    jvp = jax.jit(lambda x, t, *rest, fn=fn: jax.jvp(lambda x: fn(x, *rest), (x,), (t,))[1])
                    want_t = jvp(diff[0], t, *diff[1:])
                    with jax.set_mesh(mesh):
                        got_t = jvp(args[0], jax.device_put(t, args[0].sharding), *args[1:])
                    row["error"] = max(row["error"], float(np.max(np.abs(np.asarray(got_t) - np.asarray(want_t)))))
                    row["specs"].append(str(got_t.sharding.spec))
            except Exception as e:  # noqa: BLE001 - reported by the test
                row["failure"] = f"{type(e).__name__}: {str(e)[:300]}"
            print(json.dumps(row), flush=True)


@pytest.fixture(scope="module")
def results():
    rows = worker_rows(__file__)
    return {r["case"]: r for r in rows}


CASES = [f"direct-{n}-{m}" for n in DIRECT for m in MODES]


@pytest.mark.parametrize("name", RECORDS)
def test_records_pass_the_sharded_check_with_a_vmapped_batch(results, name):
    row = results[f"record-{name}"]
    assert "failure" not in row, row
    float(row["result"])  # a number (the worst difference), not the reason of a skip


@pytest.mark.parametrize("case", CASES)
def test_sharded_values_and_gradients_equal_the_unsharded_ones_and_stay_sharded(results, case):
    row = results[case]
    assert "failure" not in row, row
    assert row["error"] <= 1e-9 * (1 + row["scale"]), row
    assert all(s.startswith("P('data'") for s in row["specs"]), row


if __name__ == "__main__":
    _worker()
