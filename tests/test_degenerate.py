"""Zero-size and degenerate inputs: values and both derivatives against jax.numpy
(and torch where it has the op), float64 on the CPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax import lax

import jaxrules.linalg as jrl
import jaxrules.nn as rnn
import jaxrules.numpy as rnp

RNG = np.random.default_rng(16)


def _like(tree):
    def draw(a):
        if np.iscomplexobj(a):
            return RNG.standard_normal(np.shape(a)) + 1j * RNG.standard_normal(np.shape(a))
        return RNG.standard_normal(np.shape(a))

    return jax.tree_util.tree_map(draw, tree)


def _close(actual, expected):
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-12, strict=True), actual, expected
    )


def _assert_matches(ours, reference, *args):
    """Value, JVP (random tangents) and VJP (random cotangents) of ``ours`` equal those of the
    ``reference``: a jax.numpy function, or ``_torch_reference(fn)``. Shapes, dtypes and numbers.
    The reference runs on the CPU device: on a GPU, jax 0.11.2's derivatives of
    ``jnp.linalg.norm(x, ord=1)`` are NaN (``test_platform_bugs.py``)."""
    call, jvp, vjp = reference if isinstance(reference, tuple) else (reference, jax.jvp, jax.vjp)
    tangents = _like(args)
    with jax.default_device(jax.devices("cpu")[0]):
        expected = call(*args)
        ct = _like(expected)
        expected_jvp = jvp(call, args, tangents)[1] if jvp is jax.jvp else jvp(args, tangents)[1]
        expected_vjp = (vjp(call, *args) if vjp is jax.vjp else vjp(*args))[1](ct)
    _close(ours(*args), expected)
    _close(jax.jvp(ours, args, tangents)[1], expected_jvp)
    _close(jax.vjp(ours, *args)[1](ct), expected_vjp)


def _torch_reference(fn):
    """``fn`` (torch) as a function of NumPy arrays with JAX's ``jvp``/``vjp`` calling convention,
    for ``_assert_matches``: values, torch.func.jvp and torch.func.vjp."""

    def call(*args):
        return _np(fn(*map(torch.tensor, args)))

    def jvp(args, tangents):
        out, tangent = torch.func.jvp(fn, tuple(map(torch.tensor, args)), tuple(map(torch.tensor, tangents)))
        return _np(out), _np(tangent)

    def vjp(*args):
        out, pullback = torch.func.vjp(fn, *map(torch.tensor, args))
        return _np(out), lambda ct: _np(pullback(jax.tree_util.tree_map(torch.tensor, ct)))

    return call, jvp, vjp


def _jvp_from_jacobian(fn):
    """jax.numpy's ``fn`` whose JVP is its reverse-mode Jacobian times the tangent (for refs whose
    own forward mode is NaN over an empty axis: the map from an empty space is 0)."""

    def jvp(args, tangents):
        jac = jax.jacrev(fn)(*args)
        return fn(*args), jnp.tensordot(jac, tangents[0], axes=np.ndim(args[0]))

    return fn, jvp, lambda *args: jax.vjp(fn, *args)


def _np(tree):
    return jax.tree_util.tree_map(lambda t: t.detach().numpy(), tuple(tree) if isinstance(tree, list) else tree)


EMPTY_ROWS = np.zeros((3, 0))


def _logsumexp_rows(x):
    return jax.scipy.special.logsumexp(x, axis=1)


CASES = {
    "softmax": (lambda x: rnn.softmax(x, axis=1), lambda x: jax.nn.softmax(x, axis=1), EMPTY_ROWS),
    "log_softmax": (lambda x: rnn.log_softmax(x, axis=1), lambda x: jax.nn.log_softmax(x, axis=1), EMPTY_ROWS),
    # JAX's and torch's forward mode give NaN here (the value is -inf); their reverse mode 0
    "logsumexp": (lambda x: rnn.logsumexp(x, axis=1), _jvp_from_jacobian(_logsumexp_rows), EMPTY_ROWS),
    "cumprod": (lambda x: rnp.cumprod(x, axis=1), lambda x: jnp.cumprod(x, axis=1), EMPTY_ROWS),
    "logcumsumexp": (lambda x: rnp.logcumsumexp(x, axis=1), lambda x: lax.cumlogsumexp(x, axis=1), EMPTY_ROWS),
    "max over a nonempty axis": (lambda x: rnp.max(x, axis=1), lambda x: jnp.max(x, axis=1), np.zeros((0, 3))),
    "eigh 0x0": (jrl.eigh, lambda a: tuple(jnp.linalg.eigh(a)), np.zeros((0, 0))),
    "svd (3, 0)": (
        lambda a: jrl.svd(a, full_matrices=False), lambda a: tuple(jnp.linalg.svd(a, full_matrices=False)),
        np.zeros((3, 0)),
    ),
    "det 0x0": (jrl.det, _torch_reference(torch.linalg.det), np.zeros((0, 0))),  # JAX's JVP raises
    "det of an empty batch": (jrl.det, jnp.linalg.det, np.zeros((0, 3, 3))),
    "group_norm of an empty batch": (
        lambda x: rnn.group_norm(x, 2), _torch_reference(lambda x: torch.nn.functional.group_norm(x, 2)),
        np.zeros((0, 4, 5)),
    ),
    "group_norm of empty groups": (
        lambda x: rnn.group_norm(x, 2), _torch_reference(lambda x: torch.nn.functional.group_norm(x, 2)),
        np.zeros((2, 4, 0)),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_zero_size_values_and_derivatives_match_jax_numpy(name):
    ours, reference, x = CASES[name]
    _assert_matches(lambda x: tuple(ours(x)) if isinstance(ours(x), tuple) else ours(x), reference, x)


@pytest.mark.parametrize("shape", [(3, 2), (3, 0)])
def test_householder_product_with_empty_tau_matches_torch(shape):
    # no reflectors: the first columns of the identity, whatever the input (the JVP formula's
    # tangent is None, zero, which the mechanism fills in)
    a, tau = RNG.standard_normal(shape), np.zeros(0)
    _assert_matches(jrl.householder_product, _torch_reference(torch.linalg.householder_product), a, tau)


@pytest.mark.parametrize(
    "x_shape, indices",
    [((1, 4), [[0, 3], [1, 1], [2, 0], [3, 3], [0, 0]]), ((5, 4), [[0, 3]]), ((2, 1, 3), [[[2], [0]]])],
    ids=["arr broadcast", "indices broadcast", "both"],
)
def test_take_along_axis_broadcasting_matches_jax_numpy(x_shape, indices):
    indices = np.array(indices)
    axis = indices.ndim - 1
    _assert_matches(lambda x: rnp.take_along_axis(x, indices, axis), lambda x: jnp.take_along_axis(x, indices, axis),
                    RNG.standard_normal(x_shape))


@pytest.mark.parametrize("ddof", [3, 4, 5])
def test_var_std_with_ddof_at_least_n_are_nan_as_jax_numpy(ddof):
    x = np.arange(3.0)
    for ours, reference in [(rnp.var, jnp.var), (rnp.std, jnp.std)]:
        np.testing.assert_array_equal(ours(x, ddof=ddof), reference(x, ddof=ddof))  # nan, never negative
        rows = np.ones((2, 3))
        np.testing.assert_array_equal(ours(rows, axis=1, ddof=ddof), reference(rows, axis=1, ddof=ddof))
    np.testing.assert_array_equal(rnp.var_mean(x, correction=ddof)[0], jnp.var(x, ddof=ddof))
    np.testing.assert_array_equal(rnp.std_mean(x, correction=ddof)[0], jnp.std(x, ddof=ddof))
    tx = torch.tensor(x, requires_grad=True)
    torch.std(tx, correction=ddof).backward()
    np.testing.assert_array_equal(jax.grad(lambda x: rnp.std(x, ddof=ddof))(x), tx.grad.numpy())  # NaN, as torch


@pytest.mark.parametrize(
    "rtol", [np.array(1e-3), np.array([1e-3, 0.5]), np.float32(0.5)], ids=["0-d", "per matrix", "np scalar"]
)
def test_pinv_and_lstsq_take_array_tolerances_as_jax_numpy(rtol):
    a = RNG.standard_normal((2, 4, 3))
    a[1, :, 2] = a[1, :, 0] * (1 + 1e-5)  # a small singular value, cut at rtol=1e-3
    tol = jnp.asarray(rtol)
    _assert_matches(lambda a: rnp.linalg.pinv(a, rtol=tol), lambda a: jnp.linalg.pinv(a, rtol=tol), a)
    traced = jax.jit(lambda a, r: rnp.linalg.pinv(a, rtol=r))(a, rtol)
    np.testing.assert_allclose(traced, jnp.linalg.pinv(a, rtol=rtol), atol=1e-12)
    assert jax.grad(lambda r: rnp.linalg.pinv(a, rtol=r).sum())(jnp.asarray(rtol, float)).shape == np.shape(rtol)
    if np.ndim(rtol) == 0:
        b = RNG.standard_normal(4)
        ours, expected = rnp.linalg.lstsq(a[0], b, rcond=jnp.asarray(rtol)), jnp.linalg.lstsq(a[0], b, rcond=rtol)
        np.testing.assert_allclose(ours[0], expected[0], atol=1e-12)
        assert ours[2] == expected[2]


@pytest.mark.parametrize(
    "rtol, error", [(np.array(-1.0), ValueError), (np.ones(3), ValueError), (np.array(1j), TypeError)]
)
def test_pinv_bad_tolerance_raises_naming_the_argument(rtol, error):
    with pytest.raises(error, match="pinv: rtol"):
        rnp.linalg.pinv(np.ones((2, 4, 3)), rtol=rtol)


def test_complex_logcumsumexp_matches_jax_numpy_and_torch():
    x = 3 * (RNG.standard_normal((5, 3)) + 1j * RNG.standard_normal((5, 3)))
    ours = lambda x: rnp.logcumsumexp(x, 0)  # noqa: E731
    principal = lambda x: jnp.log(jnp.cumsum(jnp.exp(x), 0))  # noqa: E731 - another branch, the same derivatives
    t = _like(x)
    _close(jax.jvp(ours, (x,), (t,))[1], jax.jvp(principal, (x,), (t,))[1])
    _close(jax.vjp(ours, x)[1](t), jax.vjp(principal, x)[1](t))
    np.testing.assert_allclose(np.exp(ours(x)), np.exp(principal(x)), rtol=1e-12)
    ct = RNG.standard_normal(x.shape) + 1j * RNG.standard_normal(x.shape)
    tx = torch.tensor(x, requires_grad=True)
    y = torch.logcumsumexp(tx, 0)
    (grad,) = torch.autograd.grad(y, tx, torch.tensor(ct))
    np.testing.assert_allclose(ours(x), y.detach().numpy(), rtol=1e-12)  # torch's branch
    np.testing.assert_allclose(jax.vjp(ours, x)[1](np.conj(ct))[0], np.conj(grad.resolve_conj().numpy()), atol=1e-12)


MASK = np.array([[True, False, True, True], [False, False, False, False], [True, True, False, True]])
MASK_2 = np.array([[True, False, True, True], [True, True, False, True], [True, True, True, False]])  # >= 2 per column
WEIGHTS = np.array([1.0, 0.5, 2.0, 0.25])
MASKED_REDUCTIONS = {
    "sum where": (lambda x: rnp.sum(x, axis=1, where=MASK), lambda x: jnp.sum(x, axis=1, where=MASK)),
    "sum where initial": (lambda x: rnp.sum(x, where=MASK[0], initial=2.5),
                          lambda x: jnp.sum(x, where=MASK[0], initial=2.5)),
    "nansum where": (lambda x: rnp.nansum(x, axis=0, where=MASK, initial=1.0),
                     lambda x: jnp.nansum(x, axis=0, where=MASK, initial=1.0)),
    "prod where initial": (lambda x: rnp.prod(x, axis=1, where=MASK, initial=3.0, keepdims=True),
                           lambda x: jnp.prod(x, axis=1, where=MASK, initial=3.0, keepdims=True)),
    "mean where": (lambda x: rnp.mean(x, axis=0, where=MASK), lambda x: jnp.mean(x, axis=0, where=MASK)),
    "max where initial": (lambda x: rnp.max(x, axis=1, where=MASK, initial=-1.0),
                          lambda x: jnp.max(x, axis=1, where=MASK, initial=-1.0)),
    "var where": (lambda x: rnp.var(x, axis=1, where=MASK), lambda x: jnp.var(x, axis=1, where=MASK)),
    "std where ddof": (lambda x: rnp.std(x, axis=0, where=MASK_2, ddof=1),
                       lambda x: jnp.std(x, axis=0, where=MASK_2, ddof=1)),
    "var with a given mean": (lambda x: rnp.var(x, axis=1, mean=jnp.mean(x, axis=1, keepdims=True) + 0.1),
                              lambda x: jnp.var(x, axis=1, mean=jnp.mean(x, axis=1, keepdims=True) + 0.1)),
    "logsumexp b": (lambda x: rnn.logsumexp(x, axis=1, b=WEIGHTS),
                    lambda x: jax.scipy.special.logsumexp(x, axis=1, b=WEIGHTS)),
    "logsumexp b return_sign": (lambda x: rnn.logsumexp(x, axis=0, b=-WEIGHTS[:3, None] * x, return_sign=True),
                                lambda x: jax.scipy.special.logsumexp(x, axis=0, b=-WEIGHTS[:3, None] * x,
                                                                      return_sign=True)),
    "logsumexp where": (lambda x: rnn.logsumexp(x, axis=1, where=MASK_2),
                        lambda x: jax.scipy.special.logsumexp(x, axis=1, where=MASK_2)),
    "norm of a rank-3 array without axis": (lambda x: rnp.linalg.norm(x.reshape(3, 2, 2)),
                                            lambda x: jnp.linalg.norm(x.reshape(3, 2, 2))),
    "norm of a 0-d array": (lambda x: rnp.linalg.norm(x[1, 2]), lambda x: jnp.linalg.norm(x[1, 2])),
    "norm with ord of a matrix": (lambda x: rnp.linalg.norm(x, ord=1), lambda x: jnp.linalg.norm(x, ord=1)),
    "min initial": (lambda x: rnp.min(x, axis=0, initial=0.25), lambda x: jnp.min(x, axis=0, initial=0.25)),
    # JAX's forward mode gives NaN here (a constant's derivative is 0: its reverse mode)
    "amax initial over an empty axis": (lambda x: rnp.amax(x[:, :0], axis=1, initial=-2.0),
                                        _jvp_from_jacobian(lambda x: jnp.max(x[:, :0], axis=1, initial=-2.0))),
}


@pytest.mark.parametrize("name", list(MASKED_REDUCTIONS))
def test_where_and_initial_of_reductions_match_jax_numpy(name):
    """jax.numpy's ``where=``/``initial=``: values, JVP and VJP (distinct
    entries: no ties between the mask's survivors and ``initial``)."""
    ours, reference = MASKED_REDUCTIONS[name]
    x = np.arange(12.0).reshape(3, 4) * 0.37 - 1.3 + 0.01 * np.arange(12.0).reshape(3, 4) ** 2
    _assert_matches(ours, reference, x)


