"""Which implementation runs a kernel-backed normalization, and with which launch parameters.

A pure function of (platform, device kind, shape, dtype): no device is queried here, so the
decision can be tested on a machine without a GPU (``tests/test_dispatch.py`` checks it, and the
launch grids it implies, for every benchmark program).

* ``layer_norm_plan`` / ``rms_norm_plan`` / ``grouped_plan`` -> ``Plan(impl, launch, reason)``:
  ``impl`` is ``"pallas"`` (the fused kernels of ``jaxrules.norm_kernels``, Pallas' Triton
  backend), ``"mosaic"`` (layer and RMS norm only: the kernels of ``jaxrules.mosaic_kernels``,
  Pallas' Mosaic GPU backend) or ``"xla"`` (the jnp formulas).
* The choice on a GPU comes from measurements recorded in the repository per device kind,
  ``jaxrules/dispatch_data/<device kind>.json``, written by ``python -m jaxrules bench --suite
  sweep --record FILE`` on that GPU: at the nearest measured shape (same op and dtype; distance in
  log2 of the shape's features) the fastest measured implementation runs (a kernel without a
  measurement there, such as the Mosaic GPU kernels before a sweep times them, never does),
  fastest per call. Not on device time per step (``bench --device-time``): twice on an H200 the
  choices it gave the host-bound points made the ragged block slower (benchmarks/RESULTS.md,
  stops 27 and 28), so tables hold times per call only. A GPU kind without measurements uses the
  H100's (the nearest evidence; say so in an issue if you run another kind). Off the GPU, and
  for float64, the XLA formulas run.
* Launch parameters (``RowsLaunch``, ``GroupedLaunch``) are functions of the shape: every row
  count and width gets a tiled, masked launch with enough programs to fill the device, never a
  one-program backward (the 66850x256 cliff of issue 14). The rows kernels' launch is the rule
  (``rows_launch``) unless the device kind's table holds launches measured near the shape
  (``rows_launches``, ``benchmarks/layer_norm_tuning.py``; ``tuned_rows_launch``): the forward's
  and the backward's tiles and warps apart, the backward's programs and its prefetch of the next
  tile. The batch/group-norm kernels' launch is one per op and device kind (``grouped_launch``:
  the table's ``grouped_launches``, else ``GroupedLaunch``'s defaults).
* The ``"pallas"`` kernels are written for Pallas' Triton backend, which JAX 0.11 deprecated.
  Whether this JAX still has it is checked lazily, at the first GPU decision
  (``triton_backend_missing``); without it no ``"pallas"`` kernel is chosen: the op runs its XLA
  formulas (same derivatives), or the Mosaic GPU kernels where they were measured faster, with
  one ``KernelFallbackWarning``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import itertools
import json
import math
import pathlib
import warnings

KERNEL_DTYPES = ("float32", "bfloat16", "float16")
DATA = pathlib.Path(__file__).parent / "dispatch_data"
FALLBACK_KIND = "NVIDIA H100 80GB HBM3"

# Layer norm launch: about TILE_ELEMENTS elements per tile, BACKWARD_PROGRAMS programs in the
# backward (each sums its own dw/db partials; swept on the H100 by benchmarks/layer_norm_tuning.py).
TILE_ELEMENTS = 4096
BACKWARD_PROGRAMS = 256
MAX_TILE_ELEMENTS = 32768  # the largest tile a measured launch may take (beyond it registers spill)
MAX_WIDTH = 16384  # a wider row does not fit one program's registers


def _next_power_of_2(v: int) -> int:
    return 1 << max(0, (int(v) - 1).bit_length())


def _power_of_2_at_most(v: int) -> int:
    return 1 << max(0, int(v).bit_length() - 1)


# A row in pieces (``RowsLaunch.pieces``): at most MAX_PIECES of MIN_PIECE to MAX_PIECE columns
# (or one piece, the row padded to its power of two).
MAX_PIECES = 8
MIN_PIECE = 128
MAX_PIECE = 8192


def row_pieces(n: int) -> tuple[int, int]:
    """``(width, pieces)``: the power-of-two pieces that cover a row of ``n`` with the fewest
    padded columns (12288: 3 of 4096, not one of 16384; 5120: 5 of 1024), the fewest pieces on a
    tie (a power of two: one piece). A launch takes them where measured faster than one padded
    piece (``tuned_rows_launch``)."""
    options = [(w, _cdiv(n, w)) for w in (1 << k for k in range(MIN_PIECE.bit_length() - 1, MAX_PIECE.bit_length()))
               if _cdiv(n, w) <= MAX_PIECES] + [(_next_power_of_2(n), 1)]
    return min(options, key=lambda o: (o[0] * o[1], o[1]))


def tile_rows(elements: int, span: int, m: int) -> int:
    """Rows of a tile of about ``elements`` elements whose rows span ``span`` columns: a power of
    two, at least one, at most the rows there are (``m``, rounded up to a power of two)."""
    return max(1, min(_power_of_2_at_most(max(1, elements // span)), _next_power_of_2(m)))


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclasses.dataclass(frozen=True)
class RowsLaunch:
    """Launch of the layer-norm kernels on (M, N): the backward's tiles of ``rows`` rows, each
    row held as ``pieces`` pieces of ``width`` columns (powers of two, ``span = pieces width >=
    N``; one piece padded to the next power of two, or several that pad an awkward width such as
    12288 = 3 x 4096 less: ``row_pieces``), its programs walking ``steps`` consecutive tiles each
    (``prefetch``: loading tile ``t + 1`` before computing tile ``t``) with ``num_warps``; the
    forward's tiles of ``forward_rows`` rows in ``forward_pieces`` pieces of ``forward_width``,
    with ``forward_warps`` (0: the backward's; the forward's layout is the backward's unless
    ``forward_width`` is given), one tile per program or, with ``forward_steps``,
    that many consecutive tiles (``forward_prefetch``: loading the next before normalizing one).
    ``split``: the backward in two, XLA's row sums (of ``g w x_hat``, and of ``g w`` for layer
    norm, reading x and g once) and then a kernel that takes each piece as a program of its own
    (grid: programs by pieces), so a program holds ``rows`` by ``width`` values, not whole rows
    (the 12288-wide whole-row backward took 6.6 passes over the data where it needs 3;
    ``benchmarks/RESULTS.md`` stops 33-34).
    ``device_kind``: the GPU whose measured launches (``tuned_rows_launch``) apply, None where
    none do: kept by ``relaunch`` (a device's shard, vmap's folded rows)."""

    rows: int
    width: int
    steps: int
    num_warps: int
    num_stages: int = 2
    interpret: bool = False
    prefetch: bool = False
    forward_rows: int = 0
    forward_warps: int = 0
    device_kind: str | None = None
    pieces: int = 1
    forward_width: int = 0
    forward_pieces: int = 0
    forward_steps: int = 0
    forward_prefetch: bool = False
    split: bool = False

    @property
    def span(self) -> int:
        """The columns a tile's row covers (``pieces`` of ``width``)."""
        return self.pieces * self.width

    @property
    def held_columns(self) -> int:
        """The columns of a row one program holds: one piece in a split backward, else the span."""
        return self.width if self.split else self.span

    def forward_programs(self, m: int) -> int:
        forward = self.forward_launch()
        return _cdiv(_cdiv(m, forward.rows), forward.steps)

    def backward_programs(self, m: int) -> int:
        """The backward's programs over the rows (each walking ``steps`` tiles)."""
        return _cdiv(_cdiv(m, self.rows), self.steps)

    def backward_grid(self, m: int) -> tuple[int, ...]:
        """The backward kernel's grid: its programs over the rows, by the pieces when ``split``."""
        return (self.backward_programs(m), self.pieces) if self.split else (self.backward_programs(m),)

    def check_covers(self, n: int, kernel: str) -> None:
        """Raise unless this launch's pieces cover a row of ``n`` columns, the last one not wholly
        past it."""
        if not (self.pieces - 1) * self.width < n <= self.span:
            raise ValueError(f"{kernel}: a row of {n} columns in {self.pieces} pieces of {self.width}: {self!r}")

    def forward_launch(self) -> RowsLaunch:
        """The forward kernel's tiles, warps, pieces, tiles per program and prefetch as a launch's
        ``rows``, ``num_warps``, ``width``, ``pieces``, ``steps`` and ``prefetch``."""
        own = self.forward_width > 0  # the forward's own layout, else the backward's
        width, pieces = (self.forward_width, self.forward_pieces or 1) if own else (self.width, self.pieces)
        return dataclasses.replace(self, rows=self.forward_rows or self.rows,
                                   num_warps=self.forward_warps or self.num_warps, width=width, pieces=pieces,
                                   steps=self.forward_steps or 1,
                                   prefetch=self.forward_prefetch, forward_rows=0, forward_warps=0, forward_width=0,
                                   forward_pieces=0, forward_steps=0, forward_prefetch=False, split=False)


