"""The namespaces are complete: every public name of the installed JAX's counterpart resolves, as
JAX's own object unless jaxrules defines it (issue 18)."""

import importlib
import subprocess
import sys

import jax.nn
import jax.numpy
import jax.numpy.fft
import jax.numpy.linalg
import jax.scipy.linalg
import jax.scipy.special
import pytest

import jaxrules.nn
import jaxrules.numpy
import jaxrules.numpy.fft
import jaxrules.numpy.linalg
import jaxrules.scipy.linalg
import jaxrules.scipy.special
from jaxrules._namespace import COUNTERPARTS, namespaces


@pytest.mark.parametrize("name", sorted(COUNTERPARTS))
def test_every_jax_name_resolves(name):
    ours, theirs = importlib.import_module(name), importlib.import_module(COUNTERPARTS[name])
    _, own, _ = namespaces()[name]
    listed = dir(ours)
    missing = []
    for attr in (a for a in dir(theirs) if not a.startswith("_")):
        if not hasattr(ours, attr) or attr not in listed or attr not in ours.__all__:
            missing.append(attr)
        elif attr not in own:
            assert getattr(ours, attr) is getattr(theirs, attr), f"{name}.{attr} is not JAX's object"
    assert not missing, f"{name} lacks {missing}"


@pytest.mark.parametrize("name", sorted(COUNTERPARTS))
def test_own_names_are_not_replaced_by_jaxs(name):
    ours, theirs = importlib.import_module(name), importlib.import_module(COUNTERPARTS[name])
    _, own, forwarded = namespaces()[name]
    assert own and not own & forwarded
    for attr in own:
        obj = getattr(ours, attr)
        assert obj is not getattr(theirs, attr, None), f"{name}.{attr} is JAX's"
        home = obj.__name__ if isinstance(obj, type(sys)) else obj.__module__
        assert home.startswith("jaxrules."), f"{name}.{attr} comes from {home}"


def test_known_overrides_and_forwards():
    from jaxrules.ops import activations, linalg, reductions

    assert jaxrules.numpy.sum is reductions.sum and jaxrules.numpy.max is reductions.max
    assert jaxrules.nn.gelu is activations.gelu and jaxrules.nn.softmax is activations.softmax
    assert jaxrules.numpy.linalg.det is linalg.det and jaxrules.scipy.linalg.expm is linalg.expm
    assert jaxrules.numpy.linalg is importlib.import_module("jaxrules.numpy.linalg")
    assert jaxrules.numpy.fft is importlib.import_module("jaxrules.numpy.fft")
    # the array-API spellings of ops jaxrules implements carry its rules
    assert jaxrules.numpy.pow is jaxrules.numpy.power and jaxrules.numpy.atan2 is jaxrules.numpy.arctan2
    assert jaxrules.numpy.concat is jaxrules.numpy.concatenate
    assert jaxrules.numpy.float32 is jax.numpy.float32 and jaxrules.numpy.zeros is jax.numpy.zeros
    assert jaxrules.nn.sigmoid is jax.nn.sigmoid and jaxrules.nn.initializers is jax.nn.initializers
    assert jaxrules.scipy.special.erf is jax.scipy.special.erf
    assert jaxrules.numpy.linalg.matrix_power is jax.numpy.linalg.matrix_power
    assert jaxrules.numpy.fft.fftfreq is jax.numpy.fft.fftfreq
    assert jaxrules.scipy.linalg.schur is jax.scipy.linalg.schur
    assert jaxrules.numpy.zeros(2, dtype=jaxrules.numpy.float32).dtype == jax.numpy.float32


def test_unknown_and_private_names_are_not_forwarded():
    with pytest.raises(AttributeError, match="jaxrules.numpy.*no_such_name"):
        jaxrules.numpy.no_such_name  # noqa: B018
    with pytest.raises(AttributeError):  # jax.nn is a package: its __path__ must not leak
        jaxrules.nn.__path__  # noqa: B018
    assert not hasattr(jaxrules.numpy, "_src")


def test_importing_numpy_is_light():
    # (JAX's own jax.extend, which jaxrules.mechanism uses, loads Pallas' core, not jax.experimental.pallas)
    heavy = ("jaxrules.nested", "jax.experimental.pallas", "jaxrules.nn")
    code = f"import sys, jaxrules.numpy; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
