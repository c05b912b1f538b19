"""``jaxrules.torch.nn.functional.grouped_mm``: torch 2.13's values (float32, CPU) in its four
layouts; gradients against a float64 torch reference of one product per group (torch's own
backward fails on a CPU); JVP against VJP; second derivatives; refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jaxrules.torch.nn.functional as JF

RNG = np.random.default_rng(23)
OFFS = np.array([3, 3, 7, 11], np.int32)  # an empty group; the 12th row / column past the last group
G = len(OFFS)


def _layouts(dtype):
    """(mat_a, mat_b, offs) of each layout (torch's CPU kernel wants 16-byte strides: 8 floats)."""
    def r(*shape):
        return RNG.standard_normal(shape).astype(dtype)

    return {
        "rows": (r(12, 8), r(G, 8, 8), OFFS),
        "columns": (r(G, 8, 8), r(8, 12), OFFS),
        "contraction": (r(8, 12), r(12, 8), OFFS),
        "batched": (r(G, 8, 8), r(G, 8, 8), None),
    }


def _groups(offs, size):
    starts = np.concatenate([[0], offs[:-1]])
    return [slice(s, e) for s, e in zip(starts, offs, strict=True)] if offs is not None else None


def _reference(lib, layout, a, b, offs):
    """One product per group (``lib``: numpy-like torch or jax.numpy)."""
    if layout == "batched":
        return a @ b
    groups = _groups(offs, None)
    if layout == "rows":
        out = [a[g] @ b[i] for i, g in enumerate(groups)] + [0 * a[offs[-1]:] @ b[0]]
        return lib.cat(out) if lib is torch else jnp.concatenate(out)
    if layout == "columns":
        out = [a[i] @ b[:, g] for i, g in enumerate(groups)] + [a[0] @ (0 * b[:, offs[-1]:])]
        return lib.cat(out, 1) if lib is torch else jnp.concatenate(out, 1)
    out = [a[:, g] @ b[g] for g in groups]
    return lib.stack(out) if lib is torch else jnp.stack(out)


@pytest.mark.parametrize("layout", ["rows", "columns", "contraction", "batched"])
def test_values_match_torch_and_gradients_match_a_per_group_reference(layout):
    a, b, offs = _layouts(np.float32)[layout]
    t_offs = None if offs is None else torch.tensor(offs)
    theirs = TF.grouped_mm(torch.tensor(a), torch.tensor(b), offs=t_offs).numpy()
    ours = JF.grouped_mm(jnp.asarray(a), jnp.asarray(b), offs=None if offs is None else jnp.asarray(offs))
    ours = np.asarray(ours)
    if layout in ("rows", "columns"):  # torch leaves the rows / columns past the groups unwritten
        ours, theirs = (np.moveaxis(v, 1, 0) if layout == "columns" else v for v in (ours, theirs))
        assert not ours[offs[-1]:].any()
        ours, theirs = ours[:offs[-1]], theirs[:offs[-1]]
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)

    a, b = a.astype(np.float64), b.astype(np.float64)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ref = _reference(torch, layout, ta, tb, offs)
    ct = RNG.standard_normal(tuple(ref.shape))
    t_grads = torch.autograd.grad(ref, (ta, tb), torch.tensor(ct))

    def f(x, y):
        return JF.grouped_mm(x, y, offs=None if offs is None else jnp.asarray(offs))

    out, pullback = jax.vjp(f, jnp.asarray(a), jnp.asarray(b))
    np.testing.assert_allclose(out, ref.detach().numpy(), rtol=1e-12, atol=1e-12)
    for got, want in zip(pullback(jnp.asarray(ct)), t_grads, strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-12, atol=1e-12)
    tangents = (jnp.asarray(RNG.standard_normal(a.shape)), jnp.asarray(RNG.standard_normal(b.shape)))
    jvp = jax.jvp(f, (jnp.asarray(a), jnp.asarray(b)), tangents)[1]
    ga, gb = pullback(jnp.asarray(ct))
    np.testing.assert_allclose(jnp.vdot(jvp, ct), jnp.vdot(ga, tangents[0]) + jnp.vdot(gb, tangents[1]), rtol=1e-10)


