"""Bad input gets a clear error naming the op and the argument, before any tracing work."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrules.linalg as jrl
import jaxrules.numpy as rnp
import jaxrules.scipy.linalg as rsl
import jaxrules.scipy.special as rsp

X = np.ones((2, 3))


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: rnp.sum(X, axis=2), ValueError, ["sum", "axis=2"]),
        (lambda: rnp.var(X, axis=(0, 0)), ValueError, ["var", "repeats"]),
        (lambda: rnp.amax(X, axis=1.5), TypeError, ["amax", "axis"]),
        (lambda: rnp.cumsum(X, axis=(0, 1)), TypeError, ["cumsum", "axis"]),
        (lambda: rnp.logcumsumexp(X, axis=-3), ValueError, ["logcumsumexp", "axis"]),
        (lambda: rnp.linalg.vector_norm(X, ord="fro"), ValueError, ["vector_norm", "ord"]),
        (lambda: rnp.linalg.vector_norm(X, ord=float("nan")), ValueError, ["vector_norm", "ord"]),
        (lambda: rnp.linalg.norm(X, ord="bogus"), ValueError, ["norm", "ord"]),
        (lambda: rnp.linalg.norm(np.ones((2, 2, 2)), ord=2), ValueError, ["norm", "ord", "rank 3"]),
        (lambda: jrl.renorm(X, 0, 0, 1.0), ValueError, ["renorm", "p"]),
        (lambda: jrl.renorm(X, 2, 0, -1.0), ValueError, ["renorm", "maxnorm"]),
        (lambda: jrl.renorm(X, 2, 5, 1.0), ValueError, ["renorm", "dim"]),
        (lambda: rnp.arctan2(np.ones(3), np.ones(4)), ValueError, ["arctan2", "x1", "x2"]),
        (lambda: rnp.power(np.ones(3), np.ones((2, 2))), ValueError, ["power", "x1", "x2"]),
        (lambda: rnp.clip(np.ones(3), np.zeros(2), 1.0), ValueError, ["clip", "min"]),
        (lambda: jrl.cdist(np.ones((2, 3)), np.ones((2, 4))), ValueError, ["cdist", "x1", "x2"]),
        (lambda: jrl.cdist(np.ones(3), np.ones((2, 3))), ValueError, ["cdist", "rank"]),
        (lambda: jrl.dist(np.ones(3), np.ones(2)), ValueError, ["dist", "input", "other"]),
        (lambda: rsp.logit(X, eps=0.7), ValueError, ["logit", "eps"]),
        (lambda: rsp.multigammaln(X, 0), ValueError, ["multigammaln", "d"]),
        (lambda: rnp.abs("abc"), TypeError, ["abs", "'x'"]),
        (lambda: rnp.sum(None), TypeError, ["sum", "'a'"]),
        (lambda: rnp.mean([[1.0, 2.0], [3.0]]), TypeError, ["mean", "'a'"]),
        (lambda: rnp.sum(X, where=X), ValueError, ["sum", "where", "boolean"]),
        (lambda: rnp.max(X, where=X > 0), ValueError, ["amax", "where", "initial"]),
        (lambda: rnp.var(X, ddof=1, correction=1), ValueError, ["var", "ddof", "correction"]),
        (lambda: rnp.kthvalue(X, 1, axis=5), ValueError, ["kthvalue", "axis"]),
        (lambda: rnp.amax(np.ones((0, 2))), ValueError, ["amax", "zero-size"]),
        (lambda: rnp.amax(np.ones((3, 0)), axis=1), ValueError, ["amax", "zero-size", "axis=1"]),
        (lambda: rnp.logcumsumexp(X, (0, 1)), TypeError, ["logcumsumexp", "axis"]),
        # the one-axis transforms name their parameter, axis; the n-d ones, axes
        (lambda: rnp.fft.rfft(X, 7, 2), ValueError, ["rfft", "axis=2"]),
        (lambda: rnp.fft.ifft(X, None, -3), ValueError, ["ifft", "axis=-3"]),
        (lambda: rnp.fft.fftn(X, axes=(0, 5)), ValueError, ["fftn", "axes=5"]),
        # a 0-d right-hand side or tau: a ValueError naming the argument, not an IndexError
        (lambda: jrl.householder_product(np.ones((3, 2)), np.float64(0.5)), ValueError,
         ["householder_product", "tau", "rank >= 1"]),
        (lambda: jrl.ormqr(np.ones((3, 2)), np.float64(0.5), np.ones((3, 3))), ValueError, ["ormqr", "tau", "rank"]),
        (lambda: rsl.lu_solve((np.eye(3), np.arange(3)), np.float64(1.0)), ValueError, ["lu_solve", "b", "rank"]),
        (lambda: rsl.cho_solve((np.eye(3), True), np.float64(1.0)), ValueError, ["cho_solve", "b", "rank"]),
    ],
)
def test_bad_input_names_op_and_argument(call, error, words):
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_errors_come_before_tracing():
    """The check runs on static information, so it fires under jit too, with the same message."""
    with pytest.raises(ValueError, match="sum: axis=2"):
        jax.jit(lambda x: rnp.sum(x, axis=2))(X)


def test_gradient_with_respect_to_integers_is_refused():
    with pytest.raises(TypeError, match="grad requires real- or complex-valued inputs"):
        jax.grad(lambda x: rnp.sum(x))(jnp.arange(3))


def test_integer_input_follows_jax_numpy():
    """Integer arrays keep jax.numpy's result types (no derivative is involved)."""
    ints = jnp.arange(4)
    assert rnp.sum(ints).dtype == jnp.sum(ints).dtype
    assert rnp.cumprod(ints + 1).tolist() == [1, 2, 6, 24]
    assert rnp.mean(ints).dtype == jnp.mean(ints).dtype
    assert rnp.abs(-ints).tolist() == [0, 1, 2, 3]