def test_max_where_without_initial_raises_naming_the_op():
    with pytest.raises(ValueError, match="amax: where needs initial"):
        rnp.max(np.ones((2, 3)), axis=1, where=MASK[:2, :3])
    with pytest.raises(ValueError, match="sum: where of shape"):
        rnp.sum(np.ones((2, 3)), where=np.ones((4,), bool))


@pytest.mark.parametrize("op", ["var_mean", "std_mean"])
def test_var_mean_and_std_mean_correction_none_is_torchs_one(op):
    """torch.var_mean(x, correction=None) is Bessel's (correction 1), as its default."""
    x = RNG.standard_normal((3, 5))
    ours = getattr(rnp, op)(x, axis=1, correction=None)
    expected = getattr(torch, op)(torch.tensor(x), dim=1, correction=None)
    _close(tuple(ours), tuple(t.numpy() for t in expected))


@pytest.mark.parametrize("axis", [0, -1])
def test_a_0d_array_takes_axis_0_and_minus_1_as_torch(axis):
    """torch reduces a 0-d tensor over dim 0 or -1 (jax.numpy refuses both); jaxrules accepted 0
    and refused -1. Values and gradients as torch's; axis 1 and -2 stay errors."""
    x = jnp.asarray(2.5)
    for ours, theirs in ((lambda a: rnp.sum(a, axis=axis), lambda t: t.sum(axis)),
                         (lambda a: rnp.mean(a, axis=axis), lambda t: t.mean(axis)),
                         (lambda a: rnn.softmax(a, axis=axis), lambda t: torch.softmax(t, axis))):
        t = torch.tensor(2.5, dtype=torch.float64, requires_grad=True)
        out = theirs(t)
        out.backward()
        np.testing.assert_allclose(ours(x), out.detach().numpy())
        np.testing.assert_allclose(jax.grad(ours)(x), t.grad.numpy())
    for bad in (1, -2):
        with pytest.raises(ValueError, match="sum: axis=.* out of range"):
            rnp.sum(x, axis=bad)
