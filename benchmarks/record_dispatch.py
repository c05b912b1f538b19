"""Merge sweep records (``python -m jaxrules bench --suite sweep --record FILE``) into the
dispatch table of their device kind, ``jaxrules/dispatch_data/<kind>.json``: each measured point
(op, dtype, weight dtype, features) replaces the times it measured of the table's point with the
same key (a kernel the record did not time, such as ``mosaic`` left out of ``--variants``, keeps
its time), and is no longer ``stale`` (the table's list of points measured with earlier code). A record without
kernel times (``--variants default,xla,jax``, after a change to the XLA formulas only) updates
the XLA and plain-JAX times of the table's points, and their kernel time where the row's plan
was the kernel (its "default" time); other kernel times stay. It then names the sweep cases the
table still lacks, by op (an op no sweep has measured yet, such as ``rms_norm`` before its first
GPU run, keeps the XLA formulas as its default: ``dispatch.rms_norm_plan``).

``--launches FILE``: instead, the rows kernels' launches measured by
``benchmarks/layer_norm_tuning.py`` (its JSON lines) become the table's ``rows_launches``: per
tuned shape and dtype the fastest forward and backward launch, where it beats the rule's
(``dispatch.rows_launch`` without a device kind) by more than ``LAUNCH_MARGIN``, else the rule's,
a row in one padded piece or in several (``dispatch.tuned_rows_launch`` reads them).

A training step's record (``bench --suite sweep --with-value``: the value, then the gradients of
a cotangent that waits for it) adds its times as ``<impl>_train_ms`` to the table's points it
measured, which the dispatch then decides on (``dispatch.TRAINING_STEP``); the gradients-only
times stay. A with-value record from before stop 31 (the cotangent given, so XLA fused y into the
backward) is refused.

Device times per step (``<impl>_step_ms``, ``bench --suite sweep --device-time``) are left out:
the dispatch decides per call (twice the device-time choices made the ragged block slower,
benchmarks/RESULTS.md stops 27 and 28).

    python benchmarks/record_dispatch.py sweep0.json sweep1.json --command "python -m jaxrules bench ..."
"""

from __future__ import annotations

import argparse
import datetime
import json

from jaxrules import bench, dispatch


def _key(point):
    return point["op"], point["dtype"], point["weight_dtype"], tuple(point["features"])


def _per_call(point):
    return {k: v for k, v in point.items() if not k.endswith("_step_ms")}


def training_step(record) -> bool:
    """Whether ``record`` timed training steps (``bench --with-value``); ValueError for a
    with-value record whose cotangent was given (before stop 31: neither form)."""
    meta = record.get("meta", {})
    if meta.get("with_value") and not meta.get("cotangent_after_value"):
        raise ValueError("a --with-value record from before stop 31 (the cotangent given: XLA fuses y into the "
                         "backward): neither the gradients-only nor the training step's form")
    return bool(meta.get("with_value"))


def _train_times(point, table_points):
    """A training step's point as the table keeps it: its times as ``<impl>_train_ms``, added only
    to a point the table has (the dispatch decides on gradients-only times first)."""
    key = _key(point)
    if key not in table_points:
        return {}
    times = {f"{k[:-3]}_train_ms": v for k, v in _per_call(point).items() if k.endswith("_ms")}
    return {key: {**table_points[key], **times}}


def merge(records, command):
    """The updated table (a dict) of the records' device kind."""
    (kind,) = {r["device_kind"] for r in records}
    path = dispatch.table_path(kind)
    table = json.loads(path.read_text()) if path.exists() else {"points": []}
    points = {_key(p): p for p in table["points"]}
    fresh = set()
    steps = [r for r in records if training_step(r)]
    for record in [r for r in records if r not in steps]:
        points.update({_key(p): {**points.get(_key(p), {}), **_per_call(p)} for p in record["points"]})
        fresh.update(_key(p) for p in record["points"])
        for row in record.get("rows", []):
            if "pallas_ms" in row or "xla_ms" not in row or "jax_ms" not in row:
                continue
            key = _key({**row, "dtype": "bfloat16" if row["dtype"] == "float16" else row["dtype"]})
            if key in points:
                timed = {"xla_ms": row["xla_ms"], "jax_ms": row["jax_ms"]}
                if row.get("plan") == "pallas" and "default_ms" in row:  # the default ran the kernel
                    timed["pallas_ms"] = row["default_ms"]
                points[key] = {**_per_call(points[key]), **{k: round(v, 5) for k, v in timed.items()}}
                fresh.add(key)  # a stale point's XLA times are what went stale
    for p in (p for record in steps for p in record["points"]):  # after the gradients-only times
        points.update(_train_times(p, points))
    stale = [c.name for c in bench.sweep_cases() if c.name in table.get("stale", [])
             and (c.op, c.dtype, c.weight_dtype, bench.sweep_features(c)) not in fresh]
    jax_versions = {r["jax"] for r in records}
    kept = {"note": table["note"], "stale": stale} if stale else {}
    kept.update({k: table[k] for k in ("rows_launches", "rows_launches_command", "grouped_launches",
                                       "grouped_launches_command") if k in table})
    return path, {"device_kind": kind, "jax": ",".join(sorted(jax_versions)),
                  "date": datetime.date.today().isoformat(), "command": command, **kept,
                  "points": sorted(points.values(), key=lambda p: (p["op"], p["dtype"], p["weight_dtype"],
                                                                   p["features"]))}


LAUNCH_MARGIN = 0.03  # a tuned launch must be this much faster than the rule's (one timing's noise)


