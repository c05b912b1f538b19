"""Run-time checks (``jaxrules.checking``): eagerly the library's ValueError; under ``jit`` a
JaxRuntimeError whose first line is the library's message (XLA's text after it) and nothing on
stderr; ``jaxrules.checked`` turns both into the library's ValueError."""

import re

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


def test_under_jit_the_message_is_the_first_line_and_stderr_stays_quiet(caplog):
    """JAX logs a failed callback's traceback (on stderr without pytest); not for ours. The
    error's text starts with the library's message; XLA's text, which ends with it, follows."""
    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        jax.block_until_ready(jax.jit(_guarded)(jnp.float32(1)))
    lines = str(info.value).splitlines()
    assert lines[0] == MESSAGE
    assert lines[1] == ""
    assert lines[2].startswith("INTERNAL: ")
    assert re.fullmatch(rf"RuntimeCheckError: {re.escape(MESSAGE)}( \[executable_name='\w+'\])?", lines[-1])
    assert info.value.args[0] == str(info.value).split("\n\n", 1)[1]  # XLA's text, unchanged
    assert "Traceback" in info.value.args[0]
    assert jaxrules.checking.library_message(info.value) == MESSAGE
    assert not [r for r in caplog.records if "callback failed" in r.getMessage()]


def test_a_second_call_of_the_compiled_program_also_puts_the_message_first():
    """The first call runs through JAX's Python dispatch, later ones through its C++ fast path:
    the error's text does not depend on which raised it."""
    fn = jax.jit(_guarded)
    fn(jnp.float32(-1)).block_until_ready()
    for _ in range(2):
        with pytest.raises(jax.errors.JaxRuntimeError) as info:
            jax.block_until_ready(fn(jnp.float32(1)))
        assert str(info.value).splitlines()[0] == MESSAGE


@pytest.mark.parametrize("text", [
    # a callback error as a GPU reports it: another prefix, a line after the message
    f"INTERNAL: Generated function failed: CpuCallback error: Traceback (most recent call last):\n"
    f"  File \"checking.py\", line 1, in _raise_if\nRuntimeCheckError: {MESSAGE}\n",
    f"INTERNAL: CustomCall failed: RuntimeCheckError: {MESSAGE}\n; current profiling annotation: x",
    # jax 0.12's CUDA runtime names the executable on the message's line
    f"INTERNAL: CpuCallback error: RuntimeCheckError: {MESSAGE} [executable_name='jit__guarded']",
])
def test_the_message_is_first_whatever_text_surrounds_it(text):
    error = jax.errors.JaxRuntimeError(text)
    assert str(error).splitlines()[0] == MESSAGE
    assert str(error).endswith(text)
    assert jaxrules.checking.library_message(error) == MESSAGE


def test_other_runtime_errors_print_as_before():
    text = "INTERNAL: something else\nKeyError: 'not ours'"
    assert str(jax.errors.JaxRuntimeError(text)) == text


_TRACED_CHECKS = {
    "hardtanh": (lambda x, v: jaxrules.nn.hardtanh(x, v, 0.5), 1.0, "hardtanh: min_val must not exceed max_val"),
    "cross_entropy": (lambda x, v: jaxrules.nn.cross_entropy(x, jnp.array([1, 0, 2]), label_smoothing=v), 1.5,
                      "cross_entropy: label_smoothing must be in [0, 1]"),
    "huber_loss": (lambda x, v: jaxrules.nn.huber_loss(x, 2 * x, delta=v), -1.0, "huber_loss: delta must be positive"),
    "dropout": (lambda x, v: jaxrules.nn.dropout(x, v, key=jax.random.key(0)), 1.5, "dropout: p must be a probability"),
}


@pytest.mark.parametrize("name", sorted(_TRACED_CHECKS))
def test_a_plain_jit_check_of_an_op_names_the_op_and_the_argument_first(name):
    """A traced hyperparameter out of range under a plain ``jax.jit`` (no ``checked``): the
    first line the user sees is the library's message."""
    fn, bad, message = _TRACED_CHECKS[name]
    x = jnp.arange(9.0).reshape(3, 3) / 7
    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        jax.block_until_ready(jax.jit(fn)(x, bad))
    assert str(info.value).splitlines()[0].startswith(message)


def test_under_grad_and_jit_the_gauge_check_names_the_op_first():
    a = jnp.array([[2.0, 1j], [-1j, 3.0]], jnp.complex64)

    def loss(a):
        return jnp.imag(jaxrules.numpy.linalg.eigh(a)[1][0, 0])  # depends on the phase

    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        jax.block_until_ready(jax.jit(jax.grad(loss))(a))
    assert str(info.value).splitlines()[0].startswith("eigh: the eigenvectors")


def test_an_out_of_range_nll_loss_target_raises_inside_checked_only():
    """The index checks are ``checked_only``: under a plain ``jit`` no callback runs (the loss is
    NaN); inside ``checked`` the library's ValueError names the op and the argument."""
    x = jnp.log(jnp.full((2, 3), 1 / 3))
    target = jnp.array([0, 5])
    loss = jax.jit(jaxrules.nn.nll_loss)
    assert np.isnan(loss(x, target))
    with pytest.raises(ValueError, match=r"^nll_loss: target must lie in \[0, 3\)"):
        jaxrules.checked(loss)(x, target)


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

    with pytest.raises(jax.errors.JaxRuntimeError, match="not ours") as info:
        jaxrules.checked(jax.jit(fails))(jnp.float32(0))
    assert str(info.value).startswith("INTERNAL: ")


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
