"""The mechanism's composition tests (``test_mechanism.py``, ``test_function.py``) again with JAX's
next custom-rule machinery on: the flags ``jax_custom_jvp3`` and ``jax_custom_vjp3`` (``custom_jvp``
and ``custom_vjp`` re-implemented on hijax primitives), those of the two that this JAX has (jax 0.10.2
has only ``jax_custom_vjp3``, which jaxrules' ops do not go through: there this module re-runs the
tests on the usual path; jax 0.11 and later have both). The whole suite runs in that mode with JAX's
own environment variables: ``JAX_CUSTOM_JVP3=1 JAX_CUSTOM_VJP3=1 python -m pytest tests``
(``docs/compatibility.md``)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import test_function
import test_mechanism

import jaxrules.numpy as rnp

FLAGS = tuple(f for f in ("jax_custom_jvp3", "jax_custom_vjp3") if f in jax.config.values)

pytestmark = pytest.mark.skipif(not FLAGS, reason="this JAX has neither jax_custom_jvp3 nor jax_custom_vjp3")


@pytest.fixture(autouse=True)
def _next_custom_rules(request):
    if jax.__version__.startswith("0.11.") and request.node.name.startswith(
            "test_an_eager_call_compiles_the_primal_and_the_formula_once[vjp]"):
        request.applymarker(pytest.mark.xfail(
            strict=True, reason="jax 0.11's hijax custom_vjp compiles an eager VJP in more programs (4 on the "
                                "H200, jax 0.11.2): docs/compatibility.md, known failures with the flags on 0.11"))
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


def test_logcumsumexp_fails_exactly_where_jaxs_own_custom_jvp_of_it_fails():
    """jax 0.11's hijax ``custom_jvp`` (the flag) stages ``lax.cumlogsumexp``'s CPU lowering, a
    ``reduce_window``, as a high primitive it cannot lower ("Primitive 'reduce_window' has
    is_high=True but no to_lojax lowering rule"), for any ``custom_jvp`` around it, JAX's own
    included; jax 0.12 lowers it. ``jaxrules.numpy.logcumsumexp`` (a rule around the same
    primitive) then fails the same way: JAX's behaviour, not the library's
    (``docs/compatibility.md``)."""
    if "jax_custom_jvp3" not in FLAGS:
        pytest.skip("no jax_custom_jvp3 in this JAX")
    x = jnp.asarray(np.linspace(-1, 1, 15).reshape(3, 5))
    theirs = jax.custom_jvp(lambda v: jax.lax.cumlogsumexp(v, 1))
    theirs.defjvp(lambda p, t: (theirs(p[0]), t[0]))
    try:
        jax.jvp(theirs, (x,), (x,))
    except NotImplementedError as err:
        assert "reduce_window" in str(err)
        with pytest.raises(NotImplementedError, match="reduce_window"):
            jax.jvp(lambda v: rnp.logcumsumexp(v, 1), (x,), (x,))
    else:
        value, _ = jax.jvp(lambda v: rnp.logcumsumexp(v, 1), (x,), (x,))
        np.testing.assert_allclose(value, jax.lax.cumlogsumexp(x, 1), rtol=1e-6)


def test_eighs_second_order_runs_its_gauge_check_on_another_array_under_jax_011s_flags(monkeypatch):
    """The transpose of the linearization of eigh's VJP (``vjp_of_vjp`` in the harness's shared
    program) for a phase-invariant function: its values are JAX's own eigh's (differentiated by
    JAX), but under jax 0.11's flags JAX runs the VJP formula's gauge check (a host callback on
    ``Im diag(V^H gV)``) on an array that is not the primal cotangent's (here 0.2-0.6, where the
    cotangent's is 0), so the check raises for an invariant loss: the eig/eigh failures of
    ``docs/compatibility.md`` on 0.11 with the flags. jax 0.12 runs it on the cotangent's only."""
    import jaxrules.partials as P

    seen = []
    monkeypatch.setattr(P, "check_gauge", lambda im_diag, op: jax.debug.callback(
        lambda v: seen.append(float(np.max(np.abs(v)))), im_diag))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3))
    a = jnp.asarray(a + a.conj().T)
    c = (jnp.asarray(rng.standard_normal(3)), jnp.asarray(rng.standard_normal((3, 3))))
    t = jnp.asarray(rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3)))

    def vjp_of_vjp(eigh):
        def f(m):
            w, v = eigh(m)
            return w, jnp.abs(v) ** 2  # invariant to the eigenvectors' phases

        jc = lambda m: jax.vjp(f, m)[1](c)[0]  # noqa: E731
        return jax.linear_transpose(jax.linearize(jc, a)[1], a)(t)[0]

    ours = vjp_of_vjp(rnp.linalg.eigh)
    np.testing.assert_allclose(ours, vjp_of_vjp(jnp.linalg.eigh), rtol=1e-8, atol=1e-10)
    assert seen
    if jax.__version__.startswith("0.11."):
        assert max(seen) > 1e-2, seen
    else:
        assert max(seen) < 1e-10, seen


def test_vmapped_rules_under_an_explicit_mesh_linearize_exactly_where_jaxs_own_do():
    """jax 0.11's hijax rules cannot be linearized when vmapped under an ``Explicit`` mesh ("for
    linearize support, subclass ... VmapOf must implement `lin` and `linearized`"), for JAX's own
    ``custom_jvp`` and ``custom_vjp`` alike; jax 0.12 linearizes them. A jaxrules rule then fails
    the same way (the vmapped sharded tests of ``docs/compatibility.md`` on 0.11 with the flags):
    JAX's behaviour, not the library's. One device suffices."""
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as Spec

    theirs = jax.custom_jvp(lambda v: v * 0.5)
    theirs.defjvp(lambda p, t: (theirs(p[0]), t[0] * 0.5))
    mesh = jax.make_mesh((1,), ("data",), axis_types=(AxisType.Explicit,))
    with jax.set_mesh(mesh):
        x = jax.device_put(jnp.asarray(np.linspace(-1, 1, 12).reshape(4, 3)), NamedSharding(mesh, Spec("data")))

        def linearized(fn):
            return jax.linearize(jax.jit(lambda v: jnp.sum(jax.vmap(fn)(v))), x)

        try:
            linearized(theirs)
        except NotImplementedError as err:
            assert "VmapOf" in str(err)
            with pytest.raises(NotImplementedError, match="VmapOf"):
                linearized(rnp.deg2rad)
        else:
            value, lin = linearized(rnp.deg2rad)
            np.testing.assert_allclose(value, jnp.sum(jnp.deg2rad(x)), rtol=1e-12)
            np.testing.assert_allclose(lin(jnp.ones_like(x)), 12 * np.pi / 180, rtol=1e-12)
