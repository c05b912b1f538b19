"""What a GPU does during one call of a compiled program: the kernels, copies and collectives of
each step on each device, from a JAX profiler trace (``jax.profiler.ProfileData``, no TensorBoard).

``timeline(call, steps)`` runs ``call()`` ``steps`` times under ``jax.profiler.trace`` and returns,
per GPU, one row per operation of a step (median over the steps): its offset from the step's
start on that device, its duration, and the name; plus the step's span (the "XLA Modules" event,
or, in a trace without them as jax 0.11.2's on an H200, the operations between the host's waits,
``step_windows``) and the time the GPU did nothing inside it. ``format_timeline`` prints it. Used by
``benchmarks/models.py --profile`` to see where a step's time goes.
"""

from __future__ import annotations

import glob
import statistics
import sys
import tempfile

import jax


def _device_planes(data):
    return [p for p in data.planes if p.name.startswith("/device:GPU:")]


def _events(line):
    return [(e.name, e.start_ns, e.duration_ns) for e in line.events]


def _union_ns(intervals) -> float:
    """Total length covered by ``(start, end)`` intervals."""
    covered, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e > end:
            covered += e - max(s, end)
            end = e
    return covered


def step_windows(modules, ops, steps: int) -> list[tuple[float, float]]:
    """``(start, duration)`` of each of the last ``steps`` calls on a device: its "XLA Modules"
    events where the trace has them, else the operations (``(name, start, duration)``) cut at
    the ``steps - 1`` longest gaps between them (the host's wait between blocked calls)."""
    if modules:
        return [(start, duration) for _, start, duration in sorted(modules, key=lambda e: e[1])[-steps:]]
    if not ops:
        return []
    ordered = sorted((start, start + duration) for _, start, duration in ops)
    gaps, end = [], ordered[0][1]
    for i in range(1, len(ordered)):
        gaps.append((ordered[i][0] - end, i))
        end = max(end, ordered[i][1])
    cuts = sorted(i for _, i in sorted(gaps, reverse=True)[: steps - 1])
    windows = []
    for lo, hi in zip([0, *cuts], [*cuts, len(ordered)]):
        first, last = ordered[lo][0], max(e for _, e in ordered[lo:hi])
        windows.append((first, last - first + 1))
    return windows


def timeline(call, steps: int = 5) -> dict[str, dict]:
    """Per GPU plane: ``{"span_us", "idle_us", "ops": [(offset_us, duration_us, name), ...]}``,
    medians over the last ``steps`` calls of ``call`` (each blocked on)."""
    jax.block_until_ready(call())  # compiled and warm before the trace
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d):
            for _ in range(steps):
                jax.block_until_ready(call())
        path = glob.glob(f"{d}/**/*.xplane.pb", recursive=True)[0]
        data = jax.profiler.ProfileData.from_file(path)
    if not _device_planes(data):  # say what the trace holds instead (a JAX or CUPTI that names them otherwise)
        print("device_timeline: no GPU plane in the trace; planes:",
              {p.name: [line.name for line in p.lines][:8] for p in data.planes}, file=sys.stderr)
    result = {}
    for plane in _device_planes(data):
        lines = {line.name: _events(line) for line in plane.lines}
        ops = [e for k, v in lines.items() if k.startswith("Stream") for e in v]
        per_step = []
        for start, duration in step_windows(lines.get("XLA Modules", []), ops, steps):
            inside = sorted((s - start, d_, n) for n, s, d_ in ops if start <= s < start + duration)
            busy = _union_ns([(s, s + d_) for s, d_, _ in inside])
            per_step.append((duration, duration - busy, inside))
        if not per_step:
            continue
        reference = per_step[-1][2]  # the op list of one step; offsets/durations as medians
        op_rows = []
        for i, (_, _, name) in enumerate(reference):
            same = [step[2][i] for step in per_step if len(step[2]) == len(reference)]
            op_rows.append((statistics.median(s for s, _, _ in same) / 1e3,
                            statistics.median(d_ for _, d_, _ in same) / 1e3, name))
        result[plane.name] = {"span_us": statistics.median(s for s, _, _ in per_step) / 1e3,
                              "idle_us": statistics.median(i for _, i, _ in per_step) / 1e3,
                              "ops": op_rows}
    return result


def format_timeline(label: str, planes: dict[str, dict], width: int = 90) -> str:
    """A Markdown block: per GPU, the step's span and idle time, then its operations in order."""
    lines = []
    for plane, t in sorted(planes.items()):
        lines.append(f"{label}, {plane}: step span {t['span_us']:.1f} us, GPU idle inside it {t['idle_us']:.1f} us")
        lines += [f"    {offset:9.1f} us  {duration:8.1f} us  {name[:width]}" for offset, duration, name in t["ops"]]
    return "\n".join(lines)
