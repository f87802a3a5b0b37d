"""runtime.checkpoint: atomic, verified, the last K kept; kill -9 and a full disk never
leave a checkpoint that restore() would hand back broken."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ferry.runtime import checkpoint


@pytest.fixture
def ckdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "ck"
    monkeypatch.setenv("FERRY_CHECKPOINT_DIR", str(folder))
    monkeypatch.delenv("RANK", raising=False)
    return folder


def test_save_restore_and_keep_the_last_k(ckdir: Path) -> None:
    assert checkpoint.restore() is None  # a first start
    for step in range(1, 6):
        checkpoint.save({"step": step, "weights": [step] * 100}, step, keep=2)
    shown = sorted(p.name for p in ckdir.iterdir() if not p.name.startswith("."))
    assert shown == ["ckpt-000000000004", "ckpt-000000000005"]  # older ones go in the background
    found = checkpoint.restore()
    assert found is not None and found.step == 5 and found.state["step"] == 5
    manifest = json.loads((ckdir / "ckpt-000000000005" / "MANIFEST.json").read_text())
    assert manifest["step"] == 5 and set(manifest["files"]) == {"state.pt"}
    checkpoint.save({"step": "again"}, 5, keep=2)  # the same step again: the new one wins
    assert checkpoint.restore().state["step"] == "again"  # type: ignore[union-attr]


def test_torch_state_and_a_background_save_of_a_snapshot(ckdir: Path) -> None:
    import torch

    model = torch.nn.Linear(4, 2)
    state = {"model": model.state_dict(), "step": 7}
    before = model.weight.detach().clone()
    checkpoint.save(state, 7, background=True)
    with torch.no_grad():
        model.weight.add_(100.0)  # training goes on; the checkpoint holds the values at save
    checkpoint.wait()
    found = checkpoint.restore()
    assert found is not None and found.format == "torch" and found.step == 7
    assert torch.equal(found.state["model"]["weight"], before)
    assert torch.serialization.get_crc32_options()  # the script's own torch.save unchanged
    found.state_file.write_bytes(found.state_file.read_bytes()[:-1] + b"!")  # one byte off
    assert checkpoint.restore() is None  # the manifest's CRC catches what the zip no longer does


def test_files_the_script_wrote_itself(ckdir: Path, tmp_path: Path) -> None:
    single = tmp_path / "snapshot.pt"
    single.write_bytes(b"weights" * 1000)
    checkpoint.save(single, 1)
    folder = tmp_path / "hf"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "sub" / "model.bin").write_bytes(b"x" * 5000)
    checkpoint.save(folder, 2)
    found = checkpoint.restore()
    assert found is not None and found.format == "files" and found.state is None
    assert (found.path / "sub" / "model.bin").read_bytes() == b"x" * 5000
    assert checkpoint.checkpoints()[1].files["snapshot.pt"]["size"] == 7000


def test_partial_and_corrupt_checkpoints_are_skipped(
    ckdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint.save({"n": 1}, 1)
    checkpoint.save({"n": 2}, 2)
    checkpoint.save({"n": 3}, 3)
    state = ckdir / "ckpt-000000000003" / "state.pt"
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped byte
    state.write_bytes(bytes(data))
    (ckdir / "ckpt-000000000002" / "MANIFEST.json").unlink()  # never completed
    (ckdir / ".tmp-ckpt-000000000004-1-1").mkdir()  # a writer that died
    found = checkpoint.restore()
    assert found is not None and found.step == 1 and found.state == {"n": 1}
    assert (
        "skipping checkpoint ckpt-000000000003: state.pt does not match its manifest"
        in capsys.readouterr().err
    )


def test_only_rank_0_saves_and_outside_ferry_a_local_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("FERRY_CHECKPOINT_DIR", "AIP_CHECKPOINT_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RANK", "1")
    assert checkpoint.save({"a": 1}, 1) is None and not (tmp_path / "checkpoints").exists()
    monkeypatch.setenv("RANK", "0")
    assert checkpoint.save({"a": 1}, 1) == Path("checkpoints/ckpt-000000000001")
    assert checkpoint.directory() == Path("checkpoints")


CHURN = textwrap.dedent("""
    import os, sys
    os.environ["FERRY_CHECKPOINT_DIR"] = sys.argv[1]
    from ferry.runtime import checkpoint
    step = int(sys.argv[2])
    blob = os.urandom(4_000_000)
    while True:
        step += 1
        checkpoint.save({"step": step, "blob": blob, "check": hash(blob)}, step, keep=3)
        print(step, flush=True)
