#!/usr/bin/env python3
"""Run jaxrules' test suite and ``python -m jaxrules check`` under every JAX version in a folder of
wheels, offline: one command per JAX release (``docs/compatibility.md``).

    python tools/jax_matrix.py --wheels DIR [--out DIR] [--flags off,custom3] [--platforms auto]
                               [--only suite|check] [--workers N] [--timeout S] [--dry-run]

``DIR`` holds wheels of one or more JAX versions: ``jax`` and ``jaxlib`` (required), and optionally
``jax_cuda12_plugin`` + ``jax_cuda12_pjrt`` (or the cuda13 ones) of the same version; a wheel split
into ``NAME.whl.part-aa``, ``-ab``, ... (``split -b 29m``) is joined first. Any other wheel (numpy,
say) is installed into every environment, before JAX's.

For each JAX version it makes one virtual environment (``python -m venv --system-site-packages``:
torch, pytest, numpy, ... of this machine are reused; ``pip install --no-index --no-deps
--ignore-installed`` of that version's wheels). An environment that sees a PJRT plugin package of
another JAX version (the system's ``jax-cuda12-plugin``, say) is refused with an error naming it:
JAX loads every visible ``jax_plugins`` package and entry point. It runs, for each flag setting and
platform:

* flags ``off`` (JAX's defaults) and ``custom3`` (``JAX_CUSTOM_JVP3=1 JAX_CUSTOM_VJP3=1``: JAX's
  hijax-based ``custom_jvp``/``custom_vjp``; a JAX without a flag ignores its variable, and the
  environment's report says which flags took effect);
* platform ``gpu`` (``JAX_PLATFORMS=cuda``) where the version has a CUDA plugin wheel, and ``cpu``
  (``JAX_PLATFORMS=cpu``) always (``--platforms`` narrows it);
* ``python -m pytest -n N -q tests`` (junit XML kept) and ``python -m jaxrules check --workers N
  --json FILE``, with this repository on ``PYTHONPATH`` (nothing installed into it).

The table of passed/failed/skipped per environment goes to ``OUT/summary.md`` (and
``OUT/summary.json``); each run's log, junit XML, check JSON and environment report go to
``OUT/<environment>/``. Standard library only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FLAG_SETTINGS = {
    "off": {},
    "custom3": {"JAX_CUSTOM_JVP3": "1", "JAX_CUSTOM_VJP3": "1"},
}
PLUGINS = ("cuda12", "cuda13")
_WHEEL = re.compile(r"^(?P<name>[A-Za-z0-9_.]+?)-(?P<version>[^-]+)(-\d[^-]*)?"
                    r"-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$")
_PART = re.compile(r"^(?P<wheel>.+\.whl)\.part-[a-z]+$")


@dataclasses.dataclass(frozen=True)
class Wheel:
    file: str  # the wheel's file name (joined from its parts if it came split)
    name: str  # normalized: jax, jaxlib, jax_cuda12_plugin, numpy, ...
    version: str
    py: str
    plat: str


@dataclasses.dataclass(frozen=True)
class Env:
    """One run: a JAX version's environment, a flag setting and a platform."""

    jax: str
    flags: str
    platform: str  # "cpu" or "gpu"
    plugin: str | None  # "cuda12"/"cuda13" in the environment (also for its cpu runs), else None
    wheels: tuple[str, ...]  # installed in this order (others first, then jaxlib, jax, plugins)

    @property
    def name(self) -> str:
        return f"jax{self.jax}-{self.platform}-{self.flags}"

    @property
    def venv_name(self) -> str:
        return f"venv-jax{self.jax}"

    @property
    def env_vars(self) -> dict[str, str]:
        return {"JAX_PLATFORMS": "cuda" if self.platform == "gpu" else "cpu", **FLAG_SETTINGS[self.flags]}


def parse_wheel(file: str) -> Wheel | None:
    m = _WHEEL.match(file)
    if m is None:
        return None
    name = re.sub(r"[-_.]+", "_", m["name"]).lower()
    return Wheel(file, name, m["version"], m["py"], m["plat"])


def wheel_files(names) -> list[str]:
    """The wheels among file names: ``X.whl`` itself, or ``X.whl`` for its parts ``X.whl.part-*``."""
    out = set()
    for n in names:
        if n.endswith(".whl"):
            out.add(n)
        elif (m := _PART.match(n)) is not None:
            out.add(m["wheel"])
    return sorted(out)


def fits_python(wheel: Wheel, python_tag: str) -> bool:
    """Whether a wheel's Python tag admits this interpreter (``cp312``; ``py3``/``py2.py3`` admit any)."""
    tags = wheel.py.split(".")
    return python_tag in tags or any(t in ("py3", "py2") for t in tags)


