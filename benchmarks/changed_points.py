"""The sweep cases whose plan or kernel launch on a GPU kind differs between an earlier dispatch table and
the repository's: the points to time again after ``record_dispatch.py`` changed a table (their
kernel times were measured with the launch of before; ``docs/design.md`` §3). Prints the case
names comma-separated, for ``python -m jaxrules bench --suite sweep --ops "$(...)"``; ``--why``
prints each with its plan and launch before and after instead.

    git show HEAD~1:jaxrules/dispatch_data/nvidia_h200.json > /tmp/before.json
    python3 benchmarks/changed_points.py /tmp/before.json --kind "NVIDIA H200"
"""

from __future__ import annotations

import argparse
import math
import pathlib
import shutil
import tempfile

import jax.numpy as jnp

from jaxrules import bench, dispatch


def plans(kind: str, data: pathlib.Path | None = None) -> dict:
    """``{case name: (impl, launch, the Triton kernels' launch)}`` of every sweep case on ``kind``,
    from the tables in ``data`` (None: the repository's). The Triton launch counts where the plan
    is another: the table's kernel time there decides too."""
    saved = dispatch.DATA
    dispatch.DATA = data or saved
    _forget_tables()
    try:
        decided = {}
        for case in bench.sweep_cases():
            plan = bench.sweep_plan(case, "gpu", kind)
            triton = None
            if case.op in bench.ROW_OPS:
                m, n = math.prod(case.shape[:-1]), case.shape[-1]
                triton = dispatch.rows_launch(m, n, dtype=jnp.dtype(case.dtype), device_kind=kind)
            decided[case.name] = (plan.impl, plan.launch, triton)
        return decided
    finally:
        dispatch.DATA = saved
        _forget_tables()


def _forget_tables() -> None:
    """Drop the dispatch's cached tables (read again from ``dispatch.DATA``)."""
    for cached in (dispatch._table, dispatch.measurements):
        cached.cache_clear()


def changed(before_table: pathlib.Path, kind: str) -> list[tuple[str, tuple, tuple]]:
    """``[(case name, plans()'s value before, after)]`` where they differ: ``before_table`` standing
    in for ``kind``'s table (the other kinds' tables as they are)."""
    with tempfile.TemporaryDirectory() as tmp:
        data = pathlib.Path(tmp)
        for table in dispatch.DATA.glob("*.json"):
            shutil.copy(table, data / table.name)
        shutil.copy(before_table, data / dispatch.table_path(kind).name)
        old = plans(kind, data)
    new = plans(kind)
    return [(name, old[name], new[name]) for name in new if old[name] != new[name]]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", help="the earlier table (a dispatch_data JSON file)")
    parser.add_argument("--kind", required=True, help="the GPU kind whose table it was, e.g. 'NVIDIA H200'")
    parser.add_argument("--why", action="store_true", help="each case with its plan and launch before and after")
    args = parser.parse_args(argv)
    rows = changed(pathlib.Path(args.before), args.kind)
    if args.why:
        for name, old, new in rows:
            print(f"{name}: {old} -> {new}")
    else:
        print(",".join(name for name, *_ in rows))


if __name__ == "__main__":
    main()
