"""Alert rules: each fires once per episode, with a message a person can act on."""

from __future__ import annotations

import math
import os

from ferry.spec import spec_from_dict
from ferry.telemetry.alerts import AlertMonitor, Rules

GB = 1e9


def monitor(**rules: object) -> AlertMonitor:
    return AlertMonitor(Rules.from_spec(rules), memory_limit=8 * GB, started=1000.0)


def test_nan_and_inf_fire_once_per_metric() -> None:
    m = monitor()
    m.saw_points([(0, 10, 1001.0, "loss", 0.5), (0, 11, 1002.0, "loss", math.nan)], 1002.0)
    m.saw_points([(0, 12, 1003.0, "loss", math.nan), (1, 12, 1003.0, "grad", math.inf)], 1003.0)
    alerts = m.due(1003.0)
    assert [a.kind for a in alerts] == ["nan", "nan"]
    assert alerts[0].message.startswith("loss is NaN at step 11")
    assert "infinite at step 12 (rank 1)" in alerts[1].message
    assert m.due(1004.0) == []


def test_nan_rule_can_be_switched_off() -> None:
    m = monitor(nan=False)
    m.saw_points([(0, 1, 1001.0, "loss", math.nan)], 1001.0)
    assert m.due(1001.0) == []


def test_no_progress_fires_once_per_stall_and_rearms() -> None:
    m = monitor(no_progress=60.0)
    assert m.due(1059.0) == []
    [alert] = m.due(1061.0)
    assert alert.kind == "no_progress" and alert.message.startswith("no progress for 1m")
    assert m.due(1200.0) == []  # the same stall
    m.saw_output(1300.0)  # a log line
    assert m.due(1350.0) == []
    assert [a.kind for a in m.due(1361.0)] == ["no_progress"]
    m.saw_points([(0, 5, 1400.0, "loss", 1.0)], 1400.0)  # a report counts as progress
    assert m.due(1450.0) == []


def test_low_gpu_utilisation_after_its_window_with_the_input_pipeline_hint() -> None:
    m = monitor(gpu_util_below=20.0, gpu_util_for=300.0)
    for t in range(1000, 1300, 10):
        m.saw_sample({"gpu0/util_percent": 5.0, "gpu1/util_percent": 9.0}, float(t))
    assert m.due(1290.0) == []
    m.saw_sample({"gpu0/util_percent": 5.0, "gpu1/util_percent": 9.0}, 1300.0)
    [alert] = m.due(1300.0)
    assert (
        alert.kind == "gpu_util"
        and "2 GPUs averaged 7% utilisation over the last 5m" in alert.message
    )
    assert "input pipeline" in alert.message and "num_workers" in alert.message
    m.saw_sample({"gpu0/util_percent": 4.0}, 1400.0)
    assert m.due(1400.0) == []  # the same spell
    m.saw_sample({"gpu0/util_percent": 95.0}, 1410.0)  # busy again: re-armed
    for t in range(1420, 1800, 10):
        m.saw_sample({"gpu0/util_percent": 1.0}, float(t))
    assert [a.kind for a in m.due(1800.0)] == ["gpu_util"]


def test_a_busy_gpu_or_no_gpu_never_alerts() -> None:
    m = monitor()
    for t in range(1000, 3000, 10):
        m.saw_sample({"gpu0/util_percent": 97.0, "sys/cpu_percent": 100.0}, float(t))
        m.saw_output(float(t))
    assert m.due(3000.0) == []
    m = monitor()
    for t in range(1000, 3000, 10):
        m.saw_sample({"sys/cpu_percent": 100.0}, float(t))
        m.saw_output(float(t))
    assert m.due(3000.0) == []


