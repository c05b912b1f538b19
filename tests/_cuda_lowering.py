"""Lowering the kernels for CUDA on a machine without a GPU (the regression guards CI runs).

jax >= 0.11's Triton lowering reads the GPU's kind (its compute capability) from the default
device, here a CPU ("No supported GPU devices found, please specify an abstract GPU device"),
unless the abstract mesh in context names an abstract GPU device (``jax.sharding.use_abstract_mesh``).
jax 0.10 reads nothing there; the tests use the context with both, so CI runs the code path that
jax 0.11 needs."""

from __future__ import annotations

import contextlib

import jax

DEVICE_KIND = "NVIDIA H100 80GB HBM3"  # a Hopper GPU: the kind the guards lower for


@contextlib.contextmanager
def for_cuda(mesh=None):
    """A context in which ``jax.export(..., platforms=["cuda"])`` lowers the Triton kernels without
    a GPU: an abstract mesh of H100s (yielded), with ``mesh``'s axes or else one axis of size 1. A
    function sharded over it names no concrete mesh (``jax.shard_map`` without ``mesh``, inputs
    sharded over the yielded mesh): JAX refuses a context mesh of other devices than shard_map's."""
    device = jax.sharding.AbstractDevice(device_kind=DEVICE_KIND, num_cores=132, platform="gpu")
    if mesh is None:
        abstract = jax.sharding.AbstractMesh((1,), ("cuda_export",), axis_types=(jax.sharding.AxisType.Auto,),
                                             abstract_device=device)  # Auto: no sharding in types, as no mesh
    else:
        abstract = jax.sharding.AbstractMesh(mesh.axis_sizes, mesh.axis_names, axis_types=mesh.axis_types,
                                             abstract_device=device)
    with jax.sharding.use_abstract_mesh(abstract):
        yield abstract
