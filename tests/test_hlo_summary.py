"""``benchmarks/hlo_summary.py`` on a hand-written entry computation: two dependent all-reduces (an
async pair counting once), an independent all-gather, a custom call, and activation-sized passes
(the expected values read off the text by hand)."""

from _repo_files import load

summarize = load("benchmarks/hlo_summary.py").summarize

HLO = """HloModule m

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (p0: bf16[4,64,49], p1: f32[64]) -> (bf16[4,64,49], f32[64], f32[2,64]) {
  %p0 = bf16[4,64,49]{2,1,0} parameter(0)
  %p1 = f32[64]{0} parameter(1)
  %k = (bf16[4,64,49]{2,1,0}, f32[64]{0}) custom-call(%p0, %p1), custom_call_target="__gpu$xla.gpu.triton"
  %y = bf16[4,64,49]{2,1,0} get-tuple-element(%k), index=0
  %s = f32[64]{0} get-tuple-element(%k), index=1
  %ar0 = f32[64]{0} all-reduce-start(%s), channel_id=1, to_apply=%add
  %ar0d = f32[64]{0} all-reduce-done(%ar0)
  %f = f32[64]{0} fusion(%ar0d, %p1), kind=kLoop, calls=%add
  %ar1 = (f32[64]{0}, f32[64]{0}) all-reduce(%f, %p1), channel_id=2, to_apply=%add
  %g = f32[2,64]{1,0} all-gather(%p1), channel_id=3, dimensions={0}
  %c = bf16[4,64,49]{2,1,0} copy(%y)
  %r = f32[64]{0} get-tuple-element(%ar1), index=0
  ROOT %t = (bf16[4,64,49]{2,1,0}, f32[64]{0}, f32[2,64]{1,0}) tuple(%c, %r, %g)
}
"""


def test_collectives_depths_kernels_and_passes():
    s = summarize(HLO, 4 * 64 * 49)
    assert [(c["kind"], c["bytes"], c["depth"]) for c in s["collectives"]] == [
        ("all-reduce", 256, 1), ("all-reduce", 512, 2), ("all-gather", 256, 1)]
    assert s["depth"] == 2
    assert s["custom_calls"] == ["__gpu$xla.gpu.triton"] and s["fusions"] == 1
    # The kernel reads p0 and writes y; the copy reads y and writes c.
    assert (s["big_reads"], s["big_writes"], s["big_copies"]) == (2, 2, 1)


CALLED = """HloModule m

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%command_buffer (q0: f32[64], q1: bf16[4,64,49]) -> (f32[64], bf16[4,64,49]) {
  %q0 = f32[64]{0} parameter(0)
  %q1 = bf16[4,64,49]{2,1,0} parameter(1)
  %inner = f32[64]{0} all-reduce(%q0), channel_id=2, to_apply=%add
  %z = bf16[4,64,49]{2,1,0} fusion(%q1, %inner), kind=kLoop, calls=%add
  ROOT %out = (f32[64]{0}, bf16[4,64,49]{2,1,0}) tuple(%inner, %z)
}

ENTRY %main (p0: bf16[4,64,49], p1: f32[64]) -> (f32[64], bf16[4,64,49]) {
  %p0 = bf16[4,64,49]{2,1,0} parameter(0)
  %p1 = f32[64]{0} parameter(1)
  %ar = f32[64]{0} all-reduce(%p1), channel_id=1, to_apply=%add
  ROOT %cb = (f32[64]{0}, bf16[4,64,49]{2,1,0}) call(%ar, %p0), to_apply=%command_buffer
}
"""


def test_a_called_computation_counts_inline():
    """A GPU command buffer (``call``): its collective waits on the entry's (depth 2), its
    fusion reads and writes the activation."""
    s = summarize(CALLED, 4 * 64 * 49)
    assert [(c["kind"], c["depth"]) for c in s["collectives"]] == [("all-reduce", 1), ("all-reduce", 2)]
    assert s["depth"] == 2 and s["fusions"] == 1
    assert (s["big_reads"], s["big_writes"]) == (1, 1)