def rows_launch(m: int, n: int, *, interpret: bool = False, dtype=None, device_kind: str | None = None) -> RowsLaunch:
    """The layer-norm launch for ``m`` rows of ``n``: the launch measured fastest on
    ``device_kind`` near this shape and ``dtype`` where its table has one (``tuned_rows_launch``),
    else the rule: ``rows = TILE_ELEMENTS / width`` (at most the rows there are), backward steps so
    that about ``BACKWARD_PROGRAMS`` programs run, both kernels alike."""
    tuned_kind = None if device_kind is None or interpret or not has_tuned_launches(device_kind) else device_kind
    tuned = None if tuned_kind is None else tuned_rows_launch(tuned_kind, m, n, dtype)
    if tuned is not None:
        return tuned
    width = _next_power_of_2(n)
    rows = tile_rows(TILE_ELEMENTS, width, m)
    return RowsLaunch(rows, width, backward_steps(m, rows, BACKWARD_PROGRAMS), num_warps=8 if width >= 2048 else 4,
                      interpret=interpret, device_kind=tuned_kind)


def has_tuned_launches(device_kind: str) -> bool:
    """Whether ``device_kind``'s own table records rows launches (another kind's never carry over)."""
    return table_kind(device_kind) == device_kind and bool(_table(device_kind).get("rows_launches"))


