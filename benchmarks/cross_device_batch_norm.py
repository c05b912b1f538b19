"""Cross-device batch norm: ``batch_norm(..., axis_name=...)`` on every device of this machine
against the single-device result on the global batch — values, gradients (x, weight, bias), a
Hessian-vector product, a JVP and the running statistics — under ``shard_map``, ``pmap`` and
``vmap(axis_name=...)``. Prints one JSON line of max errors and exits non-zero above 1e-9.

CPU: ``XLA_FLAGS=--xla_force_host_platform_device_count=8 python benchmarks/cross_device_batch_norm.py``
(the test suite runs it so). GPU: run it as is on a machine with several GPUs.
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as Spec

jax.config.update("jax_enable_x64", True)

from jaxrules.nn import batch_norm  # noqa: E402


def main() -> int:
    n = jax.device_count()
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((4 * n, 3, 5)))
    ct = jnp.asarray(rng.standard_normal(x.shape))
    w, b = jnp.asarray(rng.standard_normal(3)), jnp.asarray(rng.standard_normal(3))
    rm, rv = jnp.asarray(rng.standard_normal(3)), jnp.asarray(rng.uniform(0.5, 2, 3))

    def loss(x, w, b, ct, axis_name=None):
        y, m, v = batch_norm(x, rm, rv, w, b, training=True, axis_name=axis_name)
        return jnp.sum(y * ct), (m, v)

    def reference(x, w, b):
        return loss(x, w, b, ct)

    mesh = jax.make_mesh((n,), ("d",), axis_types=(jax.sharding.AxisType.Explicit,))

    def sharded(x, w, b):
        def local(x, ct, w, b):
            value, stats = loss(x, w, b, ct, "d")
            return jax.lax.psum(value, "d"), stats

        f = jax.shard_map(local, mesh=mesh, in_specs=(Spec("d"), Spec("d"), Spec(), Spec()), out_specs=(Spec(), Spec()))
        return f(jax.sharding.reshard(x, Spec("d")), jax.sharding.reshard(ct, Spec("d")), w, b)

    def per_device(mapper):
        def run(x, w, b):
            xs, cts = x.reshape(n, 4, 3, 5), ct.reshape(n, 4, 3, 5)
            values, (m, v) = mapper(lambda xi, ci: loss(xi, w, b, ci, "d"), axis_name="d")(xs, cts)
            return values.sum(), (m[0], v[0])

        return run

    variants = {"shard_map": sharded, "pmap": per_device(jax.pmap), "vmap": per_device(jax.vmap)}

    def summary(fn):
        (value, stats), grads = jax.value_and_grad(fn, (0, 1, 2), has_aux=True)(x, w, b)
        hvp = jax.grad(lambda x: jnp.vdot(jax.grad(lambda x: fn(x, w, b)[0])(x), ct))(x)
        jvp = jax.jvp(lambda x: fn(x, w, b)[0], (x,), (ct,))[1]
        return {"value": value, "grad_x": grads[0], "grad_w": grads[1], "grad_b": grads[2],
                "hvp": hvp, "jvp": jvp, "running_mean": stats[0], "running_var": stats[1]}

    expected = summary(reference)
    report = {"devices": n, "platform": jax.devices()[0].platform}
    worst = 0.0
    for name, fn in variants.items():
        if name == "shard_map":
            with jax.set_mesh(mesh):
                got = summary(jax.jit(fn))
        else:
            got = summary(fn)
        errors = {k: float(jnp.max(jnp.abs(got[k] - expected[k]))) for k in expected}
        report[name] = errors
        worst = max(worst, *errors.values())
    report["max_error"] = worst
    print(json.dumps(report))
    return 0 if worst < 1e-9 else 1


if __name__ == "__main__":
    sys.exit(main())
