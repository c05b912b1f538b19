"""The API reference: every public function jaxrules defines in its
namespaces has a Google-style docstring (an ``Args:`` section naming each parameter, a
``Returns:`` section) and type hints on every parameter and the return.

A ratchet: ``KNOWN_UNDOCUMENTED`` lists the public names that may still lack them. The test fails
when a name outside it lacks them, and when a name in it has them (remove it: the set only
shrinks), or is no longer public."""

from __future__ import annotations

import importlib
import inspect
import re
import types
import typing

import pytest

NAMESPACES = (
    "jaxrules.numpy",
    "jaxrules.numpy.linalg",
    "jaxrules.numpy.fft",
    "jaxrules.nn",
    "jaxrules.linalg",
    "jaxrules.scipy.special",
    "jaxrules.scipy.linalg",
)

# "namespace.name" of the public functions that may still lack Args/Returns/type hints. Only
# remove entries (the test tells when one is done); never add one.
KNOWN_UNDOCUMENTED: frozenset[str] = frozenset()  # every public function is documented


def public_functions() -> dict[str, typing.Callable]:
    """``{"namespace.name": function}`` for every public callable that jaxrules defines (its
    ``__module__`` starts with ``jaxrules``; JAX's forwarded objects are JAX's to document)."""
    found = {}
    for ns in NAMESPACES:
        module = importlib.import_module(ns)
        names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
        for name in names:
            obj = getattr(module, name)
            if isinstance(obj, types.ModuleType | type) or not callable(obj):
                continue
            if (getattr(obj, "__module__", None) or "").startswith("jaxrules"):
                found[f"{ns}.{name}"] = obj
    return found


_SECTION = re.compile(r"^(\w[\w ]*):\s*$")
_ENTRY = re.compile(r"^(\*{0,2}\w+)(?: \([^)]*\))?:(?:\s|$)")


def _sections(doc: str) -> dict[str, list[str]]:
    """Google-style sections: header (``Args``, ``Returns``, ...) -> its indented lines."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in doc.splitlines():
        header = _SECTION.match(line)
        if header:
            current = sections.setdefault(header.group(1), [])
        elif current is not None and (line.startswith((" ", "\t")) or not line.strip()):
            current.append(line)
        else:
            current = None
    return sections


def _documented_args(lines: list[str]) -> list[str]:
    """The names an ``Args:`` section describes (its entries at the first indentation level)."""
    body = [line for line in lines if line.strip()]
    if not body:
        return []
    indent = min(len(line) - len(line.lstrip()) for line in body)
    names = []
    for line in body:
        if len(line) - len(line.lstrip()) == indent and (entry := _ENTRY.match(line.strip())):
            names.append(entry.group(1).lstrip("*"))
    return names


def problems(fn: typing.Callable) -> list[str]:
    """What ``fn``'s docstring and annotations lack (empty: documented)."""
    found = []
    doc = inspect.getdoc(fn) or ""
    if not doc.strip():
        return ["no docstring"]
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    sections = _sections(doc)
    if params:
        if "Args" not in sections:
            found.append("no Args: section")
        else:
            documented = _documented_args(sections["Args"])
            names = [p.name for p in params]
            missing = [n for n in names if n not in documented]
            extra = [n for n in documented if n not in names]
            if missing:
                found.append(f"Args: lacks {missing}")
            if extra:
                found.append(f"Args: describes {extra}, which are not parameters")
            if len(set(documented)) != len(documented):
                found.append("Args: describes a parameter twice")
            elif not missing and not extra and documented != names:
                found.append("Args: not in the signature's order")
    if not "".join(sections.get("Returns", [])).strip():
        found.append("no Returns: section")
    unhinted = [p.name for p in params if p.annotation is inspect.Parameter.empty]
    if unhinted:
        found.append(f"no type hint on {unhinted}")
    if sig.return_annotation is inspect.Signature.empty:
        found.append("no return type hint")
    if not unhinted:
        try:
            typing.get_type_hints(fn)
        except Exception as err:  # a string annotation naming something the module lacks
            found.append(f"type hints do not resolve ({type(err).__name__}: {err})")
    return found


def test_namespaces_have_public_functions():
    functions = public_functions()
    assert len(functions) > 100
    assert "jaxrules.numpy.sum" in functions and "jaxrules.nn.conv" in functions
    assert "jaxrules.numpy.zeros" not in functions  # JAX's own object, forwarded


def test_public_functions_are_documented():
    lacking, now_documented = {}, []
    for name, fn in sorted(public_functions().items()):
        found = problems(fn)
        if found and name not in KNOWN_UNDOCUMENTED:
            lacking[name] = found
        elif not found and name in KNOWN_UNDOCUMENTED:
            now_documented.append(name)
    assert not lacking, f"public functions without Args/Returns/type hints: {lacking}"
    assert not now_documented, f"documented now: remove from KNOWN_UNDOCUMENTED: {now_documented}"


def test_known_undocumented_names_are_public():
    stale = sorted(KNOWN_UNDOCUMENTED - set(public_functions()))
    assert not stale, f"no longer public jaxrules functions: remove from KNOWN_UNDOCUMENTED: {stale}"


_GOOD = '''Sum.

    Args:
        a: the array.
        axis (int): an axis.
        *args: more.

    Returns:
        The sum.
    '''


def _fn(a: int, axis: int = 0, *args: int) -> int:
    return a


@pytest.mark.parametrize("doc, expected", [
    (_GOOD, []),
    ("Sum.", ["no Args: section", "no Returns: section"]),
    (_GOOD.replace("        axis (int): an axis.\n", ""), ["Args: lacks ['axis']"]),
    (_GOOD.replace("*args: more.", "*args: more.\n        b: nothing."),
     ["Args: describes ['b'], which are not parameters"]),
    (_GOOD.replace("    Returns:\n        The sum.\n", ""), ["no Returns: section"]),
    (_GOOD.replace("a: the array.", "axis: first.").replace("axis (int): an axis.", "a: second."),
     ["Args: not in the signature's order"]),
])
def test_problems_reads_google_style(doc, expected):
    _fn.__doc__ = doc
    assert problems(_fn) == expected


def test_problems_wants_type_hints():
    def f(a, b: int):
        """F.

        Args:
            a: a.
            b: b.

        Returns:
            Something.
        """

    assert problems(f) == ["no type hint on ['a']", "no return type hint"]