def tuned_rows_launch(device_kind: str, m: int, n: int, dtype) -> RowsLaunch | None:
    """The launch recorded for ``device_kind`` (its table's ``rows_launches``, from
    ``benchmarks/layer_norm_tuning.py``, layer norm's: RMS norm's kernels are the same code
    without centering and run them too) at the nearest tuned shape of ``dtype``'s kind (float16
    follows bfloat16) padded to the same width, when (m, n) is within a factor of two of it in
    both; a tie goes to the launch without the prefetch. Tiles keep their elements (rows: the
    power of two at most elements / span), programs their count (a forward without ``programs``:
    one per tile), rows in pieces their piece width (a kernel's ``piece_width``: ``row_pieces``)
    where those pad less than one piece (a power-of-two width near an awkward one: one piece) or
    the backward is ``split`` (a program a piece).
    None: no such entry. (Across widths a tile's registers differ: the prefetch that wins at 5120
    wide rows spills at 16384.)"""
    if dtype is None or not has_tuned_launches(device_kind):
        return None
    key, width = _dtype_key(dtype), _next_power_of_2(n)
    here = (math.log2(max(m, 1)), math.log2(max(n, 1)))
    near = [e for e in _table(device_kind)["rows_launches"] if e["dtype"] == key
            and _next_power_of_2(e["features"][1]) == width
            and all(abs(math.log2(f) - h) <= 1 + 1e-9 for f, h in zip(e["features"], here))]
    if not near:
        return None
    entry = min(near, key=lambda e: (sum((math.log2(f) - h) ** 2 for f, h in zip(e["features"], here)),
                                     e["backward"]["prefetch"]))
    fwd, bwd = entry["forward"], entry["backward"]

    def layout(kernel):  # (tile rows, piece width, pieces) of a kernel's entry
        piece, split = kernel.get("piece_width", width), kernel.get("split", False)
        if _cdiv(n, piece) * piece >= width and not split:  # the pieces pad no less than one piece: one piece
            piece = width
        span = _cdiv(n, piece) * piece
        return tile_rows(kernel["tile_elements"], piece if split else span, m), piece, span // piece

    (rows, piece, pieces), (forward_rows, forward_piece, forward_pieces) = layout(bwd), layout(fwd)
    walks = "programs" in fwd  # a forward whose programs walk several tiles
    return RowsLaunch(rows, piece, backward_steps(m, rows, bwd["programs"]), bwd["num_warps"],
                      prefetch=bwd["prefetch"], forward_rows=forward_rows, forward_warps=fwd["num_warps"],
                      device_kind=device_kind, pieces=pieces, forward_width=forward_piece,
                      forward_pieces=forward_pieces,
                      forward_steps=backward_steps(m, forward_rows, fwd["programs"]) if walks else 0,
                      forward_prefetch=fwd.get("prefetch", False), split=bwd.get("split", False))


