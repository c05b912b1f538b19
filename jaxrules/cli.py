"""``python -m jaxrules``: ``check`` runs the harness on every registered op; ``list`` prints
the coverage table (``--wide``: with the seed functions; ``--all``: also every name of each
namespace; ``--markdown``: COVERAGE.md's content); ``opinfo`` runs torch's OpInfo samples through
the ``jaxrules.torch`` adapters (``jaxrules/opinfo.py``); ``--version``."""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import gc
import importlib.metadata
import json
import os
import re
import signal
import sys
import textwrap
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context

import jax
from tqdm import tqdm

import jaxrules  # ``jaxrules.records``, looked up at each use
import jaxrules.nn  # noqa: F401 (the namespaces ``list --all`` reads: ``namespaces()``)
import jaxrules.numpy  # noqa: F401
import jaxrules.scipy  # noqa: F401
from jaxrules import __version__
from jaxrules._namespace import namespaces
from jaxrules.registry import OpRecord
from jaxrules.testing import (
    CHECKS,
    HOST_DEVICES,
    OPT_IN_CHECKS,
    CheckResult,
    interpreted_kernels,
    modes_in_use,
    release_programs,
    run_check,
)

# XLA's CPU compiler options for the harness's many small programs (read when the backend starts,
# so set before the process's first computation): the older loop emitters compile about a fifth
# faster than the fusion emitters (jaxlib 0.10; 0.11's XLA no longer has the flag and aborts on
# it), and one LLVM module per program (no parallel codegen split) is cheaper when every core
# already runs a worker.
FAST_COMPILE_XLA_FLAGS = ("--xla_cpu_parallel_codegen_split_count=1",)
_FLAGS_OF_JAXLIB = {"0.10": ("--xla_cpu_use_fusion_emitters=false",)}


def use_fast_compile_flags() -> None:
    """Add ``FAST_COMPILE_XLA_FLAGS`` to ``XLA_FLAGS`` (for this process if its backend has not
    started yet, and for the processes it starts)."""

    try:
        jaxlib = ".".join(importlib.metadata.version("jaxlib").split(".")[:2])
    except importlib.metadata.PackageNotFoundError:
        jaxlib = ""
    flags = os.environ.get("XLA_FLAGS", "").split()
    ours = FAST_COMPILE_XLA_FLAGS + _FLAGS_OF_JAXLIB.get(jaxlib, ())
    flags += [f for f in ours if f.split("=")[0] not in {g.split("=")[0] for g in flags}]
    os.environ["XLA_FLAGS"] = " ".join(flags)


def configure_check_process(cache_dir: str | None = None) -> None:
    """JAX settings of a process that runs the harness: float64; XLA's optimization passes off
    (the checks compile thousands of tiny programs, where those passes cost about a fifth of the
    time and buy nothing) and its faster-compiling CPU options; a compilation cache shared by the
    run's worker processes, without JAX's size limit (``trim_cache`` bounds it between runs);
    Python's cyclic garbage collector run less often."""

    _collect_less_often()
    use_fast_compile_flags()
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_disable_most_optimizations", True)
    if cache_dir is not None:
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


# Python's garbage collector in a checking process: tracing and lowering allocate millions of
# short-lived objects, and with the default thresholds (700, 10, 10) the collector's passes over
# them (the younger generations) and over everything imported (the oldest) cost about 5% of a
# check's CPU time. A collection of the youngest generation every 100,000 net allocations instead
# of 700, and the modules imported so far frozen (never scanned again); memory stays flat
# (cyclic garbage is still collected, later).
_GC_THRESHOLDS = (100_000, 50, 100)


def _collect_less_often() -> None:
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLDS)


# The compilation cache's size limit, kept by ``trim_cache`` after a run, never by JAX during one:
# with ``jax_compilation_cache_max_size`` set, JAX's cache takes a file lock around every read and
# write and lists and reads every entry's access time on every write (jax/_src/lru_cache.py), so
# each compilation costs time linear in the entries so far and the workers wait on each other's
# lock: with the test suite's ~14,000 entries that was most of its time (a 20 s test took 160 s
# late in a run, the two workers 40% idle on the lock).
_CACHE_MAX_BYTES = 2 << 30


