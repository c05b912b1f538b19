"""``jax.experimental.hijax`` against the mechanism's contract (docs/hijax.md).

The same checks as tests/test_mechanism.py, run on ``jaxrules._hijax_prototype.hijax_op`` (the
``define_op`` formulas on a public ``VJPHiPrimitive``), plus what hijax itself does where the
prototype has to work around it (each such test asserts the observed behaviour of jax 0.10.2),
one real op (``sinc`` with the library's own JVP and VJP formulas) and a NestedTensor-like
``HiType``.
"""

import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import hijax
from jax.sharding import PartitionSpec

from jaxrules import _hijax_prototype as proto
from jaxrules import jvp_rules as J
from jaxrules import vjp_rules as R
from jaxrules._hijax_prototype import Ragged, formula_spy, hijax_op, make_ragged, ragged_parts, ragged_scale

# The toy op of tests/test_mechanism.py: f(x, y) = sin(x) * y, formulas counting their calls.
CALLS = {"jvp": 0, "vjp": 0}


def _jvp(res, tx, ty):
    CALLS["jvp"] += 1
    x, y = res
    out = 0
    if tx is not None:
        out = out + jnp.cos(x) * y * tx
    if ty is not None:
        out = out + jnp.sin(x) * ty
    return out


def _vjp(res, ct):
    CALLS["vjp"] += 1
    x, y = res
    return jnp.cos(x) * y * ct, jnp.sin(x) * ct


def reference(x, y):
    return jnp.sin(x) * y


sinmul = hijax_op("test_sinmul", reference, _jvp, _vjp)
# The direct mapping: the JVP formula inline in ``VJPHiPrimitive.jvp`` (no linear primitive).
sinmul_direct = hijax_op("test_sinmul_direct", reference, _jvp, _vjp, linear=False)

X = jnp.array([0.3, -1.2, 2.0])
Y = jnp.array([1.5, 0.7, -0.4])


def _close(a, b):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(u, v, rtol=1e-12, atol=1e-12)


def _counting(fn):
    CALLS.update(jvp=0, vjp=0)
    out = fn()
    return out, dict(CALLS)


FORWARD = {
    "jvp": lambda f: jax.jvp(f, (X, Y), (Y, X))[1],
    "jacfwd": lambda f: jax.jacfwd(f, (0, 1))(X, Y),
    "linearize": lambda f: jax.linearize(f, X, Y)[1](Y, X),
}
REVERSE = {
    "grad": lambda f: jax.grad(lambda x, y: f(x, y).sum(), (0, 1))(X, Y),
    "vjp": lambda f: jax.vjp(f, X, Y)[1](Y),
    "jacrev": lambda f: jax.jacrev(f, (0, 1))(X, Y),
}


@pytest.mark.parametrize("transform", sorted(FORWARD))
def test_forward_mode_runs_the_jvp_formula(transform):
    out, calls = _counting(lambda: FORWARD[transform](sinmul))
    assert calls["jvp"] >= 1 and calls["vjp"] == 0
    _close(out, FORWARD[transform](reference))


@pytest.mark.parametrize("transform", sorted(REVERSE))
def test_reverse_mode_runs_the_vjp_formula(transform):
    out, calls = _counting(lambda: REVERSE[transform](sinmul))
    assert calls["vjp"] >= 1 and calls["jvp"] == 0
    _close(out, REVERSE[transform](reference))


def test_formula_spy_records_op_names():
    with formula_spy() as calls:
        jax.jvp(sinmul, (X, Y), (Y, X))
    assert calls == [("jvp", "test_sinmul")]
    with formula_spy() as calls:
        jax.grad(lambda x: sinmul(x, Y).sum())(X)
    assert calls == [("vjp", "test_sinmul")]