def backward_steps(m: int, rows: int, programs: int) -> int:
    """Tiles each backward program walks so that about ``programs`` run over ``m`` rows in tiles
    of ``rows`` (no more programs than tiles)."""
    tiles = _cdiv(max(m, 1), rows)
    return _cdiv(tiles, min(tiles, programs))


@dataclasses.dataclass(frozen=True)
class GroupedLaunch:
    """Launch of the batch/group-norm kernels: tiles of ``tile_elements`` elements, ``chunk``
    columns wide (power of two); batch-norm statistics split over about ``stat_programs``
    programs. ``reverse``: a program's second pass over its group (the backward's ``dx``, the
    forward's ``y``) walks the tiles last to first, so it starts on those its first pass read last
    (the likeliest still in L2); ``writes_y``: group norm's forward is one kernel, the statistics
    and then ``y`` (else the statistics' kernel and ``y`` by XLA); ``backward_programs``: batch
    norm's backward as two kernels over about that many programs (a channel's samples split:
    the row sums, then ``dx``; 0: one program per channel, both passes)."""

    chunk: int = 4096
    tile_elements: int = 4096
    stat_programs: int = 1024
    num_warps: int = 8
    num_stages: int = 2
    interpret: bool = False
    reverse: bool = False
    writes_y: bool = False
    backward_programs: int = 0


def row_launch(impl: str, m: int, n: int, dtype, *, interpret: bool = False, device_kind: str | None = None):
    """The launch of the rows kernels ``impl`` on (m, n) of ``dtype`` on a GPU of ``device_kind``:
    ``"pallas"``: ``RowsLaunch`` (``rows_launch``), ``"mosaic"``: ``mosaic_kernels.MosaicRowsLaunch``."""
    if impl == "mosaic":
        from jaxrules import mosaic_kernels

        return mosaic_kernels.mosaic_rows_launch(m, n, dtype, interpret=interpret)
    return rows_launch(m, n, interpret=interpret, dtype=dtype, device_kind=device_kind)


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """The launch of a kernel-backed norm whose choice waits for each device's shard shape: under
    ``jit`` with an ``Auto`` mesh the shardings are known only when XLA partitions the program,
    and the plans of the possible shard shapes differ (``shard_plan``). ``shard_launch`` decides
    it there (``jaxrules.partitioning``'s ``partition`` callbacks), or on the whole array where
    nothing is partitioned: the kernel of ``op``'s plan for the shard, or the XLA formulas."""

    op: str  # "layer_norm", "rms_norm", "batch_norm" or "group_norm"
    platform: str
    device_kind: str
    weight_dtype: str


def _plan_of(op: str):
    """``(platform, device_kind, *features, dtype, weight_dtype) -> Plan`` of ``op``."""
    if op in ("batch_norm", "group_norm"):
        return functools.partial(grouped_plan, op)
    return {"layer_norm": layer_norm_plan, "rms_norm": rms_norm_plan}[op]


def mesh_splits(sizes) -> set:
    """The numbers of shards a dimension can be cut into over a subset of the mesh axes of
    ``sizes`` (more than one)."""
    return {math.prod(c) for k in range(1, len(sizes) + 1) for c in itertools.combinations(sizes, k)} - {1}


def shard_plan(op: str, platform: str, device_kind: str, features: tuple, dtype, weight_dtype,
               shard_features) -> Plan:
    """The plan of ``op`` on ``features`` (those of ``layer_norm_plan`` / ``rms_norm_plan`` /
    ``grouped_plan``) where XLA chooses the split (an ``Auto`` mesh), ``shard_features`` the
    features of each shard it may make: the whole array's plan where every shard's plan agrees
    with it, else a ``ShardPlan`` decided per shard."""
    plan_of = _plan_of(op)
    whole = plan_of(platform, device_kind, *features, dtype, weight_dtype)
    shards = {plan_of(platform, device_kind, *f, dtype, weight_dtype).impl for f in shard_features}
    if shards <= {whole.impl}:
        return whole
    import numpy as np

    wdtype = np.dtype(weight_dtype if weight_dtype is not None else dtype).name
    return Plan("per shard", ShardPlan(op, platform, device_kind, wdtype),
                f"{whole.reason}; a shard's shape decides ({'/'.join(sorted(shards | {whole.impl}))})")


