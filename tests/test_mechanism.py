"""The rule mechanism (docs/design.md §2): which formula each transform runs, and composition with
jit, vmap, hessian, checkpoint, scan."""

import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxrules import define_op, formula_spy

# A toy op f(x, y) = sin(x) * y whose formulas count their calls. Its true derivative is known,
# so every transform below is compared with JAX's own autodiff of the same math.
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


sinmul = define_op("test_sinmul", lambda x, y: jnp.sin(x) * y, _jvp, _vjp)
reference = lambda x, y: jnp.sin(x) * y  # noqa: E731

X = jnp.array([0.3, -1.2, 2.0])
Y = jnp.array([1.5, 0.7, -0.4])


def _close(a, b):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(u, v, rtol=1e-12, atol=1e-12)


def _counting(fn):
    jax.clear_caches()  # the formulas run when traced: an eager call compiles them, then reuses that
    CALLS.update(jvp=0, vjp=0)
    out = fn()
    return out, dict(CALLS)


@pytest.mark.parametrize("transform", ["jvp", "jacfwd", "linearize"])
def test_forward_mode_runs_the_jvp_formula(transform):
    run = {
        "jvp": lambda f: jax.jvp(f, (X, Y), (Y, X))[1],
        "jacfwd": lambda f: jax.jacfwd(f, (0, 1))(X, Y),
        "linearize": lambda f: jax.linearize(f, X, Y)[1](Y, X),
    }[transform]
    out, calls = _counting(lambda: run(sinmul))
    assert calls["jvp"] >= 1 and calls["vjp"] == 0
    _close(out, run(reference))


@pytest.mark.parametrize("transform", ["grad", "vjp", "jacrev"])
def test_reverse_mode_runs_the_vjp_formula(transform):
    run = {
        "grad": lambda f: jax.grad(lambda x, y: f(x, y).sum(), (0, 1))(X, Y),
        "vjp": lambda f: jax.vjp(f, X, Y)[1](Y),
        "jacrev": lambda f: jax.jacrev(f, (0, 1))(X, Y),
    }[transform]
    out, calls = _counting(lambda: run(sinmul))
    assert calls["vjp"] >= 1 and calls["jvp"] == 0
    _close(out, run(reference))


def _compilations(fn) -> int:
    """How many programs XLA compiles while ``fn`` runs (JAX's compile event)."""
    events = []

    def listen(event, duration, **_):
        events.append(event) if event == "/jax/core/compile/backend_compile_duration" else None

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        jax.block_until_ready(fn())
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    return len(events)


def _five_primitives_slope(x):  # d/dx (exp(2 sin x + cos x) - 1)
    return jnp.exp(jnp.sin(x) * 2.0 + jnp.cos(x)) * (2.0 * jnp.cos(x) - jnp.sin(x))


_FIVE_PRIMITIVES = define_op("test_five_primitives", lambda x: jnp.exp(jnp.sin(x) * 2.0 + jnp.cos(x)) - 1.0,
                             lambda x, t: _five_primitives_slope(x) * t,
                             lambda x, ct: (_five_primitives_slope(x) * ct,))


@pytest.mark.parametrize("transform", ["value", "jvp", "vjp"])
def test_an_eager_call_compiles_the_primal_and_the_formula_once(transform):
    """Eagerly (no ``jit``), an op's primal and its formula each run as one compiled program per shape,
    as ``jax.numpy``'s functions do, not one program per primitive they call; a second call with new
    values of the same shapes compiles nothing. (Under an eager ``vmap`` they still run primitive by
    primitive: the arrays are tracers there.)"""
    run = {
        "value": lambda x: _FIVE_PRIMITIVES(x),
        "jvp": lambda x: jax.jvp(_FIVE_PRIMITIVES, (x,), (x,)),
        "vjp": lambda x: jax.vjp(_FIVE_PRIMITIVES, x)[1](x),
    }[transform]
    jax.clear_caches()
    x, y = jnp.array([[0.5, -1.0, 2.0, 0.25, 3.0, -0.75, 1.5], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]])
    first = _compilations(lambda: run(x))
    assert 1 <= first <= 3, first  # op-by-op, the primal alone compiled 5 programs
    assert _compilations(lambda: run(y)) == 0
    value = jnp.exp(jnp.sin(y) * 2.0 + jnp.cos(y)) - 1.0
    tangent = _five_primitives_slope(y) * y
    expected = {"value": value, "jvp": (value, tangent), "vjp": (tangent,)}[transform]
    _close(run(y), expected)  # the compiled eager path computes the formulas' values


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


def test_unbatched_argument_gets_the_batch_summed():
    """grad of vmap with y unbatched: y's cotangent is summed over the batch (reductify)."""
    xs = jnp.stack([X, 2 * X, -X])
    g = jax.grad(lambda y: jax.vmap(sinmul, (0, None))(xs, y).sum())(Y)
    _close(g, jnp.sin(xs).sum(0))


