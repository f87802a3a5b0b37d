"""What the commands print matches what happened: the model that landed, the files copied,
samples of a short job, both streams of its log, and single values shown as numbers."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ferry.units import format_size
from tests.conftest import ferry, ferry_json

pytestmark = pytest.mark.slow


def last_job() -> str:
    job_id: str = ferry_json("jobs")[0]["id"]
    return job_id


def test_run_says_what_landed_in_the_model_folder(home: Path, project: Path) -> None:
    (project / "save.py").write_text(
        "import os\nopen(os.environ['FERRY_MODEL_DIR'] + '/model.pt', 'wb').write(b'x' * 2000)\n"
    )
    result = ferry("run", "--", "python", "save.py", cwd=project)
    assert result.returncode == 0, result.stderr
    outputs = ferry_json("jobs")[0]["outputs"]
    last = result.stderr.splitlines()[-1]
    assert "SUCCEEDED in " in last
    assert last.endswith(f"; model: model.pt (2.0 KB) in {outputs}/model")

    (project / "two.py").write_text(
        "import os\nd = os.environ['FERRY_MODEL_DIR']\n"
        "open(d + '/a.bin', 'wb').write(b'a' * 1000)\nopen(d + '/b.json', 'w').write('{}')\n"
    )
    result = ferry("run", "--", "python", "two.py", cwd=project)
    assert "model: 2 files, 1.0 KB: a.bin, b.json in " in result.stderr.splitlines()[-1]

    result = ferry("run", "--", "python", "-c", "print('no model')", cwd=project)
    last = result.stderr.splitlines()[-1]
    assert "the model folder is empty" in last and "model in" not in last


def test_outputs_download_counts_the_files_it_lists(
    home: Path, project: Path, tmp_path: Path
) -> None:
    (project / "save.py").write_text(
        "import os\nopen(os.environ['FERRY_MODEL_DIR'] + '/m.bin', 'wb').write(b'x' * 500)\n"
    )
    assert ferry("run", "--", "python", "save.py", cwd=project).returncode == 0
    job_id = last_job()
    listed = ferry_json("outputs", job_id)["files"]
    assert {"model/m.bin", "logs/attempt-1.log"} <= {f["path"] for f in listed}
    assert "manifest.json" not in {f["path"] for f in listed}
    dest = tmp_path / "fetched"
    result = ferry("outputs", job_id, "--download", str(dest))
    assert result.returncode == 0, result.stderr
    size = format_size(sum(f["size"] for f in listed))
    copied = f"ferry: {len(listed)} files of {job_id} ({size}) copied to {dest}"
    assert f"{copied}, and its manifest.json" in result.stderr
    assert (dest / "manifest.json").exists() and (dest / "model" / "m.bin").exists()


def test_a_job_shorter_than_the_sampling_interval_has_system_samples(
    home: Path, project: Path
) -> None:
    assert ferry("config", "set", "telemetry.interval", "1h").returncode == 0
    (project / "short.py").write_text(
        "block = bytearray(300_000_000)\nsum(range(3_000_000))\nprint('done')\n"
    )
    assert ferry("run", "--", "python", "short.py", cwd=project).returncode == 0
    summary = {m["name"]: m for m in ferry_json("metrics", last_job())}
    assert summary["sys/cpu_percent"]["points"] == 2  # as it started, and as it ended
    assert summary["sys/cpu_percent"]["maximum"] > 0
    assert summary["sys/rss_bytes"]["maximum"] > 300_000_000  # its peak, known once it ended


LOGGING_SCRIPT = textwrap.dedent("""
    import logging, os, pathlib, sys, time

    log = pathlib.Path(os.environ["FERRY_HOME"], "jobs", os.environ["FERRY_JOB_ID"],
                       f"attempt-{os.environ['FERRY_ATTEMPT']}.log")

    def logged(text):  # each line reaches the log before the next is written
        end = time.monotonic() + 30
        while text not in log.read_text() and time.monotonic() < end:
            time.sleep(0.01)

    print("step 1 loss=0.5", flush=True)
    logged("step 1")
    logging.warning("learning rate lowered")
    logged("lowered")
    print("step 2 loss=0.4", flush=True)
""")


def test_logs_prints_both_streams_to_stdout_in_order(home: Path, project: Path) -> None:
    (project / "train.py").write_text(LOGGING_SCRIPT)
    run = ferry("run", "--", "python", "train.py", cwd=project)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "step 1 loss=0.5\nstep 2 loss=0.4\n"  # ferry run keeps them apart
    assert "WARNING:root:learning rate lowered" in run.stderr
    job_id = last_job()
    both = "step 1 loss=0.5\nWARNING:root:learning rate lowered\nstep 2 loss=0.4\n"
    shown = ferry("logs", job_id)
    assert (shown.stdout, shown.stderr) == (both, "")
    assert ferry("logs", "-f", job_id).stdout == both
    assert ferry("logs", job_id, "--stream", "all").stdout == both
    assert (
        ferry("logs", job_id, "--stream", "stdout").stdout == "step 1 loss=0.5\nstep 2 loss=0.4\n"
    )
    only_err = ferry("logs", job_id, "--stream", "stderr")
    assert (only_err.stdout, only_err.stderr) == ("WARNING:root:learning rate lowered\n", "")
    assert ferry("logs", job_id, "-n", "1", "-s", "stderr").stdout == only_err.stdout
    assert ferry("logs", job_id, "-n", "1", "-s", "stdout").stdout == "step 2 loss=0.4\n"
    assert ferry("logs", job_id, "-f", "-n", "2", "-s", "stdout").stdout.count("step") == 2
    stamped = ferry("logs", job_id, "-t", "-s", "stderr").stdout
    assert stamped[:4].isdigit() and stamped.endswith(" WARNING:root:learning rate lowered\n")


def test_plot_shows_single_values_as_numbers_and_leaves_out_bookkeeping(
    home: Path, project: Path, tmp_path: Path
) -> None:
    (project / "train.py").write_text(
        "import json\n"
        "for epoch in range(1, 31):\n"
        "    print(f'epoch={epoch}/30 loss={1 / epoch:.4f}', flush=True)\n"
        "print(json.dumps({'test_accuracy': 0.9712}))\n"
    )
    assert ferry("run", "--", "python", "train.py", cwd=project).returncode == 0
    job_id = last_job()
    text = ferry("plot", job_id).stdout
    assert "steps_total" not in text  # derived from epoch=N/30, not measured
    lines = {line.split()[0]: line for line in text.splitlines()}
    assert "█" in lines["loss"]
    assert lines["test_accuracy"].split(maxsplit=2)[1:] == ["0.9712", "(a single value)"]

    from PIL import Image

    charts = [tmp_path / "loss.png", tmp_path / "with_value.png"]
    assert ferry("plot", job_id, "loss", "-o", str(charts[0])).returncode == 0
    result = ferry("plot", job_id, "loss", "test_accuracy", "-o", str(charts[1]))
    assert result.returncode == 0, result.stderr
    alone, beside = (Image.open(path).size for path in charts)
    assert beside[1] == alone[1]  # no second panel for the single value ...
    assert beside[0] > alone[0]  # ... but a column beside the chart with the number