def shard_launch(launch, features: tuple, dtype):
    """The launch on one device's shard of ``features``: a ``ShardPlan`` decided now (``None``:
    the XLA formulas), a rows kernels' launch relaunched for the shape (``relaunch``), a grouped
    launch as it is (it does not depend on the shape)."""
    if isinstance(launch, ShardPlan):
        return _plan_of(launch.op)(launch.platform, launch.device_kind, *features, dtype, launch.weight_dtype).launch
    if isinstance(launch, GroupedLaunch):
        return launch
    return relaunch(launch, *features, dtype)


def relaunch(launch, m: int, n: int, dtype):
    """A launch of ``launch``'s rows kernels for another shape (a device's shard, vmap's folded
    rows); a ``ShardPlan`` stays one (it is decided on the shard)."""
    from jaxrules import mosaic_kernels

    if isinstance(launch, ShardPlan):
        return launch
    kinds = {RowsLaunch: "pallas", mosaic_kernels.MosaicRowsLaunch: "mosaic"}
    if type(launch) not in kinds:
        raise TypeError(f"relaunch: not a rows kernels' launch: {launch!r}")
    return row_launch(kinds[type(launch)], m, n, dtype, interpret=launch.interpret,
                      device_kind=getattr(launch, "device_kind", None))


@dataclasses.dataclass(frozen=True)
class Plan:
    impl: str  # "pallas", "mosaic", "xla" or "per shard" (``shard_plan``)
    launch: object  # RowsLaunch, GroupedLaunch, mosaic_kernels.MosaicRowsLaunch, ShardPlan or None (XLA)
    reason: str


_LABELS = {"pallas": "Triton kernel", "mosaic": "Mosaic GPU kernel", "xla": "XLA"}


def _dtype_key(dtype) -> str:
    import numpy as np

    name = np.dtype(dtype).name
    return "bfloat16" if name == "float16" else name  # float16 follows the bfloat16 measurements


@functools.cache
def _table(device_kind: str) -> dict:
    """The recorded table of ``device_kind`` (the H100's when it has none), or {}. Not to be
    mutated (cached)."""
    for kind in (device_kind, FALLBACK_KIND):
        path = DATA / f"{slug(kind)}.json"
        if path.exists():
            return json.loads(path.read_text())
    return {}


@functools.cache
def measurements(device_kind: str) -> tuple:
    """The recorded sweep points of ``device_kind`` (the H100's when it has none): a tuple of
    dicts with ``op``, ``dtype``, ``features``, ``pallas_ms``, ``xla_ms`` (gradients only, the
    sweep's form) and, where measured, ``<impl>_train_ms`` (a training step, ``TRAINING_STEP``)."""
    return tuple(_table(device_kind).get("points", ()))


def table_kind(device_kind: str) -> str:
    """The device kind whose measurements ``device_kind`` uses."""
    return device_kind if table_path(device_kind).exists() else FALLBACK_KIND


def table_path(device_kind: str) -> pathlib.Path:
    """Where the measurements of ``device_kind`` are (or go)."""
    return DATA / f"{slug(device_kind)}.json"


def slug(device_kind: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in device_kind.lower()).strip("_")


