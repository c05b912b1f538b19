"""The rotating subsets of the suite's registry-wide tests (``test_registry``, ``test_sharded``,
``test_fuzz_records``): which records a run covers is chosen by a seed, the commit under test
(``git rev-parse HEAD``; 0 outside git) unless the environment sets one, so a run is reproducible
and successive commits cover different records. ``python -m jaxrules check`` checks every record."""

from __future__ import annotations

import os
import subprocess
import zlib


def commit_seed(variable: str = "JAXRULES_TEST_SEED") -> int:
    """``$variable`` if set, else the first 32 bits of HEAD's hash (0 outside git)."""
    if variable in os.environ:
        return int(os.environ[variable])
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                              cwd=os.path.dirname(__file__)).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        head = ""
    return int(head[:8], 16) if head else 0


def rotating_subset(names: list[str], count: int, seed: int, salt: str = "") -> list[str]:
    """``count`` of ``names``, ordered by a hash of the seed, ``salt`` and the name."""
    return sorted(names, key=lambda name: zlib.crc32(f"{seed}/{salt}/{name}".encode()))[:count]


def rotating_share(records: list, share: int, salt: str, everything: str) -> list:
    """The records a run checks, in their order: every one where the environment sets the variable
    ``everything`` (e.g. ``JAXRULES_EMPTY_ALL=1``), else ``len(records) // share`` of them
    (``rotating_subset`` of their names, seeded by the commit)."""
    if os.environ.get(everything):
        return list(records)
    chosen = set(rotating_subset([r.name for r in records], len(records) // share, commit_seed(), salt))
    return [r for r in records if r.name in chosen]
