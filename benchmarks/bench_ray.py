"""Ray launch overhead: ``ferry run --backend ray -- python -c pass`` against
``ray job submit -- python -c pass`` on the same head.

Budget (issue: the ray backend): at most 1.1 times raw Ray, median against median. A Ray
head is started on this machine as Ferry starts one (127.0.0.1, free ports) in a private
FERRY_HOME; both commands go to it through RAY_ADDRESS, interleaved (rotating which goes
first) after warm-up rounds, so machine noise and Ray's own warm-up hit both alike. Both
wait for the job to end: ``ray job submit`` follows it (its default), ``ferry run`` too.
Also reported, not judged: Ray's Python client submitting and polling every 50 ms
(``ratio_to_sdk``). Skipped (``ok`` true, ``skipped`` set) where Ray is not installed.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys

from _common import BIN_DIR, FERRY_EXE, emit, interleaved, log, sandbox, skipped, summary, timed_run

BUDGET_RATIO = 1.1
# Ray's Python client, submitting and polling every 50 ms until the job ends (a tighter
# baseline than the CLI, whose log streaming ends a few seconds after the job)
SDK = """
import sys, time
from ray.job_submission import JobStatus, JobSubmissionClient
client = JobSubmissionClient(sys.argv[1])
job = client.submit_job(entrypoint="python -c pass")
while client.get_job_status(job) not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
    time.sleep(0.05)
"""
WARMUPS = 2
RUNS = 9


def main() -> int:
    if importlib.util.find_spec("ray") is None:
        why = "Ray is not installed (pip install 'ferry[ray]')"
        skipped("ray", "ratio", "x", BUDGET_RATIO, "<=", why)
        return 0
    with sandbox():
        from ferry.backends.ray_cluster import LocalHead

        timed_run([FERRY_EXE, "config", "set", "ray.idle", "0"])
        head = LocalHead()
        url = head.ensure()
        env = {"RAY_ADDRESS": url}
        ray = os.path.join(BIN_DIR, "ray")
        cases = {
            "ray": [ray, "job", "submit", "--address", url, "--", "python", "-c", "pass"],
            "sdk": [sys.executable, "-c", SDK, url],
            "ferry": [FERRY_EXE, "run", "--backend", "ray", "--", "python", "-c", "pass"],
        }
        try:
            for _ in range(WARMUPS):
                for argv in cases.values():
                    timed_run(argv, env=env)
            samples = interleaved(
                list(cases), RUNS, lambda name: timed_run(cases[name], env=env)[0]
            )
        finally:
            head.stop()
        log(", ".join(f"{n} {statistics.median(v):.3f}s" for n, v in samples.items()))
    ratio = statistics.median(samples["ferry"]) / statistics.median(samples["ray"])
    emit(
        {
            "bench": "ray",
            "metric": "ratio",
            "value": round(ratio, 3),
            "unit": "x",
            "budget": BUDGET_RATIO,
            "rule": "<=",
            "ok": ratio <= BUDGET_RATIO,
            "ferry_run": summary(samples["ferry"]),
            "baseline_ray_job_submit": summary(samples["ray"]),
            # reported, not judged: Ray's own client submitting and polling in a loop
            "sdk_submit_and_poll": summary(samples["sdk"]),
            "ratio_to_sdk": round(
                statistics.median(samples["ferry"]) / statistics.median(samples["sdk"]), 3
            ),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
