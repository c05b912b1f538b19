"""Kernel launches of the sweep's forward+backward programs (issue 14): for each named sweep case
and variant, the number of instructions of the optimized HLO's entry computation that launch
work on the device (fusions, custom calls, unfused reductions, copies, ...), and optionally the
HLO itself in one tarball. Host-bound shapes (a few us of device work) pay per launch, which is
where the XLA formulas trailed plain JAX by 10-40 us. ``--time`` also times each program as the
sweep does (``bench.interleaved_median_ms``: separate calls, host launch included) and as
``--loop`` steps of a ``fori_loop`` inside one program (device time per step, no host launch).

    PYTHONPATH=. python3 benchmarks/kernel_count.py --ops "layer_norm 3x5120 bfloat16" --hlo out.tar.gz
"""

from __future__ import annotations

import argparse
import io
import re
import tarfile

import numpy as np

from jaxrules import bench

# Entry-computation instructions that launch nothing (views, tuples, constants, parameters).
_NO_LAUNCH = {"parameter", "tuple", "get-tuple-element", "bitcast", "constant", "copy-start", "copy-done"}


def entry_launches(hlo_text: str) -> list[str]:
    """The opcodes of the entry computation's instructions that launch device work."""
    entry = hlo_text[hlo_text.index("\nENTRY"):]
    body = entry[entry.index("{") + 1:entry.index("\n}")]
    opcodes = []
    for line in body.splitlines():
        found = re.search(r"=\s*(?:\([^=]*\)|\S+)\s+([a-z][a-z0-9-]*)\(", line)
        if found and found.group(1) not in _NO_LAUNCH:
            opcodes.append(found.group(1))
    return opcodes


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", required=True, help="sweep case names, comma-separated (substrings)")
    parser.add_argument("--variants", default="xla,jax,default")
    parser.add_argument("--hlo", help="write every program's optimized HLO into this .tar.gz")
    parser.add_argument("--time", action="store_true", help="also time each program (ms per call, per loop step)")
    parser.add_argument("--loop", type=int, default=100, help="steps of the timed loop")
    args = parser.parse_args()
    wanted = args.ops.split(",")
    cases = [c for c in bench.sweep_cases() if any(w in c.name for w in wanted)]
    archive = tarfile.open(args.hlo, "w:gz") if args.hlo else None
    print("| case | variant | launches | ms per call | ms per loop step | opcodes |")
    print("| --- | --- | --- | --- | --- | --- |")
    for case in cases:
        x, w, b, ct = bench._sweep_inputs(case, np.random.default_rng(0))
        for variant in args.variants.split(","):
            text = bench.fwd_bwd(bench.sweep_fn(case, variant)).lower(ct, x, w, b).compile().as_text()
            ops = entry_launches(text)
            call = step_ms = ""
            if args.time:
                step = bench.fwd_bwd(bench.sweep_fn(case, variant))
                call = f"{bench.median_ms(lambda: step(ct, x, w, b), 15):.4f}"
                loop = bench.looped(step, args.loop)
                step_ms = f"{bench.median_ms(lambda: loop(ct, x, w, b), 7, calls=1) / args.loop:.4f}"
            print(f"| {case.name} | {variant} | {len(ops)} | {call} | {step_ms} | {' '.join(ops)} |")
            if archive is not None:
                data = text.encode()
                info = tarfile.TarInfo(f"{case.name.replace(' ', '_')}_{variant}.hlo")
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    if archive is not None:
        archive.close()


if __name__ == "__main__":
    main()
