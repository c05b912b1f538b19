"""The ``>>>`` examples in the docstrings of the names the API reference documents (``docs/conf.py``'s
namespaces) run under ``doctest`` and print what they show, with JAX's default float32 and with
float64; the headline ops each have one.

Each example imports what it uses (the globals start empty), so a reader can paste it as it is.
Its printed values are exact in both precisions (rounded where float32 and float64 differ), on a
CPU device (the examples run there on every machine)."""

from __future__ import annotations

import doctest
import importlib
import inspect

import jax
import pytest

from jaxrules import _namespace

NAMESPACES = (
    "jaxrules", "jaxrules.numpy", "jaxrules.numpy.linalg", "jaxrules.numpy.fft", "jaxrules.nn", "jaxrules.linalg",
    "jaxrules.scipy.special", "jaxrules.scipy.linalg", "jaxrules.nested", "jaxrules.testing", "jaxrules.registry",
)

# The ops a newcomer reaches for first: each docstring shows a call and, where the op's reason to
# exist is its derivative, that derivative.
HEADLINE = (
    "jaxrules.numpy.linalg.norm", "jaxrules.numpy.linalg.vector_norm", "jaxrules.numpy.std", "jaxrules.numpy.var",
    "jaxrules.numpy.clip", "jaxrules.numpy.power", "jaxrules.numpy.linalg.eigh", "jaxrules.numpy.linalg.svd",
    "jaxrules.nn.softmax", "jaxrules.nn.log_softmax", "jaxrules.nn.logsumexp", "jaxrules.nn.cross_entropy",
    "jaxrules.nn.nll_loss", "jaxrules.nn.mse_loss", "jaxrules.nn.l1_loss", "jaxrules.nn.huber_loss",
    "jaxrules.nn.smooth_l1_loss", "jaxrules.nn.binary_cross_entropy", "jaxrules.nn.binary_cross_entropy_with_logits",
    "jaxrules.nn.kl_div", "jaxrules.nn.layer_norm", "jaxrules.nn.rms_norm", "jaxrules.nn.batch_norm",
    "jaxrules.nn.scaled_dot_product_attention", "jaxrules.nn.linear_cross_entropy", "jaxrules.nested.nested_tensor",
    "jaxrules.nested.softmax", "jaxrules.nested.sum", "jaxrules.nested.from_lengths", "jaxrules.nested.layer_norm",
    "jaxrules.nested.scaled_dot_product_attention", "jaxrules.numpy.linalg.eig", "jaxrules.numpy.linalg.det",
    "jaxrules.numpy.linalg.cholesky", "jaxrules.linalg.cdist", "jaxrules.nn.normalize", "jaxrules.nn.cosine_similarity",
    "jaxrules.nn.group_norm",
)

_OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _own_objects() -> dict[str, object]:
    """``{"namespace.name": object}`` for the names jaxrules defines in ``NAMESPACES`` (not JAX's
    forwarded objects, not submodules), each object once, under its first name."""
    found, seen = {}, set()
    for ns in NAMESPACES:
        module = importlib.import_module(ns)
        names = _namespace.namespaces()[ns][1] if ns in _namespace.COUNTERPARTS else module.__all__
        for name in sorted(names):
            obj = getattr(module, name)
            if inspect.ismodule(obj) or id(obj) in seen:
                continue
            seen.add(id(obj))
            found[f"{ns}.{name}"] = obj
    return found


def _examples() -> list[doctest.DocTest]:
    """The doctests of every documented object (a class's methods included) with examples."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = []
    for name, obj in _own_objects().items():
        tests += [t for t in finder.find(obj, name, globs={}) if t.examples]
    return sorted(tests, key=lambda t: t.name)


EXAMPLES = _examples()


def _run(test: doctest.DocTest) -> tuple[doctest.TestResults, str]:
    report = []
    runner = doctest.DocTestRunner(optionflags=_OPTIONS)
    test.globs = {}  # each run starts from what the example imports itself
    result = runner.run(test, out=report.append, clear_globs=True)
    return result, "".join(report)


@pytest.mark.parametrize("x64", [False, True], ids=["float32", "float64"])
@pytest.mark.parametrize("test", EXAMPLES, ids=[t.name for t in EXAMPLES])
def test_docstring_example_prints_what_it_shows(test, x64):
    # The printed digits are a CPU's: on a GPU, cuSOLVER's and TF32's roundings can move the last one.
    with jax.enable_x64(x64), jax.default_device(jax.devices("cpu")[0]):
        result, report = _run(test)
    assert result.attempted == len(test.examples)
    assert result.failed == 0, report


def test_headline_ops_have_examples():
    objects = _own_objects()
    documented = {id(objects[t.name]) for t in EXAMPLES if t.name in objects}
    missing = []
    for name in HEADLINE:
        module, attr = name.rsplit(".", 1)
        if id(getattr(importlib.import_module(module), attr)) not in documented:
            missing.append(name)
    assert not missing, f"headline ops without a >>> example in their docstring: {missing}"


def test_a_wrong_example_fails():
    """The runner reports a mismatch (the parametrized test's failures are real)."""
    test = doctest.DocTestParser().get_doctest(">>> print(1 + 1)\n3\n", {}, "wrong", "wrong", 0)
    result, report = _run(test)
    assert result.failed == 1 and "Expected:\n    3\nGot:\n    2" in report
