"""``tools/jax_matrix.py``'s planning: which environments it makes from a folder's file names (no
environment made, nothing installed), and its summary of results."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parent.parent / "tools" / "jax_matrix.py"
_spec = importlib.util.spec_from_file_location("jax_matrix", _PATH)
jax_matrix = importlib.util.module_from_spec(_spec)
sys.modules["jax_matrix"] = jax_matrix  # dataclasses look their module up there
_spec.loader.exec_module(jax_matrix)

FOLDER = [
    "jax-0.12.0.1-py3-none-any.whl",
    "jaxlib-0.12.0.1-cp312-cp312-manylinux_2_27_x86_64.whl.part-aa",  # split: planned as the wheel
    "jaxlib-0.12.0.1-cp312-cp312-manylinux_2_27_x86_64.whl.part-ab",
    "jax_cuda12_plugin-0.12.0.1-cp312-cp312-manylinux_2_27_x86_64.whl",
    "jax_cuda12_pjrt-0.12.0.1-py3-none-manylinux_2_27_x86_64.whl.part-aa",
    "jax-0.11.2-py3-none-any.whl",
    "jaxlib-0.11.2-cp312-cp312-manylinux_2_27_x86_64.whl",  # no plugin: cpu only
    "jax-0.13.0-py3-none-any.whl",  # no jaxlib: left out
    "jaxlib-0.13.0-cp313-cp313-manylinux_2_27_x86_64.whl",
    "jaxlib-0.11.2-cp312-cp312-macosx_11_0_arm64.whl",  # another machine's
    "numpy-2.2.6-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",  # into every environment
    "SHA256SUMS",
]


def test_plan_from_a_folder_of_wheels():
    envs, skipped = jax_matrix.plan(FOLDER, "cp312")
    assert [e.name for e in envs] == [
        "jax0.11.2-cpu-off", "jax0.11.2-cpu-custom3",
        "jax0.12.0.1-gpu-off", "jax0.12.0.1-cpu-off", "jax0.12.0.1-gpu-custom3", "jax0.12.0.1-cpu-custom3",
    ]
    by = {e.name: e for e in envs}
    assert by["jax0.12.0.1-cpu-off"].wheels == (
        "numpy-2.2.6-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "jaxlib-0.12.0.1-cp312-cp312-manylinux_2_27_x86_64.whl",
        "jax-0.12.0.1-py3-none-any.whl",
        "jax_cuda12_pjrt-0.12.0.1-py3-none-manylinux_2_27_x86_64.whl",
        "jax_cuda12_plugin-0.12.0.1-cp312-cp312-manylinux_2_27_x86_64.whl",
    )
    assert by["jax0.12.0.1-gpu-custom3"].env_vars == {"JAX_PLATFORMS": "cuda", "JAX_CUSTOM_JVP3": "1",
                                                      "JAX_CUSTOM_VJP3": "1"}
    assert by["jax0.11.2-cpu-off"].env_vars == {"JAX_PLATFORMS": "cpu"}
    assert {e.venv_name for e in envs} == {"venv-jax0.11.2", "venv-jax0.12.0.1"}  # one per version
    reasons = dict(skipped)
    assert reasons["jax 0.13.0"] == "no jaxlib 0.13.0 wheel for cp312"
    assert reasons["jaxlib-0.13.0-cp313-cp313-manylinux_2_27_x86_64.whl"] == "not for cp312"
    assert reasons["jaxlib-0.11.2-cp312-cp312-macosx_11_0_arm64.whl"] == "not for x86_64"
    assert "SHA256SUMS" not in reasons


def test_plan_options():
    envs, _ = jax_matrix.plan(FOLDER, "cp312", flags=("off",), platforms="cpu")
    assert [e.name for e in envs] == ["jax0.11.2-cpu-off", "jax0.12.0.1-cpu-off"]
    envs, skipped = jax_matrix.plan(FOLDER, "cp312", flags=("custom3",), platforms="gpu")
    assert [e.name for e in envs] == ["jax0.12.0.1-gpu-custom3"]
    assert ("jax 0.11.2 gpu", "no CUDA plugin wheels") in skipped
    envs, skipped = jax_matrix.plan(FOLDER, "cp311")
    assert envs == [] and ("jax 0.12.0.1", "no jaxlib 0.12.0.1 wheel for cp311") in skipped


def test_a_plugin_without_its_pjrt_wheel_is_not_a_gpu_environment():
    folder = ["jax-0.12.0.1-py3-none-any.whl", "jaxlib-0.12.0.1-cp312-cp312-manylinux_2_27_x86_64.whl",
              "jax_cuda13_plugin-0.12.0.1-cp312-cp312-manylinux_2_27_x86_64.whl"]
    envs, skipped = jax_matrix.plan(folder, "cp312")
    assert [e.name for e in envs] == ["jax0.12.0.1-cpu-off", "jax0.12.0.1-cpu-custom3"]
    assert ("jax 0.12.0.1 cuda13", "the plugin wheel needs its pjrt wheel (both or neither)") in skipped


def test_split_wheels_are_joined(tmp_path):
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / "a-1.0-py3-none-any.whl.part-aa").write_bytes(b"12")
    (folder / "a-1.0-py3-none-any.whl.part-ab").write_bytes(b"34")
    (folder / "b-1.0-py3-none-any.whl").write_bytes(b"b")
    joined = jax_matrix.join_parts(folder, tmp_path / "joined")
    assert (joined / "a-1.0-py3-none-any.whl").read_bytes() == b"1234"
    assert (joined / "b-1.0-py3-none-any.whl").read_bytes() == b"b"


def test_summary_counts(tmp_path):
    (tmp_path / "junit.xml").write_text(
        '<testsuites><testsuite tests="10" failures="2" errors="1" skipped="3"/></testsuites>')
    assert jax_matrix.suite_counts(tmp_path / "junit.xml") == {"passed": 4, "failed": 2, "errors": 1, "skipped": 3}
    results = [{"op": "det", "check": "vmap", "passed": True, "skipped": False},
               {"op": "det", "check": "torch", "passed": True, "skipped": True},
               {"op": "sort", "check": "jit", "passed": False, "skipped": False}]
    (tmp_path / "check.json").write_text(json.dumps({"results": results}))
    counts = jax_matrix.check_counts(tmp_path / "check.json")
    assert counts == {"passed": 1, "failed": 1, "skipped": 1, "failures": ["sort / jit"]}
    row = {"env": "jax0.12.0.1-cpu-off", "report": {"python": "3.12.3", "jax": "0.12.0.1", "jaxlib": "0.12.0.1",
           "backend": "cpu", "devices": ["cpu"], "flags": {"jax_custom_jvp3": False}},
           "suite": {"rc": 1, "seconds": 5, "passed": 4, "failed": 2, "errors": 1, "skipped": 3},
           "check": {"rc": 124, "seconds": 9, **counts}}
    md = jax_matrix.summary_markdown([row])
    line = "| jax0.12.0.1-cpu-off | 3.12.3 | 0.12.0.1 / 0.12.0.1 | cpu (1x cpu) | none | 4 / 2, 1 errors / 3, 5 s |"
    assert line in md
    assert "1 / 1 / 1, 9 s (timed out) |" in md and "- jax0.12.0.1-cpu-off: sort / jit" in md


@pytest.mark.parametrize("name, version", [("jax-0.12.0.1-py3-none-any.whl", "0.12.0.1"),
                                           ("jax_cuda12_pjrt-0.12.0.1-py3-none-manylinux_2_27_x86_64.whl", "0.12.0.1")])
def test_parse_wheel(name, version):
    assert jax_matrix.parse_wheel(name).version == version


def test_plugins_of_another_jax_are_named(tmp_path):
    seen = [["jax-cuda12-plugin", "0.11.2", "/usr/lib/python3/dist-packages/jax_cuda12_plugin-0.11.2.dist-info"],
            ["jax-cuda12-pjrt", "0.12.0.1", "/venv/lib/python3.12/site-packages/jax_cuda12_pjrt-0.12.0.1.dist-info"]]
    assert jax_matrix.foreign_plugins(seen, "0.12.0.1") == [
        "jax-cuda12-plugin 0.11.2 (/usr/lib/python3/dist-packages/jax_cuda12_plugin-0.11.2.dist-info)"]
    assert jax_matrix.foreign_plugins(seen[1:], "0.12.0.1") == []
    # A distribution of another version, visible to an interpreter, is refused by name.
    info = tmp_path / "site" / "jax_cuda12_plugin-0.0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: jax_cuda12_plugin\nVersion: 0.0.1\n")
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={tmp_path / 'site'} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    env = jax_matrix.Env(jax="0.12.0.1", flags="off", platform="cpu", plugin=None, wheels=())
    with pytest.raises(RuntimeError, match=r"jax-cuda12-plugin 0\.0\.1 .*--no-system-site-packages"):
        jax_matrix.check_plugins(python, env, tmp_path / "plugins.txt")
