"""Which implementation a normalization runs, and the launch of its opt-in fused kernels.

* The default of every normalization (``layer_norm``, ``rms_norm``, ``batch_norm``,
  ``group_norm``) is its XLA formulas, on every platform and at every shape: they are no slower
  than plain JAX's autodiff of the same math at any shape of real models drawn on an H200, and
  much faster at large ones (``benchmarks/README.md``; the design in ``docs/performance.md``).
  Nothing here depends on a measured shape, so no unmeasured shape can fall off a cliff.
* ``impl="pallas"`` runs the fused Triton kernels of layer and RMS norm (``jaxrules.norm_kernels``)
  with a launch that is a rule of the shape (``rows_launch``): tiles of about ``TILE_ELEMENTS``
  elements, a backward of at most ``BACKWARD_PROGRAMS`` programs (about two per SM of a Hopper
  GPU) whose partial weight sums XLA adds up, so any row count gets a tiled, masked launch with a
  bounded number of partial sums.
* Pallas' Triton backend is deprecated since JAX 0.11: where it does not import, ``impl="pallas"``
  runs the XLA formulas with one ``KernelFallbackWarning`` (``triton_backend_missing``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import warnings

import jax

# The dtypes cuDNN's flash attention runs in (dense ``scaled_dot_product_attention`` and the
# NestedTensor's): the default there on a GPU.
CUDNN_DTYPES = ("bfloat16", "float16")

TILE_ELEMENTS = 4096  # elements of a tile: rows of the padded width
BACKWARD_PROGRAMS = 256  # the backward's programs at most (its partial sums: one row each)
MAX_WIDTH = 16384  # a wider row does not fit one program's registers


def _next_power_of_2(v: int) -> int:
    return 1 << max(0, (int(v) - 1).bit_length())


def _power_of_2_at_most(v: int) -> int:
    return 1 << max(0, int(v).bit_length() - 1)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclasses.dataclass(frozen=True)
class Plan:
    """The implementation an op runs (``"pallas"`` or ``"xla"``), its launch (None for XLA) and
    why."""

    impl: str
    launch: RowsLaunch | None
    reason: str


@dataclasses.dataclass(frozen=True)
class RowsLaunch:
    """Launch of the layer/RMS-norm kernels on (M, N): tiles of ``rows`` rows of ``width`` columns
    (a power of two >= N, masked past N); the forward runs a program per tile, the backward
    ``backward_programs(M)`` programs walking ``steps`` consecutive tiles each, with
    ``num_warps`` warps (Triton's ``num_stages`` pipelining stages); ``interpret``: Pallas'
    interpreter (the CPU tests)."""

    rows: int
    width: int
    steps: int
    num_warps: int
    num_stages: int = 2
    interpret: bool = False

    def forward_programs(self, m: int) -> int:
        """The forward's programs: one per tile."""
        return _cdiv(m, self.rows)

    def backward_programs(self, m: int) -> int:
        """The backward's programs over ``m`` rows (each walking ``steps`` tiles)."""
        return _cdiv(_cdiv(m, self.rows), self.steps)

    def check_covers(self, n: int, kernel: str) -> None:
        """Raise unless a tile's ``width`` covers a row of ``n`` columns."""
        if not 0 < n <= self.width:
            raise ValueError(f"{kernel}: a row of {n} columns does not fit the launch's width {self.width}: {self!r}")


def tile_rows(elements: int, width: int, m: int) -> int:
    """Rows of a tile of about ``elements`` elements of ``width`` columns: a power of two, at
    least one, at most the rows there are (``m``, rounded down to a power of two)."""
    return max(1, min(_power_of_2_at_most(max(1, elements // width)), _power_of_2_at_most(max(m, 1))))


def backward_steps(m: int, rows: int, programs: int) -> int:
    """Tiles each backward program walks so that at most ``programs`` programs cover ``m`` rows
    in tiles of ``rows`` (no more programs than tiles)."""
    tiles = _cdiv(max(m, 1), rows)
    return _cdiv(tiles, min(tiles, programs))


def rows_launch(m: int, n: int, *, interpret: bool = False) -> RowsLaunch:
    """The launch of the layer/RMS-norm kernels for ``m`` rows of ``n``: ``width`` the next power
    of two of ``n``, tiles of ``TILE_ELEMENTS / width`` rows (``tile_rows``), a backward of at
    most ``BACKWARD_PROGRAMS`` programs, 8 warps from a width of 2048 (4 below)."""
    width = _next_power_of_2(n)
    rows = tile_rows(TILE_ELEMENTS, width, m)
    return RowsLaunch(rows, width, backward_steps(m, rows, BACKWARD_PROGRAMS), num_warps=8 if width >= 2048 else 4,
                      interpret=interpret)


def relaunch(launch: RowsLaunch, m: int, n: int) -> RowsLaunch:
    """``rows_launch`` for another shape (a device's shard, vmap's folded rows), interpreted as
    ``launch`` is."""
    if not isinstance(launch, RowsLaunch):
        raise TypeError(f"relaunch: not a rows kernels' launch: {launch!r}")
    return rows_launch(m, n, interpret=launch.interpret)


class KernelFallbackWarning(UserWarning):
    """The fused kernels cannot run in this JAX; their ops run the XLA formulas instead."""


@functools.cache
def triton_backend_missing() -> str | None:
    """Why the kernels cannot run (Pallas' Triton backend, ``jax.experimental.pallas.triton``,
    does not import in this JAX), or None when they can. Checked once, at first use (importing
    it is not free, and ``import jaxrules.nn`` stays light); the first miss warns once."""
    try:
        importlib.import_module("jax.experimental.pallas.triton")
    except ImportError as err:
        reason = (f"Pallas' Triton backend is not available in jax {jax.__version__} ({err}); impl='pallas' "
                  "runs the XLA formulas (the same derivatives)")
        warnings.warn(f"jaxrules: {reason}", KernelFallbackWarning, stacklevel=2)
        return reason
    return None
