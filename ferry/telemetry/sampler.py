"""Samples of a job's process tree (CPU, memory, disk I/O) and of its GPUs (NVML).

The supervisor takes a sample every ``telemetry.interval`` seconds (5 by default) and
stores it as metrics named ``sys/...`` and ``gpu<index>/...``, next to what the script
reports. A sample costs well under a millisecond per process.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from ferry.procs import boot_time, children, stat_fields


class ProcessTreeSampler:
    """CPU %, resident memory and disk I/O of a process and everything below it, and the
    machine's network traffic.

    CPU % is each process's CPU time since the previous sample (or since it started) over
    the time between, summed: 200 means two cores busy. On Linux the figures are read
    straight from ``/proc`` (a few small reads per process: a tiny job is sampled as it
    starts and as it ends, and psutil's objects cost more than the job's own bookkeeping);
    elsewhere psutil reads them.
    """

    def __init__(self, pid: int, pss_above: float | None = None, include_root: bool = True) -> None:
        """``include_root``: False samples only what runs below ``pid`` (a runner's
        processes, without the runner)."""
        self._pid = pid
        self._root = [pid] if include_root else []
        self._read = _read_proc if _PROC else _read_psutil
        figures = self._read(pid)  # (an ended but unreaped process is still there)
        if figures is None:
            raise ProcessLookupError(f"no process {pid}")
        self.started = figures[0]  # when the process started (epoch seconds)
        # Resident memory summed over processes counts pages they share (forked data loader
        # workers) once per process. Past this many bytes, the proportional share (PSS) is
        # measured too: it is exact, but costs milliseconds per process.
        self._pss_above = pss_above
        self._last: dict[int, tuple[float, float]] = {}  # pid -> (when, cpu seconds)

    def sample(self) -> dict[str, float]:
        """One sample (empty once the tree has gone)."""
        import time

        now = time.time()
        cpu = rss = read = written = 0.0
        seen: dict[int, tuple[float, float]] = {}
        for pid in [*self._root, *_descendants(self._pid)]:
            figures = self._read(pid)
            if figures is None:  # (ended since it was listed)
                continue
            started, used, resident, io = figures
            since, before = self._last.get(pid, (started, 0.0))
            if now > since:
                cpu += 100.0 * max(0.0, used - before) / (now - since)
            seen[pid] = (now, used)
            rss += resident
            if io is not None:
                read += io[0]
                written += io[1]
        self._last = seen
        if not seen:
            return {}
        out = {
            "sys/cpu_percent": cpu,
            "sys/rss_bytes": rss,
            "sys/read_bytes": read,
            "sys/write_bytes": written,
            "sys/processes": float(len(seen)),
        }
        if self._pss_above is not None and rss > self._pss_above and len(seen) > 1:
            out["sys/pss_bytes"] = float(sum(_pss(pid) for pid in seen))
        # Network traffic is counted per network namespace, not per process: a local job
        # shares the machine's, so these are the machine's totals.
        with contextlib.suppress(Exception):
            received, sent = _net() if _PROC else _net_psutil()
            out["host/net_recv_bytes"] = received
            out["host/net_sent_bytes"] = sent
        return out


_PROC = os.path.exists("/proc/self/io")  # Linux, with per-process I/O accounting
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

# (start time, CPU seconds, resident bytes, (bytes read, bytes written) or None)
Figures = tuple[float, float, float, tuple[float, float] | None]


def _read_proc(pid: int) -> Figures | None:
    """A process's figures from /proc; None if it has gone."""
    try:
        fields = stat_fields(pid)
        used = (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime
        started = boot_time() + int(fields[19]) / _TICK
        resident = float(int(fields[21]) * _PAGE)
    except (ValueError, IndexError, OSError):
        return None
    io = None
    with contextlib.suppress(OSError, ValueError, KeyError):  # (another user's: unreadable)
        with open(f"/proc/{pid}/io", "rb") as file:
            counters = dict(line.split(b":") for line in file.read().splitlines() if line)
        io = (float(counters[b"read_bytes"]), float(counters[b"write_bytes"]))
    return started, used, resident, io


def _read_psutil(pid: int) -> Figures | None:
    import psutil

    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            times = proc.cpu_times()
            started = proc.create_time()
            resident = float(proc.memory_info().rss)
            io = None
            with contextlib.suppress(psutil.Error, AttributeError):
                counters = proc.io_counters()
                io = (float(counters.read_bytes), float(counters.write_bytes))
    except psutil.Error:
        return None
    return started, times.user + times.system, resident, io


def _net() -> tuple[float, float]:
    """Bytes received and sent over every interface of this network namespace, as the
    kernel counts them (64-bit counters; an interface removed takes its counts along)."""
    received = sent = 0
    with open("/proc/net/dev", "rb") as file:
        for line in file.read().splitlines()[2:]:  # (two header lines)
            fields = line.split(b":", 1)[1].split()
            received += int(fields[0])
            sent += int(fields[8])
    return float(received), float(sent)


def _net_psutil() -> tuple[float, float]:
    import psutil

    net = psutil.net_io_counters()
    return float(net.bytes_recv), float(net.bytes_sent)


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid``, from the kernel's per-task lists of children: a few
    small reads, where psutil's ``children()`` reads the status of every process on the
    machine (milliseconds, at each sample of every job)."""
    found: list[int] = []
    stack = children(pid)
    while stack:
        child = stack.pop()
        found.append(child)
        stack += children(child)
    return found


def _pss(pid: int) -> int:
    """Proportional set size of a process in bytes (0 if it has gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as file:
            data = file.read()
        start = data.index(b"\nPss:") + 5
        return int(data[start : data.index(b"kB", start)]) * 1024
    except (OSError, ValueError):
        return 0


class GpuSampler:
    """Utilisation, memory, power and temperature of the job's GPUs, through NVML."""

    def __init__(self, indices: tuple[int, ...]) -> None:
        self._handles: list[tuple[int, Any]] = []
        self._nvml: Any = None
        if not indices:
            return
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception:  # no nvidia-ml-py, or no driver: declared GPUs on a CPU machine
            return
        self._nvml = pynvml
        for index in indices:
            with contextlib.suppress(Exception):
                self._handles.append((index, pynvml.nvmlDeviceGetHandleByIndex(index)))

    def sample(self) -> dict[str, float]:
        nvml, out = self._nvml, {}
        for index, handle in self._handles:
            prefix = f"gpu{index}/"
            with contextlib.suppress(Exception):
                util = nvml.nvmlDeviceGetUtilizationRates(handle)
                out[prefix + "util_percent"] = float(util.gpu)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                out[prefix + "memory_used_bytes"] = float(memory.used)
                out[prefix + "memory_total_bytes"] = float(memory.total)
            with contextlib.suppress(Exception):
                out[prefix + "power_watts"] = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
            with contextlib.suppress(Exception):
                out[prefix + "temperature_c"] = float(
                    nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
                )
        return out
