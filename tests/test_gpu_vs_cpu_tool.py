"""``tools/gpu_vs_cpu.py`` runs every stage in every mode and writes the compiled programs; on a
CPU (the default device is the CPU device) every difference is zero."""

import subprocess
import sys

from _repo_files import ROOT, subprocess_env


def test_the_tool_compares_every_stage_and_dumps_its_programs(tmp_path):
    env = subprocess_env(JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_vs_cpu.py"), "--dump", str(tmp_path),
                           "--no-optimizations"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if "max |gpu - cpu|" in line]
    stages = {line[:28].strip() for line in lines}
    assert {"batch_norm training", "linear + cross_entropy", "the whole CNN, training",
            "vmap attention, q unbatched", "the same in jax.numpy"} <= stages
    assert len(lines) == 4 * len(stages) and all(line.endswith("= 0.0e+00") for line in lines), done.stdout
    dumped = sorted(p.name for p in tmp_path.iterdir())
    assert len(dumped) == 2 * len(stages) and "batch_norm_training_jit_grad.hlo" in dumped
    assert "HloModule" in (tmp_path / "batch_norm_training_jit_grad.hlo").read_text()
