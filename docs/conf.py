"""Sphinx configuration: the API reference from the docstrings (autodoc, Google-style sections
through napoleon, autosummary tables) and the Markdown pages of ``docs/`` (myst-parser).

Build (warnings are errors): ``python -m sphinx -W --keep-going -q -b html docs docs/_build/html``.

The API pages (``docs/api/*.rst``, git-ignored) are written at each build from the namespaces
themselves, so a new op appears without editing this file: a namespace completed with JAX's names
(``jaxrules._namespace``) lists only the names jaxrules defines, never JAX's forwarded objects.
"""

import importlib
import inspect
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

project = "jaxrules"
author = "jaxrules contributors"
copyright = "jaxrules contributors"  # noqa: A001 (Sphinx's setting name)

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path = []

autodoc_member_order = "bysource"
autodoc_typehints = "none"  # signatures as written; several annotations name private or JAX-internal types
autosummary_generate = False  # the tables only: each page documents its functions itself
napoleon_google_docstring = True
napoleon_numpy_docstring = False
myst_heading_anchors = 3

# Each page: (title, module, introduction). The module's public names are its own definitions.
API_PAGES = [
    ("jaxrules", "jaxrules", "Defining and checking ops, porting ``torch.autograd.Function``."),
    ("jaxrules.numpy", "jaxrules.numpy", "Drop-in for ``jax.numpy``: the names with jaxrules rules."),
    ("jaxrules.numpy.linalg", "jaxrules.numpy.linalg", "Drop-in for ``jax.numpy.linalg``."),
    ("jaxrules.numpy.fft", "jaxrules.numpy.fft", "Drop-in for ``jax.numpy.fft``."),
    ("jaxrules.nn", "jaxrules.nn", "``jax.nn`` plus torch.nn.functional's ops with torch's signatures."),
    ("jaxrules.linalg", "jaxrules.linalg", "torch.linalg's ops and signatures that JAX lacks."),
    ("jaxrules.scipy.special", "jaxrules.scipy.special", "Drop-in for ``jax.scipy.special``."),
    ("jaxrules.scipy.linalg", "jaxrules.scipy.linalg", "Drop-in for ``jax.scipy.linalg``."),
    ("jaxrules.torch", "jaxrules.torch", "torch's tensor functions with torch's names, arguments and defaults."),
    ("jaxrules.torch.nn.functional", "jaxrules.torch.nn.functional",
     "``torch.nn.functional`` for literal ports: torch's signatures over the same ops."),
    ("jaxrules.torch.linalg", "jaxrules.torch.linalg", "``torch.linalg`` for literal ports."),
    ("jaxrules.nested", "jaxrules.nested", "Ragged batches in torch's jagged layout."),
    ("jaxrules.testing", "jaxrules.testing", "The verification harness behind ``python -m jaxrules check``."),
    ("jaxrules.registry", "jaxrules.registry", "Op records: samples, singular points, torch references."),
]


def own_names(module_name):
    """The names ``module_name`` documents: its ``__all__`` less JAX's forwarded names and
    submodules, sorted."""
    from jaxrules import _namespace

    module = importlib.import_module(module_name)
    if module_name in _namespace.COUNTERPARTS:
        names = _namespace.namespaces()[module_name][1]
    else:
        names = module.__all__
    return sorted(n for n in names if not inspect.ismodule(getattr(module, n)))


def write_api_pages(app):
    """Write ``docs/api/<module>.rst`` (a summary table, then each name documented) and the
    API index, rewriting a file only when its text changes (Sphinx then rebuilds only that page)."""
    out = os.path.join(app.srcdir, "api")
    os.makedirs(out, exist_ok=True)
    pages = {}
    for title, module_name, intro in API_PAGES:
        module = importlib.import_module(module_name)
        names = own_names(module_name)
        lines = [title, "=" * len(title), "", f".. currentmodule:: {module_name}", "", intro, ""]
        lines += [".. autosummary::", ""] + [f"   {n}" for n in names] + [""]
        for name in names:
            kind = "autoclass" if inspect.isclass(getattr(module, name)) else "autofunction"
            if kind == "autofunction" and not callable(getattr(module, name)):
                kind = "autodata"
            lines += [f".. {kind}:: {name}", ""]
            if kind == "autoclass":
                lines += ["   :members:", ""]
        pages[f"{module_name}.rst"] = "\n".join(lines)
    toc = ["API reference", "=============", "", ".. toctree::", "   :maxdepth: 1", ""]
    toc += [f"   {module_name}" for _, module_name, _ in API_PAGES] + [""]
    pages["index.rst"] = "\n".join(toc)
    for filename, text in pages.items():
        path = os.path.join(out, filename)
        if not os.path.exists(path) or open(path).read() != text:
            with open(path, "w") as f:
                f.write(text)


def setup(app):
    app.connect("builder-inited", write_api_pages)
