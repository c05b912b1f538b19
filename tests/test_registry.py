"""Every registered op through every check of the harness (docs/design.md §4)."""

import pytest

from jaxrules import records
from jaxrules.testing import CHECKS, run_check

CASES = [(r, c) for r in records() for c in CHECKS]


@pytest.mark.parametrize("record, check", CASES, ids=[f"{r.name}-{c}" for r, c in CASES])
def test_op(record, check):
    result = run_check(record, check)
    assert result.passed, result.detail
    if check == "torch":  # torch is part of the test extra: its absence is a failure here
        assert "torch is not installed" not in result.detail


def test_every_record_is_complete():
    for r in records():
        assert r.seed, r.name
        assert r.public, r.name
        assert r.formula_ops, r.name
        assert r.torch_fn is not None, r.name
        assert "float64" in r.dtypes, r.name
