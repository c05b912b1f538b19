"""Every registered op through every check of the harness (docs/design.md §4).

One test per op running all its checks in one process: the checks share each sample's compiled
program (``jaxrules.testing._shared``), which per-(op, check) tests spread over xdist workers
would compile once per worker. ``python -m jaxrules check --ops NAME --checks CHECK`` runs one
check alone."""

import pytest

from jaxrules import records
from jaxrules.testing import CHECKS, check_op, release_programs

RECORDS = records()


@pytest.mark.parametrize("record", RECORDS, ids=[r.name for r in RECORDS])
def test_op(record):
    results = check_op(record)
    release_programs()  # each xdist worker's memory stays flat over its records
    assert [r.check for r in results] == list(CHECKS)
    failed = [f"{r.check}: {r.detail}" for r in results if not r.passed]
    assert not failed, "\n".join(failed)
    torch = next(r for r in results if r.check == "torch")
    # torch is part of the test extra: its absence is a failure here
    assert "torch is not installed" not in torch.detail


def test_every_record_is_complete():
    for r in RECORDS:
        assert r.seed, r.name
        assert r.public, r.name
        assert r.formula_ops, r.name
        assert r.torch_fn is not None, r.name
        assert "float64" in r.dtypes, r.name
