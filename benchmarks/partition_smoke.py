"""The kernels' partitioning on the GPUs of one host, correctness only: on every
device, with the compiled kernels (``impl="pallas"``), against the same program on one device.

* ``jit`` of layer_norm (forward, JVP, gradient) on arrays on no mesh in a process of several
  devices (the kernels' ``custom_partitioning`` needs the program's devices);
* layer_norm and rms_norm vmapped with per-example weights over a batch-sharded axis (the
  vmapped kernels are partitioned along it): no all-gather, gradients sharded;
* the ragged attention kernels with the heads sharded, and vmapped over a sharded axis.

    PYTHONPATH=. python3 benchmarks/partition_smoke.py
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrules.nn import layer_norm, rms_norm, scaled_dot_product_attention


def _gap(got, want) -> float:
    return max(float(jnp.max(jnp.abs(jnp.asarray(g, jnp.float32) - jnp.asarray(w, jnp.float32))))
               for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)))


def _sharded_row(name, fn, arrays, spec, dtype):
    """``fn``'s value and gradients on one device vs over every device with ``spec``."""
    grad = jax.jit(jax.value_and_grad(lambda *a: jnp.sum(jnp.sin(fn(*a).astype(jnp.float32))),
                                      tuple(range(len(arrays)))))
    arrays = [a.astype(dtype) for a in arrays]
    want = grad(*arrays)
    mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    with jax.set_mesh(mesh):
        args = [jax.device_put(a, NamedSharding(mesh, spec)) for a in arrays]
        compiled = grad.lower(*args).compile()
        got = compiled(*args)
    gathers = len(re.findall(r" all-gather(?:-start)?\(", compiled.as_text()))
    specs = [str(g.sharding.spec) for g in got[1]]
    print(f"| {name} | {dtype.__name__} | {_gap(got, want):.2e} | {gathers} | {', '.join(specs)} |")


def main() -> None:
    rng = np.random.default_rng(0)
    print(f"{jax.device_count()} x {jax.devices()[0].device_kind}, jax {jax.__version__}\n")
    x, w = jnp.asarray(rng.standard_normal((4096, 1024)), jnp.float32), jnp.asarray(rng.standard_normal(1024) + 1)
    f = lambda x, w: layer_norm(x, 1024, w, impl="pallas")  # noqa: E731
    programs = (f, lambda x, w: jax.jvp(f, (x, w), (x, w)), jax.grad(lambda x, w: jnp.sum(f(x, w) ** 2), (0, 1)))
    gaps = [_gap(jax.jit(p)(x, w), p(x, w)) for p in programs]
    print(f"jit on arrays on no mesh (value, JVP, gradient vs eager): {', '.join(f'{g:.1e}' for g in gaps)}\n")

    print("| case | dtype | max difference vs one device | all-gathers | gradients' shardings |")
    print("| --- | --- | --- | --- | --- |")
    n = 4 * jax.device_count()
    xb, wb = rng.standard_normal((n, 2048, 1024)), rng.standard_normal((n, 1024)) + 1
    for dtype in (jnp.float32, jnp.bfloat16):
        for norm in (layer_norm, rms_norm):
            _sharded_row(f"vmap {norm.__name__}, per-example weights",
                         jax.vmap(lambda x, w, norm=norm: norm(x, 1024, w, impl="pallas")), [xb, wb], P("data"), dtype)
        qkv = [rng.standard_normal((2, 4 * jax.device_count(), 1000, 64)) for _ in range(3)]
        attention = lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=True, impl="pallas")  # noqa: E731
        _sharded_row("attention, heads sharded", attention, qkv, P(None, "data"), dtype)
        _sharded_row("vmap attention", jax.vmap(attention), [a[None].repeat(jax.device_count(), 0) for a in qkv],
                     P("data"), dtype)


if __name__ == "__main__":
    main()