def _decide(op: str, device_kind: str, dtype, weight_dtype, features: tuple, kernels=("pallas",)) -> tuple[str, str]:
    """``(impl, reason)``: the fastest of the XLA formulas and ``kernels`` (those that can run
    here) at the nearest measured point, in a training step where it has those times
    (``TRAINING_STEP``; a kernel without one counts with its gradients-only time), else gradients
    only."""
    key = _dtype_key(dtype)
    points = [p for p in measurements(device_kind) if p["op"] == op and p["dtype"] == key]
    same_weights = [p for p in points if p["weight_dtype"] == _dtype_key(weight_dtype or dtype)]
    points = same_weights or points
    if not points:
        return "xla", (f"no {op} {key} measurements for {device_kind} ({table_kind(device_kind)}'s table): the XLA "
                       "formulas run until a GPU sweep (python -m jaxrules bench --suite sweep --record FILE) "
                       "measures the kernels")
    here = [math.log2(max(f, 1)) for f in features]
    for i, h in enumerate(here):  # no evidence, no kernel: a shape outside the measured box runs XLA
        measured = [math.log2(max(p["features"][i], 1)) for p in points]
        if not min(measured) - 1 <= h <= max(measured) + 1:
            return "xla", (f"{op} {key} feature {i} = {features[i]} outside the measured range "
                           f"({table_kind(device_kind)})")

    def distance(p):
        return sum((math.log2(max(f, 1)) - h) ** 2 for f, h in zip(p["features"], here))

    nearest = min(points, key=distance)
    candidates = [k for k in kernels if f"{k}_ms" in nearest] + ["xla"]  # xla last: a kernel wins a tie
    times = {k: nearest[f"{k}_ms"] for k in candidates}
    form = "per call"
    trained = {k: nearest[f"{k}_train_ms"] for k in candidates if f"{k}_train_ms" in nearest}
    if len(trained) > 1 and "xla" in trained:  # a kernel without a step's time: its gradients' time stands in
        estimated = [k for k in candidates if k not in trained]
        times = {k: trained.get(k, times[k]) for k in candidates}
        form = f"per call in {TRAINING_STEP}" + (f" ({', '.join(_LABELS[k] for k in estimated)}: gradients only)"
                                                 if estimated else "")
    impl = min(times, key=times.get)
    where = f"{op} {key} {'x'.join(map(str, nearest['features']))} ({table_kind(device_kind)})"
    return impl, f"nearest measurement {where} {form}: " + ", ".join(
        f"{_LABELS[k]} {t:.4f} ms" for k, t in times.items())


# A point's ``<impl>_train_ms`` times (``python -m jaxrules bench --suite sweep --with-value
# --record``, ``benchmarks/record_dispatch.py``) decide it where it has them: a program returns the
# value and the gradients of a cotangent that waits for it (``bench.fwd_bwd``), as every training
# step does (the loss reads y). The sweep's gradients-only programs let XLA drop y's pass, which
# the rows kernels write anyway: at 40 of 53 H200 points where those times chose the XLA formulas,
# the Triton kernels were 1.06-1.54x faster in a training step (benchmarks/RESULTS.md stop 31). A
# kernel the step was not timed for counts with its gradients-only time: a rows kernel writes y in
# both forms (the Triton kernels' step took 0.98-1.05x their gradients' time, median 1.006, RESULTS.md
# stop 32). Stop 31 had left such kernels out: the Mosaic kernels at every training-step decision.
TRAINING_STEP = "a training step (the value, then the gradients)"


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
        import jax

        reason = (f"Pallas' Triton backend is not available in jax {jax.__version__} ({err}); its fused "
                  "kernels fall back to the XLA formulas (same derivatives) or, for layer and RMS norm where "
                  "measured faster, the Mosaic GPU kernels")
        warnings.warn(f"jaxrules: {reason}", KernelFallbackWarning, stacklevel=2)
        return reason
    return None


@functools.cache
def mosaic_backend_missing() -> str | None:
    """Why the Mosaic GPU kernels cannot run (``jax.experimental.pallas.mosaic_gpu`` does not
    import in this JAX), or None when they can; checked once, at first use."""
    try:
        importlib.import_module("jax.experimental.pallas.mosaic_gpu")
    except ImportError as err:
        return f"Pallas' Mosaic GPU backend is not available ({err})"
    return None


def _gate(platform: str, dtype) -> str | None:
    """Why no kernel can run (off the GPU, an unsupported dtype), or None."""
    import numpy as np

    if platform != "gpu":
        return f"platform {platform}: the kernels are for GPUs"
    if np.dtype(dtype).name not in KERNEL_DTYPES:
        return f"dtype {np.dtype(dtype).name}: the kernels take {', '.join(KERNEL_DTYPES)}"
    return None


def _decide_kernels(op, device_kind, dtype, weight_dtype, features, kernels) -> tuple[str, str]:
    """``_decide`` among the XLA formulas and those of ``{kernel: why not or None}`` that can run
    here; the reason says so when the Triton kernels cannot (``triton_backend_missing``, which
    warns once)."""
    ready = tuple(k for k, why in kernels.items() if why is None)
    impl, reason = _decide(op, device_kind, dtype, weight_dtype, features, ready)
    return impl, f"{reason}; {kernels['pallas']}" if kernels["pallas"] else reason


