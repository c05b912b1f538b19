"""What a compiled program does, read from its optimized HLO text (``compiled.as_text()``), for the
partitioning diagnostics of issue 19 (``benchmarks/multi_device.py``, ``tests/test_partitioning.py``).

Only the entry computation is read (the partitioned program's top level: kernels, fusions,
collectives). For each program:

* ``collectives``: every all-reduce, all-gather, reduce-scatter, all-to-all and
  collective-permute (an async ``-start``/``-done`` pair counts once): kind, operand shapes,
  bytes, and its *depth*, the number of collectives on the longest chain of data dependencies
  ending at it (1: it waits for no other collective). ``depth`` of the program: the longest such
  chain, the collective latencies a step pays one after the other.
* ``kernels``: the custom calls (Triton kernels on a GPU: ``__gpu$xla.gpu.triton``, named by
  their ``pallas_call`` name when the text shows it) and the number of fusions.
* ``big_reads`` / ``big_writes``: operands read and results written by the top-level
  instructions (fusions, custom calls, copies, transposes, loops) that have at least ``big``
  elements (pass the per-device activation's size): the passes over activation-sized arrays.
  On a CPU the kernels run in Pallas interpret mode as ``while`` loops, so their count means
  less there than on a GPU.
"""

from __future__ import annotations

import math
import re

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4,
          "f64": 8, "s64": 8, "u64": 8, "c64": 8, "c128": 16}
_SHAPE = re.compile(r"\b(pred|[subfc]\d+|bf16)\[([\d,]*)\]")
_LINE = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (.*?) ([\w\-]+)\((.*)$")
_PLUMBING = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "partition-id", "replica-id"}


def _arrays(type_text: str) -> list[tuple[str, int]]:
    """``(dtype, elements)`` of each array in an HLO type (a tuple type lists several)."""
    return [(dt, math.prod(int(d) for d in dims.split(",") if d)) for dt, dims in _SHAPE.findall(type_text)]


def _operands(rest: str) -> list[str]:
    """The ``%names`` inside the operand parentheses of an instruction (``rest``: the text after
    the opcode's opening parenthesis)."""
    depth = 1
    for end, ch in enumerate(rest):  # noqa: B007 - the closing parenthesis' position is the result
        depth += (ch == "(") - (ch == ")")
        if depth == 0:
            return re.findall(r"%([\w.\-]+)", rest[:end])
    return re.findall(r"%([\w.\-]+)", rest)


def entry_instructions(hlo: str) -> list[dict]:
    """The entry computation's instructions: ``name``, ``type`` (text), ``op``, ``operands``,
    ``line``."""
    match = re.search(r"^ENTRY [^\n]*\{\n(.*?)^\}", hlo, re.S | re.M)
    out = []
    for line in (match.group(1) if match else "").splitlines():
        m = _LINE.match(line)
        if m:
            out.append({"name": m.group(1), "type": m.group(2), "op": m.group(3), "operands": _operands(m.group(4)),
                        "line": line})
    return out


def _collective_kind(op: str) -> str | None:
    base = op.removesuffix("-start")
    return base if base in COLLECTIVES and not op.endswith("-done") else None


def summarize(hlo: str, big: int) -> dict:
    """The collectives, kernels and activation-sized passes of a compiled program (see the module
    docstring); ``big``: the element count from which an array counts as activation-sized."""
    instructions = entry_instructions(hlo)
    by_name = {i["name"]: i for i in instructions}
    depth: dict[str, int] = {}
    collectives, custom_calls, fusions, reads, writes, copies = [], [], 0, 0, 0, 0

    def components(name):  # a tuple's operands stand for it (a loop reads what its tuple holds)
        i = by_name.get(name)
        if i is not None and i["op"] == "tuple":
            return [c for o in i["operands"] for c in components(o)]
        return [name]

    for i in instructions:
        kind = _collective_kind(i["op"])
        depth[i["name"]] = max((depth.get(o, 0) for o in i["operands"]), default=0) + (kind is not None)
        arrays = _arrays(i["type"])
        if kind is not None:
            operand_arrays = arrays if kind != "all-gather" else [a for o in i["operands"]
                                                                  for a in _arrays(by_name.get(o, {}).get("type", ""))]
            collectives.append({"kind": kind, "shapes": re.sub(r"\{[\d,]*\}", "", i["type"]),
                                "bytes": sum(_BYTES.get(dt, 4) * n for dt, n in operand_arrays),
                                "depth": depth[i["name"]]})
        if i["op"] == "custom-call":
            target = re.search(r'custom_call_target="([^"]+)"', i["line"])
            name = re.search(r'"name":\s*"([^"]+)"', i["line"]) or re.search(r"kernel_name=\"?([\w.]+)", i["line"])
            custom_calls.append((name or target).group(1) if (name or target) else "?")
        fusions += i["op"] == "fusion"
        if i["op"] in _PLUMBING or kind is not None or i["op"].endswith("-done"):
            continue
        copies += i["op"] in ("copy", "transpose") and any(n >= big for _, n in arrays)
        reads += sum(n >= big for o in i["operands"] for c in components(o)
                     for _, n in _arrays(by_name.get(c, {}).get("type", "")))
        writes += sum(n >= big for _, n in arrays)
    return {"collectives": collectives, "depth": max((c["depth"] for c in collectives), default=0),
            "custom_calls": custom_calls, "fusions": fusions, "big_reads": reads, "big_writes": writes,
            "big_copies": copies}


def describe(summary: dict) -> str:
    """One line: ``collectives (kind shapes bytes @depth; ...), chain depth, kernels, passes``."""
    coll = "; ".join(f"{c['kind']} {c['shapes']} {c['bytes']} B @{c['depth']}" for c in summary["collectives"])
    calls = ", ".join(sorted(set(summary["custom_calls"])))
    return (f"{len(summary['collectives'])} collectives [{coll or '-'}], chain depth {summary['depth']}; "
            f"{len(summary['custom_calls'])} custom calls [{calls or '-'}], {summary['fusions']} fusions; "
            f"activation-sized reads {summary['big_reads']}, writes {summary['big_writes']}, copies/transposes "
            f"{summary['big_copies']}")


__all__ = ["COLLECTIVES", "describe", "entry_instructions", "summarize"]
