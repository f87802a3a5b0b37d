"""Framework integrations, preempted for real: PyTorch Lightning."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ferry, job_status, submit, wait_for

pytestmark = pytest.mark.slow


def preempted_once(project: Path, script: str, after_steps: int) -> tuple[str, dict[str, Any]]:
    """Run ``script``, preempt it once it has reported ``after_steps`` steps, wait for the
    end; the first attempt must have saved on the notice (exit 143), the second succeeded.

    The scripts' first attempt slows down (``slow()``) once past ``after_steps``, so the
    notice lands mid-training however late a loaded machine lets this test see the step: a
    first attempt that finished before the notice would end 0, not 143."""
    from ferry.store import open_store

    (project / "train.py").write_text(script)
    job_id = submit("--", "python", "train.py", cwd=project)

    def step() -> int:
        rows = open_store().metrics_after(job_id, 0, 100_000)
        return max((r[3] or 0 for r in rows), default=0)

    wait_for(lambda: step() >= after_steps, 120, f"{after_steps} steps")
    assert ferry("preempt", job_id).returncode == 0
    assert ferry("wait", job_id, "--timeout", "180s").returncode == 0
    status = job_status(job_id)
    assert [a["status"] for a in status["attempts"]] == ["PREEMPTED", "SUCCEEDED"]
    assert status["attempts"][0]["exit_code"] == 143
    return job_id, status


LIGHTNING = textwrap.dedent("""
    import os, time
    import torch
    import lightning as L

    def slow(step):  # the first attempt waits for its notice (see preempted_once)
        return 0.5 if os.environ["FERRY_ATTEMPT"] == "1" and step > 25 else 0.05
    from ferry import runtime
    from ferry.runtime.lightning import FerryCheckpoint

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)
        def training_step(self, batch, batch_idx):
            x, y = batch
            time.sleep(slow(self.global_step))
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            runtime.report(step=self.global_step, loss=loss.item())
            return loss
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    trainer = L.Trainer(max_steps=120, callbacks=[FerryCheckpoint()], logger=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    print("attempt", os.environ["FERRY_ATTEMPT"], flush=True)
    trainer.fit(Tiny(), loader, ckpt_path="last")
    print("finished at", trainer.global_step, flush=True)
""")


def test_lightning_saves_on_the_notice_and_resumes(home: Path, project: Path) -> None:
    pytest.importorskip("lightning")
    job_id, status = preempted_once(project, LIGHTNING, after_steps=20)
    log = ferry("logs", job_id, "--attempt", "2").stdout
    assert "finished at 120" in log
    ckpt = Path(status["outputs"]) / "checkpoints" / "lightning" / "last.ckpt"
    assert ckpt.exists()
    import torch

    saved_steps = torch.load(ckpt, weights_only=False)["global_step"]
    assert saved_steps == 120
    # the second attempt started where the first stopped, not from scratch
    from ferry.store import open_store

    rows = [r for r in open_store().metrics_after(job_id, 0, 100_000) if r[5] == "loss"]
    second = [r[3] for r in rows if r[1] == 2]
    first = [r[3] for r in rows if r[1] == 1]
    assert min(second) >= max(first) - 1 > 15


HF = textwrap.dedent("""
    import os, time
    import torch
    from transformers import Trainer, TrainingArguments

    def slow(step):  # the first attempt waits for its notice (see preempted_once)
        return 0.5 if os.environ["FERRY_ATTEMPT"] == "1" and step > 20 else 0.05
    from ferry import runtime
    from ferry.runtime.hf import FerryCallback, last_checkpoint, output_dir

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)
        def forward(self, x, labels=None):
            time.sleep(slow(STEP[0]))
            out = self.layer(x)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

    class Data(torch.utils.data.Dataset):
        def __len__(self): return 64
        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return {"x": torch.randn(8, generator=g), "labels": torch.randn(1, generator=g)}

    STEP = [0]

    class Report(FerryCallback):
        def on_step_end(self, args, state, control, **kw):
            STEP[0] = state.global_step
            runtime.report(step=state.global_step, loss=1.0)
            return super().on_step_end(args, state, control, **kw)

    args = TrainingArguments(output_dir=output_dir(), max_steps=80, per_device_train_batch_size=4,
                             save_steps=1000, report_to=[], use_cpu=True, logging_steps=1000,
                             disable_tqdm=True)
    trainer = Trainer(Tiny(), args, train_dataset=Data(), callbacks=[Report()])
    resume = last_checkpoint(args.output_dir)
    print("attempt", os.environ["FERRY_ATTEMPT"], "resumes from", resume, flush=True)
    trainer.train(resume_from_checkpoint=resume)
    print("finished at", trainer.state.global_step, flush=True)
""")


def test_hugging_face_trainer_saves_on_the_notice_and_resumes(home: Path, project: Path) -> None:
    pytest.importorskip("transformers")
    job_id, _ = preempted_once(project, HF, after_steps=15)
    log = ferry("logs", job_id, "--attempt", "2").stdout
    resumed = int(log.split("checkpoint-")[1].split()[0])
    assert resumed >= 15 and "finished at 80" in log
