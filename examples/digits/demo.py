"""`make demo`: run the digits example through Ferry on the embedded defaults (local
backend, SQLite store and local bucket under FERRY_HOME), then say how it went."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
FERRY = Path(sys.executable).parent / "ferry"


def main() -> int:
    shown = HERE.relative_to(Path.cwd()) if HERE.is_relative_to(Path.cwd()) else HERE
    print(f"$ ferry run {shown}/job.yaml", flush=True)
    run = subprocess.run(
        [str(FERRY), "run", str(HERE / "job.yaml"), "--detach"], capture_output=True, text=True
    )
    if run.returncode != 0:
        sys.stderr.write(run.stderr)
        return run.returncode
    job_id = run.stdout.strip()
    code = subprocess.run([str(FERRY), "logs", "-f", job_id]).returncode
    status = json.loads(
        subprocess.run(
            [str(FERRY), "status", job_id, "--json"], capture_output=True, text=True, check=True
        ).stdout
    )
    if status["status"] != "SUCCEEDED":
        print(f"\ndemo: job {job_id} {status['status']}: {status['reason']}", file=sys.stderr)
        return code or 1
    model_dir = Path(status["outputs"]) / "model"
    metrics = json.loads((model_dir / "metrics.json").read_text())
    print(f"\ndemo: job {job_id} SUCCEEDED")
    print(f"demo: test accuracy {metrics['test_accuracy']:.1%}")
    print(f"demo: model in {model_dir / 'model.pt'}")
    on_path = shutil.which("ferry") == str(FERRY)
    ferry = "ferry" if on_path else os.path.relpath(FERRY)
    print(f"demo: more with: {ferry} status {job_id}   {ferry} logs {job_id}   {ferry} jobs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