def test_memory_near_the_job_limit_and_gpu_memory_near_full() -> None:
    m = monitor(memory_above=90.0, gpu_memory_above=95.0)
    m.saw_sample({"sys/rss_bytes": 7.0 * GB}, 1001.0)
    assert m.due(1001.0) == []
    m.saw_sample({"sys/rss_bytes": 7.5 * GB}, 1002.0)
    [alert] = m.due(1002.0)
    assert alert.kind == "memory" and alert.message.startswith("memory at 94% of the job's")
    assert "resources.memory" in alert.message
    m.saw_sample({"sys/rss_bytes": 7.6 * GB}, 1003.0)
    assert m.due(1003.0) == []  # still high: said once
    m.saw_sample({"sys/rss_bytes": 2 * GB}, 1004.0)
    m.saw_sample({"sys/rss_bytes": 7.9 * GB}, 1005.0)
    assert [a.kind for a in m.due(1005.0)] == ["memory"]  # a new episode
    m.saw_sample({"gpu0/memory_used_bytes": 78 * GB, "gpu0/memory_total_bytes": 80 * GB}, 1006.0)
    [alert] = m.due(1006.0)
    assert alert.kind == "gpu_memory" and alert.message.startswith("GPU0 memory at 98%")


def test_spec_fields_parse_percentages_durations_and_off() -> None:
    spec = spec_from_dict(
        {
            "command": "python x.py",
            "alerts": {
                "no_progress": "off",
                "gpu_util_below": "25%",
                "gpu_util_for": "2m",
                "memory_above": 80,
                "on_alert": "stop",
                "notify": [{"webhook": "http://127.0.0.1:9/hook"}, {"email": "a@b.c, d@e.f"}],
            },
        }
    )
    alerts = spec.alerts
    assert alerts.no_progress is None and alerts.gpu_util_below == 25.0
    assert alerts.gpu_util_for == 120.0 and alerts.memory_above == 80.0
    assert [n.kind for n in alerts.notify or ()] == ["webhook", "email"]
    rules = Rules.from_spec(spec.to_json()["alerts"])
    assert rules.no_progress is None and rules.gpu_util_for == 120.0


def test_shared_pages_count_once_and_gpu_memory_is_not_watched_by_default() -> None:
    m = monitor(memory_above=90.0)
    # four forked workers share the parent's pages: resident sizes add up past the limit
    m.saw_sample({"sys/rss_bytes": 20 * GB, "sys/pss_bytes": 5 * GB}, 1001.0)
    m.saw_sample({"gpu0/memory_used_bytes": 79 * GB, "gpu0/memory_total_bytes": 80 * GB}, 1002.0)
    assert m.due(1002.0) == []


