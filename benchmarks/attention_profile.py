"""Where dense attention's XLA formulas lose to ``jax.nn.dot_product_attention``'s XLA path in
float32 (issue 17): for each shape, the forward+backward programs of both (``bench.fwd_bwd``),
their compiled HLO summarized (cuBLAS calls with operand shapes, fusions by output shape, the
largest temporaries), and the time of each; plus variants of our formulas patched in this process
(``--variants``), to find which difference costs the time.

    PYTHONPATH=. python3 benchmarks/attention_profile.py --out attention_profile.md   # GPU
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np

from jaxrules import bench
from jaxrules.ops import attention as A

SHAPES = ((8, 12, 512, 64), (4, 16, 2048, 64), (2, 8, 4096, 128), (64, 12, 197, 64))


def _variants(causal):
    """``{label: fn(q, k, v)}`` on (B, H, L, E): our XLA formulas and jax.nn's XLA path."""
    return {
        "jaxrules XLA": lambda q, k, v: A.scaled_dot_product_attention(q, k, v, is_causal=causal, impl="xla"),
        "jax.nn XLA": lambda q, k, v: jnp.swapaxes(jax.nn.dot_product_attention(
            *(jnp.swapaxes(x, 1, 2) for x in (q, k, v)), is_causal=causal), 1, 2),
    }


def summary(hlo: str) -> str:
    """cuBLAS/cuDNN custom calls and fusions of the entry computation, counted by kind and shape."""
    entry = hlo[hlo.find("ENTRY"):]
    calls = collections.Counter()
    for line in entry.splitlines():
        m = re.match(r"\s*(?:ROOT )?%?[\w.-]+ = (\S+) (\w[\w-]*)\(", line)
        if not m:
            continue
        shape, op = m.groups()
        if op == "custom-call":
            target = re.search(r'custom_call_target="([^"]+)"', line)
            operands = re.findall(r"f32\[[\d,]*\]|bf16\[[\d,]*\]", line.split("custom-call(")[1])[:2]
            calls[f"custom-call {target.group(1) if target else '?'} {shape[:60]} <- {operands}"] += 1
        elif op in ("fusion", "copy", "transpose", "reduce", "dot"):
            kind = re.search(r"kind=(\w+)", line)
            calls[f"{op} {kind.group(1) if kind else ''} {shape[:80]}"] += 1
    return "\n".join(f"  {n} x {k}" for k, n in sorted(calls.items()))


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out")
    parser.add_argument("--hlo-dir")
    parser.add_argument("--causal", action="store_true")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    lines = [f"Device: {jax.devices()[0].device_kind}, jax {jax.__version__}, {args.dtype}, causal {args.causal}"]
    for shape in SHAPES:
        q, k, v, ct = (jnp.asarray(rng.standard_normal(shape), args.dtype) for _ in range(4))
        variants = _variants(args.causal)
        compiled = {lb: bench.fwd_bwd(fn).lower(ct, q, k, v).compile() for lb, fn in variants.items()}
        times = bench.interleaved_median_ms({lb: (lambda c=c: c(ct, q, k, v)) for lb, c in compiled.items()},
                                            args.repeats)
        lines.append(f"\n## {'x'.join(map(str, shape))}: " + ", ".join(f"{lb} {t:.3f} ms" for lb, t in times.items()))
        for lb, c in compiled.items():
            hlo = c.as_text()
            mem = c.memory_analysis()
            temp = getattr(mem, "temp_size_in_bytes", 0) / 2**20 if mem is not None else float("nan")
            lines.append(f"### {lb}: temp {temp:.0f} MiB\n{summary(hlo)}")
            if args.hlo_dir:
                name = f"{lb.replace(' ', '_').replace('.', '')}_{'x'.join(map(str, shape))}.hlo"
                pathlib.Path(args.hlo_dir, name).write_text(hlo)
        print("\n".join(lines[-3:]), flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        pathlib.Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