TRANSFORMS = {
    "jit": lambda f: jax.jit(f)(X, Y),
    "jit_grad": lambda f: jax.jit(jax.grad(lambda x, y: f(x, y).sum(), (0, 1)))(X, Y),
    "grad_of_jit": lambda f: jax.grad(jax.jit(lambda x, y: f(x, y).sum()), (0, 1))(X, Y),
    "grad_of_jit_constant_arg": lambda f: jax.grad(jax.jit(lambda x: f(x, 0.5).sum()))(X),
    "hessian": lambda f: jax.hessian(lambda x, y: f(x, y).sum(), (0, 1))(X, Y),
    "rev_over_rev": lambda f: jax.jacrev(jax.jacrev(lambda x, y: f(x, y).sum(), (0, 1)), (0, 1))(X, Y),
    "fwd_over_fwd": lambda f: jax.jacfwd(jax.jacfwd(lambda x: f(x, Y).sum()))(X),
    "third_order": lambda f: jax.grad(jax.grad(jax.grad(lambda x: f(x, 2.0))))(0.4),
    "jvp_of_grad": lambda f: jax.jvp(jax.grad(lambda x: f(x, Y).sum()), (X,), (Y,)),
    "grad_of_jvp": lambda f: jax.grad(lambda x: jax.jvp(lambda x: f(x, Y), (x,), (Y,))[1].sum())(X),
    "vmap_in_axes_mixed": lambda f: jax.vmap(f, in_axes=(1, None))(jnp.stack([X, 2 * X], 1), Y),
    "vmap_nested": lambda f: jax.vmap(jax.vmap(f, (0, None)), (None, 0))(jnp.stack([X, X + 1]), jnp.stack([Y, Y, -Y])),
    "vmap_of_grad": lambda f: jax.vmap(jax.grad(lambda x, y: f(x, y).sum(), (0, 1)), (0, None))(jnp.stack([X, -X]), Y),
    "grad_of_vmap": lambda f: jax.grad(lambda x, y: jax.vmap(f, (0, None))(x, y).sum(), (0, 1))(jnp.stack([X, -X]), Y),
    "vmap_of_jvp": lambda f: jax.vmap(lambda t: jax.jvp(f, (X, Y), (t, Y)))(jnp.stack([X, Y])),
    "checkpoint": lambda f: jax.grad(lambda x: jax.checkpoint(lambda x: f(x, Y).sum())(x))(X),
    "checkpoint_nothing_saveable": lambda f: jax.grad(
        lambda x: jax.checkpoint(lambda x: f(x, Y).sum(), policy=jax.checkpoint_policies.nothing_saveable)(x)
    )(X),
    "scan": lambda f: jax.grad(lambda x: lax.scan(lambda c, _: (f(c, Y), None), x, None, length=4)[0].sum())(X),
    "jit_vmap_hessian": lambda f: jax.jit(jax.vmap(jax.hessian(lambda x: f(x, Y).sum())))(jnp.stack([X, X / 2])),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_composes_like_native_autodiff(name):
    _close(TRANSFORMS[name](sinmul), TRANSFORMS[name](reference))


@pytest.mark.parametrize("name", ["checkpoint", "checkpoint_nothing_saveable"])
def test_checkpoint_runs_the_vjp_formula_only_through_the_linear_primitive(name):
    """``jax.checkpoint`` differentiates by JVP + partial evaluation + transposition. With the JVP
    formula inline in ``VJPHiPrimitive.jvp`` (the direct mapping) reverse mode is then JAX's
    transpose of the JVP formula and the VJP formula never runs: the values are right, the
    contract is not. Routing the tangent through ``_LinearRuleOp`` (transpose = VJP formula)
    restores it."""
    _, direct = _counting(lambda: TRANSFORMS[name](sinmul_direct))
    assert direct["vjp"] == 0 and direct["jvp"] >= 1
    out, linear = _counting(lambda: TRANSFORMS[name](sinmul))
    assert linear["vjp"] >= 1 and linear["jvp"] == 0
    _close(out, TRANSFORMS[name](reference))


def test_unbatched_argument_gets_the_batch_summed():
    xs = jnp.stack([X, 2 * X, -X])
    g = jax.grad(lambda y: jax.vmap(sinmul, (0, None))(xs, y).sum())(Y)
    _close(g, jnp.sin(xs).sum(0))


def _hi_eqns(jaxpr):
    return [e for e in jaxpr.eqns if e.primitive.name == "call_hi_primitive"]


def test_residuals_are_what_the_op_saves():
    """Forward mode keeps the residuals ``save`` picked (x and y) and the tangent as the three
    inputs of the linear primitive; reverse mode keeps only x and y (the same array here)."""
    lin = jax.linearize(lambda x: sinmul(x, Y), X)[1]
    (eqn,) = _hi_eqns(jax.make_jaxpr(lin)(X))
    assert type(eqn.params["_prim"]).__name__ == "_LinearRuleOp" and len(eqn.invars) == 3
    fwd = jax.make_jaxpr(lambda x: jax.vjp(lambda x: sinmul(x, x), x)[1])(X)
    assert len(fwd.jaxpr.outvars) == 1 and fwd.jaxpr.outvars[0] is fwd.jaxpr.invars[0]


def test_zero_tangents_and_unused_outputs_reach_the_formulas_as_none():
    """hijax passes symbolic zeros (``hijax.Zero``) to ``jvp`` for inputs that are not
    differentiated and to the VJP for outputs whose cotangent is zero; the prototype hands them
    to the formulas as ``None`` (``define_op``'s ``none_for_zero_cotangents``)."""
    seen_t, seen_ct = [], []

    def jvp2(res, tx, ty):
        seen_t.append((tx is None, ty is None))
        return _jvp(res, tx, ty)

    def vjp2(x, ct):
        seen_ct.append(tuple(c is None for c in ct))
        return (jnp.cos(x) * ct[0] if ct[0] is not None else -jnp.sin(x) * ct[1],)

    f = hijax_op("test_zero_t", reference, jvp2, _vjp)
    _close(jax.jvp(lambda x: f(x, Y), (X,), (Y,))[1], jnp.cos(X) * Y * Y)
    assert seen_t == [(False, True)]
    two = hijax_op("test_two", lambda x: (jnp.sin(x), jnp.cos(x)), lambda x, t: (jnp.cos(x) * t, -jnp.sin(x) * t), vjp2)
    _close(jax.grad(lambda x: two(x)[1].sum())(X), -jnp.sin(X))
    assert seen_ct == [(True, False)]


# An op with its own vmap rule for the primal (functorch-style), as in tests/test_mechanism.py.
BATCH_RULE_CALLS = []


def _rows_batch(args, dims, *, vmap_axis_name):
    (x,), (d,) = args, dims
    BATCH_RULE_CALLS.append(d)
    x = jnp.moveaxis(x, d, 0)
    return _rows_primal(x.reshape((-1,) + x.shape[2:])).reshape(x.shape), 0


def _rows_primal(x):
    return x / jnp.sum(x * x, axis=-1, keepdims=True)


def _rows_jvp(x, t):
    s = jnp.sum(x * x, axis=-1, keepdims=True)
    return t / s - 2 * x * jnp.sum(x * t, axis=-1, keepdims=True) / s**2


def _rows_vjp(x, ct):
    return (_rows_jvp(x, ct),)  # the map is symmetric


rows = hijax_op("test_rows", _rows_primal, _rows_jvp, _rows_vjp, batch=_rows_batch)
M = jnp.array([[1.0, 2.0, -1.0], [0.5, -0.3, 2.0]])
MB = jnp.stack([M, 2 * M, -M])

BATCHED = {
    "vmap": lambda f: jax.vmap(f)(MB),
    "vmap_axis_2": lambda f: jax.vmap(f, in_axes=2, out_axes=2)(jnp.moveaxis(MB, 0, 2)),
    "vmap_of_grad": lambda f: jax.vmap(jax.grad(lambda m: jnp.sum(f(m) ** 2)))(MB),
    "grad_of_vmap": lambda f: jax.grad(lambda m: jnp.sum(jax.vmap(f)(m) ** 2))(MB),
    "vmap_of_jvp": lambda f: jax.vmap(lambda m: jax.jvp(f, (m,), (m + 1,)))(MB),
    "jit_vmap_hessian": lambda f: jax.jit(jax.vmap(jax.hessian(lambda m: jnp.sum(f(m) ** 3))))(MB),
    "nested_vmap": lambda f: jax.vmap(jax.vmap(f))(jnp.stack([MB, MB / 2])),
}


@pytest.mark.parametrize("name", sorted(BATCHED))
def test_custom_batching_rule_is_used_and_composes(name):
    BATCH_RULE_CALLS.clear()
    _close(BATCHED[name](rows), BATCHED[name](_rows_primal))
    assert BATCH_RULE_CALLS, "the op's vmap rule did not run"


def test_default_vmapof_fails_under_nested_vmap_when_an_application_is_unbatched():
    """hijax's default batching (``VJPHiPrimitive.batch`` -> ``VmapOf``) in jax 0.10.2 (same code in
    0.11.1): batchers run for unbatched arguments too, so the inner vmap wraps an unbatched
    application in a ``VmapOf`` with output axis ``None``, and the outer vmap's
    ``VmapOf.batch_dim_rule`` computes ``d + (None < d)``. (``jit(vmap(hessian(f)))`` hits it.)
    The prototype batches without ``VmapOf``."""

    class Sin(hijax.VJPHiPrimitive):
        def __init__(self, aval):
            self.in_avals, self.out_aval, self.params = (aval,), aval, {}
            super().__init__()

        def expand(self, x):
            return jnp.sin(x)

        def jvp(self, primals, tangents):
            return self(*primals), jnp.cos(primals[0]) * tangents[0]

        def batch_dim_rule(self, axis_data, dims):
            return dims[0]

    def sin(x):
        return Sin(jax.typeof(x))(x)

    _close(jax.vmap(sin)(MB), jnp.sin(MB))
    with pytest.raises(TypeError, match="'<' not supported between instances of 'NoneType' and 'int'"):
        jax.vmap(lambda m: jax.vmap(lambda x: sin(m) * x)(m))(MB)  # sin(m): unbatched inside


# An op with an integer output beside its float output, and a ``save`` reading needs_input_grad.
SAVE_MASKS = []


def _sort_save(out, x, *, needs_input_grad):
    SAVE_MASKS.append(needs_input_grad)
    return out[1]


def _sort_vjp(idx, ct):
    return (jnp.zeros_like(ct[0]).at[idx].set(ct[0]),)


sort_with_indices = hijax_op(
    "test_sort", lambda x: (jnp.sort(x), jnp.argsort(x)),
    lambda idx, t: (jnp.take_along_axis(t, idx, -1), None), _sort_vjp, _sort_save,
)


def test_integer_outputs_get_no_tangent():
    x = jnp.array([3.0, 1.0, 2.0])
    (values, idx), (dv, didx) = jax.jvp(sort_with_indices, (x,), (jnp.array([10.0, 20.0, 30.0]),))
    assert idx.tolist() == [1, 2, 0] and dv.tolist() == [20.0, 30.0, 10.0]
    assert didx.dtype == jax.dtypes.float0
    g = jax.grad(lambda x: jnp.sum(sort_with_indices(x)[0] * jnp.arange(3.0)))(x)
    assert g.tolist() == [2.0, 0.0, 1.0]
    assert SAVE_MASKS[-1] == (True,)


# shard_map: one-device mesh in this process; the manual axis still types y replicated and x
# varying, which is what hijax checks.
def _sharded(f, grad):
    mesh = jax.make_mesh((1,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
    body = (lambda x, y: jax.grad(lambda y: f(x, y).sum())(y)) if grad else f
    out_spec = PartitionSpec() if grad else PartitionSpec("i")
    run = jax.shard_map(body, mesh=mesh, in_specs=(PartitionSpec("i"), PartitionSpec()), out_specs=out_spec)
    return jax.jit(run)(X, Y)


@pytest.mark.parametrize("grad", [False, True])
def test_shard_map(grad):
    with formula_spy() as calls:
        _close(_sharded(sinmul, grad), _sharded(reference, grad))
    assert calls == ([("vjp", "test_sinmul")] if grad else [])


def test_shard_map_cotangent_type_is_checked(monkeypatch):
    """hijax checks a cotangent's type, varying manual axes included, against its input's: a VJP
    formula's cotangent for a replicated input must be ``psum``-ed over the axes it varies along
    (the prototype does it as ``mechanism._sum_over_varying_axes`` does); without it, grad fails."""
    monkeypatch.setattr(proto, "_psum_varying", lambda ct, aval: ct)
    op = hijax_op("test_sinmul_nopsum", reference, _jvp, _vjp)
    with pytest.raises(ValueError, match=r"Expected cotangent type float64\[3\] but got float64\[3\]\{V:i\}"):
        _sharded(op, grad=True)


# A real op: sinc with the library's formulas (jvp_rules.sinc_jvp, vjp_rules.sinc_vjp).
sinc = hijax_op("sinc", jnp.sinc, J.sinc_jvp, R.sinc_vjp)
S = jnp.array([-1.5, -0.2, 0.0, 0.4, 2.5])


def _sinc_derivative(x):
    """Hand-derived: (cos(pi x) - sinc(x)) / x, 0 at 0."""
    safe = jnp.where(x == 0, 1.0, x)
    return jnp.where(x == 0, 0.0, (jnp.cos(jnp.pi * safe) - jnp.sinc(safe)) / safe)


def test_sinc_runs_each_formula_and_matches_the_derivative():
    with formula_spy() as calls:
        t = jax.jvp(sinc, (S,), (jnp.ones_like(S),))[1]
    assert calls == [("jvp", "sinc")]
    with formula_spy() as calls:
        g = jax.grad(lambda x: sinc(x).sum())(S)
    assert calls == [("vjp", "sinc")]
    _close(t, _sinc_derivative(S))
    _close(g, _sinc_derivative(S))
    h = jax.jit(jax.vmap(jax.grad(jax.grad(sinc))))(S)
    eps = 1e-5
    fd = (_sinc_derivative(S + eps) - _sinc_derivative(S - eps)) / (2 * eps)
    np.testing.assert_allclose(h, fd, rtol=1e-6, atol=1e-8)
    _close(jax.jit(jax.vmap(sinc))(S[:, None]), jnp.sinc(S)[:, None])


# A NestedTensor-like HiType: int32 offsets inside the type, no tangent for them.
RG = Ragged(jnp.array([1.0, 2.0, 3.0, 4.0, 5.0]), jnp.array([0, 2, 5], jnp.int32))
W = jnp.array([2.0, -1.0])
SEG = jnp.array([0, 0, 1, 1, 1])


def _values(r):
    return ragged_parts(r)[0]


def test_hitype_offsets_are_int_and_carry_no_tangent():
    assert [a.dtype for a in jax.typeof(RG).lo_ty()] == [jnp.float64, jnp.int32]
    _close(jax.jit(lambda r, w: _values(ragged_scale(r, w)))(RG, W), RG.values * W[SEG])
    g = jax.grad(lambda r: _values(ragged_scale(r, W)).sum())(RG)
    assert [a.dtype for a in jax.typeof(g).lo_ty()] == [jnp.float64]  # values only
    _close(_values(g), W[SEG])


def test_hitype_op_formulas_under_transforms():
    loss = lambda v, w: jnp.sum(_values(ragged_scale(make_ragged(v, RG.offsets), w)) ** 2)  # noqa: E731
    want = (2 * RG.values * W[SEG] ** 2, jax.ops.segment_sum(2 * RG.values**2 * W[SEG], SEG, 2))
    with formula_spy() as calls:
        _close(jax.jit(jax.grad(loss, (0, 1)))(RG.values, W), want)
    assert calls == [("vjp", "ragged_scale")]
    with formula_spy() as calls:
        _close(jax.jvp(lambda w: _values(ragged_scale(RG, w)), (W,), (W,))[1], RG.values * W[SEG])
    assert calls == [("jvp", "ragged_scale")]
    _close(jax.grad(jax.checkpoint(lambda w: loss(RG.values, w)))(W), want[1])


def test_hitype_vmap_with_per_example_offsets():
    """vmap over Ragged values whose offsets differ per example (the batch is a leading axis of
    both parts: ``RaggedTy.dec_rank``/``inc_rank``, a ``batch`` rule on every Ragged primitive),
    and over the weight: ``vmap``, ``grad`` of ``vmap``, ``vmap`` of ``grad``, ``hessian``."""
    offsets2 = jnp.array([0, 1, 5], jnp.int32)
    seg2 = jnp.array([0, 1, 1, 1, 1])
    rb = Ragged(jnp.stack([RG.values, 2 * RG.values]), jnp.stack([RG.offsets, offsets2]))
    out = jax.jit(jax.vmap(lambda r: _values(ragged_scale(r, W))))(rb)
    _close(out, jnp.stack([RG.values * W[SEG], 2 * RG.values * W[seg2]]))
    loss = lambda r, w: jnp.sum(_values(ragged_scale(r, w)) ** 2)  # noqa: E731
    dloss_dw = lambda v, w, seg: jax.ops.segment_sum(2 * v**2 * w[seg], seg, 2)  # noqa: E731
    want = dloss_dw(RG.values, W, SEG) + dloss_dw(2 * RG.values, W, seg2)
    with formula_spy() as calls:
        _close(jax.jit(jax.grad(lambda r, w: jax.vmap(loss, (0, None))(r, w).sum(), 1))(rb, W), want)
    assert set(calls) == {("vjp", "ragged_scale")}
    ws = jnp.stack([W, 2 * W])
    _close(jax.jit(jax.vmap(jax.grad(loss, 1), (None, 0)))(RG, ws), jax.vmap(lambda w: dloss_dw(RG.values, w, SEG))(ws))
    h = jax.jit(jax.hessian(lambda r, w: jnp.sum(_values(ragged_scale(r, w)) ** 3), 1))(RG, W)
    _close(h, jnp.diag(6 * W * jax.ops.segment_sum(RG.values**3, SEG, 2)))


def test_hitype_constant_closed_over_by_jit_of_grad_fails():
    """jax 0.10.2: ``jit`` of a derivative of a function that closes over a concrete HiType value
    fails inside the hi-to-lo lowering (``partial_eval.lower_jaxpr`` reads ``.val`` of the
    constant); ``jit`` without AD, or the value passed as an argument, works. (0.11 rewrote
    ``lower_jaxpr``; not run here.)"""
    loss = lambda r, w: jnp.sum(_values(ragged_scale(r, w)))  # noqa: E731
    _close(jax.jit(lambda w: loss(RG, w))(W), jnp.sum(RG.values * W[SEG]))
    _close(jax.jit(jax.grad(loss, 1))(RG, W), jax.ops.segment_sum(RG.values, SEG, 2))
    with pytest.raises(AttributeError, match="object has no attribute 'val'"):
        jax.jit(jax.grad(lambda w: loss(RG, w)))(W)


def test_prototype_uses_only_public_jax_and_is_not_imported_by_the_package():
    root = pathlib.Path(__file__).resolve().parents[1] / "jaxrules"
    text = (root / "_hijax_prototype.py").read_text()
    assert not re.search(r"jax\.(_src|interpreters|extend)\b", text)
    others = [p for p in root.rglob("*.py") if p.name != "_hijax_prototype.py"]
    importers = [p.name for p in others if "_hijax_prototype" in p.read_text()]
    assert importers == []
