"""Batch-sharded programs of ops whose own code must keep the sharding (each case names what):
scatter/index-reduce prod, eig, expm, lu_unpack and qr under ``jit`` on 8 forced host devices (a
subprocess: JAX starts with one device in the test process) with a batch-sharded input under an
``Explicit`` mesh (the mode that exposes each; the sharded check covers ``Auto`` too). Each case:
the value, the VJP of a fixed cotangent and the JVP in a fixed direction equal the unsharded
program's, the value also an independent reference (NumPy / SciPy / torch), and the gradient of
the sharded argument keeps the batch sharding."""

from __future__ import annotations

import pytest
from _forced_devices import one_xdist_worker, worker_rows

pytestmark = one_xdist_worker(__name__)  # its module fixture runs once

# case: what must keep the batch sharding (the first argument is batch-sharded)
CASES = {
    "scatter_reduce_prod": "the prod weights: the sharded x concatenated with the replicated src",
    "index_reduce_prod": "the same, with x sharded along the reduced axis itself",
    "eig": "the eigenvalues' sort (JAX's sort JVP) and the gauge check's callback under vmap",
    "expm": "jnp.digitize's searchsorted scan under vmap (JAX's expm)",
    "lu_unpack": "slicing L and U out of an LU whose row axis is sharded",
    "qr": "JAX's QR lowering's unsharded triangle mask beside a sharded batch",
}


def _cases():
    """``{name: (fn, args, reference value)}``: ``fn``'s first argument is sharded along axis 0;
    the others stay replicated."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import scipy.linalg
    import torch

    import jaxrules
    from jaxrules.linalg import lu_unpack, matrix_exp, qr
    from jaxrules.op_records.linalg import _eig_invariants  # the eig record's function: sorted w, |V|^2

    rng = np.random.default_rng(0)
    x, src, xi, source = (rng.uniform(0.5, 1.5, shape) for shape in ((8, 4), (3, 3), (8, 2), (4, 2)))
    index, rows = np.array([[0, 2, 0], [3, 3, 3], [1, 0, 1]]), np.array([2, 0, 7, 2])
    a = rng.standard_normal((8, 3, 3))
    lu, piv = rng.standard_normal((8, 4)), np.array([2, 5, 2, 3], np.int32)

    def torch_ref(method, *args):
        return getattr(torch.from_numpy(args[0]), method)(
            *[torch.from_numpy(t) if isinstance(t, np.ndarray) else t for t in args[1:]]).numpy()

    return {
        "scatter_reduce_prod": (lambda x, src: jaxrules.numpy.scatter_reduce(x, 1, index, src, "prod"), (x, src),
                                torch_ref("scatter_reduce", x, 1, index, src, "prod")),
        "index_reduce_prod": (lambda x, s: jaxrules.numpy.index_reduce(x, 0, rows, s, "prod"), (xi, source),
                              torch_ref("index_reduce", xi, 0, rows, source, "prod")),
        "eig": (lambda a: jax.vmap(_eig_invariants)(a)[0], (a,), np.sort_complex(np.linalg.eigvals(a))),
        "expm": (jax.vmap(matrix_exp), (0.5 * a,), np.stack([scipy.linalg.expm(m) for m in 0.5 * a])),
        "lu_unpack": (lambda lu: lu_unpack(lu, piv), (lu,),
                      tuple(t.numpy() for t in torch.lu_unpack(torch.from_numpy(lu), torch.from_numpy(piv + 1)))),
        "qr": (lambda a: jnp.einsum("bij,bjk->bik", *jax.vmap(qr)(a)), (a,), a),  # Q R = A
    }


def _worker():
    """Runs in the subprocess: one line of JSON per case."""
    import json

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxrules.cli import configure_check_process

    configure_check_process()  # the harness's settings (float64, XLA's optimizations off), before the backend starts
    rng = np.random.default_rng(1)
    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Explicit,))
    for name, (fn, args, reference) in _cases().items():
        outs = jax.eval_shape(fn, *args)
        def draw(o):
            ct = rng.standard_normal(o.shape)
            return (ct + 1j * rng.standard_normal(o.shape) if jnp.iscomplexobj(o) else ct).astype(o.dtype)

        cts = jax.tree_util.tree_map(draw, outs)
        tangents = [rng.standard_normal(np.shape(x)) for x in args]

        def program(*args, fn=fn, cts=cts, tangents=tangents):
            value, pullback = jax.vjp(fn, *args)
            _, jvp = jax.jvp(fn, args, tuple(tangents))
            return value, pullback(cts), jvp

        want = jax.jit(program)(*args)
        row = {"case": name}
        try:
            with jax.set_mesh(mesh):
                specs = [P("data")] + [P()] * (len(args) - 1)
                sharded = [jax.device_put(x, NamedSharding(mesh, spec)) for x, spec in zip(args, specs)]
                got = jax.block_until_ready(jax.jit(program)(*sharded))
        except Exception as err:  # noqa: BLE001 - the failure is the result
            print(json.dumps({**row, "error": f"{type(err).__name__}: {str(err)[:300]}"}), flush=True)
            continue
        leaves = list(zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)))
        row["sharded_vs_unsharded"] = max(float(jnp.max(jnp.abs(g - w))) for g, w in leaves)
        row["grad_spec"] = str(got[1][0].sharding.spec)
        value, ref = got[0], reference
        value, ref = (value, ref) if isinstance(ref, tuple) else ((value,), (ref,))
        row["vs_reference"] = max(float(np.max(np.abs(np.asarray(v) - r))) for v, r in zip(value, ref, strict=True))
        print(json.dumps(row), flush=True)

    # A run-time check under vmap over a batch sharded on an Explicit mesh: one boolean reaches
    # the callback (JAX's batching of a callback slices a sharded batch one entry at a time).
    from jaxrules.checking import checked, runtime_check

    def positive(x):
        runtime_check(x[0] <= 0, "positive: x[0] must be positive")
        return 2 * x

    outcomes = []
    with jax.set_mesh(mesh):
        for first in (1.0, -1.0):
            x = np.ones((8, 3))
            x[5, 0] = first
            try:
                checked(jax.jit(jax.vmap(positive)))(jax.device_put(x, NamedSharding(mesh, P("data"))))
                outcomes.append("ok")
            except ValueError as err:  # checked(...) raises the library's message as a ValueError
                outcomes.append(f"ValueError: {err}")
            except Exception as err:  # noqa: BLE001 - the outcome is the result
                outcomes.append(f"{type(err).__name__}: {str(err)[:200]}")
    print(json.dumps({"case": "runtime_check", "outcomes": outcomes}), flush=True)


@pytest.fixture(scope="module")
def results():
    return {r["case"]: r for r in worker_rows(__file__, timeout=300)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_sharded_program_equals_the_unsharded_one_and_keeps_the_batch_sharding(results, case):
    row = results[case]
    assert "error" not in row, f"{case} ({CASES[case]}): {row.get('error')}"
    assert row["sharded_vs_unsharded"] <= 1e-12, row
    assert row["vs_reference"] <= 1e-10, row
    assert row["grad_spec"].startswith("P('data'"), row


def test_a_runtime_check_under_vmap_over_a_sharded_batch_fires_only_on_bad_values(results):
    assert results["runtime_check"]["outcomes"] == ["ok", "ValueError: positive: x[0] must be positive"]


if __name__ == "__main__":
    _worker()
