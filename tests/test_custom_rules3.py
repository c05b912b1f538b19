"""The mechanism's composition tests (``test_mechanism.py``, ``test_function.py``) again with JAX's
next custom-rule machinery on: the flags ``jax_custom_jvp3`` and ``jax_custom_vjp3`` (``custom_jvp``
and ``custom_vjp`` re-implemented on hijax primitives), those of the two that this JAX has (jax 0.10.2
has only ``jax_custom_vjp3``, which jaxrules' ops do not go through: there this module re-runs the
tests on the usual path; jax 0.11 and later have both). The whole suite runs in that mode with JAX's
own environment variables: ``JAX_CUSTOM_JVP3=1 JAX_CUSTOM_VJP3=1 python -m pytest tests``
(``docs/compatibility.md``)."""

import jax
import pytest
import test_function
import test_mechanism

FLAGS = tuple(f for f in ("jax_custom_jvp3", "jax_custom_vjp3") if f in jax.config.values)

pytestmark = pytest.mark.skipif(not FLAGS, reason="this JAX has neither jax_custom_jvp3 nor jax_custom_vjp3")


@pytest.fixture(autouse=True)
def _next_custom_rules():
    before = {f: jax.config.values[f] for f in FLAGS}
    for f in FLAGS:
        jax.config.update(f, True)
    try:
        yield
    finally:
        for f, v in before.items():
            jax.config.update(f, v)


def test_the_flags_are_on_in_this_module():
    assert FLAGS and all(jax.config.values[f] for f in FLAGS)


def test_custom_jvp_takes_the_hijax_path_where_jax_has_it():
    """Under ``jax_custom_jvp3`` a ``custom_jvp`` function is staged as a hijax primitive
    (``CustomJVPTraced``), not ``custom_jvp_call``: the tests below then run the new path. Fails
    when JAX renames the primitive or drops the flag's effect (then see what the mode tests)."""
    if "jax_custom_jvp3" not in FLAGS:
        pytest.skip("no jax_custom_jvp3 in this JAX")
    x = jax.numpy.ones(3)
    names = {e.primitive.name for e in jax.make_jaxpr(test_mechanism.sinmul)(x, x).jaxpr.eqns}
    assert "custom_jvp_call" not in names and names, names


_MODULES = (test_mechanism, test_function)
for _module in _MODULES:
    for _name in dir(_module):
        if _name.startswith("test_") and callable(getattr(_module, _name)):
            globals()[_name] = getattr(_module, _name)  # collected here too, with the fixture above
