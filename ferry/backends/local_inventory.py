"""What this machine offers local jobs: CPU cores, memory and GPUs.

Detected (``os.sched_getaffinity``, sysconf, NVML through nvidia-ml-py when installed) unless
the user declares otherwise with ``ferry config set local.gpus 2`` and friends, which makes
GPU scheduling testable on a machine without GPUs.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from ferry import config
from ferry.units import format_size


@dataclass(frozen=True)
class Inventory:
    """The resources local jobs share."""

    cpus: float
    memory: int  # bytes
    gpus: int
    gpu_type: str | None  # canonical accelerator name, or None when unknown/any
    gpus_declared: bool  # from config rather than detected

    def describe(self) -> str:
        """``'2 CPUs, 24.0 GB memory and no GPUs'`` for messages."""
        cpus = f"{self.cpus:g} CPU{'s' if self.cpus != 1 else ''}"
        if self.gpus:
            kind = f" {self.gpu_type}" if self.gpu_type else ""
            gpus = f"{self.gpus}{kind} GPU{'s' if self.gpus != 1 else ''}"
        else:
            gpus = "no GPUs"
        return f"{cpus}, {format_size(self.memory)} memory and {gpus}"


def _detect_gpus() -> tuple[int, str | None]:
    try:
        import pynvml
    except ImportError:
        return 0, None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver: a machine without NVIDIA GPUs
        return 0, None
    try:
        count = int(pynvml.nvmlDeviceGetCount())
        names = {
            str(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)))
            for i in range(count)
        }
    finally:
        pynvml.nvmlShutdown()
    gpu_type = None
    if len(names) == 1:
        from ferry.accelerators import GPUS

        # "NVIDIA H200" / "NVIDIA A100-SXM4-80GB" -> the longest canonical name it contains
        raw = names.pop().upper().replace(" ", "-")
        matches = [g for g in GPUS if g.upper() in raw]
        gpu_type = max(matches, key=len) if matches else None
    return count, gpu_type


_cache: tuple[object, Inventory] | None = None


def local_inventory() -> Inventory:
    """The inventory now: config overrides win over detection (re-read when config changes)."""
    global _cache
    version = config.config_version()
    if _cache is None or _cache[0] != version:
        _cache = (version, _read_inventory())
    return _cache[1]


def _read_inventory() -> Inventory:
    cpus = config.get("local.cpus")
    if cpus is None:
        cpus = float(
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else os.cpu_count() or 1
        )
    memory = config.get("local.memory")
    if memory is None:
        from ferry.procs import total_memory

        memory = total_memory()
    declared = config.get("local.gpus")
    gpu_type = config.get("local.gpu_type")
    if declared is not None:
        gpus = int(declared)
    else:
        gpus, detected_type = _detect_gpus()
        gpu_type = gpu_type or detected_type
    if gpu_type:
        from ferry.accelerators import canonical_name

        with contextlib.suppress(ValueError):  # a name we do not know is kept as given
            gpu_type = canonical_name(gpu_type)
    return Inventory(
        cpus=float(cpus),
        memory=int(memory),
        gpus=gpus,
        gpu_type=gpu_type,
        gpus_declared=declared is not None,
    )
