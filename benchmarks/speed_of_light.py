"""The speed-of-light table of issue 14 (requirement 4): every kernel-backed op's default in a
training step (``bench --suite sweep --with-value`` records), as a fraction of the copy probe for
the bytes it must move (``bench.sweep_bytes``: read x, write y, read x and the cotangent, write
dx), at widths >= ``--min-width`` (the last axis of layer and RMS norm, batch and group norm's
feature map); a point
below ``--target`` gets the reason and the next idea of its class (``CLASSES``: what the
measurements of ``benchmarks/RESULTS.md`` show, and what to try). A later record's point replaces
an earlier one's.

    python3 benchmarks/speed_of_light.py benchmarks/sweeps/h200_twentyfirst_sol.json ... > table.md
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys

# (class, reason, next idea), the first whose test holds (``diagnose``).
CLASSES = {
    "grouped": (
        "8 passes over the activation where the count has 5: the statistics read x, y's pass reads x and writes "
        "y, the backward reads x and the cotangent twice (row sums, then dx): at most 5/8 = 0.63. Group norm on "
        "the H200 (stop 33): one forward kernel whose y pass and the backward's dx pass re-read their group last "
        "tile first, from L2 in part (0.55-0.66 at the large maps; the step profile measured 10 passes before); "
        "batch norm's backward split over 4096 programs only evens the XLA formulas (1.01-1.04x, stop 33)",
        "batch norm: its channel spans the batch (no program holds it), so a grid-wide reduction or the "
        "statistics fused into the producer; group norm: the group held in one program's shared memory"),
    "wide rows": (
        "rows wider than 8192: no program holds a row with its next one's loads (registers spill); where "
        "measured faster the backward runs split (stop 34): XLA's row sums read x and the cotangent (1.9 "
        "passes), then the dx kernel, a program per 1024-2048 columns (3.5 passes), the forward 2.4: 7.9 "
        "passes of a step where the count has 5 (layer norm 21844x12288 bfloat16; 9.2 whole-row, stop 33); "
        "float32 12288 wide keeps the whole-row backward (the split 2% slower there)",
        "the row sums inside the dx kernel's programs exchanged through memory (one pass less), or rows "
        "staged in shared memory (Mosaic GPU, TMA: a 12288-wide bfloat16 row of x and the cotangent is 48 KB)"),
    "short": (
        "under 0.3 ms (1000-8192 rows, 8-62 per SM): the kernels themselves run long, not the launches or the "
        "partials' sum (layer norm 8192x5120 bfloat16, stop 33's step profile: forward 2.75 passes where 2 are "
        "needed, backward 4.82 where 3, 2.4 us idle, the partials' sums 5 us of 161); at 1000-1024 rows of "
        "12288-16384 the split backward (stop 34) made the kernels' step 1.05-1.37x faster, still under 0.2 ms",
        "fewer rows per program and more programs: 8192 rows fill 132 SMs with at most 62 each"),
    "bfloat16": (
        "a bfloat16 tile carries half a float32 tile's bytes through the same chain of dependent loads "
        "and two row reductions per step; the forward has no prefetch (kernels alone at 66850x768, 66850x1536, "
        "52427x5120: forward 0.62-0.68, backward 0.55-0.64 of the probe, stop 32; in a step at 65535x4096: "
        "forward 2.25 passes, backward 3.76, stop 33)",
        "not a forward that walks tiles (slower at 15 of 16 points, stop 33); the Mosaic GPU kernels' TMA "
        "pipelines, which lead at 4 of these points"),
    "float32": (
        "the kernels alone reach 0.71-0.85 of the probe at 66850x768-52427x5120 (stop 32); the step adds "
        "the launches' tails",
        "as bfloat16: the Mosaic GPU kernels where they take the width"),
}


def diagnose(row) -> str:
    """The class (``CLASSES``) of a row below the target."""
    n = row["shape"][-1]
    if row["op"] in ("batch_norm", "group_norm"):
        return "grouped"
    if row["default_ms"] < 0.3:
        return "short"
    if n > 8192:
        return "wide rows"
    return "bfloat16" if row["dtype"] != "float32" else "float32"


def _width(row) -> int:
    """The contiguous length a row of the op spans: the last axis (layer, RMS norm) or the feature
    map (batch, group norm on NCHW)."""
    return row["shape"][-1] if row["op"] in ("layer_norm", "rms_norm") else math.prod(row["shape"][2:])


def load(paths) -> tuple[list, list]:
    """``(rows, notes)``: the training-step rows of the records at ``paths`` (later ones replace
    earlier ones' points), and a line per record on its form."""
    rows, notes = {}, []
    for path in paths:
        record = json.load(open(path))
        meta = record["meta"]
        if not meta.get("with_value"):
            raise ValueError(f"{path}: gradients only, not a training step")
        notes.append(f"{path}: {meta['device']}, {len(record['rows'])} points, probe {meta['sol_gbps']:.0f} GB/s"
                     + ("" if meta.get("cotangent_after_value") else
                        " (its form unmarked: recorded at the commit that made the training step's form)"))
        for r in record["rows"]:
            if "default_ms" in r:
                rows[(r["op"], tuple(r["shape"]), r["dtype"], r["weight_dtype"])] = r
    return list(rows.values()), notes


def markdown(rows, target: float, min_width: int) -> str:
    rows = [r for r in rows if _width(r) >= min_width]
    rows.sort(key=lambda r: (r["op"], r["dtype"], r["weight_dtype"], -math.prod(r["shape"])))
    below = [r for r in rows if r["sol"] < target]
    lines = [f"{len(below)} of {len(rows)} points below {target:.0%} of the speed of light "
             f"(median {statistics.median(r['sol'] for r in rows):.2f}).", "",
             "| op | shape | dtype | plan | default ms | of SoL | class |", "|" + " --- |" * 7]
    for r in rows:
        dtype = r["dtype"] + ("" if r["dtype"] == r["weight_dtype"] else f" (w {r['weight_dtype']})")
        lines.append(f"| {r['op']} | {'x'.join(map(str, r['shape']))} | {dtype} | {r['plan']} | "
                     f"{r['default_ms']:.3f} | {r['sol']:.2f} | {diagnose(r) if r['sol'] < target else ''} |")
    lines += ["", "| class | points below | why | next idea |", "| --- | --- | --- | --- |"]
    for name, (why, idea) in CLASSES.items():
        count = sum(diagnose(r) == name for r in below)
        if count:
            lines.append(f"| {name} | {count} | {why} | {idea} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="+", help="bench --suite sweep --with-value --record files, oldest first")
    parser.add_argument("--target", type=float, default=0.85)
    parser.add_argument("--min-width", type=int, default=1024)
    args = parser.parse_args(argv)
    rows, notes = load(args.records)
    print("\n".join(notes), file=sys.stderr)
    print(markdown(rows, args.target, args.min_width))


if __name__ == "__main__":
    main()
