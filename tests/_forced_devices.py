"""Run a test module's worker on forced host devices: JAX starts with one CPU device in the test
process, so the multi-device tests (``test_partitioning``, ``test_explicit_sharding``) run their
``__main__`` in a subprocess with ``--xla_force_host_platform_device_count`` and read back the
JSON rows it prints, one per line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from _repo_files import subprocess_env


def forced_devices_env(devices: int = 8) -> dict:
    """The environment of a process that runs on ``devices`` CPU devices: JAX on its CPU backend
    alone (``JAX_PLATFORMS=cpu``; where a CUDA plugin is installed JAX would otherwise start on the
    one GPU), the host split by ``--xla_force_host_platform_device_count``."""
    # This process's other XLA flags (tests/conftest.py's fast-compile ones) carry over: without them
    # the workers' compilations took about 40% more CPU time (test_partitioning's: 54 -> 31 s).
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform")]
    return subprocess_env(XLA_FLAGS=" ".join([*flags, f"--xla_force_host_platform_device_count={devices}"]),
                          JAX_PLATFORMS="cpu")


def worker_rows(script: str, devices: int = 8, timeout: int = 600, args=()) -> list[dict]:
    """The JSON rows ``python script *args`` prints with ``devices`` host devices (the repository
    first on the path); fails with its output when it exits non-zero."""
    env = forced_devices_env(devices)
    done = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, env=env, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def one_xdist_worker(module: str):
    """The mark that keeps a module's tests on one xdist worker (pyproject's ``--dist=loadgroup``), so
    that its module fixture, one run of its forced-device worker, runs once: spread over both
    workers, each would run it (test_partitioning's 70 CPU s twice)."""
    return pytest.mark.xdist_group(module)