""")


def test_kill_9_while_saving_never_leaves_a_broken_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "ck"
    step = 0
    rounds = 25
    for _ in range(rounds):
        proc = subprocess.Popen(
            [sys.executable, "-c", CHURN, str(folder), str(step)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        assert proc.stdout is not None
        proc.stdout.readline()  # at least one save done
        time.sleep(random.uniform(0.0, 0.15))  # then die anywhere in the next ones
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        restored = subprocess.run(
            [
                sys.executable,
                "-c",
                "import os, sys; os.environ['FERRY_CHECKPOINT_DIR'] = sys.argv[1]; "
                "from ferry.runtime import checkpoint; c = checkpoint.restore(); "
                "assert c.state['step'] == c.step and hash(c.state['blob']) == c.state['check']; print(c.step)",
                str(folder),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        assert restored.returncode == 0, restored.stderr
        assert int(restored.stdout) >= step
        step = int(restored.stdout)
    assert step >= rounds  # progress was made every round


@pytest.mark.parametrize(
    "blob",
    [
        "b'a' * 1_000_000 if step == 1 else os.urandom(6_000_000)",  # pickled
        "torch.zeros(250_000) if step == 1 else torch.rand(1_500_000)",  # torch's C++ writer
    ],
    ids=["pickle", "torch"],
)
def test_a_full_disk_fails_clearly_and_keeps_the_previous_checkpoint(
    tmp_path: Path, blob: str
) -> None:
    folder = tmp_path / "small"
    folder.mkdir()
    code = textwrap.dedent(f"""
        import os
        os.environ["FERRY_CHECKPOINT_DIR"] = "{folder}"
        if "torch" in {blob!r}:
            import torch
        from ferry.runtime import checkpoint
        blob = lambda step: {blob}
        checkpoint.save({{"step": 1, "blob": blob(1)}}, 1)
        try:
            checkpoint.save({{"step": 2, "blob": blob(2)}}, 2)
        except checkpoint.CheckpointError as exc:
            print("error:", exc)
        found = checkpoint.restore()
        print("restored", found.step, len(found.state["blob"]))
        print("left", sorted(os.listdir("{folder}")))
    """)
    result = subprocess.run(
        [
            "unshare",
            "-rm",
            "sh",
            "-c",
            f'mount -t tmpfs -o size=4m tmpfs {folder} && exec "$0" -c "$1"',
            sys.executable,
            code,
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("error: checkpoint of step 2 could not be written in")
    assert "No space left on device; the previous checkpoints are intact" in lines[0]
    assert lines[1] == ("restored 1 250000" if "torch" in blob else "restored 1 1000000")
    assert lines[2] == "left ['ckpt-000000000001']"  # no half-written folder behind


def test_a_resumed_run_drops_checkpoints_of_the_abandoned_future(ckdir: Path) -> None:
    checkpoint.save({"n": 10}, 10, keep=3)
    checkpoint.save({"n": 30}, 30, keep=3)
    state = ckdir / "ckpt-000000000030" / "state.pt"
    state.write_bytes(state.read_bytes()[:-3])  # broken: restore falls back to step 10
    assert checkpoint.restore().step == 10  # type: ignore[union-attr]
    checkpoint.save({"n": 20}, 20, keep=1)  # the run goes on from 10: 20 is kept, 30 dropped
    shown = sorted(p.name for p in ckdir.iterdir() if not p.name.startswith("."))
    assert shown == ["ckpt-000000000020"]


def test_a_failed_background_save_is_not_lost_at_exit(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    code = (
        "import os, sys; os.environ['FERRY_CHECKPOINT_DIR'] = sys.argv[1]\n"
        "from ferry.runtime import checkpoint\n"
        "checkpoint.save({'a': 1}, 1, background=True)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(blocker / "ck")], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "ferry: the last checkpoint could not be written" in result.stderr


def test_a_checkpoint_never_gets_ahead_of_the_metrics(tmp_path: Path) -> None:
    """Points reported before a save are on disk once it returns: a process killed at once
    after (a notice with no handler) loses none of them, so a resumed job's series is
    whole up to its checkpoint."""
    metrics = tmp_path / "metrics.jsonl"
    script = textwrap.dedent(
        """
        import os, signal
        from ferry import runtime
        for step in range(5):
            runtime.report(step=step, loss=1.0 / (step + 1))
        runtime.checkpoint.save({"step": 4}, 4)
        os.kill(os.getpid(), signal.SIGKILL)  # before the metrics writer's next turn
        """
    )
    env = {
        **os.environ,
        "FERRY_METRICS_FILE": str(metrics),
        "FERRY_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
    }
    done = subprocess.run([sys.executable, "-c", script], env=env, timeout=60)
    assert done.returncode == -signal.SIGKILL
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert steps == [0, 1, 2, 3, 4]
    assert [step for step, _ in checkpoint.complete_checkpoints(tmp_path / "ckpt")] == [4]
