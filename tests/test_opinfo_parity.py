"""torch's own OpInfo samples through the ``jaxrules.torch`` adapters (``jaxrules/opinfo.py``):
values, VJP and JVP against torch 2.13 in float64 and complex128. Every check passes or its
(OpInfo, check) is in ``opinfo.DEVIATIONS``, the one table of deliberate deviations, with its
reason; an entry that no longer fails is an error too.

The porter ops are every ``jaxrules.torch.nn.functional`` adapter with an OpInfo and the
``jaxrules.torch`` / ``jaxrules.torch.linalg`` ones; CI runs a rotating subset of them
(``tests/_rotation.py``, ``ROTATION`` OpInfos, ``MAX_SAMPLES`` samples each per dtype);
``JAXRULES_OPINFO_ALL=1`` runs all of them, ``python -m jaxrules opinfo`` prints the table."""

from __future__ import annotations

import os

import jax
import pytest

pytest.importorskip("torch", reason="torch is the reference of the OpInfo parity checks")
pytest.importorskip("expecttest", reason="torch's op_db (torch.testing._internal) imports expecttest")

from _rotation import commit_seed, rotating_subset  # noqa: E402
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

import jaxrules.torch as T  # noqa: E402
import jaxrules.torch.linalg as TL  # noqa: E402
import jaxrules.torch.nn.functional as TF  # noqa: E402
from jaxrules import cli, opinfo  # noqa: E402

ROTATION = 12
MAX_SAMPLES = 2

TARGETS = {t.key: t for t in opinfo.targets()}
_ALL = os.environ.get("JAXRULES_OPINFO_ALL") == "1"
SELECTED = sorted(TARGETS) if _ALL else rotating_subset(sorted(TARGETS), ROTATION, commit_seed(), "opinfo")


@pytest.fixture(autouse=True)
def _float64():
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", previous)


@pytest.mark.parametrize("key", SELECTED)
def test_opinfo_samples_match_torch_or_are_listed_deviations(key):
    outcomes = opinfo.run([TARGETS[key]], max_samples=None if _ALL else MAX_SAMPLES)
    failures = [f"{o.dtype} {o.check} sample {o.sample}: {o.detail}" for o in outcomes if o.status == "fail"]
    assert failures == []
    assert any(o.status in ("pass", "deviation") for o in outcomes), "no check ran"
    if _ALL:  # a listed deviation shows within every sample of the OpInfo, not within the first few
        listed = [(check, dtype) for (name, check, dtype) in opinfo.DEVIATIONS if name == key]
        seen = {(o.check, o.dtype) for o in outcomes if o.status == "deviation"}
        stale = [(c, d) for c, d in listed if not any(c in ("*", sc) and d in ("*", sd) for sc, sd in seen)]
        assert stale == [], f"{key}: DEVIATIONS lists {stale}, which no longer deviate"


def test_every_deviation_names_an_opinfo_with_an_adapter_and_gives_a_reason():
    bad = [key for key, reason in opinfo.DEVIATIONS.items()
           if key[0] not in TARGETS or key[1] not in (*opinfo.CHECKS, "*") or key[2] not in (*opinfo.DTYPES, "*")
           or len(reason) < 20]
    assert bad == []


def test_the_porter_namespaces_are_matched():
    """Every adapter whose name is an OpInfo's (``nn.functional.<name>``, ``linalg.<name>``,
    ``<name>``) is a target: counted from the two name lists, not from the matcher. OpInfos whose
    CPU dtypes include none of the checks' (float64, complex128: ``nn.functional.one_hot`` takes
    integers only) have no sample to check and are not counted."""
    import torch

    checked = {getattr(torch, d) for d in opinfo.DTYPES}
    names = {op.name for op in op_db if checked & set(op.supported_dtypes("cpu"))}
    expected = {f"jaxrules.torch.nn.functional.{n}" for n in TF.__all__ if f"nn.functional.{n}" in names}
    expected |= {f"jaxrules.torch.linalg.{n}" for n in TL.__all__ if f"linalg.{n}" in names}
    expected |= {f"jaxrules.torch.{n}" for n in T.__all__ if n in names}
    assert expected - {t.adapter for t in TARGETS.values()} == set()
    assert len(expected) > 120


def test_a_wrong_adapter_fails_every_check():
    """The harness can fail: relu's samples through silu differ in value, VJP and JVP."""
    relu = TARGETS["nn.functional.relu"]
    wrong = opinfo.Target(relu.name, relu.variant, "jaxrules.torch.nn.functional.silu", relu.opinfo)
    outcomes = opinfo.run([wrong], max_samples=1)
    assert {(o.check, o.status) for o in outcomes} == {("value", "fail"), ("vjp", "fail"), ("jvp", "fail")}


def test_cli_prints_the_table(capsys):
    assert cli.main(["opinfo", "--ops", "nn.functional.relu6", "--max-samples", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "nn.functional.relu6" in out and "1/1" in out and "0 fail" in out


@pytest.mark.parametrize("argv", [["--ops", "no_such_op"], ["--checks", "no_such_check"], ["--dtypes", "float16"]])
def test_cli_refuses_unknown_ops_checks_and_dtypes(argv, capsys):
    assert cli.main(["opinfo", "--quiet", *argv]) == 2
    assert argv[1] in capsys.readouterr().err


def test_every_target_has_a_dtype_to_check_on_the_cpu():
    """A rotating subset must never draw an OpInfo without samples here (a CUDA-only variant)."""
    no_dtype = [key for key, t in TARGETS.items()
                if not any(opinfo._TORCH_DTYPES[d] in t.opinfo.supported_dtypes("cpu") for d in opinfo.DTYPES)]
    assert no_dtype == []
    assert "nn.functional.batch_norm" in TARGETS
