"""``python -m jaxrules check``'s run loop: cut short by Ctrl-C (SIGINT) it stops at once, its
worker processes included, prints the table and the counts of the records that finished and exits
with 130; ``check --json`` reports each record's cost; the workers take the records costliest
first by the costs of earlier runs, kept beside the compilation cache."""

import json
import os
import re
import select
import signal
import subprocess
import sys
import time

import pytest
from _repo_files import ROOT, subprocess_env

import jaxrules
from jaxrules import cli
from jaxrules.cli import RECORD_CPU_BUDGET_S, costliest_first, load_costs, main, save_costs
from jaxrules.testing import CheckResult

_PROGRESS = re.compile(r"\b([1-9]\d*)/(\d+) \[")  # tqdm's "N/total [": N checks done


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _alive(pid: int) -> bool:
    """Running: a zombie (exited, its orphan not yet reaped by the container's init) is not."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize(("workers", "whole_group"), [("1", False), ("2", False), ("2", True)],
                         ids=["in-process", "workers", "workers-terminal"])
def test_ctrl_c_stops_check_at_once_and_prints_what_finished(workers, whole_group):
    """SIGINT once the first record has finished (every record's ``jit`` check: far from done):
    to the parent alone, or to the whole process group as a terminal's Ctrl-C sends it."""
    env = subprocess_env(PYTHONFAULTHANDLER="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jaxrules", "check", "--checks", "jit", "--workers", workers, "--no-cache"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        progress, deadline = b"", time.monotonic() + 240
        while not _PROGRESS.search(progress.decode(errors="replace")) and time.monotonic() < deadline:
            if select.select([proc.stderr], [], [], 1.0)[0]:
                chunk = os.read(proc.stderr.fileno(), 65536)
                if not chunk:
                    break
                progress += chunk
        assert _PROGRESS.search(progress.decode(errors="replace")), progress.decode(errors="replace")[-2000:]
        children = _children(proc.pid)
        if workers == "2":
            assert len(children) >= 2, children  # the two workers (and multiprocessing's resource tracker)
        sent = time.monotonic()
        if whole_group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # where it hangs: faulthandler's dump of every thread
            proc.send_signal(signal.SIGABRT)
            err = proc.communicate(timeout=30)[1].decode(errors="replace")
            raise AssertionError(f"check did not end within 60 s of SIGINT:\n{err[-8000:]}") from None
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    out, err = out.decode(), progress.decode(errors="replace") + err.decode(errors="replace")
    assert proc.returncode == 130, (proc.returncode, out[-2000:], err[-2000:])
    assert took < 20, took  # at once: no running record waited for
    assert "Traceback" not in err, err[-3000:]
    summary = re.search(r": (\d+) of (\d+) ops \(interrupted\), (\d+) checks in", out)
    assert summary, out[-2000:]
    finished, total, checks = (int(g) for g in summary.groups())
    assert 1 <= finished < total and checks == finished
    counts = re.search(r"^(\d+) passed, 0 failed(?:, (\d+) skipped)?$", out, re.M)  # skipped: kernels off a GPU
    assert counts and int(counts[1]) >= 1 and int(counts[1]) + int(counts[2] or 0) == checks, out[-2000:]
    table = out[: out.index("\njaxrules check on")].strip().splitlines()
    assert table[0].split() == ["op", "jit"] and len(table) == 2 + finished, table
    # The workers' SIGTERM, and the resource tracker's exit once they are gone, take a moment
    # on a loaded machine: poll, bounded.
    deadline = time.monotonic() + 20
    while [pid for pid in children if _alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in children if _alive(pid)], children


def test_check_json_reports_each_records_cost(tmp_path, capsys):
    out = tmp_path / "report.json"
    assert main(["check", "--ops", "deg2rad,rad2deg", "--checks", "jit,vmap", "--workers", "1",
                 "--json", str(out), "--quiet"]) == 0
    report = json.loads(out.read_text())
    assert report["interrupted"] is False and report["record_cpu_budget_s"] == RECORD_CPU_BUDGET_S
    assert sorted(c["op"] for c in report["records"]) == ["deg2rad", "rad2deg"]
    for cost in report["records"]:
        mine = [r for r in report["results"] if r["op"] == cost["op"]]
        assert len(mine) == 2 and all(r["cpu_seconds"] > 0 and r["seconds"] > 0 for r in mine)
        assert cost["cpu_seconds"] == pytest.approx(sum(r["cpu_seconds"] for r in mine))
        assert cost["seconds"] == pytest.approx(sum(r["seconds"] for r in mine))
    cpu = [c["cpu_seconds"] for c in report["records"]]
    assert cpu == sorted(cpu, reverse=True)  # costliest first
    assert "over the budget" not in capsys.readouterr().out


def test_check_lists_the_records_over_the_cost_budget(monkeypatch, capsys):
    monkeypatch.setattr("jaxrules.cli.RECORD_CPU_BUDGET_S", 0.0)
    assert main(["check", "--ops", "deg2rad", "--checks", "jit", "--workers", "1", "--quiet"]) == 0
    assert re.search(r"^over the budget of 0 CPU s a record: deg2rad \d+ s$", capsys.readouterr().out, re.M)


def test_workers_take_unknown_records_then_the_costliest_first():
    a, b, c, d, e = jaxrules.records()[:5]
    costs = {a.name: {"jit": 1.0, "vmap": 2.0}, b.name: {"jit": 5.0, "vmap": 0.5}, c.name: {"jit": 9.0},
             d.name: {"jit": 0.5, "vmap": 6.0}}
    # c never ran vmap, e never ran: unknown, first (in the given order); then by the summed
    # seconds of the checks asked for: d 6.5, b 5.5, a 3.0
    assert costliest_first([a, b, c, d, e], ("jit", "vmap"), costs) == [c, e, d, b, a]
    # jit alone: c 9, b 5, a 1, d 0.5
    assert costliest_first([a, b, c, d, e], ("jit",), costs) == [e, c, b, a, d]
    assert costliest_first([a, b, c], ("jit",), {}) == [a, b, c]  # no costs: the records' order


def test_costs_of_a_run_are_merged_into_the_cache_directory(tmp_path):
    assert load_costs(None) == {} and load_costs(str(tmp_path)) == {}
    save_costs(str(tmp_path), [CheckResult("abs", "jit", True, cpu_seconds=1.5),
                               CheckResult("abs", "vmap", True, cpu_seconds=2.0)])
    save_costs(str(tmp_path), [CheckResult("abs", "jit", True, cpu_seconds=0.5),
                               CheckResult("cos", "jit", True, cpu_seconds=3.0)])
    assert load_costs(str(tmp_path)) == {"abs": {"jit": 0.5, "vmap": 2.0}, "cos": {"jit": 3.0}}
    (tmp_path / "jaxrules-record-costs.json").write_text("{not json")
    assert load_costs(str(tmp_path)) == {}  # an unreadable file: no costs, the records' order


def test_check_with_a_cache_keeps_the_records_costs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JAXRULES_CHECK_CACHE", str(tmp_path))
    assert main(["check", "--ops", "deg2rad,rad2deg", "--checks", "jit", "--workers", "2", "--quiet"]) == 0
    costs = load_costs(str(tmp_path))
    assert sorted(costs) == ["deg2rad", "rad2deg"] and all(c["jit"] > 0 for c in costs.values())
    assert "2 passed, 0 failed" in capsys.readouterr().out


def test_in_process_run_stops_after_a_keyboard_interrupt_that_was_dropped(monkeypatch):
    """JAX catches every exception in places, so a Ctrl-C's KeyboardInterrupt can be dropped
    inside a record's check: the run still stops before the next record and says it was cut."""
    ran = []

    def check_record(record, checks, full=False):
        ran.append(record.name)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler runs here
        except KeyboardInterrupt:
            pass  # dropped, as a bare ``except:`` does
        return [CheckResult(record.name, check, True, 0.0) for check in checks]

    monkeypatch.setattr(cli, "_check_record", check_record)
    selected = jaxrules.records()[:3]
    results, interrupted = cli._run_checks(selected, ("jit",), workers=1, quiet=True, full=False)
    assert interrupted and ran == [selected[0].name] and [r.op for r in results] == [selected[0].name]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
