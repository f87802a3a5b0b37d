"""Samples of a job's process tree (CPU, memory, disk I/O) and of its GPUs (NVML).

The supervisor takes a sample every ``telemetry.interval`` seconds (5 by default) and
stores it as metrics named ``sys/...`` and ``gpu<index>/...``, next to what the script
reports. A sample costs well under a millisecond per process.
"""

from __future__ import annotations

import contextlib
from typing import Any


class ProcessTreeSampler:
    """CPU %, resident memory and disk I/O of a process and everything below it, and the
    machine's network traffic.

    CPU % is each process's CPU time since the previous sample (or since it started) over
    the time between, summed: 200 means two cores busy.
    """

    def __init__(self, pid: int, pss_above: float | None = None) -> None:
        import psutil

        self._psutil = psutil
        self._root = psutil.Process(pid)
        # Resident memory summed over processes counts pages they share (forked data loader
        # workers) once per process. Past this many bytes, the proportional share (PSS) is
        # measured too: it is exact, but costs milliseconds per process.
        self._pss_above = pss_above
        self._last: dict[int, tuple[float, float]] = {}  # pid -> (when, cpu seconds)

    def sample(self) -> dict[str, float]:
        """One sample (empty once the tree has gone)."""
        import time

        psutil = self._psutil
        procs = [self._root]
        for pid in _descendants(self._root.pid):
            with contextlib.suppress(psutil.Error):  # (ended since it was listed)
                procs.append(psutil.Process(pid))
        now = time.time()
        cpu = rss = read = written = 0.0
        seen: dict[int, tuple[float, float]] = {}
        for proc in procs:
            with contextlib.suppress(psutil.Error), proc.oneshot():
                times = proc.cpu_times()
                used = times.user + times.system
                since, before = self._last.get(proc.pid, (proc.create_time(), 0.0))
                if now > since:
                    cpu += 100.0 * max(0.0, used - before) / (now - since)
                seen[proc.pid] = (now, used)
                rss += proc.memory_info().rss
                with contextlib.suppress(psutil.Error, AttributeError):
                    io = proc.io_counters()
                    read += io.read_bytes
                    written += io.write_bytes
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
            net = psutil.net_io_counters()
            out["host/net_recv_bytes"] = float(net.bytes_recv)
            out["host/net_sent_bytes"] = float(net.bytes_sent)
        return out


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid``, from the kernel's per-task lists of children: a few
    small reads, where psutil's ``children()`` reads the status of every process on the
    machine (milliseconds, at each sample of every job)."""
    from ferry.procs import children

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
