"""What a compiled program does, read from its optimized HLO text (``compiled.as_text()``), for the
partitioning diagnostics (``benchmarks/models.py``, ``tests/test_partitioning.py``).

The entry computation is read, with the computations it runs inline (``call``: a GPU command
buffer; ``async-start``: an async collective's wrapper), not the bodies of fusions and loops.
For each program:

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


def computations(hlo: str) -> tuple[dict, str]:
    """Every computation's instructions (``name``, ``type`` text, ``op``, ``operands``, ``line``),
    by name, and the entry computation's name."""
    comps, entry = {}, ""
    for header, body in re.findall(r"^((?:ENTRY )?%?[\w.\-]+ [^\n]*\{)\n(.*?)^\}", hlo, re.S | re.M):
        name = re.match(r"(?:ENTRY )?%?([\w.\-]+)", header).group(1)
        entry = name if header.startswith("ENTRY") else entry
        comps[name] = []
        for line in body.splitlines():
            m = _LINE.match(line)
            if m:
                comps[name].append({"name": m.group(1), "type": m.group(2), "op": m.group(3),
                                    "operands": _operands(m.group(4)), "line": line})
    return comps, entry


def entry_instructions(hlo: str) -> list[dict]:
    """The entry computation's instructions (see ``computations``)."""
    comps, entry = computations(hlo)
    return comps.get(entry, [])


def _callee(i: dict, comps: dict) -> str | None:
    """The computation a ``call`` (a GPU command buffer) or an ``async-start`` (an async
    collective's wrapper) runs inline, else None."""
    if i["op"] not in ("call", "async-start"):
        return None
    m = re.search(r"(?:to_apply|calls)=%?([\w.\-]+)", i["line"])
    return m.group(1) if m and m.group(1) in comps else None


def _collective_kind(op: str) -> str | None:
    base = op.removesuffix("-start")
    return base if base in COLLECTIVES and not op.endswith("-done") else None


def summarize(hlo: str, big: int) -> dict:
    """The collectives, kernels and activation-sized passes of a compiled program (see the module
    docstring); ``big``: the element count from which an array counts as activation-sized. The
    computations of ``call`` and ``async-start`` instructions count as inline."""
    comps, entry = computations(hlo)
    out = {"collectives": [], "custom_calls": [], "fusions": 0, "big_reads": 0, "big_writes": 0, "big_copies": 0}

    def walk(name: str, param_depths: list[int]) -> int:
        """Adds up computation ``name``'s instructions, its parameters at ``param_depths``;
        returns its root's depth."""
        instructions = comps[name]
        by_name = {i["name"]: i for i in instructions}
        depth: dict[str, int] = {}

        def components(n):  # a tuple's operands stand for it (a loop reads what its tuple holds)
            i = by_name.get(n)
            return [c for o in i["operands"] for c in components(o)] if i and i["op"] == "tuple" else [n]

        for i in instructions:
            before = max((depth.get(o, 0) for o in i["operands"]), default=0)
            if i["op"] == "parameter":
                index = int(re.search(r"parameter\((\d+)\)", i["line"]).group(1))
                depth[i["name"]] = param_depths[index] if index < len(param_depths) else 0
                continue
            callee = _callee(i, comps)
            if callee is not None:
                depth[i["name"]] = walk(callee, [depth.get(o, 0) for o in i["operands"]])
                continue
            kind = _collective_kind(i["op"])
            depth[i["name"]] = before + (kind is not None)
            arrays = _arrays(i["type"])
            if kind is not None:
                sent = arrays if kind != "all-gather" else [a for o in i["operands"]
                                                            for a in _arrays(by_name.get(o, {}).get("type", ""))]
                out["collectives"].append({"kind": kind, "shapes": re.sub(r"\{[\d,]*\}", "", i["type"]),
                                           "bytes": sum(_BYTES.get(dt, 4) * n for dt, n in sent),
                                           "depth": depth[i["name"]]})
                continue
            if i["op"] == "custom-call":
                label = (re.search(r'"name":\s*"([^"]+)"', i["line"])
                         or re.search(r'custom_call_target="([^"]+)"', i["line"]))
                out["custom_calls"].append(label.group(1) if label else "?")
            out["fusions"] += i["op"] == "fusion"
            if i["op"] in _PLUMBING or i["op"].endswith("-done"):
                continue
            out["big_copies"] += i["op"] in ("copy", "transpose") and any(n >= big for _, n in arrays)
            out["big_reads"] += sum(n >= big for o in i["operands"] for c in components(o)
                                    for _, n in _arrays(by_name.get(c, {}).get("type", "")))
            out["big_writes"] += sum(n >= big for _, n in arrays)
        root = next((i["name"] for i in instructions if i["line"].lstrip().startswith("ROOT")), None)
        return depth.get(root, max(depth.values(), default=0))

    if entry:
        walk(entry, [])
    return {**out, "depth": max((c["depth"] for c in out["collectives"]), default=0)}


def describe(summary: dict) -> str:
    """One line: ``collectives (kind shapes bytes @depth; ...), chain depth, kernels, passes``."""
    coll = "; ".join(f"{c['kind']} {c['shapes']} {c['bytes']} B @{c['depth']}" for c in summary["collectives"])
    calls = ", ".join(sorted(set(summary["custom_calls"])))
    return (f"{len(summary['collectives'])} collectives [{coll or '-'}], chain depth {summary['depth']}; "
            f"{len(summary['custom_calls'])} custom calls [{calls or '-'}], {summary['fusions']} fusions; "
            f"activation-sized reads {summary['big_reads']}, writes {summary['big_writes']}, copies/transposes "
            f"{summary['big_copies']}")


__all__ = ["COLLECTIVES", "computations", "describe", "entry_instructions", "summarize"]
