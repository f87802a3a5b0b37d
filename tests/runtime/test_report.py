"""runtime.report(): cheap in the training loop, safe from threads, stored for `ferry metrics`."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ferry.telemetry import is_telemetry
from tests.conftest import ferry, ferry_json

pytestmark = pytest.mark.slow


def test_report_outside_ferry_is_a_no_op(tmp_path: Path) -> None:
    code = "from ferry import runtime\nfor i in range(1000): runtime.report(step=i, loss=1/(i+1))\nprint('ok')\n"
    env = {"PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert result.stdout == "ok\n" and list(tmp_path.iterdir()) == []


def test_report_writes_every_point_from_many_threads(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    code = textwrap.dedent("""
        import threading
        from ferry import runtime
        def work(k):
            for i in range(2000):
                runtime.report(step=i, **{f"t{k}": i * 0.5})
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        runtime.report(step=1, weird=float("nan"), text="not a number")
    """)
    env = {"PATH": "/usr/bin:/bin", "FERRY_METRICS_FILE": str(path), "RANK": "3"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 8001  # written at exit: nothing lost
    assert {r["rank"] for r in records} == {3}
    for k in range(4):
        values = [r["m"][f"t{k}"] for r in records if f"t{k}" in r["m"]]
        assert values == [i * 0.5 for i in range(2000)]
    last = records[-1]
    assert math.isnan(last["m"]["weird"]) and "text" not in last["m"]


def test_a_fold_keeps_its_metrics_apart(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    code = textwrap.dedent("""
        from ferry import runtime
        for fold in range(3):
            for epoch in range(2):
                runtime.report(step=epoch, fold=fold, val_loss=fold + epoch / 10)
        runtime.report(step=5, test_loss=0.5)
    """)
    env = {"PATH": "/usr/bin:/bin", "FERRY_METRICS_FILE": str(path)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["step"], r["m"]) for r in records] == [
        (0, {"val_loss/fold0": 0.0}), (1, {"val_loss/fold0": 0.1}),
        (0, {"val_loss/fold1": 1.0}), (1, {"val_loss/fold1": 1.1}),
        (0, {"val_loss/fold2": 2.0}), (1, {"val_loss/fold2": 2.1}),
        (5, {"test_loss": 0.5}),
    ]  # fmt: skip


def test_metrics_of_a_job(home: Path, project: Path) -> None:
    (project / "train.py").write_text(
        "from ferry import runtime\n"
        "for step in range(1, 101):\n"
        "    runtime.report(step=step, loss=1.0 / step, acc=step / 100)\n"
    )
    assert ferry("run", "--", "python", "train.py", cwd=project).returncode == 0
    job_id = ferry_json("jobs")[0]["id"]
    summary = {m["name"]: m for m in ferry_json("metrics", job_id)}
    assert summary["loss"]["points"] == 100 and summary["loss"]["last"] == pytest.approx(0.01)
    assert summary["loss"]["minimum"] == pytest.approx(0.01) and summary["loss"]["maximum"] == 1.0
    assert summary["acc"]["last"] == 1.0 and summary["acc"]["last_step"] == 100
    text = ferry("metrics", job_id).stdout
    assert "loss" in text and "acc" in text and "100" in text
    rows = ferry("metrics", job_id, "--csv").stdout.splitlines()
    assert rows[0] == "name,points,last,last_step,minimum,maximum"
    assert len([r for r in rows[1:] if not is_telemetry(r)]) == 2  # and the samples


def test_printed_metrics_are_understood(home: Path, project: Path) -> None:
    (project / "prints.py").write_text(
        "import json\n"
        "for epoch in range(1, 4):\n"
        "    print(f'epoch={epoch}/3 loss={1 / epoch:.4f} val_acc={epoch / 4} time=0.05s')\n"
        "print(json.dumps({'step': 9, 'throughput': 123.5, 'note': 'text'}))\n"
        "print('Validation -- val_loss: 0.125 (best)')\n"
        "print('see http://example.com/?a=1 for details')\n"
    )
    (project / "job.yaml").write_text(
        "command: python prints.py\nmetrics: {val_loss: 'val_loss: ([0-9.e-]+)'}\n"
    )
    assert ferry("run", "job.yaml", cwd=project).returncode == 0
    summary = {m["name"]: m for m in ferry_json("metrics", ferry_json("jobs")[0]["id"])}
    own = {name for name in summary if not is_telemetry(name)}
    assert own == {"loss", "val_acc", "throughput", "val_loss", "steps_total"}
    assert summary["steps_total"]["last"] == 3  # from epoch=N/3
    assert summary["loss"]["points"] == 3 and summary["loss"]["last"] == pytest.approx(
        1 / 3, abs=1e-4
    )
    assert summary["loss"]["last_step"] == 3
    assert summary["throughput"]["last_step"] == 9
    assert summary["val_loss"]["last"] == 0.125


def test_a_script_that_reports_keeps_only_the_printed_metrics_it_never_reports(
    home: Path, project: Path
) -> None:
    # it prints what it reports as it goes (read while it runs: every heartbeat), and at the
    # end a JSON line with a name it never reported
    (project / "both.py").write_text(
        "import json, time\n"
        "from ferry import runtime\n"
        "for step in range(1, 31):\n"
        "    runtime.report(step=step, loss=1 / step)\n"
        "    print(f'epoch={step}/30 loss={1 / step:.4f} lr=0.01', flush=True)\n"
        "    time.sleep(0.1)\n"
        "print(json.dumps({'val_loss': 0.12}))\n"
    )
    assert ferry("run", "--", "python", "both.py", cwd=project).returncode == 0
    summary = {m["name"]: m for m in ferry_json("metrics", ferry_json("jobs")[0]["id"])}
    # the reported steps are the job's step axis: no total read from epoch=N/30
    assert {name for name in summary if not is_telemetry(name)} == {"loss", "lr", "val_loss"}
    assert summary["loss"]["points"] == 30 and summary["loss"]["last"] == pytest.approx(1 / 30)
    assert summary["lr"]["points"] == 30 and summary["lr"]["last_step"] == 30
    assert summary["val_loss"]["points"] == 1 and summary["val_loss"]["last"] == 0.12


def test_a_metric_pattern_without_a_group_is_refused(home: Path, project: Path) -> None:
    from tests.conftest import assert_one_line_error

    (project / "job.yaml").write_text("command: python x.py\nmetrics: {loss: 'loss: [0-9.]+'}\n")
    line = assert_one_line_error(ferry("run", "job.yaml", cwd=project), 2)
    assert "needs a group around the value" in line


def test_the_supervisor_samples_the_job_process_tree(home: Path, project: Path) -> None:
    ferry("config", "set", "telemetry.interval", "0.5s")
    (project / "burn.py").write_text(
        "import time\n"
        "data = bytearray(50_000_000)  # 50 MB resident\n"
        "end = time.time() + 2.5\n"
        "while time.time() < end:\n"
        "    sum(range(10000))\n"
    )
    assert ferry("run", "--", "python", "burn.py", cwd=project).returncode == 0
    summary = {m["name"]: m for m in ferry_json("metrics", ferry_json("jobs")[0]["id"])}
    assert summary["sys/cpu_percent"]["points"] >= 2
    assert summary["sys/cpu_percent"]["maximum"] > 50  # one core busy
    assert summary["sys/rss_bytes"]["maximum"] > 50_000_000
    assert summary["sys/processes"]["last"] >= 1


def test_plot_as_png_and_sparklines(home: Path, project: Path, tmp_path: Path) -> None:
    (project / "train.py").write_text(
        "from ferry import runtime\n"
        "for step in range(1, 5001):\n"
        "    runtime.report(step=step, loss=1.0 / step)\n"
    )
    assert ferry("run", "--", "python", "train.py", cwd=project).returncode == 0
    job_id = ferry_json("jobs")[0]["id"]
    text = ferry("plot", job_id).stdout
    assert text.startswith("loss") and "█" in text and "▁" in text
    png = tmp_path / "chart.png"
    result = ferry("plot", job_id, "loss", "-o", str(png))
    assert result.returncode == 0, result.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    from tests.conftest import assert_one_line_error

    assert "has no metric 'nope'" in assert_one_line_error(ferry("plot", job_id, "nope"), 2)
    from ferry.store import open_store

    series = open_store().metric_series(job_id, "loss", max_points=100)
    assert 10 <= len(series) <= 101  # 5000 points averaged down (by time buckets) for the chart


def test_compare_jobs_side_by_side_and_overlaid(home: Path, project: Path, tmp_path: Path) -> None:
    (project / "train.py").write_text(
        "import json, os\n"
        "from ferry import runtime\n"
        "lr = json.loads(os.environ['FERRY_HPARAMS'])['lr']\n"
        "for step in range(1, 11):\n"
        "    runtime.report(step=step, loss=lr / step)\n"
    )
    for lr in ("0.1", "0.2"):
        assert (
            ferry("run", "-p", f"lr={lr}", "--", "python", "train.py", cwd=project).returncode == 0
        )
    a, b = (j["id"] for j in ferry_json("jobs"))
    data = json.loads(ferry("compare", a, b, "--json").stdout)
    assert data[a]["metrics"]["loss"] == pytest.approx(0.02) and data[b]["metrics"][
        "loss"
    ] == pytest.approx(0.01)
    assert data[a]["hyperparameters"] == {"lr": 0.2}
    table = ferry("compare", a, b).stdout
    assert "loss" in table and "lr" in table
    png = tmp_path / "cmp.png"
    assert ferry("compare", a, b, "-o", str(png)).returncode == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert ferry("compare", a).returncode == 2


def test_top_shows_progress_rate_and_eta(home: Path, project: Path, tmp_path: Path) -> None:
    from tests.conftest import submit, wait_for

    (project / "slow.py").write_text(
        "import os, time\n"
        "for epoch in range(1, 101):\n"
        "    print(f'epoch={epoch}/100 loss={1 / epoch:.4f}', flush=True)\n"
        "    time.sleep(0.05)\n"
        "    if epoch == 20:\n"
        "        while not os.path.exists(os.path.join(os.environ['FERRY_TEST_TMP'], 'go')):\n"
        "            time.sleep(0.05)\n"
    )
    job_id = submit("--", "python", "slow.py", cwd=project)

    def shown() -> str:
        out = ferry("top", "--once", env={"COLUMNS": "250"}).stdout
        return out if "20/100" in out else ""

    text = wait_for(shown, 30, "the job's progress in ferry top")
    assert job_id in text and "/s" in text and "loss=0.05" in text
    (tmp_path / "go").write_text("")
    assert ferry("wait", job_id).returncode == 0
    assert "(no running jobs)" in ferry("top", "--once").stdout