def layer_norm_features(m: int, n: int) -> tuple:
    return (m, n)


def layer_norm_plan(platform: str, device_kind: str, m: int, n: int, dtype, weight_dtype=None) -> Plan:
    """Layer norm over the last axis of (m, n); ``weight_dtype`` that of the affine weight (x's
    if None)."""
    return _rows_plan("layer_norm", platform, device_kind, m, n, dtype, weight_dtype)


def rms_norm_plan(platform: str, device_kind: str, m: int, n: int, dtype, weight_dtype=None) -> Plan:
    """RMS norm over the last axis of (m, n) (the layer-norm kernels without centering), decided
    like ``layer_norm_plan`` from the ``rms_norm`` points of the sweep. Until a GPU sweep records
    them, every shape runs the XLA formulas: no evidence, no kernel (the layer-norm points do not
    stand in, their kernels do more work per element)."""
    return _rows_plan("rms_norm", platform, device_kind, m, n, dtype, weight_dtype)


def _rows_plan(op: str, platform: str, device_kind: str, m: int, n: int, dtype, weight_dtype) -> Plan:
    blocked = _gate(platform, dtype) or (f"width {n} > {MAX_WIDTH}" if n > MAX_WIDTH else None)
    if blocked or m * n == 0:
        return Plan("xla", None, blocked or "empty input")
    from jaxrules import mosaic_kernels

    own_table = None if table_kind(device_kind) == device_kind else f"no measurements of {device_kind} itself"
    kernels = {"pallas": triton_backend_missing(),  # Mosaic: Hopper kernels, only on the kind they were measured on
               "mosaic": mosaic_kernels.mosaic_supports(m, n, dtype) or mosaic_backend_missing() or own_table}
    impl, reason = _decide_kernels(op, device_kind, dtype, weight_dtype, layer_norm_features(m, n), kernels)
    return Plan(impl, None if impl == "xla" else row_launch(impl, m, n, dtype, device_kind=device_kind), reason)


def grouped_features(groups: int, rows: int, length: int) -> tuple:
    """Features of a batch/group norm: ``groups`` statistics groups of ``rows`` rows of
    ``length``."""
    return (groups, rows, length)


def grouped_plan(op: str, platform: str, device_kind: str, groups: int, rows: int, length: int, dtype,
                 weight_dtype=None) -> Plan:
    """Batch norm (``op="batch_norm"``: groups = C, rows = N) or group norm (``"group_norm"``:
    groups = N G, rows = C / G) of rows of ``length``."""
    blocked = _gate(platform, dtype)
    if blocked or groups * rows * length == 0:
        return Plan("xla", None, blocked or "empty input")
    impl, reason = _decide_kernels(op, device_kind, dtype, weight_dtype, grouped_features(groups, rows, length),
                                   {"pallas": triton_backend_missing()})
    return Plan(impl, grouped_launch(op, device_kind) if impl == "pallas" else None, reason)


def grouped_writes_y(launch) -> bool:
    """Whether group norm's forward is one kernel under ``launch``: a ``GroupedLaunch``'s
    ``writes_y``, or, for a ``ShardPlan`` (decided on each shard), its device kind's group-norm
    launch's (each shard then runs that kernel or the XLA formulas' same outputs)."""
    if isinstance(launch, ShardPlan):
        return launch.op == "group_norm" and grouped_launch("group_norm", launch.device_kind).writes_y
    return bool(getattr(launch, "writes_y", False))


def grouped_launch(op: str, device_kind: str | None, interpret: bool = False) -> GroupedLaunch:
    """The launch of ``op``'s (``"batch_norm"``/``"group_norm"``) kernels on ``device_kind``: the
    settings its own table records (``grouped_launches``, measured in a training step by
    ``benchmarks/grouped_norm_tuning.py``; another kind's never carry over), else the defaults."""
    entry = _table(device_kind).get("grouped_launches", {}).get(op) if device_kind and table_kind(
        device_kind) == device_kind else None
    return GroupedLaunch(**entry, interpret=interpret) if entry else GroupedLaunch(interpret=interpret)
