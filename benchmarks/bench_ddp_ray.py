"""Steps per second of the 2-rank gloo DDP job of ``bench_ddp`` sent to a Ray head on this
machine (``ferry run --backend ray``), against the same script under ``torchrun`` here.

Budget (the ray backend's: DDP under Ferry at least 95 % of the step rate under
torchrun), median against median. A Ray job's ranks run under Ferry's runner on the
node, which gives them one thread each as torchrun does, whatever Ray sets for the job's
CPUs (it set ``OMP_NUM_THREADS=2`` for ``cpus: 2``, and the two ranks then fought over two
cores: the PyTorch DDP tutorial took 12 minutes on Ray against 2 here). The rate excludes
starting Python, torch and the Ray job, which differ; the runs alternate after a warm-up
of each. Skipped (``ok`` true, ``skipped`` set) without torch or Ray.
"""

from __future__ import annotations

import importlib.util
import os
import sys

from _common import BIN_DIR, FERRY_EXE, emit, sandbox, skipped, timed_run
from bench_ddp import BUDGET, JOB, SCRIPT, against_torchrun, measured

RUNS = 3


def main() -> int:
    missing = [m for m in ("torch", "ray") if importlib.util.find_spec(m) is None]
    if missing:
        skipped("ddp_ray", "ratio", "x", BUDGET, ">=", f"{missing[0]} is not installed")
        return 0
    with sandbox() as code:
        from ferry.backends.ray_cluster import LocalHead

        timed_run([FERRY_EXE, "config", "set", "ray.idle", "0"])
        head = LocalHead()
        head.ensure()
        (code / "train.py").write_text(SCRIPT)
        (code / "job.yaml").write_text(JOB)
        torchrun = os.path.join(BIN_DIR, "torchrun")
        cases = {
            "torchrun": [torchrun, "--standalone", "--nproc_per_node", "2", "train.py"],
            "ferry_on_ray": [FERRY_EXE, "run", "--backend", "ray", "job.yaml"],
        }
        try:
            samples = measured(cases, code, RUNS)
        finally:
            head.stop()
    emit(against_torchrun("ddp_ray", "ferry_on_ray", samples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
