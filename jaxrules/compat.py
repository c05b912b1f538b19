"""Which JAX versions jaxrules was tested with (``docs/compatibility.md``).

``pyproject.toml`` declares ``jax>=0.10.2`` with no upper cap, so that jaxrules installs beside
the JAX a user has. The mechanism rests on JAX internals (``jaxrules/mechanism.py``), which a
release can change without notice, so ``import jaxrules`` warns once (``UntestedJaxWarning``)
on a JAX newer than ``NEWEST_TESTED_JAX``. After a release passes ``tools/jax_matrix.py``, bump
the constant and add its rows to ``docs/compatibility.md``.

Silence it with ``warnings.filterwarnings("ignore", message="jaxrules was tested with")`` before
the import, or ``PYTHONWARNINGS="ignore::UserWarning"`` (a category filter on
``jaxrules.compat.UntestedJaxWarning`` takes effect for later checks only, as the class exists
once the package is imported).
"""

from __future__ import annotations

import os
import re
import warnings

import jax

__all__ = ["NEWEST_TESTED_JAX", "OLDEST_SUPPORTED_JAX", "UntestedJaxWarning", "gpu_reduction_bug", "jax_version_tuple",
           "triton_gemm_float64_bug", "warn_if_untested"]

_WARNED = "JAXRULES_UNTESTED_JAX_WARNED"  # set once warned: the check's worker processes stay quiet
OLDEST_SUPPORTED_JAX = "0.10.2"  # pyproject.toml's lower bound
NEWEST_TESTED_JAX = "0.12.0.1"  # the newest JAX whose test suite and full check passed (docs/compatibility.md)


class UntestedJaxWarning(UserWarning):
    """JAX is newer than the newest version jaxrules was tested with."""


def jax_version_tuple(version: str) -> tuple[int, ...]:
    """The release numbers of a version string: ``"0.12.0.1"`` -> ``(0, 12, 0, 1)``,
    ``"0.12.1.dev20261101"`` -> ``(0, 12, 1)`` (a pre-release counts as its release)."""
    match = re.match(r"\d+(\.\d+)*", version.strip())
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    parts = [int(p) for p in match.group(0).split(".")]
    while len(parts) > 1 and parts[-1] == 0:  # 0.12 == 0.12.0
        parts.pop()
    return tuple(parts)


def warn_if_untested(version: str | None = None) -> bool:
    """Warn (``UntestedJaxWarning``) when ``version`` (default: the installed JAX's) is newer than
    ``NEWEST_TESTED_JAX``; return whether it is. Once per process tree: a process started by one
    that warned (the environment variable ``JAXRULES_UNTESTED_JAX_WARNED``) does not repeat it."""
    if version is None:
        version = jax.__version__
    newer = jax_version_tuple(version) > jax_version_tuple(NEWEST_TESTED_JAX)
    if newer and not os.environ.get(_WARNED):
        os.environ[_WARNED] = "1"
        warnings.warn(
            f"jaxrules was tested with JAX up to {NEWEST_TESTED_JAX}; this is JAX {version}. jaxrules' "
            "mechanism uses JAX internals that a release may change: run `python -m jaxrules check` "
            "to see that every op still passes (docs/compatibility.md).",
            UntestedJaxWarning,
            stacklevel=2,
        )
    return newer


# Bugs of a JAX release's platform that give wrong values in plain JAX as in jaxrules
# (docs/compatibility.md, "On a GPU"); the check (``testing.PLATFORM_BUGS``) and the tests ask
# these whether one applies in this process.

def _on_jax_gpu(release: tuple[int, int], avoided_by: tuple[str, ...]) -> bool:
    flags = os.environ.get("XLA_FLAGS", "").split()
    return (jax.default_backend() == "gpu" and jax_version_tuple(jax.__version__)[:2] == release
            and not any(flag in flags for flag in avoided_by))


def triton_gemm_float64_bug() -> bool:
    """jax 0.12's CUDA backend computes a float64 batched product of an unbatched operand wrongly
    under ``jit`` (XLA's Triton GEMM), unless ``--xla_gpu_enable_triton_gemm=false``."""
    return _on_jax_gpu((0, 12), ("--xla_gpu_enable_triton_gemm=false",))


def gpu_reduction_bug() -> bool:
    """jax 0.12's CUDA backend reduces over several non-minor axes (``jnp.var(x, axis=(0, 2, 3))``)
    off by 0.4-0.8% in some compilations, unless ``--xla_gpu_deterministic_ops=true`` or
    ``--xla_gpu_autotune_level=0``."""
    return _on_jax_gpu((0, 12), ("--xla_gpu_deterministic_ops=true", "--xla_gpu_autotune_level=0"))