def fits_machine(wheel: Wheel, machine: str = "x86_64") -> bool:
    return wheel.plat == "any" or all(machine in p for p in wheel.plat.split("."))


def plan(names, python_tag: str, flags=("off", "custom3"), platforms: str = "auto", machine: str = "x86_64"):
    """The runs for a folder holding the files ``names``: a list of ``Env`` and a list of
    ``(what, why)`` for what is left out."""
    skipped = []
    wheels = []
    for file in wheel_files(names):
        w = parse_wheel(file)
        if w is None:
            skipped.append((file, "not a wheel file name"))
        elif not fits_python(w, python_tag):
            skipped.append((file, f"not for {python_tag}"))
        elif not fits_machine(w, machine):
            skipped.append((file, f"not for {machine}"))
        else:
            wheels.append(w)
    jax_names = {"jax", "jaxlib"} | {f"jax_{p}_{k}" for p in PLUGINS for k in ("plugin", "pjrt")}
    others = [w.file for w in wheels if w.name not in jax_names]
    by = {(w.name, w.version): w.file for w in wheels if w.name in jax_names}
    envs = []
    for version in sorted({v for n, v in by if n == "jax"}, key=_version_key):
        if ("jaxlib", version) not in by:
            skipped.append((f"jax {version}", f"no jaxlib {version} wheel for {python_tag}"))
            continue
        plugin = next((p for p in PLUGINS if (f"jax_{p}_plugin", version) in by and (f"jax_{p}_pjrt", version) in by),
                      None)
        for p in PLUGINS:
            if p != plugin and ((f"jax_{p}_plugin", version) in by) != ((f"jax_{p}_pjrt", version) in by):
                skipped.append((f"jax {version} {p}", "the plugin wheel needs its pjrt wheel (both or neither)"))
        installs = (*others, by[("jaxlib", version)], by[("jax", version)])
        if plugin:
            installs += (by[(f"jax_{plugin}_pjrt", version)], by[(f"jax_{plugin}_plugin", version)])
        plats = {"auto": ["gpu", "cpu"] if plugin else ["cpu"], "cpu": ["cpu"], "gpu": ["gpu"]}[platforms]
        if "gpu" in plats and not plugin:
            skipped.append((f"jax {version} gpu", "no CUDA plugin wheels"))
            plats = [p for p in plats if p != "gpu"]
        for flag in flags:
            for platform in plats:
                envs.append(Env(version, flag, platform, plugin, installs))
    return envs, skipped


def _version_key(v: str):
    return tuple(int(p) if p.isdigit() else -1 for p in re.findall(r"\d+|[a-z]+", v))


# ----------------------------------------------------------------------------------------------
# Running.


def join_parts(folder: Path, work: Path) -> Path:
    """Where the wheels are, with any split wheel joined (into ``work``, the folder left as is)."""
    names = os.listdir(folder)
    split = [w for w in wheel_files(names) if w not in names]
    if not split:
        return folder
    work.mkdir(parents=True, exist_ok=True)
    for w in wheel_files(names):
        target = work / w
        if w in names:
            if not target.exists():
                os.symlink(folder.resolve() / w, target)
            continue
        parts = sorted(n for n in names if n.startswith(w + ".part-"))
        with open(target, "wb") as out:
            for p in parts:
                with open(folder / p, "rb") as f:
                    shutil.copyfileobj(f, out)
        print(f"joined {len(parts)} parts into {target}", flush=True)
    return work