def trim_cache(cache_dir: str, max_bytes: int = _CACHE_MAX_BYTES) -> int:
    """Delete the oldest entries (by modification time: an entry is written once) of a
    compilation cache directory until it holds at most ``max_bytes``; returns the bytes freed.
    One pass over the directory, after a run."""

    try:
        entries = [e for e in os.scandir(cache_dir) if e.is_file()]
    except FileNotFoundError:
        return 0
    stats = sorted(((e.stat().st_mtime, e.stat().st_size, e.path) for e in entries), reverse=True)
    kept = freed = 0
    for _, size, path in stats:  # newest first: keep while within the limit
        if kept + size <= max_bytes:
            kept += size
            continue
        os.remove(path)
        freed += size
    return freed


def default_cache_dir() -> str:
    """Where ``check`` keeps compiled programs between runs: ``$JAXRULES_CHECK_CACHE``, else
    ``$XDG_CACHE_HOME/jaxrules/check`` (``~/.cache/jaxrules/check``). The key of an entry is
    the program, the compiler options and the versions of jax and jaxlib: a hit is the same
    executable, so a warm cache changes no result, only the time."""

    if os.environ.get("JAXRULES_CHECK_CACHE"):
        return os.environ["JAXRULES_CHECK_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jaxrules", "check")


def _check_record(record, checks: tuple, full: bool) -> list:
    """Every check of one record (a record, or its name in a worker process); ``full``:
    ``run_check``'s."""

    if isinstance(record, str):
        (record,) = [r for r in jaxrules.records() if r.name == record]
    results = [run_check(record, check, full) for check in checks]
    release_programs()  # memory stays flat over a worker's records
    return results