def test_the_sampler_counts_every_descendant_and_nothing_else() -> None:
    import signal
    import subprocess

    from ferry.telemetry.sampler import ProcessTreeSampler

    outside = subprocess.Popen(["sleep", "60"])  # this test's child, not the job's
    # the job: a shell, its child, that child's child, and one that left for its own session
    job = subprocess.Popen(
        ["sh", "-c", "sh -c 'sleep 60 & wait' & setsid sleep 60 & echo ready; wait"],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert job.stdout is not None and job.stdout.readline() == b"ready\n"
        from tests.conftest import wait_for

        sampler = ProcessTreeSampler(job.pid)
        wait_for(lambda: sampler.sample().get("sys/processes") == 4, 10, "4 processes")
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        outside.kill()
        outside.wait()


def test_the_sampler_measures_the_proportional_share_of_forked_workers() -> None:
    import os
    import signal
    import subprocess
    import sys

    from ferry.telemetry.sampler import ProcessTreeSampler

    code = (
        "import os, time\n"
        "block = bytearray(60_000_000)\n"
        "for i in range(0, len(block), 4096): block[i] = 1\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(60); os._exit(0)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        sample = ProcessTreeSampler(proc.pid, pss_above=0).sample()
        assert sample["sys/processes"] == 4
        assert sample["sys/rss_bytes"] > 200_000_000  # 60 MB counted in each of 4 processes
        assert 60_000_000 < sample["sys/pss_bytes"] < 120_000_000  # counted about once
        assert "sys/pss_bytes" not in ProcessTreeSampler(proc.pid).sample()  # only when asked
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_printed_numbers_alert_only_when_they_say_whether_training_is_healthy() -> None:
    m = AlertMonitor(Rules(), memory_limit=8 * GB, started=1000.0, objective="val_auc")
    printed = [
        (0, None, 1001.0, "gain", -math.inf),  # LightGBM's "best gain: -inf" is no divergence
        (0, None, 1001.0, "grad_norm", math.inf),
        (0, 3, 1001.0, "val_loss", math.nan),  # a loss, by its words
        (0, 3, 1001.0, "trainLoss", math.inf),
        (0, 3, 1001.0, "nll", math.nan),
        (0, 3, 1001.0, "val_auc", math.nan),  # the sweep's objective
        (0, 3, 1001.0, "glossary", math.nan),  # "loss" inside another word is not a loss
    ]
    m.saw_points(printed, 1001.0, printed=True)
    named = [a.message.split(" is ")[0] for a in m.due(1001.0)]
    assert named == ["val_loss", "trainLoss", "nll", "val_auc"]
    m.saw_points([(0, 4, 1002.0, "grad_norm", math.inf)], 1002.0)  # reported: always watched
    [alert] = m.due(1002.0)
    assert alert.message.startswith("grad_norm is infinite at step 4")


def test_which_names_mean_a_loss() -> None:
    from ferry.telemetry.alerts import is_loss_name

    for name in ("loss", "val_loss", "train/loss", "trainLoss", "loss_cls", "losses", "nll"):
        assert is_loss_name(name), name
    for name in ("gain", "glossary", "lossless", "accuracy", "val_acc", "lr"):
        assert not is_loss_name(name), name


def test_the_sweep_objective_is_read_defensively_from_the_spec() -> None:
    from ferry.telemetry.alerts import objective_name

    assert objective_name({"sweep": {"objective": "val_loss:min"}}) == "val_loss"
    assert objective_name({"sweep": {"objective": "accuracy"}}) == "accuracy"
    assert objective_name({"sweep": {"objective": {"name": "f1", "direction": "max"}}}) == "f1"
    for spec in ({}, {"sweep": None}, {"sweep": "x"}, {"sweep": {"objective": 3}}, {"sweep": []}):
        assert objective_name(spec) is None


def test_the_samplers_figures_read_from_proc_match_psutils() -> None:
    """On Linux the sampler reads /proc itself (cheaper than psutil's objects); what it
    reads must be what psutil reports."""
    import subprocess
    import sys

    import psutil

    from ferry.telemetry import sampler

    code = (
        "import time\n"
        "block = bytearray(50_000_000)\n"
        "with open(__import__('os').devnull, 'wb') as f: f.write(block)\n"
        "end = time.process_time() + 0.3\n"
        "while time.process_time() < end: pass\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        figures = sampler._read_proc(proc.pid)
        theirs = sampler._read_psutil(proc.pid)
        assert figures is not None and theirs is not None
        started, used, resident, io = figures
        assert abs(started - theirs[0]) < 0.02
        assert used >= 0.3 and abs(used - theirs[1]) < 0.05
        assert resident > 50_000_000 and abs(resident - theirs[2]) < 2_000_000
        assert io is not None and io == theirs[3]
        net = psutil.net_io_counters()
        received, sent = sampler._net()
        assert 0 <= received - net.bytes_recv < 10_000_000
        assert 0 <= sent - net.bytes_sent < 10_000_000
    finally:
        proc.kill()
        proc.wait()
    assert sampler._read_proc(proc.pid) is None


def test_a_process_that_ended_before_its_first_sample_is_still_sampled_once() -> None:
    """A job shorter than the supervisor's first look has ended (unreaped) by then: its
    start time still anchors the first sample, so its CPU is counted once, from its start."""
    import subprocess
    import sys
    import time

    from ferry.telemetry.sampler import ProcessTreeSampler
    from tests.conftest import wait_for

    before = time.time()
    code = "import time\nend = time.process_time() + 0.2\nwhile time.process_time() < end: pass\n"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:

        def ended() -> bool:
            with open(f"/proc/{proc.pid}/stat", "rb") as file:
                return file.read().rsplit(b")", 1)[1].split()[0] == b"Z"

        wait_for(ended, 10, "the process to end")
        sampler = ProcessTreeSampler(proc.pid)
        assert before - 1.0 <= sampler.started <= time.time()  # (boot time: whole seconds)
        sample = sampler.sample()
        assert sample["sys/processes"] == 1
        assert sample["sys/cpu_percent"] > 0
    finally:
        proc.wait()