def run(cmd, log: Path, env=None, timeout=None, cwd=REPO) -> tuple[int, float]:
    """Run ``cmd`` (its own process group, killed whole at the timeout), output to ``log``."""
    start = time.time()
    with open(log, "a") as out:
        out.write(f"$ {shlex.join(map(str, cmd))}\n")
        out.flush()
        proc = subprocess.Popen(list(map(str, cmd)), stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = 124
            out.write(f"\n[timed out after {timeout} s]\n")
    return rc, time.time() - start


def make_venv(env: Env, wheels: Path, venvs: Path, python: str, system_site: bool, log: Path) -> Path:
    venv = venvs / env.venv_name
    py = venv / "bin" / "python"
    stamp = venv / "jax_matrix_wheels.txt"
    want = "\n".join(env.wheels)
    if py.exists() and stamp.exists() and stamp.read_text() == want:
        return py
    shutil.rmtree(venv, ignore_errors=True)
    cmd = [python, "-m", "venv", *(["--system-site-packages"] if system_site else []), venv]
    if run(cmd, log)[0] != 0:
        raise RuntimeError(f"venv failed: see {log}")
    pip = [py, "-m", "pip", "install", "--no-index", "--no-deps", "--ignore-installed", "--disable-pip-version-check",
           "--no-warn-script-location"]
    if run(pip + [wheels / w for w in env.wheels], log)[0] != 0:
        raise RuntimeError(f"pip install failed: see {log}")
    stamp.write_text(want)
    return py


_REPORT = """
import json, os, sys, jax, jaxlib
flags = {f: jax.config.values[f] for f in ("jax_custom_jvp3", "jax_custom_vjp3") if f in jax.config.values}
try:
    devices = [d.device_kind for d in jax.devices()]
except Exception as e:
    devices = [f"error: {e}"]
print(json.dumps({"python": sys.version.split()[0], "jax": jax.__version__, "jaxlib": jaxlib.__version__,
                  "jax_file": jax.__file__, "backend": jax.default_backend(), "devices": devices, "flags": flags}))
"""


# The PJRT plugin distributions an interpreter sees (its own site-packages and, with
# --system-site-packages, the system's): JAX loads every ``jax_plugins`` package and entry point.
_PLUGINS = """
import importlib.metadata as md, json
seen = []
for d in md.distributions():
    name = (d.metadata["Name"] or "").lower().replace("_", "-")
    if name.startswith(("jax-cuda", "jax-rocm")) or any(e.group == "jax_plugins" for e in d.entry_points):
        seen.append([name, d.version, str(getattr(d, "_path", ""))])
print(json.dumps(seen))
"""


def foreign_plugins(plugins, jax_version: str) -> list[str]:
    """The plugin distributions (``[name, version, path]``, as ``_PLUGINS`` prints) of another
    version than ``jax_version``: JAX would load them beside (or instead of) that version's, and a
    plugin built for another jaxlib fails ("PJRT_Api already exists for device type cuda", "FFI
    handler ... API version ... is incompatible", "No FFI handler registered")."""
    return [f"{name} {version} ({path})" for name, version, path in plugins if version != jax_version]


def check_plugins(py: Path, env: Env, log: Path) -> None:
    """Refuse an environment that sees a PJRT plugin of another JAX version (``foreign_plugins``)."""
    proc = subprocess.run([py, "-c", _PLUGINS], capture_output=True, text=True)
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"listing the PJRT plugins failed: see {log}")
    if foreign := foreign_plugins(json.loads(proc.stdout.strip().splitlines()[-1]), env.jax):
        raise RuntimeError(
            f"jax {env.jax}'s environment sees PJRT plugins of another JAX: {'; '.join(foreign)}. JAX loads every "
            "visible jax_plugins package, so uninstall them from the system's site-packages (pip uninstall "
            "jax-cuda12-plugin jax-cuda12-pjrt ...) or pass --no-system-site-packages")


def suite_counts(junit: Path) -> dict | None:
    if not junit.exists():
        return None
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    return {"passed": passed, "failed": total["failures"], "errors": total["errors"], "skipped": total["skipped"]}


def check_counts(path: Path) -> dict | None:
    if not path.exists():
        return None
    results = json.loads(path.read_text())["results"]
    skipped = sum(bool(r.get("skipped")) for r in results)
    failed = [f"{r['op']} / {r['check']}" for r in results if not r["passed"]]
    return {"passed": len(results) - len(failed) - skipped, "failed": len(failed), "skipped": skipped,
            "failures": failed}


def run_env(env: Env, py: Path, out: Path, args) -> dict:
    d = out / env.name
    d.mkdir(parents=True, exist_ok=True)
    log = d / "log.txt"
    base = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", *FLAG_SETTINGS["custom3"])}
    base["PYTHONPATH"] = str(REPO) + (os.pathsep + base["PYTHONPATH"] if base.get("PYTHONPATH") else "")
    base.pop("JAXRULES_UNTESTED_JAX_WARNED", None)
    environ = {**base, **env.env_vars}
    row = {"env": env.name, "jax": env.jax, "flags": env.flags, "platform": env.platform}
    rc, _ = run([py, "-c", _REPORT], d / "report.txt", env=environ, timeout=300)
    lines = (d / "report.txt").read_text().strip().splitlines()
    try:
        row["report"] = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        row["report"] = {"error": f"rc {rc}, see {d / 'report.txt'}"}
    n = str(args.workers)
    if args.only in (None, "suite"):
        junit = d / "junit.xml"
        cmd = [py, "-m", "pytest", "-n", n, "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
               *shlex.split(args.pytest_args), "tests"]
        rc, secs = run(cmd, log, env=environ, timeout=args.timeout)
        row["suite"] = {"rc": rc, "seconds": round(secs), **(suite_counts(junit) or {})}
    if args.only in (None, "check"):
        report = d / "check.json"
        cmd = [py, "-m", "jaxrules", "check", "--workers", n, "--quiet", "--json", report,
               *shlex.split(args.check_args)]
        rc, secs = run(cmd, log, env=environ, timeout=args.timeout)
        row["check"] = {"rc": rc, "seconds": round(secs), **(check_counts(report) or {})}
    (d / "row.json").write_text(json.dumps(row, indent=1))
    return row


