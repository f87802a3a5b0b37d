"""Shared pieces of the benchmark scripts: a private FERRY_HOME and code folder, timing
statistics, waiting for jobs, and the one JSON line each script prints.

Import this module before ``ferry``: :func:`sandbox` sets ``FERRY_HOME`` for the process.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BIN_DIR = str(Path(sys.executable).parent)
FERRY_EXE = str(Path(BIN_DIR) / "ferry")


def log(message: str) -> None:
    """Progress for people: stderr, so stdout holds only the result line."""
    print(f"[{Path(sys.argv[0]).stem}] {message}", file=sys.stderr, flush=True)


def child_env() -> dict[str, str]:
    """This environment with ``python`` resolving to this interpreter."""
    env = dict(os.environ)
    if env.get("PATH", "").split(os.pathsep)[0] != BIN_DIR:
        env["PATH"] = BIN_DIR + os.pathsep + env.get("PATH", os.defpath)
    return env


@contextmanager
def sandbox() -> Iterator[Path]:
    """A fresh FERRY_HOME and an empty code folder as cwd; both removed afterwards.

    Yields the code folder.
    """
    previous_cwd = os.getcwd()
    previous_env = dict(os.environ)
    home = scratch("home")
    code = scratch("code")
    os.environ["FERRY_HOME"] = home
    os.environ["PATH"] = BIN_DIR + os.pathsep + os.environ.get("PATH", os.defpath)
    # Measure Ferry as installed (bytecode cached) even where the environment turns
    # caching off; the cache lives in the sandbox, so the checkout gets no __pycache__.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(Path(home) / "pycache")
    os.chdir(code)
    try:
        yield Path(code)
    finally:
        try:
            stop_leftovers()
        except Exception as exc:
            log(f"clean-up: {type(exc).__name__}: {exc}")
        os.chdir(previous_cwd)
        os.environ.clear()
        os.environ.update(previous_env)
        discard(Path(home))
        discard(Path(code))


CODE_FILES = 200  # the code folder case: a small project's worth of files

# `ferry` with no launcher (ferry.launcher) to hand its command to: the cost of the first
# command, or of every command where the launcher is turned off. The budgets are for the
# commands after it (the launcher is started by the first, during the warm-up rounds).
COLD = {"FERRY_LAUNCHER": "off"}


@contextmanager
def code_folder(files: int = CODE_FILES) -> Iterator[Path]:
    """A temporary project of ``files`` files (see :func:`make_code_folder`), removed after."""
    root = Path(scratch("project"))
    try:
        yield make_code_folder(root, files)
    finally:
        discard(root)


SCRATCH_ENV = "FERRY_BENCH_SCRATCH"
TRASH_ENV = "FERRY_BENCH_TRASH"


def scratch_root() -> Path:
    """Where the scripts make their scratch folders: ``FERRY_BENCH_SCRATCH``, by default
    ``~/.cache/ferry-bench``, beside where Ferry keeps its data by default (``~/.ferry``).

    Not in ``/tmp``: on a build machine every test writes and removes its scratch files
    there, and on an ext4 file system without a journal (this project's build machines)
    each file created first steps over the inodes of its block group freed in the last
    minutes (``recently_deleted`` in the kernel's ``fs/ext4/ialloc.c``). Measured here:
    0.2 to 0.9 ms to create an empty file in ``/tmp`` after a test run, 0.03 ms under
    ``~``; a job creates a dozen files, so the figures would measure the test suite's
    leftovers rather than Ferry."""
    root = Path(os.environ.get(SCRATCH_ENV) or Path.home() / ".cache" / "ferry-bench")
    root.mkdir(parents=True, exist_ok=True)
    return root


def scratch(name: str) -> str:
    """A new empty folder under :func:`scratch_root`."""
    return tempfile.mkdtemp(prefix=f"{name}-", dir=scratch_root())


def discard(folder: Path) -> None:
    """Remove a scratch folder, or, under ``run_all`` (which names a trash folder in
    ``FERRY_BENCH_TRASH`` and empties it when every script has run), move it there:
    removing thousands of files would slow the scripts that follow for minutes (see
    :func:`scratch_root`), and the cost belongs to none of them."""
    trash = os.environ.get(TRASH_ENV)
    if trash:
        with contextlib.suppress(OSError):
            os.rename(folder, Path(trash) / folder.name)
            return
    shutil.rmtree(folder, ignore_errors=True)


def make_code_folder(root: Path, files: int = CODE_FILES) -> Path:
    """A project of ``files`` files to snapshot: Python modules of a few KB in packages two
    levels deep, a README and a ``.gitignore``, plus ignored clutter (caches, a log, a
    ``.git`` folder) that the snapshot must walk past. Returns ``root``."""
    packages = max(1, files // 20)
    written = 0
    for name, text in ((".gitignore", "*.log\nruns/\n"), ("README.md", "# bench\n" * 40)):
        (root / name).write_text(text)
        written += 1
    while written < files:
        package = root / "src" / f"pkg{written % packages}" / f"sub{written % 3}"
        package.mkdir(parents=True, exist_ok=True)
        body = "".join(f"def f{i}(x):\n    return x * {i}\n\n" for i in range(20 + written % 80))
        (package / f"mod{written}.py").write_text(body)
        written += 1
    for clutter in ("runs/1/metrics.jsonl", "train.log", ".git/HEAD", "src/__pycache__/a.pyc"):
        (root / clutter).parent.mkdir(parents=True, exist_ok=True)
        (root / clutter).write_text("x" * 1000)
    return root


def fill_bundle_folder(code: Path) -> int:
    """The folder the cloud benchmarks upload: 40 files of random bytes (2.5 MB each:
    nothing to compress) and 200 small source files; returns its size in bytes."""
    for i in range(40):
        (code / f"data-{i}.bin").write_bytes(os.urandom(2_500_000))
    for i in range(200):
        (code / f"module_{i}.py").write_text(f"VALUE = {i}\n" * 50)
    return sum(p.stat().st_size for p in code.iterdir())


def plain_put_s(fs: Any, code: Path, key: str) -> float:
    """Seconds one put of a file as big as the folder ``code`` takes into ``key`` of the
    fsspec filesystem ``fs`` (the baseline of a first upload)."""
    plain = code.parent / "plain.bin"
    with open(plain, "wb") as out:
        for path in sorted(code.iterdir()):
            out.write(path.read_bytes())
    started = time.perf_counter()
    fs.put_file(str(plain), key)
    took = time.perf_counter() - started
    plain.unlink()
    return took


def timed_run(
    argv: Sequence[str],
    capture: bool = False,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> tuple[float, str]:
    """Run a command to its end (in ``cwd``, default this folder; ``env`` added to this
    environment); return (wall seconds, stdout if captured)."""
    start = time.perf_counter()
    proc = subprocess.run(
        list(argv),
        cwd=cwd,
        env={**child_env(), **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}")
    return took, (proc.stdout.decode() if capture else "")


def percentile(values: Iterable[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median, p90, min and count of timings (seconds, rounded to microseconds)."""
    return {
        "median_s": round(statistics.median(values), 6),
        "p90_s": round(percentile(values, 90), 6),
        "min_s": round(min(values), 6),
        "n": len(values),
    }


def wait_for_jobs(
    job_ids: Iterable[str], timeout: float, stall: float = 20.0, poll: float = 0.1
) -> tuple[dict[str, Any], bool]:
    """Wait until every job is terminal; return (their records by id, whether all ended).

    Each round reads only the jobs still active (one query; reading every job each round
    would cost the machine more, as the store fills, than some of what is measured), and
    runs ``reconcile`` every heartbeat interval, as ``Job.wait`` does, so a lost supervisor
    ends its job. Gives up after ``timeout`` seconds, or after ``stall`` seconds in which no
    job changed, so a broken run reports instead of hanging.
    """
    from ferry import defaults
    from ferry.controller import reconcile
    from ferry.followers import start as follow
    from ferry.status import JobStatus
    from ferry.store import open_store

    wanted = set(job_ids)
    active_statuses = [s for s in JobStatus if not s.is_terminal()]
    store = open_store()
    start = last_change = reconciled = time.monotonic()
    seen: dict[str, tuple[str, float]] = {}
    while True:
        active = {j.id: j for j in store.list_jobs(active_statuses) if j.id in wanted}
        now = time.monotonic()
        state = {i: (r.status.value, r.updated_at) for i, r in active.items()}
        if state != seen:
            seen, last_change = state, now
        if not active:
            records = {j.id: j for j in store.list_jobs(None, None) if j.id in wanted}
            if len(records) == len(wanted):
                return records, True
        if now - reconciled >= defaults.HEARTBEAT_INTERVAL:
            reconcile(store, start=follow)
            reconciled = now
        if now - start >= timeout or now - last_change >= stall:
            records = {j.id: j for j in store.list_jobs(None, None) if j.id in wanted}
            pending = Counter(r.status.value for r in records.values() if r.status.is_active())
            why = "timed out" if now - start >= timeout else f"no job changed for {stall:g}s"
            log(f"gave up waiting ({why}); still active: {dict(pending)}")
            return records, False
        time.sleep(poll)


def _live_supervisor(job: Any) -> int | None:
    """The job's supervisor pid if that very process still runs."""
    from ferry.procs import start_time

    pid = job.supervisor_pid
    started = start_time(pid) if pid else None
    if pid and started and abs(started - (job.supervisor_started or started)) < 1.0:
        return int(pid)
    return None


def stop_leftovers() -> None:
    """Cancel every unfinished job in this sandbox's store and kill supervisors that remain.

    The sandbox's FERRY_HOME holds only this benchmark's jobs, so nothing else is touched;
    a supervisor is killed only if its pid still has the start time it registered.
    """
    if "ferry.store" not in sys.modules:
        return
    import signal

    from ferry.controller import cancel
    from ferry.followers import start
    from ferry.status import ACTIVE, JobStatus
    from ferry.store import open_store

    store = open_store()
    unfinished = store.list_jobs(ACTIVE | {JobStatus.QUEUED}, None)
    if not unfinished:
        return
    log(f"stopping {len(unfinished)} job(s) left unfinished")
    for job in unfinished:
        try:
            cancel(store, job, start=start)
        except Exception as exc:  # a broken store must not stop the clean-up
            log(f"cancel {job.id}: {exc}")
    end = time.monotonic() + 15
    while time.monotonic() < end:
        if not any(_live_supervisor(j) for j in store.list_jobs(ACTIVE, None)):
            return
        time.sleep(0.2)
    for job in store.list_jobs(ACTIVE, None):
        pid = _live_supervisor(job)
        if pid:
            log(f"killing the supervisor of {job.id} (pid {pid})")
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def outcomes(records: Iterable[Any]) -> dict[str, int]:
    """How many jobs ended in each status."""
    return dict(Counter(r.status.value for r in records))


def failure_reasons(records: Iterable[Any], limit: int = 3) -> list[str]:
    """A few distinct reasons of jobs that did not succeed."""
    reasons = {f"{r.status.value}: {r.reason}" for r in records if r.status.value != "SUCCEEDED"}
    return sorted(reasons)[:limit]


def interleaved(
    names: Sequence[str], runs: int, measure: Callable[[str], float]
) -> dict[str, list[float]]:
    """``runs`` rounds of ``measure(name)`` for every name, rotating which goes first, so
    that the machine's noise and any warm-up hit them alike."""
    samples: dict[str, list[float]] = {name: [] for name in names}
    order = list(names)
    for i in range(runs):
        shift = i % len(order)
        for name in order[shift:] + order[:shift]:
            samples[name].append(measure(name))
    return samples


def skipped(bench: str, metric: str, unit: str, budget: float, rule: str, why: str) -> None:
    """Emit the result of a benchmark that cannot run here (``ok`` true, ``skipped`` why)."""
    emit(
        {
            "bench": bench,
            "metric": metric,
            "value": None,
            "unit": unit,
            "budget": budget,
            "rule": rule,
            "ok": True,
            "skipped": why,
        }
    )


def emit(result: dict[str, Any]) -> None:
    """Print the one JSON result line (keys: bench, metric, value, unit, budget, rule, ok)."""
    for key in ("bench", "metric", "value", "unit", "budget", "rule", "ok"):
        if key not in result:
            raise KeyError(f"result lacks {key!r}")
    print(json.dumps(result, sort_keys=False), flush=True)
