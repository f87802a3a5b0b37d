"""The catalog and the optimizer: ``import ferry.catalog`` (with the offerings loaded), a
plan over the whole catalog, and ``ferry catalog --accelerator H100`` end to end, each
against ``python -c pass`` measured in the same run.

Budgets (issue 6): the optimizer over the whole catalog ≤ 50 ms; ``import ferry.catalog``
≤ 100 ms; ``ferry catalog --accelerator H100`` is reported (≤ 0.5 s over Python's start).
"""

from __future__ import annotations

import statistics
import subprocess
import sys

from _common import FERRY_EXE, child_env, emit, log, sandbox, timed_run

ROUNDS = 15
BUDGET_PLAN_S = 0.050
BUDGET_IMPORT_S = 0.100
BUDGET_CLI_S = 0.5

IMPORT = (
    "import time; t = time.perf_counter(); import ferry.catalog; "
    "ferry.catalog.load_catalog(); print(time.perf_counter() - t)"
)
PLAN = """
import json, statistics, time
from ferry.accelerators import parse_accelerator
from ferry.catalog import load_catalog
from ferry.catalog.optimizer import Request, plan
load_catalog()
backends = ["local", "vertex", "sagemaker", "azure"]  # every offering is a candidate
requests = [Request(parse_accelerator(a), spot=s) for a in ("H100:8", "A100:1", "T4:1",
            "tpu-v5e-8") for s in (False, True)]
times = []
for _ in range(%d):
    for r in requests:
        t = time.perf_counter()
        found = plan(r, backends=backends)
        times.append(time.perf_counter() - t)
print(json.dumps({"times": times, "considered": found.considered}))
"""


def main() -> int:
    with sandbox():
        import json

        imports = []
        for _ in range(ROUNDS):
            out = subprocess.run(
                [sys.executable, "-c", IMPORT], env=child_env(), capture_output=True, text=True
            )
            imports.append(float(out.stdout))
        log(f"import ferry.catalog + load: median {statistics.median(imports) * 1000:.1f} ms")
        out = subprocess.run(
            [sys.executable, "-c", PLAN % ROUNDS],
            env=child_env(),
            capture_output=True,
            text=True,
            check=True,
        )
        planned = json.loads(out.stdout)
        plan_s = statistics.median(planned["times"])
        log(f"plan over {planned['considered']} offerings: median {plan_s * 1000:.2f} ms")
        python, cli = [], []
        for _ in range(ROUNDS):  # alternate, so both see the same machine
            python.append(timed_run([sys.executable, "-c", "pass"])[0])
            cli.append(timed_run([FERRY_EXE, "catalog", "--accelerator", "H100"])[0])
        over = statistics.median(cli) - statistics.median(python)
        log(
            f"ferry catalog --accelerator H100: median {statistics.median(cli):.3f}s "
            f"({over:.3f}s over python -c pass)"
        )
    import_s = statistics.median(imports)
    emit(
        {
            "bench": "catalog",
            "metric": "plan_whole_catalog_s",
            "value": round(plan_s, 5),
            "unit": "s",
            "budget": BUDGET_PLAN_S,
            "rule": "<=",
            "ok": plan_s <= BUDGET_PLAN_S and import_s <= BUDGET_IMPORT_S and over <= BUDGET_CLI_S,
            "plan_max_s": round(max(planned["times"]), 5),
            "offerings": planned["considered"],
            "import_and_load_s": round(import_s, 4),
            "import_budget_s": BUDGET_IMPORT_S,
            "cli_h100_s": round(statistics.median(cli), 4),
            "python_start_s": round(statistics.median(python), 4),
            "cli_over_python_s": round(over, 4),
            "cli_budget_s": BUDGET_CLI_S,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