def summary_markdown(rows) -> str:
    def counts(c):
        if c is None:
            return "not run"
        if "passed" not in c:
            return f"no result (rc {c['rc']})"
        errors = f", {c['errors']} errors" if c.get("errors") else ""
        timed_out = " (timed out)" if c["rc"] == 124 else ""
        return f"{c['passed']} / {c['failed']}{errors} / {c['skipped']}, {c['seconds']} s{timed_out}"

    lines = ["| environment | python | jax / jaxlib | backend (devices) | flags on "
             "| suite p / f / s | check p / f / s |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        rep = r.get("report", {})
        flags = ", ".join(f for f, v in rep.get("flags", {}).items() if v) or "none"
        devs = rep.get("devices", [])
        dev = f"{rep.get('backend', '?')} ({len(devs)}x {devs[0] if devs else '?'})"
        lines.append(f"| {r['env']} | {rep.get('python', '?')} | {rep.get('jax', '?')} / {rep.get('jaxlib', '?')} | "
                     f"{dev} | {flags} | {counts(r.get('suite'))} | {counts(r.get('check'))} |")
    failures = [(r["env"], f) for r in rows for f in (r.get("check") or {}).get("failures", [])]
    if failures:
        lines += ["", "Check failures:", ""] + [f"- {e}: {f}" for e, f in failures]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wheels", required=True, type=Path, help="folder of wheels (or their .part-* pieces)")
    p.add_argument("--out", type=Path, default=Path("jax_matrix_out"), help="results (default ./jax_matrix_out)")
    p.add_argument("--venvs", type=Path, help="where the environments go (default OUT/venvs; kept and reused)")
    p.add_argument("--flags", default="off,custom3", help=f"comma-separated of {', '.join(FLAG_SETTINGS)}")
    p.add_argument("--platforms", default="auto", choices=("auto", "cpu", "gpu"),
                   help="auto: gpu where a CUDA plugin wheel is, and cpu")
    p.add_argument("--only", choices=("suite", "check"), help="run only the test suite or only the check")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="pytest -n and check --workers")
    p.add_argument("--timeout", type=float, default=None, help="seconds per suite or check run (killed past it)")
    p.add_argument("--python", default=sys.executable, help="the interpreter the environments are made from")
    p.add_argument("--no-system-site-packages", action="store_true",
                   help="isolated environments (every dependency must then be a wheel in --wheels)")
    p.add_argument("--pytest-args", default="", help="more pytest arguments (e.g. '-x -k mechanism')")
    p.add_argument("--check-args", default="", help="more check arguments (e.g. '--ops layer_norm')")
    p.add_argument("--dry-run", action="store_true", help="print the plan, make and run nothing")
    args = p.parse_args(argv)
    flags = tuple(args.flags.split(","))
    if unknown := set(flags) - set(FLAG_SETTINGS):
        p.error(f"unknown flag settings {sorted(unknown)}")
    tag = subprocess.run([args.python, "-c", "import sys;print(f'cp{sys.version_info[0]}{sys.version_info[1]}')"],
                         capture_output=True, text=True, check=True).stdout.strip()
    envs, skipped = plan(os.listdir(args.wheels), tag, flags, args.platforms, os.uname().machine)
    for what, why in skipped:
        print(f"left out: {what}: {why}")
    for e in envs:
        variables = " ".join(f"{k}={v}" for k, v in e.env_vars.items())
        print(f"plan: {e.name}  ({e.venv_name}: {', '.join(e.wheels)}; {variables})")
    if args.dry_run or not envs:
        return 0 if envs else 2
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out.resolve()
    wheels = join_parts(args.wheels, out / "wheels")
    venvs = (args.venvs or out / "venvs").resolve()
    venvs.mkdir(parents=True, exist_ok=True)
    rows = []
    for e in envs:
        print(f"== {e.name}", flush=True)
        try:
            py = make_venv(e, wheels, venvs, args.python, not args.no_system_site_packages, out / f"{e.venv_name}.log")
            check_plugins(py, e, out / f"{e.venv_name}.plugins.txt")
            rows.append(run_env(e, py, out, args))
        except RuntimeError as err:
            rows.append({"env": e.name, "jax": e.jax, "flags": e.flags, "platform": e.platform,
                         "report": {"error": str(err)}})
        (out / "summary.json").write_text(json.dumps(rows, indent=1))
        (out / "summary.md").write_text(summary_markdown(rows))
        print(summary_markdown(rows[-1:]), flush=True)
    print(f"summary: {out / 'summary.md'}")
    failed = [r for r in rows for k in ("suite", "check") if k in r and r[k]["rc"] != 0]
    broken = [r for r in rows if "error" in r["report"]]
    return 1 if failed or broken else 0


if __name__ == "__main__":
    sys.exit(main())