@pytest.mark.parametrize("layout", ["rows", "columns", "contraction"])
def test_second_derivatives_are_the_references(layout):
    """Every order runs the grouped products' own rules (JAX's ragged contraction has no
    derivative of its own)."""
    a, b, offs = (x.astype(np.float64) if x.dtype != np.int32 else x for x in _layouts(np.float32)[layout])

    def loss(fn, x, y):
        return jnp.sum(jnp.sin(fn(x, y)))

    ours = jax.hessian(lambda x, y: loss(lambda u, v: JF.grouped_mm(u, v, offs=jnp.asarray(offs)), x, y),
                       argnums=(0, 1))(jnp.asarray(a), jnp.asarray(b))
    ref = jax.hessian(lambda x, y: loss(lambda u, v: _reference(jnp, layout, u, v, offs), x, y),
                      argnums=(0, 1))(jnp.asarray(a), jnp.asarray(b))
    for row_ours, row_ref in zip(ours, ref, strict=True):
        for h_ours, h_ref in zip(row_ours, row_ref, strict=True):
            np.testing.assert_allclose(h_ours, h_ref, rtol=1e-10, atol=1e-12)


def test_float32_accumulation_of_bfloat16_and_jit():
    a, b, offs = _layouts(np.float32)["rows"]
    x, y = jnp.asarray(a, jnp.bfloat16), jnp.asarray(b, jnp.bfloat16)
    wide = jax.jit(lambda u, v: JF.grouped_mm(u, v, offs=jnp.asarray(offs), out_dtype=jnp.float32))(x, y)
    assert wide.dtype == jnp.float32
    np.testing.assert_allclose(wide, _reference(jnp, "rows", x.astype(jnp.float32), y.astype(jnp.float32), offs),
                               rtol=1e-5, atol=1e-5)
    assert JF.grouped_mm(x, y, offs=jnp.asarray(offs)).dtype == jnp.bfloat16
    a3, b3, _ = _layouts(np.float32)["batched"]  # the batch of products accumulates in float32 too
    x3, y3 = jnp.asarray(a3, jnp.bfloat16), jnp.asarray(b3, jnp.bfloat16)
    wide = JF.grouped_mm(x3, y3, out_dtype=jnp.float32)
    assert wide.dtype == jnp.float32
    np.testing.assert_allclose(wide, np.asarray(x3, np.float64) @ np.asarray(y3, np.float64), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("args", "kwargs", "error", "words"), [
    ((np.zeros((12, 8)), np.zeros((G, 8, 8))), {}, ValueError, "offs is required"),
    ((np.zeros((G, 8, 8)), np.zeros((G, 8, 8))), {"offs": OFFS}, ValueError, "offs must be None"),
    ((np.zeros((12, 8)), np.zeros((G, 8, 8))), {"offs": OFFS.astype(np.int64)}, TypeError, "int32"),
    ((np.zeros((12, 8)), np.zeros((G, 8, 8))), {"offs": np.array([3, 2, 7, 11], np.int32)}, ValueError, "increase"),
    ((np.zeros((12, 8)), np.zeros((G, 8, 8))), {"offs": np.array([3, 3, 7, 13], np.int32)}, ValueError, "increase"),
    ((np.zeros((12, 8)), np.zeros((G, 8, 8))), {"offs": OFFS[:3]}, ValueError, "one end per group"),
    ((np.zeros((12, 8)), np.zeros((G, 7, 8))), {"offs": OFFS}, ValueError, "do not multiply"),
    ((np.zeros((12, 8)), np.zeros((G, 8, 8))), {"offs": OFFS, "bias": np.zeros(8)}, ValueError, "bias"),
    ((np.zeros((12, 8)), np.zeros((G, 8, 8), np.float32)), {"offs": OFFS}, TypeError, "one dtype"),
])
def test_refusals_name_the_op_and_the_argument(args, kwargs, error, words):
    with pytest.raises(error, match=f"grouped_mm: .*{words}"):
        JF.grouped_mm(*(jnp.asarray(x) for x in args), **{k: jnp.asarray(v) if k != "bias" else v
                                                          for k, v in kwargs.items()})


@pytest.mark.parametrize("layout", ["rows", "columns", "contraction"])
def test_vmap_over_operands_and_offsets_is_the_loop(layout):
    """A batch of products with their own groups (one op call with one more batch dimension)
    equals the products one by one."""
    a, b, _ = _layouts(np.float64)[layout]
    offs = np.array([[3, 3, 7, 11], [0, 5, 5, 12], [12, 12, 12, 12]], np.int32)
    xs = jnp.stack([jnp.asarray(a) * (i + 1) for i in range(3)])

    def f(x, o):
        return JF.grouped_mm(x, jnp.asarray(b), offs=o)

    batched = jax.vmap(f)(xs, jnp.asarray(offs))
    for i in range(3):
        np.testing.assert_allclose(batched[i], f(xs[i], jnp.asarray(offs[i])), rtol=1e-12, atol=1e-12)
