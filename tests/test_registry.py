"""Every registered op through every check of the harness (docs/design.md §4).

One test per op running all its checks in one process: the checks share each sample's compiled
program (``jaxrules.testing._shared``), which per-(op, check) tests spread over xdist workers
would compile once per worker. ``python -m jaxrules check --ops NAME --checks CHECK`` runs one
check alone.

Budget: a record takes 7 CPU s on average (0.5-58 s; 1,394 of the suite's 2,946 worker-seconds
for all 189 on 2 cores), so a CI run checks a rotating sixteenth of the records (``SHARE``, chosen by
the commit, ``tests/_rotation.py``); ``JAXRULES_REGISTRY_ALL=1`` checks every record, as ``python
-m jaxrules check`` (the first command of the README's Quick start) always does. The records
run at full depth (every composition on every sample, ``check --full``), where ``check`` runs
the compositions on each record's first sample: over the rotation CI checks every sample's."""

import pytest
from _rotation import rotating_share

from jaxrules import records
from jaxrules.testing import CHECKS, check_op, release_programs

ALL_RECORDS = records()
# A CI run checks len(ALL_RECORDS) // SHARE records: an eighth took 133 CPU s of the suite's 2,290 (CI's
# whole run then 18-20 minutes on 2 cores, over its 15; with a twelfth and the other shares cut, 17).
SHARE = 16
RECORDS = rotating_share(ALL_RECORDS, SHARE, "registry", "JAXRULES_REGISTRY_ALL")
# ``empty`` (zero-size inputs) runs in tests/test_empty.py, beside the records still open there.
REGISTRY_CHECKS = tuple(c for c in CHECKS if c not in ("empty", "sharded"))  # tests/test_empty.py, test_sharded.py


@pytest.mark.parametrize("record", RECORDS, ids=[r.name for r in RECORDS])
def test_op(record):
    results = check_op(record, REGISTRY_CHECKS, full=True)
    release_programs()  # each xdist worker's memory stays flat over its records
    assert [r.check for r in results] == list(REGISTRY_CHECKS)
    failed = [f"{r.check}: {r.detail}" for r in results if not r.passed]
    assert not failed, "\n".join(failed)
    torch = next(r for r in results if r.check == "torch")
    # torch is part of the test extra: its absence is a failure here
    assert "torch is not installed" not in torch.detail


def test_every_record_is_complete():
    for r in ALL_RECORDS:
        assert r.seed, r.name
        assert r.public, r.name
        assert r.formula_ops, r.name
        assert r.torch_fn is not None, r.name
        assert "float64" in r.dtypes, r.name


def _resolve(public_name: str):
    """The object a record's public name (``jaxrules.nn.layer_norm(impl='pallas')``, a method
    ``jaxrules.nested.NestedTensor.__add__``) names: the longest importable module prefix, then
    attributes; a call suffix ``(...)`` is dropped."""
    import importlib
    import re

    parts = re.sub(r"\(.*\)$", "", public_name).split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(public_name)


def test_every_public_name_a_record_lists_resolves_to_jaxrules_own_function():
    """A record's public names are the functions users call; each must exist and be
    jaxrules' own (a name forwarded from JAX carries JAX's rule, not the record's)."""
    wrong = []
    for r in ALL_RECORDS:
        for name in r.public:
            try:
                obj = _resolve(name)
            except (ImportError, AttributeError) as err:
                wrong.append((r.name, name, repr(err)))
                continue
            if not callable(obj) or not (getattr(obj, "__module__", "") or "").startswith("jaxrules"):
                wrong.append((r.name, name, getattr(obj, "__module__", None)))
    assert wrong == []
