"""Steps per second of a 2-rank gloo DDP job under Ferry against the same script under
``torchrun`` directly.

Budget (issue: the portable runner): at least 95 % of torchrun's rate, median against
median. The script (below) trains a small MLP with DistributedDataParallel on the CPU,
reports its loss through ``runtime.report`` every step as a real script would (outside
Ferry that call does nothing), and rank 0 prints its own rate over the steps after a
warm-up, between two barriers: the rate excludes starting Python and torch, which both
pay alike. Ferry runs it with ``resources: {procs_per_node: 2}`` (its runner starts the two
ranks with the variables torchrun sets, ``OMP_NUM_THREADS=1`` included); torchrun with
``--standalone --nproc_per_node 2``. The runs alternate, rotating which goes first, after
a warm-up round of each. Skipped (``ok`` true, ``skipped`` set) without torch.
"""

from __future__ import annotations

import importlib.util
import os
import re
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from _common import BIN_DIR, FERRY_EXE, child_env, emit, interleaved, log, sandbox, skipped

BUDGET = 0.95
RUNS = 5
SCRIPT = textwrap.dedent(
    """
    import time
    import torch, torch.distributed as dist
    from torch import nn
    from ferry import runtime
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x, y = torch.randn(256, 256), torch.randint(0, 10, (256,))
    WARM, STEPS = 30, 330
    for step in range(STEPS):
        if step == WARM:
            dist.barrier()
            started = time.perf_counter()
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        runtime.report(loss=loss.item(), step=step)
    dist.barrier()
    if dist.get_rank() == 0:
        print(f"steps_per_s={(STEPS - WARM) / (time.perf_counter() - started):.3f}", flush=True)
    dist.destroy_process_group()
    """
)
JOB = "command: python train.py\nresources: {procs_per_node: 2, cpus: 2}\n"
RATE = re.compile(r"steps_per_s=([0-9.]+)")


# torch's gloo now and then aborts a rank as the process exits, after the training and
# destroy_process_group() (C++ std::terminate on a thread not joined): about one run in 25
# on this machine with two ranks started by hand, neither Ferry nor torchrun involved. A
# run that printed its rate and then aborted so is run again, and counted.
EXIT_ABORT = "terminate called without an active exception"
ABORTED: dict[str, int] = {}


def rate(argv: list[str], code: Path, name: str = "") -> float:
    """The steps per second rank 0 printed when running ``argv`` in ``code``."""
    for _ in range(3):
        proc = subprocess.run(
            argv,
            cwd=code,
            env=child_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
        found = RATE.search(proc.stdout)
        said = proc.stdout + proc.stderr
        if proc.returncode != 0 and found is not None and EXIT_ABORT in said:
            ABORTED[name] = ABORTED.get(name, 0) + 1
            log(f"{name}: a rank aborted at exit (torch's gloo), run again")
            continue
        if proc.returncode != 0 or found is None:
            raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {said[-1500:]}")
        return float(found.group(1))
    raise RuntimeError(f"{' '.join(argv)} aborted at exit three times in a row")


def main() -> int:
    if importlib.util.find_spec("torch") is None:
        skipped("ddp", "ratio", "x", BUDGET, ">=", "torch is not installed")
        return 0
    with sandbox() as code:
        (code / "train.py").write_text(SCRIPT)
        (code / "job.yaml").write_text(JOB)
        torchrun = os.path.join(BIN_DIR, "torchrun")
        cases = {
            "torchrun": [torchrun, "--standalone", "--nproc_per_node", "2", "train.py"],
            "ferry": [FERRY_EXE, "run", "job.yaml"],
        }
        samples = measured(cases, code, RUNS)
    emit(against_torchrun("ddp", "ferry", samples))
    return 0


def measured(cases: dict[str, list[str]], code: Path, runs: int) -> dict[str, list[float]]:
    """Each case's rates over ``runs`` interleaved runs in ``code``, after a warm-up run
    of each (caches, bytecode, the launcher, a Ray head's workers)."""
    for name, argv in cases.items():
        rate(argv, code, name)
    samples = interleaved(list(cases), runs, lambda name: rate(cases[name], code, name))
    log(", ".join(f"{n} {statistics.median(v):.1f} steps/s" for n, v in samples.items()))
    return samples


def against_torchrun(bench: str, ours: str, samples: dict[str, list[float]]) -> dict[str, Any]:
    """The result line: the median rate of case ``ours`` against torchrun's."""
    ratio = statistics.median(samples[ours]) / statistics.median(samples["torchrun"])
    return {
        "bench": bench,
        "metric": "ratio",
        "value": round(ratio, 3),
        "unit": "x",
        "budget": BUDGET,
        "rule": ">=",
        "ok": ratio >= BUDGET,
        f"{ours}_steps_per_s": sorted(samples[ours]),
        "baseline_torchrun_steps_per_s": sorted(samples["torchrun"]),
        "runs_aborted_at_exit_and_rerun": {name: ABORTED.get(name, 0) for name in samples},
    }


if __name__ == "__main__":
    sys.exit(main())
