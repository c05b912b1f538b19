"""Run-time checks (``jaxrules.checking``): eagerly the library's ValueError; under ``jit`` a
JaxRuntimeError ending with the message and nothing on stderr; ``jaxrules.checked`` turns both
into the library's ValueError."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrules
from jaxrules.checking import RuntimeCheckError, runtime_check

MESSAGE = "someop: x must not be positive"


def _guarded(x):
    runtime_check(x > 0, MESSAGE)
    return 2 * x


def test_eagerly_the_check_raises_the_library_error():
    with pytest.raises(RuntimeCheckError, match=MESSAGE) as info:
        jax.block_until_ready(_guarded(jnp.float32(1)))
    assert isinstance(info.value, ValueError)
    assert float(_guarded(jnp.float32(-1))) == -2  # a passing check changes nothing


def test_under_jit_the_message_ends_the_runtime_error_and_stderr_stays_quiet(caplog):
    """JAX logs a failed callback's traceback (on stderr without pytest); not for ours."""
    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        jax.block_until_ready(jax.jit(_guarded)(jnp.float32(1)))
    assert str(info.value).rstrip().endswith(MESSAGE)
    assert jaxrules.checking.library_message(info.value) == MESSAGE
    assert not [r for r in caplog.records if "callback failed" in r.getMessage()]


def test_checked_raises_the_library_value_error_from_inside_jit():
    fn = jaxrules.checked(jax.jit(_guarded))
    with pytest.raises(ValueError) as info:
        fn(jnp.float32(1))
    assert str(info.value) == MESSAGE
    assert not isinstance(info.value, jax.errors.JaxRuntimeError)
    np.testing.assert_array_equal(fn(jnp.float32(-3)), -6)


def test_checked_leaves_other_runtime_errors_alone():
    def fails(x):
        jax.debug.callback(lambda v: (_ for _ in ()).throw(KeyError("not ours")), x)
        return x

    with pytest.raises(jax.errors.JaxRuntimeError, match="not ours"):
        jaxrules.checked(jax.jit(fails))(jnp.float32(0))


def test_a_phase_dependent_complex_eigh_loss_under_jit():
    """The gauge check of complex eigenvectors (torch's), from a user's jit."""
    a = jnp.array([[2.0, 1j], [-1j, 3.0]], jnp.complex64)

    def loss(a):
        return jnp.imag(jaxrules.numpy.linalg.eigh(a)[1][0, 0])  # depends on the phase

    with pytest.raises(ValueError, match="^eigh: the eigenvectors"):
        jaxrules.checked(jax.jit(jax.grad(loss)))(a)


_TARGET = jnp.array([1, 0, 2])


@pytest.mark.parametrize("call", [
    lambda x: jaxrules.nn.relu6(x),
    lambda x: jaxrules.nn.hardtanh(x, -0.5, 0.5),
    lambda x: jaxrules.nn.dropout(x, 0.1, key=jax.random.key(0)),
    lambda x: jaxrules.nn.cross_entropy(x, _TARGET),
    lambda x: jaxrules.nn.cross_entropy(x, _TARGET, label_smoothing=np.float32(0.1)),
    lambda x: jaxrules.nn.elu(x, 0.5),
    lambda x: jaxrules.nn.softplus(x, beta=2.0),
    lambda x: jaxrules.nn.huber_loss(x, x * 2, delta=0.5),
    lambda x: jaxrules.nn.layer_norm(x, 3, eps=np.float64(1e-3)),
])
def test_hyperparameters_given_as_numbers_add_no_runtime_check_under_jit(call):
    """A check on a hyperparameter the caller gave as a number runs on the host at trace time;
    only a traced one becomes a host callback (which would run in every call and stop
    ``jax.export``)."""
    x = jnp.arange(9.0).reshape(3, 3) / 7
    assert "callback" not in str(jax.make_jaxpr(call)(x))


def test_a_traced_hyperparameter_is_checked_at_run_time():
    jaxpr = jax.make_jaxpr(lambda x, lo: jaxrules.nn.hardtanh(x, lo, 1.0))(jnp.ones(3), -1.0)
    assert "callback" in str(jaxpr)