def test_jit_of_vmap_over_a_numpy_argument():
    """vmap of an op over a NumPy array inside jit (JAX's own custom_jvp refuses it without the
    hijax flag: "non-canonical constant"), nested vmaps too, and its gradient."""
    xs, ys = np.stack([np.asarray(X), 2 * np.asarray(X)]), np.stack([np.asarray(Y), -np.asarray(Y)])
    expected = np.sin(xs) * ys
    _close(jax.jit(lambda x: jax.vmap(sinmul)(x, ys))(jnp.asarray(xs)), expected)
    _close(jax.jit(lambda: jax.vmap(sinmul)(xs, ys))(), expected)
    _close(jax.jit(lambda: jax.vmap(jax.vmap(sinmul))(xs[:, None], ys[:, None]))(), expected[:, None])
    grad = jax.grad(lambda x: jax.jit(lambda x: jax.vmap(sinmul)(x, ys))(x).sum())(jnp.asarray(xs))
    _close(grad, np.cos(xs) * ys)


def test_jaxs_own_custom_jvp_still_refuses_a_numpy_argument_under_jit_of_vmap():
    """What ``mechanism._batched_over_a_jax_array`` works around: once this fails (JAX accepts
    the call), the workaround can go. Under ``jax_custom_jvp3`` JAX accepts it."""
    from jaxrules.mechanism import custom_jvp3_enabled

    f = jax.custom_jvp(lambda x, y: x * y)
    f.defjvp(lambda p, t: (f(*p), t[0] * p[1] + t[1] * p[0]))
    call = lambda: jax.jit(lambda x: jax.vmap(f)(x, np.ones((2, 3))))(jnp.ones((2, 3)))  # noqa: E731
    if custom_jvp3_enabled():
        np.testing.assert_array_equal(call(), np.ones((2, 3)))
    else:
        with pytest.raises(AssertionError, match="non-canonical constant"):
            call()


def test_residuals_are_what_the_op_saves():
    """Reverse mode keeps exactly the residuals ``save`` picked (here x and y), nothing else."""
    saved = jax.linearize(lambda x: sinmul(x, Y), X)[1]
    jaxpr = jax.make_jaxpr(saved)(X)
    (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "jaxrules_rule"]
    assert len(eqn.invars) == 3  # two residuals (x, y) and one tangent


def test_only_the_mechanism_imports_jax_internals():
    root = pathlib.Path(__file__).resolve().parents[1] / "jaxrules"
    internal = re.compile(r"(^\s*(from|import)\s+jax\.(_src|interpreters|extend)\b)|jax\.(_src|extend)\.", re.M)
    offenders = [p.name for p in root.rglob("*.py") if internal.search(p.read_text()) and p.name != "mechanism.py"]
    assert offenders == []


# An op with its own vmap rule for the primal (functorch-style): the batch is folded into the
# leading axis, so the batched primal is one call of the unbatched one.
BATCH_RULE_CALLS = []


def _rows_batch(args, dims, *, vmap_axis_name):
    (x,), (d,) = args, dims
    BATCH_RULE_CALLS.append(d)
    x = jnp.moveaxis(x, d, 0)
    folded = x.reshape((-1,) + x.shape[2:])  # (B * rows, cols): one call of the primal
    return _rows_primal(folded).reshape(x.shape), 0


def _rows_primal(x):
    return x / jnp.sum(x * x, axis=-1, keepdims=True)


def _rows_jvp(x, t):
    s = jnp.sum(x * x, axis=-1, keepdims=True)
    return t / s - 2 * x * jnp.sum(x * t, axis=-1, keepdims=True) / s**2


def _rows_vjp(x, ct):
    s = jnp.sum(x * x, axis=-1, keepdims=True)
    return (ct / s - 2 * x * jnp.sum(x * ct, axis=-1, keepdims=True) / s**2,)


rows = define_op("test_rows", _rows_primal, _rows_jvp, _rows_vjp, batch=_rows_batch)
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
    # The rule runs while JAX traces; under ``jax_custom_jvp3`` JAX keeps the batched trace of the
    # primal between calls, so an earlier test's trace would hide this one's.
    jax.clear_caches()
    BATCH_RULE_CALLS.clear()
    _close(BATCHED[name](rows), BATCHED[name](_rows_primal))
    assert BATCH_RULE_CALLS, "the op's vmap rule did not run"


# An op with an integer output (indices) beside its float output, and a ``save`` that reads
# ``needs_input_grad``.
SAVE_MASKS = []


def _sort_save(out, x, *, needs_input_grad):
    SAVE_MASKS.append(needs_input_grad)
    return out[1]


def _sort_jvp(idx, t):
    return jnp.take_along_axis(t, idx, -1), None


def _sort_vjp(idx, ct):
    values_ct, _ = ct
    return (jnp.zeros_like(values_ct).at[..., idx].set(values_ct) if idx.ndim == 1 else None,)


sort_with_indices = define_op(
    "test_sort", lambda x: (jnp.sort(x), jnp.argsort(x)), _sort_jvp, _sort_vjp, _sort_save
)


def test_integer_outputs_get_no_tangent():
    x = jnp.array([3.0, 1.0, 2.0])
    (values, idx), (dv, didx) = jax.jvp(sort_with_indices, (x,), (jnp.array([10.0, 20.0, 30.0]),))
    assert idx.tolist() == [1, 2, 0] and dv.tolist() == [20.0, 30.0, 10.0]
    assert didx.dtype == jax.dtypes.float0
    g = jax.grad(lambda x: jnp.sum(sort_with_indices(x)[0] * jnp.arange(3.0)))(x)
    assert g.tolist() == [2.0, 0.0, 1.0]
    assert SAVE_MASKS[-1] == (True,)