def launches(tuning: list[dict]) -> list[dict]:
    """The ``rows_launches`` entries of tuning records (``layer_norm_tuning.py``, layer norm's: RMS
    norm runs them too, ``dispatch.tuned_rows_launch``): per (dtype, m, n), each kernel's fastest
    launch, rows in one padded piece or in pieces (``dispatch.row_pieces``: the kernel's
    ``piece_width``; pieces only where they beat one piece's best by ``LAUNCH_MARGIN``), a forward
    with one tile per program or walking them (its ``programs`` and ``prefetch``), or the backward
    split (``RowsLaunch.split``; only where it beats every whole-row backward by ``LAUNCH_MARGIN``).
    The fastest is taken where it beats the rule's by ``LAUNCH_MARGIN``, else the rule's; both
    times are kept."""
    if {r["op"] for r in tuning} != {"layer_norm"}:
        raise ValueError("record_dispatch --launches: the launches are layer norm's (RMS norm runs them); got records "
                         f"of {sorted({r['op'] for r in tuning})}")
    shapes = {}
    for r in tuning:
        shapes.setdefault((r["dtype"], r["m"], r["n"]), []).append(r)
    entries = []
    for (dtype, m, n), records in sorted(shapes.items()):
        rule = dispatch.rows_launch(m, n)
        entry = {"dtype": dtype, "features": [m, n]}
        for kernel in ("forward", "backward"):
            timed = [r for r in records if r["kernel"] == kernel]
            base = next(r for r in timed if (r["rows"], r["num_warps"], r["steps"], r["prefetch"], r["width"],
                                             _pieces(r), r.get("forward_steps", 0), r.get("split", False))
                        == (rule.rows, rule.num_warps, rule.steps, rule.prefetch, rule.width, rule.pieces, 0, False))
            whole = [r for r in timed if not r.get("split")]
            best = _faster(min((r for r in whole if _pieces(r) == 1), key=lambda r: r["ms"]),
                           min((r for r in whole if _pieces(r) > 1), key=lambda r: r["ms"], default=None))
            split_best = min((r for r in timed if r.get("split")), key=lambda r: r["ms"], default=None)
            if _faster(min(whole, key=lambda r: r["ms"]), split_best) is split_best:  # past the best of the others
                best = split_best
            chosen = _faster(base, best)
            pieces, split = _pieces(chosen), chosen.get("split", False)
            entry[kernel] = {"tile_elements": chosen["rows"] * chosen["width"] * (1 if split else pieces),
                             "num_warps": chosen["num_warps"], "rule_ms": round(base["ms"], 5),
                             "ms": round(chosen["ms"], 5),
                             **({"piece_width": chosen["width"]} if pieces > 1 else {}),
                             **({"split": True} if split else {})}
            tiles = -(-m // chosen["rows"])
            if kernel == "backward":
                entry[kernel].update(programs=-(-tiles // chosen["steps"]), prefetch=chosen["prefetch"])
            elif chosen.get("forward_steps"):  # a forward walking tiles
                entry[kernel].update(programs=-(-tiles // chosen["forward_steps"]), prefetch=chosen["forward_prefetch"])
        entries.append(entry)
    return entries


def _faster(incumbent: dict, challenger: dict | None) -> dict:
    """``challenger`` where it beats ``incumbent`` by more than ``LAUNCH_MARGIN``, else ``incumbent``."""
    return challenger if challenger and challenger["ms"] < (1 - LAUNCH_MARGIN) * incumbent["ms"] else incumbent


def _pieces(record) -> int:
    """A tuning record's pieces per row (stop 32's first records name them ``chunks``)."""
    return record.get("pieces", record.get("chunks", 1))


def merge_launches(table: dict, entries: list[dict]) -> list[dict]:
    """``table``'s ``rows_launches`` with ``entries`` replacing those of the same dtype and shape."""
    key = lambda e: (e["dtype"], tuple(e["features"]))  # noqa: E731
    merged = {key(e): e for e in table.get("rows_launches", [])} | {key(e): e for e in entries}
    return sorted(merged.values(), key=key)


def missing(table) -> dict:
    """``{op: [case names]}`` of the sweep cases (``bench.sweep_cases``) without a point in
    ``table``."""
    points = {_key(p) for p in table["points"]}
    lacking = {}
    for c in bench.sweep_cases():
        if (c.op, c.dtype, c.weight_dtype, bench.sweep_features(c)) not in points:
            lacking.setdefault(c.op, []).append(c.name)
    return lacking


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("records", nargs="+")
    parser.add_argument("--command", required=True, help="the command that measured the records")
    parser.add_argument("--launches", action="store_true",
                        help="the records are layer_norm_tuning.py's (JSON lines): record the rows launches")
    parser.add_argument("--device-kind", help="with --launches: the GPU they were measured on (else the records')")
    args = parser.parse_args()
    if args.launches:
        tuning = [json.loads(line) for f in args.records for line in open(f) if line.strip()]
        (kind,) = {args.device_kind} if args.device_kind else {r["device_kind"] for r in tuning}
        path = dispatch.table_path(kind)
        table = json.loads(path.read_text())
        table["rows_launches"] = merge_launches(table, launches(tuning))
        table["rows_launches_command"] = args.command
        path.write_text(json.dumps(table, indent=1) + "\n")
        print(f"{path}: {len(table['rows_launches'])} rows launches")
        return
    records = [json.load(open(f)) for f in args.records]
    path, table = merge(records, args.command)
    path.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{path}: {len(table['points'])} points")
    for op, names in missing(table).items():
        print(f"  not measured: {len(names)} {op} sweep cases (e.g. {names[0]}); its plan stays XLA there")


if __name__ == "__main__":
    main()