def _init_worker(cache_dir: str | None) -> None:
    """A worker process: SIGINT ignored (a Ctrl-C at a terminal reaches the whole process group;
    the parent alone handles it and ends the workers), then ``configure_check_process``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_check_process(cache_dir)


@contextlib.contextmanager
def _sigint_noted():
    """While inside: a SIGINT sets the yielded event as well as raising KeyboardInterrupt. JAX
    catches every exception in places (bare ``except:`` around calls into C++ that may run
    Python's signal handlers), so a KeyboardInterrupt can be dropped; the event is not, and the run
    loop stops at the next record. A SIGINT that is ignored, or handled by the caller, stays so."""
    sigint = threading.Event()
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield sigint
        return

    def handler(signum, frame):
        sigint.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield sigint
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _end_workers(pool) -> None:
    """Stop ``pool``'s worker processes now, their running records abandoned:
    ``ProcessPoolExecutor.terminate_workers`` where Python has it (3.14), else SIGTERM to each
    process of the pool, then the pool shut down without waiting for a queued record."""
    terminate = getattr(pool, "terminate_workers", None)
    if terminate is not None:
        terminate()
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.join(timeout=5)


# The records' costs of earlier runs (CPU seconds per record and check), kept in the compilation
# cache's directory (``trim_cache`` keeps it: it is rewritten after every run, the newest file).
_COSTS_FILE = "jaxrules-record-costs.json"


def load_costs(cache_dir: str | None) -> dict:
    """``{op: {check: CPU seconds}}`` of the earlier runs that used ``cache_dir`` (empty without
    one, or when the file is missing or unreadable)."""
    if cache_dir is None:
        return {}
    try:
        with open(os.path.join(cache_dir, _COSTS_FILE)) as fh:
            costs = json.load(fh)
    except (OSError, ValueError):
        return {}
    return costs if isinstance(costs, dict) else {}


def save_costs(cache_dir: str | None, results) -> None:
    """Merge ``results``' CPU seconds (per record and check) into ``cache_dir``'s costs file."""
    if cache_dir is None or not results:
        return
    costs = load_costs(cache_dir)
    for r in results:
        entry = costs.get(r.op)
        if not isinstance(entry, dict):
            entry = costs[r.op] = {}
        entry[r.check] = round(r.cpu_seconds, 3)
    os.makedirs(cache_dir, exist_ok=True)
    path = os.path.join(cache_dir, _COSTS_FILE)
    with open(path + ".tmp", "w") as fh:
        json.dump(costs, fh, indent=0, sort_keys=True)
    os.replace(path + ".tmp", path)  # a run cut short never leaves half a file


def costliest_first(selected, checks, costs: dict) -> list:
    """``selected`` in the order the workers take them: the longest-processing-time-first rule,
    by the CPU seconds of ``checks`` in ``costs`` (``load_costs``), a record of unknown cost
    (new, or a check it never ran) first, as if costliest; ties keep ``selected``'s order. The last
    records handed out are the cheapest, so the workers finish within about one cheap record of
    each other."""
    def known(record):
        entry = costs.get(record.name)
        if not isinstance(entry, dict) or any(not isinstance(entry.get(c), int | float) for c in checks):
            return None
        return sum(entry[c] for c in checks)

    estimates = [known(r) for r in selected]
    rank = sorted(range(len(selected)), key=lambda i: (estimates[i] is not None, -(estimates[i] or 0.0), i))
    return [selected[i] for i in rank]


def _run_checks(selected, checks, workers: int, quiet: bool, cache_dir: str | None = None,
                order: list | None = None, *, full: bool) -> tuple[list, bool]:
    """``run_check`` of every selected record and check, in ``workers`` processes (records are
    handed out one at a time, so slow records do not hold up the rest); failures are printed at
    once, so a run cut short still shows them. ``cache_dir``: the workers' compilation cache
    (``None``: none; a fresh one shared by the workers cost more than it saved, the programs of
    different records being different). ``order``: the order the worker processes take the records
    in (default ``selected``'s; ``costliest_first``). ``full``: ``run_check``'s. Returns the
    results of the records that finished (in ``selected``'s order) and whether a
    KeyboardInterrupt (Ctrl-C, SIGINT) cut the run short: it ends the worker processes at once
    and keeps what finished."""


    by_name = {}
    interrupted = False
    with tqdm(total=len(selected) * len(checks), unit="check", file=sys.stderr, disable=quiet) as bar:
        def done(name, results):
            by_name[name] = results
            for r in results:
                if not r.passed:
                    tqdm.write(f"FAIL {r.op} / {r.check}: {r.detail}", file=sys.stdout)
            bar.set_postfix_str(name)
            bar.update(len(results))

        if workers <= 1:  # this process (configured by the caller)
            with _sigint_noted() as sigint:
                try:
                    for record in selected:
                        if sigint.is_set():  # a KeyboardInterrupt that JAX's code caught and dropped
                            interrupted = True
                            break
                        done(record.name, _check_record(record, checks, full))
                except KeyboardInterrupt:
                    interrupted = True
        else:
            os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # workers share a GPU
            pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_init_worker,
                                       initargs=(cache_dir,))
            try:
                # The workers start while the records are submitted: SIGINT ignored meanwhile (a
                # spawned interpreter keeps an ignored SIGINT ignored), so that a Ctrl-C never
                # interrupts a worker's start-up with a traceback of its own.
                handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
                try:
                    futures = {pool.submit(_check_record, r.name, checks, full): r.name for r in order or selected}
                finally:
                    signal.signal(signal.SIGINT, handler)
                for future in as_completed(futures):
                    done(futures[future], future.result())
            except KeyboardInterrupt:
                interrupted = True
                _end_workers(pool)
            except BaseException:
                _end_workers(pool)
                raise
            else:
                pool.shutdown()
    return [result for record in selected if record.name in by_name for result in by_name[record.name]], interrupted


def _check(args) -> int:

    cache_dir = None if args.no_cache else default_cache_dir()
    if args.sharded_modes:  # read by the sharded check, here and in the spawned workers
        os.environ["JAXRULES_SHARDED_MODES"] = args.sharded_modes
    # The host's devices, before the backend starts here (the spawned workers inherit it): 8 by
    # default, for the sharded check (a CPU split into 8 JAX devices; a GPU's devices are its
    # own), unless XLA_FLAGS already says how many.
    flags = os.environ.get("XLA_FLAGS", "")
    host_devices = args.host_devices or (None if "host_platform_device_count" in flags else HOST_DEVICES)
    if host_devices and host_devices > 1:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={host_devices}".strip()
    configure_check_process(cache_dir)

    try:
        modes_in_use()
    except ValueError as err:
        print(f"check: {err}", file=sys.stderr)
        return 2
    checks = CHECKS if not args.checks else tuple(args.checks.split(","))
    checks += ("strict_promotion",) if args.strict_promotion and "strict_promotion" not in checks else ()
    unknown = set(checks) - set(CHECKS) - set(OPT_IN_CHECKS)
    if unknown:
        print(f"check: unknown checks {sorted(unknown)}; choose from {', '.join(CHECKS + OPT_IN_CHECKS)}",
              file=sys.stderr)
        return 2
    selected = _shard(jaxrules.records(args.ops), args.shard)
    if not selected:
        print(f"check: no registered op matches {args.ops!r}", file=sys.stderr)
        return 2
    backend = jax.default_backend()
    device = jax.devices()[0].device_kind
    start = time.time()
    interpreted = set() if args.interpret_kernels else {r.name for r in selected if interpreted_kernels(r)}
    to_run = [r for r in selected if r.name not in interpreted]
    workers = max(1, min(len(to_run), args.workers or os.cpu_count() or 1))
    order = costliest_first(to_run, checks, load_costs(cache_dir))
    ran, interrupted = _run_checks(to_run, checks, workers, args.quiet, cache_dir, order, full=args.full)
    by_name: dict = {}
    for r in ran:
        by_name.setdefault(r.op, []).append(r)
    for name in interpreted:
        by_name[name] = [CheckResult(name, c, True, None, KERNELS_OFF_A_GPU, skipped=True) for c in checks]
    results = [r for rec in selected for r in by_name.get(rec.name, [])]
    if cache_dir is not None:
        save_costs(cache_dir, results)
        trim_cache(cache_dir)
    finished = [rec for rec in selected if any(r.op == rec.name for r in results)]
    print(_table(finished, checks, results))
    failed = [r for r in results if not r.passed]
    skipped = sum(r.skipped for r in results)
    passed = len(results) - len(failed) - skipped
    ops = f"{len(finished)} of {len(selected)} ops (interrupted)" if interrupted else f"{len(selected)} ops"
    print(
        f"\njaxrules check on {backend} ({device}), jax {jax.__version__}: "
        f"{ops}, {len(results)} checks in {time.time() - start:.0f} s ({workers} worker processes"
        + (", full depth)" if args.full else ")")
    )
    print(f"{passed} passed, {len(failed)} failed" + (f", {skipped} skipped" if skipped else ""))
    costs = _record_costs(results)
    over = [c for c in costs if c["cpu_seconds"] > RECORD_CPU_BUDGET_S]
    if over:
        print(f"over the budget of {RECORD_CPU_BUDGET_S:.0f} CPU s a record: "
              + ", ".join(f"{c['op']} {c['cpu_seconds']:.0f} s" for c in over))
    if args.json:
        report = {
            "backend": backend,
            "device": device,
            "jax": jax.__version__,
            "interrupted": interrupted,
            "full": args.full,
            "record_cpu_budget_s": RECORD_CPU_BUDGET_S,
            "records": costs,
            "results": [r.__dict__ for r in results],
        }
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
    if interrupted:
        return INTERRUPTED
    return 1 if failed else 0


INTERRUPTED = 130  # the exit code of a check cut short by Ctrl-C: the shell's for a process ended by SIGINT

# Off a GPU the records of the fused Pallas (Triton) kernels would run in Pallas' interpret mode, a
# path no user takes there; the test suite checks that mode, ``check --interpret-kernels`` too.
KERNELS_OFF_A_GPU = ("not applicable off a GPU: the fused Triton kernels (--interpret-kernels checks them in "
                     "Pallas' interpret mode)")


# A record's cost guard: ``check`` lists the records whose checks took more CPU seconds than this
# (in their worker, ``time.process_time``: compile threads included, other processes not), and
# ``check --json`` holds every record's seconds. The costliest records take about 15-30 CPU s;
# the whole check's budget is 5 minutes on 2 cores (600 CPU s for about 190 records).
RECORD_CPU_BUDGET_S = 60.0


def _record_costs(results) -> list[dict]:
    """Per record: its checks' wall and CPU seconds summed, costliest (CPU) first."""
    costs: dict = {}
    for r in results:
        c = costs.setdefault(r.op, {"op": r.op, "seconds": 0.0, "cpu_seconds": 0.0})
        c["seconds"] += r.seconds
        c["cpu_seconds"] += r.cpu_seconds
    return sorted(costs.values(), key=lambda c: -c["cpu_seconds"])


def _shard(items: list, spec: str | None) -> list:
    """Every N-th item starting at K, for ``--shard K/N`` (all of them without it)."""
    if not spec:
        return items
    index, count = (int(v) for v in spec.split("/"))
    return items[index::count]


def _table(selected, checks, results) -> str:
    """op x check: ``ok``, ``ok 3e-12`` (max error), ``skip`` or ``FAIL``."""
    by_key = {(r.op, r.check): r for r in results}

    def cell(r):
        if not r.passed:
            return "FAIL"
        if r.skipped:
            return "skip"
        return "ok" if not r.max_error else f"ok {r.max_error:.0e}"

    header = ["op", *checks]
    rows = [[rec.name, *(cell(by_key[rec.name, c]) for c in checks)] for rec in selected]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)) for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def coverage_markdown() -> str:
    """The coverage table and the deliberate deviations from torch, as Markdown (COVERAGE.md)."""

    lines = [
        "# Coverage",
        "",
        "Generated by `python -m jaxrules list --markdown > COVERAGE.md` (a test keeps it current).",
        "Every op has a JVP formula and a VJP formula, beside it in `jaxrules/ops/<family>.py`",
        "(gathered in `jaxrules/jvp_rules.py` and `jaxrules/vjp_rules.py`), or is a composition",
        "of ops that do. Unless the table says",
        "otherwise, batching comes from the mechanism (the primal and the formulas under `jax.vmap`,",
        "unbatched cotangents summed as functorch's `reductify` does) and second-order reverse",
        "mode differentiates the VJP formula (itself written with jaxrules ops where a singular",
        "point needs it).",
        "",
        "`jaxrules.torch` (torch's tensor functions, `.nn.functional`, `.linalg`) calls these ops with",
        "torch's signatures: thin adapters with no formula of their own (docs/differences.md, \"Which",
        "namespace to use when\").",
        "",
        "The ops run under `jax_numpy_rank_promotion=\"raise\"` and `jax_numpy_dtype_promotion=\"strict\"`",
        "with the same values (docs/differences.md, \"Strict promotion\"): `python -m jaxrules check",
        "--strict-promotion` checks every record (all pass), `tests/test_strict_promotion.py` a rotating",
        "subset and the linear-algebra records.",
        "",
        "| op | public names | seed functions | formulas | double backward | batching | dtypes | torch reference |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    deviations = []
    for r in jaxrules.records():
        composed = r.formula_ops != (r.name,)
        formulas = f"composition of {', '.join(r.formula_ops)}" if composed else "JVP + VJP"
        lines.append(
            f"| {r.name} | {', '.join(f'`{p}`' for p in r.public)} | {', '.join(r.seed)} | {formulas} | "
            f"{r.double_backward} | {r.batching} | {', '.join(r.dtypes + r.low_precision)} | {r.torch_name} |"
        )
        if r.deviations:
            deviations.append(f"- **{r.name}**: {r.deviations}")
        for p in r.singular:
            if p.torch_differs:
                deviations.append(f"- **{r.name}** at {p.label}: {p.torch_differs}")
    lines += ["", "## Deliberate deviations from torch", "", *deviations, ""]
    return "\n".join(lines)


_LIST_WIDTH = 100  # ``list`` fits this many columns; ``--wide`` adds columns and wraps nothing
_DTYPE = {"float64": "f64", "float32": "f32", "complex128": "c128", "complex64": "c64", "bfloat16": "bf16",
          "float16": "f16"}


def _wrap_names(names: list[str], cap: int | None) -> list[str]:
    """``names`` joined by ", " in lines of at most ``cap`` characters; a name is broken (after a
    "(" or a "." before a name) only where it alone is longer."""

    text = ", ".join(names)
    if cap is None or len(text) <= cap:
        return [text]
    lines = [""]
    for i, name in enumerate(names):
        piece = name + ("," if i < len(names) - 1 else "")
        if lines[-1] and len(lines[-1]) + 1 + len(piece) > cap:
            lines.append("")
        for part in re.split(r"(?<=\()|(?<=\.)(?=\w)", piece) if len(piece) > cap else [piece]:
            if lines[-1] and len(lines[-1]) + len(part) > cap:
                lines.append("")
            lines[-1] += (" " if lines[-1] and lines[-1].endswith(",") else "") + part
    return lines


def _list_table(header, rows, public_cap) -> list[str]:
    """``rows`` (their first cell: a list of names, wrapped at ``public_cap`` columns) as text."""
    cells = [[_wrap_names(row[0], public_cap), *([x] for x in row[1:])] for row in rows]
    widths = [max([len(h)] + [len(line) for row in cells for line in row[i]]) for i, h in enumerate(header)]
    out = []
    for row in [[[h] for h in header], [["-" * w] for w in widths], *cells]:
        for k in range(max(len(c) for c in row)):
            out.append("  ".join((c[k] if k < len(c) else "").ljust(w) for c, w in zip(row, widths)).rstrip())
    return out


def _forwarded_names(pattern) -> list[str]:
    """``list --all``: every name of each completed namespace, ``*`` marking jaxrules' own."""


    globs = [p if any(c in p for c in "*?[") else f"*{p}*" for p in pattern.split(",")] if pattern else ["*"]
    out = []
    for name, (jax_name, own, forwarded) in namespaces().items():
        names = sorted(n for n in own | forwarded if any(fnmatch.fnmatch(n, g) for g in globs))
        if not names:
            continue
        mine = sum(n in own for n in names)
        out += ["", f"{name}: {len(names)} names, {mine} jaxrules' own, {len(names) - mine} forwarded to {jax_name}"]
        words = " ".join(("*" if n in own else "") + n for n in names)
        out += textwrap.wrap(words, _LIST_WIDTH, initial_indent="  ", subsequent_indent="  ",
                             break_long_words=False, break_on_hyphens=False)
    if not out:
        return []
    legend = "Names of each namespace: * = jaxrules' own (hand-written rules); the others are JAX's own objects."
    return ["", legend, *out]


def _list(args) -> int:
    if args.markdown:
        print(coverage_markdown(), end="")
        return 0
    selected = jaxrules.records(args.ops)
    names = _forwarded_names(args.ops) if args.all else []
    if args.ops and not selected and not names:
        print(f"list: no registered op{' or namespace name' if args.all else ''} matches {args.ops!r}",
              file=sys.stderr)
        return 2
    default = OpRecord.__dataclass_fields__
    header = ("public names", "op", "rules", "2nd", "vmap")
    if args.wide:
        header += ("dtypes", "composed of", "seed functions")
    rows = []
    for r in selected:
        composed = r.formula_ops != (r.name,)
        row = (
            [p.removeprefix("jaxrules.") for p in r.public],
            r.name,
            "via" if composed else "own",
            "auto" if r.double_backward == default["double_backward"].default else "own",
            "auto" if r.batching == default["batching"].default else "own",
        )
        if args.wide:
            row += (" ".join(_DTYPE.get(d, d) for d in r.dtypes + r.low_precision),
                    ", ".join(r.formula_ops) if composed else "", ", ".join(r.seed))
        rows.append(row)
    # the public names take what the other columns leave of the 100 (at least 24)
    rest = sum(max(len(h), *(len(row[i]) for row in rows)) + 2 for i, h in enumerate(header) if i) if rows else 0
    lines = [] if not rows else [
        *_list_table(header, rows, None if args.wide else max(24, _LIST_WIDTH - rest - 2)),
        "",
        "rules: own = the op's own JVP and VJP formulas, via = a composition of ops that have them (--wide",
        "lists them); 2nd (second-order reverse mode): auto = JAX's derivative of the VJP formula, own =",
        "the op's own double-backward formulas; vmap: auto = the formulas under jax.vmap, own = the op's",
        "own batching rule. --wide: also the dtypes checked, the ops composed and the PyTorch seed functions.",
    ]
    print("\n".join(lines + names))
    return 0


def _opinfo(args) -> int:
    """``python -m jaxrules opinfo``: the table of ``jaxrules.opinfo.run``; non-zero on a failure
    that ``opinfo.DEVIATIONS`` does not list, 2 without torch's OpInfo database."""
    try:
        from jaxrules import opinfo
    except ImportError as err:
        print(f"opinfo: needs torch and its test utilities (pip install torch expecttest): {err}", file=sys.stderr)
        return 2
    jax.config.update("jax_enable_x64", True)
    checks = tuple(args.checks.split(",")) if args.checks else opinfo.CHECKS
    dtypes = tuple(args.dtypes.split(",")) if args.dtypes else opinfo.DTYPES
    unknown = sorted(set(checks) - set(opinfo.CHECKS) | set(dtypes) - set(opinfo.DTYPES))
    if unknown:
        print(f"opinfo: unknown --checks or --dtypes {unknown}: checks are {', '.join(opinfo.CHECKS)}, dtypes "
              f"{', '.join(opinfo.DTYPES)}", file=sys.stderr)
        return 2
    found = opinfo.targets(args.ops)
    if not found:
        print(f"opinfo: no OpInfo matches --ops {args.ops!r}", file=sys.stderr)
        return 2
    bar = tqdm(total=len(found) * len(dtypes), disable=args.quiet, desc="opinfo", file=sys.stderr)
    outcomes = opinfo.run(found, dtypes, checks, args.max_samples, progress=lambda *_: bar.update())
    bar.close()
    print(opinfo.format_table(outcomes, checks, dtypes))
    counts = {s: sum(o.status == s for o in outcomes) for s in ("pass", "fail", "deviation", "skip")}
    print(f"\n{len(found)} OpInfos, {len({(o.target, o.dtype, o.sample) for o in outcomes})} samples: "
          + ", ".join(f"{n} {s}" for s, n in counts.items()))
    return 1 if counts["fail"] else 0


def _version() -> str:
    return __version__


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jaxrules", description=__doc__)
    parser.add_argument("--version", action="version", version=f"jaxrules {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="run the verification harness on the registered ops")
    check.add_argument("--ops", help="only ops whose name matches this glob or substring (comma-separated: any)")
    check.add_argument("--checks", help="comma-separated subset of the checks")
    check.add_argument("--json", help="also write the results to this JSON file")
    check.add_argument("--shard", help="K/N: only every N-th op starting at K (to run N processes in parallel)")
    check.add_argument("--quiet", action="store_true", help="no progress bar")
    check.add_argument("--workers", type=int, help="worker processes (default: one per CPU core; 1: this process)")
    check.add_argument("--host-devices", type=int,
                       help=f"on a CPU, split it into this many JAX devices (default {HOST_DEVICES}, for the sharded "
                            "check; 1: one device, the sharded check skipped)")
    check.add_argument("--sharded-modes",
                       help="the sharded check's mesh modes, comma-separated: auto, explicit (default: explicit; "
                            "both with --full)")
    check.add_argument("--strict-promotion", action="store_true",
                       help="also run the strict_promotion check: every sample's value, JVP, VJP, vmap and jit under "
                            "jax.numpy_rank_promotion('raise') and jax.numpy_dtype_promotion('strict')")
    check.add_argument("--full", action="store_true",
                       help="every composition on every sample: second derivatives, batched derivatives and the "
                            "derivatives of a jitted function on every sample, not on each dtype's first (about 1.4x "
                            "the time; the registry tests run this depth)")
    check.add_argument("--interpret-kernels", action="store_true",
                       help="off a GPU, also check the fused Triton kernels' records in Pallas' interpret mode")
    check.add_argument("--no-cache", action="store_true",
                       help="no compilation cache kept between runs (default: $JAXRULES_CHECK_CACHE or "
                       "~/.cache/jaxrules/check, which makes a second run faster and changes no result)")
    check.set_defaults(run=_check)
    listing = sub.add_parser("list", help="print the coverage table")
    listing.add_argument("--ops", help="only ops (with --all: and names) matching this glob or substring")
    listing.add_argument("--markdown", action="store_true", help="print COVERAGE.md")
    listing.add_argument("--wide", action="store_true", help="also the PyTorch seed functions (wide lines)")
    listing.add_argument("--all", action="store_true",
                         help="also every name of each namespace (those forwarded to JAX; * marks jaxrules' own)")
    listing.set_defaults(run=_list)
    parity = sub.add_parser("opinfo", help="run torch's OpInfo samples through the jaxrules.torch adapters")
    parity.add_argument("--ops", help="only OpInfos or adapters matching these globs or substrings (comma-separated)")
    parity.add_argument("--checks", help="comma-separated subset of value, vjp, jvp")
    parity.add_argument("--dtypes", help="comma-separated subset of float64, complex128")
    parity.add_argument("--max-samples", type=int, help="at most this many samples per OpInfo and dtype")
    parity.add_argument("--quiet", action="store_true", help="no progress bar")
    parity.set_defaults(run=_opinfo)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
