"""The run folder on a local disk: a runner's record read back in order, whole segments
only, its end written last, and nothing torn by a runner killed at any moment."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ferry.runner.record import (
    ENDED,
    RUNNING,
    STARTING,
    RunFolderError,
    RunFolderReader,
    RunFolderWriter,
    RunState,
)


def test_a_runners_record_is_read_back_in_order_and_known_complete(tmp_path: Path) -> None:
    folder = str(tmp_path / "attempt-1")
    reader = RunFolderReader(folder)
    assert reader.state() is None and reader.read("log") == b""
    writer = RunFolderWriter(folder, attempt=1)
    assert reader.state().state == STARTING  # type: ignore[union-attr]
    writer.write("log", b"epoch 1\n")
    writer.event("inputs staged", files=3)
    writer.beat()
    state = reader.state()
    assert state is not None and state.state == RUNNING and state.attempt == 1
    assert state.host and state.pid == os.getpid()
    assert reader.read("log") == b"epoch 1\n"
    writer.write("log", b"epoch 2\n")
    writer.write("metrics", b'{"step": 2, "loss": 0.5}\n')
    writer.flush()
    writer.write("log", b"done\n")
    assert reader.read("log") == b"epoch 2\n"  # what is still buffered is not there yet
    writer.end(0, "exited")
    state = reader.state()
    assert state is not None and state.state == ENDED and state.exit_code == 0
    assert state.segments == {"log": 3, "metrics": 1, "events": 1}
    assert not reader.complete(state)  # the end is known, not everything read yet
    assert reader.read("log") == b"done\n"
    assert json.loads(reader.read("metrics")) == {"step": 2, "loss": 0.5}
    event = json.loads(reader.read("events"))
    assert event["message"] == "inputs staged" and event["files"] == 3
    assert reader.complete(state)
    with pytest.raises(RunFolderError, match="already records the attempt's end"):
        writer.beat()
    # the folder is private, and holds only what the layout names
    assert (tmp_path / "attempt-1").stat().st_mode & 0o077 == 0
    assert sorted(p.name for p in (tmp_path / "attempt-1").iterdir()) == [
        "events",
        "log",
        "metrics",
        "state.json",
    ]


def test_a_large_stream_is_written_out_before_the_next_flush(tmp_path: Path) -> None:
    writer = RunFolderWriter(str(tmp_path), attempt=2, segment_bytes=100)
    reader = RunFolderReader(str(tmp_path))
    writer.write("log", b"x" * 60)
    assert reader.read("log") == b""
    writer.write("log", b"y" * 60)  # past the limit: out at once, as one segment
    assert reader.read("log") == b"x" * 60 + b"y" * 60


def test_a_runner_started_again_goes_on_after_what_is_there(tmp_path: Path) -> None:
    first = RunFolderWriter(str(tmp_path), attempt=1)
    first.write("log", b"one\n")
    first.flush()
    second = RunFolderWriter(str(tmp_path), attempt=1)  # nothing overwritten
    second.write("log", b"two\n")
    second.end(-15, "preempted", "the notice came")
    reader = RunFolderReader(str(tmp_path))
    assert reader.read("log") == b"one\ntwo\n"
    state = reader.state()
    assert state is not None and state.segments["log"] == 2 and state.exit_code == -15
    assert (state.outcome, state.reason) == ("preempted", "the notice came")


def test_a_missing_segment_holds_back_those_after_it(tmp_path: Path) -> None:
    writer = RunFolderWriter(str(tmp_path), attempt=1)
    for text in (b"a", b"b", b"c"):
        writer.write("log", text)
        writer.flush()
    (tmp_path / "log" / "000002").rename(tmp_path / "later")
    reader = RunFolderReader(str(tmp_path))
    assert reader.read("log") == b"a"  # "c" waits for "b": the order is kept
    (tmp_path / "later").rename(tmp_path / "log" / "000002")
    assert reader.read("log") == b"bc"


def test_a_heartbeat_tells_a_lost_runner(tmp_path: Path) -> None:
    now = [1000.0]
    writer = RunFolderWriter(str(tmp_path), attempt=1, clock=lambda: now[0])
    writer.beat()
    reader = RunFolderReader(str(tmp_path))
    now[0] += 20
    state = reader.state()
    assert state is not None and not state.lost(now[0], ttl=30)
    assert state.lost(now[0] + 15, ttl=30)
    writer.end(0, "exited")
    ended = reader.state()
    assert ended is not None and not ended.lost(now[0] + 1e6, ttl=30)  # it ended: not lost


def test_a_state_that_is_not_one_or_from_a_newer_ferry_is_refused(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("[1, 2]")
    with pytest.raises(RunFolderError, match="is not a run state"):
        RunFolderReader(str(tmp_path)).state()
    newer = {**json.loads(RunState(1, RUNNING, "h", 1, 0.0, 0.0).to_json()), "format": 99}
    (tmp_path / "state.json").write_text(json.dumps(newer))
    with pytest.raises(RunFolderError, match="newer Ferry"):
        RunFolderReader(str(tmp_path)).state()
    with pytest.raises(ValueError, match="no stream"):
        RunFolderReader(str(tmp_path)).read("stdout")


WRITER = """
import itertools, sys
from ferry.runner.record import RunFolderWriter
writer = RunFolderWriter(sys.argv[1], attempt=1)
print("ready", flush=True)
for n in itertools.count():
    writer.write("metrics", ('{"step": %d, "loss": 0.5, "pad": "%s"}\\n' % (n, "x" * (n % 4000))).encode())
    if n % 7 == 0:
        writer.beat()
"""


def test_a_runner_killed_at_any_moment_leaves_only_whole_files(tmp_path: Path) -> None:
    for round_ in range(5):
        folder = tmp_path / f"run-{round_}"
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(folder)], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        time.sleep(0.2 + 0.07 * round_)
        child.send_signal(signal.SIGKILL)
        child.wait()
        reader = RunFolderReader(str(folder))
        state = reader.state()  # whole, whatever the moment
        assert state is not None and state.state in (STARTING, RUNNING)
        lines = reader.read("metrics").splitlines()
        assert lines, "nothing was written out"
        steps = [json.loads(line)["step"] for line in lines]  # every line whole
        assert steps == list(range(len(steps)))
