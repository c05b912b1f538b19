"""The declared JAX range and the warning on a JAX newer than the newest tested one
(``jaxrules/compat.py``, ``docs/compatibility.md``)."""

import os
import re
import subprocess
import sys
import tomllib
import warnings

import jax
import pytest
from _forced_devices import forced_devices_env
from _repo_files import ROOT, subprocess_env

from jaxrules import compat


def test_version_tuples():
    assert compat.jax_version_tuple("0.12.0.1") == (0, 12, 0, 1)
    assert compat.jax_version_tuple("0.12.0") == compat.jax_version_tuple("0.12") == (0, 12)
    assert compat.jax_version_tuple("0.12.1.dev20261101") == (0, 12, 1)
    assert compat.jax_version_tuple("0.11.2") < compat.jax_version_tuple("0.12.0.1")
    with pytest.raises(ValueError):
        compat.jax_version_tuple("main")


@pytest.mark.parametrize("offset, warns", [(-1, False), (0, False), (1, True)])
def test_warns_past_the_newest_tested_jax(monkeypatch, offset, warns):
    monkeypatch.delenv(compat._WARNED, raising=False)
    newest = compat.jax_version_tuple(compat.NEWEST_TESTED_JAX)
    version = ".".join(map(str, (*newest[:-1], newest[-1] + offset)))
    monkeypatch.setattr(jax, "__version__", version)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert compat.warn_if_untested() is warns
        assert compat.warn_if_untested() is warns  # the second time stays quiet
    assert [w.category for w in caught] == [compat.UntestedJaxWarning] * warns
    assert issubclass(compat.UntestedJaxWarning, UserWarning)
    if warns:
        assert version in str(caught[0].message) and compat.NEWEST_TESTED_JAX in str(caught[0].message)


def test_import_warns_once_on_a_newer_jax():
    """``import jaxrules`` with JAX's version set past the newest tested one: one warning, and a
    message filter set before the import silences it."""
    code = (
        "import warnings, jax; jax.__version__ = '99.0'; warnings.simplefilter('always'); {filter}"
        "import jaxrules, jaxrules.compat, importlib; importlib.import_module('jaxrules')"
    )
    env = subprocess_env({k: v for k, v in os.environ.items() if k != compat._WARNED})
    for filter_, expected in (("", 1), ("warnings.filterwarnings('ignore', message='jaxrules was tested with');", 0)):
        out = subprocess.run([sys.executable, "-c", code.format(filter=filter_)], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert len(re.findall(r"UntestedJaxWarning", out.stderr)) == expected, out.stderr


def test_the_declared_range_has_no_upper_cap():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    jax_deps = [d for d in project["dependencies"] + project["optional-dependencies"]["cuda12"]
                if re.match(r"jax(\[|[<>=]|$)", d)]
    assert jax_deps == [f"jax>={compat.OLDEST_SUPPORTED_JAX}", f"jax[cuda12]>={compat.OLDEST_SUPPORTED_JAX}"]


def test_the_compatibility_page_names_the_newest_tested_jax():
    with open(os.path.join(ROOT, "docs", "compatibility.md")) as f:
        text = f.read()
    assert f"`NEWEST_TESTED_JAX = \"{compat.NEWEST_TESTED_JAX}\"`" in text


def test_the_tests_child_processes_keep_this_processs_pythonpath(tmp_path, monkeypatch):
    """The JAX under test may come from ``PYTHONPATH`` (unpacked wheels): a process the tests start
    (``_repo_files.subprocess_env``, the forced-device workers' too) finds what this one's
    ``PYTHONPATH`` holds, and this repository first."""
    (tmp_path / "marker_on_the_path.py").write_text("WHERE = 'the parent PYTHONPATH'\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    code = "import marker_on_the_path, jaxrules; print(marker_on_the_path.WHERE); print(jaxrules.__file__)"
    out = subprocess.run([sys.executable, "-c", code], env=subprocess_env(JAX_PLATFORMS="cpu"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    where, package = out.stdout.splitlines()
    assert where == "the parent PYTHONPATH" and package.startswith(str(ROOT))


def test_forced_device_workers_run_on_the_cpu_whatever_this_process_runs_on(monkeypatch):
    """The multi-device workers (``_forced_devices.forced_devices_env``) split the host into CPU
    devices even where this process runs on a GPU: with a CUDA plugin installed JAX would start
    them on the one GPU, and every multi-device test would fail for want of devices."""
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    code = "import jax; print(jax.default_backend(), jax.device_count())"
    out = subprocess.run([sys.executable, "-c", code], env=forced_devices_env(4), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["cpu", "4"]
