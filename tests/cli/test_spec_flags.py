"""Every field of the job spec has a flag (or is declared file-only, with the reason), and
each flag sets its field: parsed by the real `ferry` parser, applied as `ferry run` applies
flags, validated as the spec. A field added to the spec without a flag fails here."""

from __future__ import annotations

import argparse
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from ferry.cli.main import build_parser
from ferry.cli.run import split_command
from ferry.cli.spec_flags import FILE_ONLY, FLAGS, overrides_from
from ferry.spec import JobSpec, load_spec

# flag words -> (the field, the value the spec then holds). Every field of FLAGS outside
# the sweep: section has a line here, so each flag is seen to set what the table says.
SAMPLES: list[tuple[list[str], str, Any]] = [
    (["--name", "digits"], "name", "digits"),
    (["--code", "/tmp"], "code", "/tmp"),
    (["--", "python", "train.py"], "command", ("python", "train.py")),
    (["--shell"], "shell", True),
    (["--requirements", "req.txt"], "environment.requirements", "req.txt"),
    (["--image", "us-docker.pkg.dev/p/r/i:1"], "environment.image", "us-docker.pkg.dev/p/r/i:1"),
    (["--framework", "pytorch==2.4"], "environment.framework", "pytorch==2.4"),
    (["--accelerator", "A100:2"], "resources.accelerator", "A100:2"),
    (["--cpus", "3"], "resources.cpus", 3.0),
    (["--memory", "2GiB"], "resources.memory", 2 << 30),
    (["--spot"], "resources.spot", True),
    (["--flex-start"], "resources.spot", "flex"),
    (["--nodes", "2"], "resources.nodes", 2),
    (["--procs-per-node", "4"], "resources.procs_per_node", 4),
    (["--provider", "gcp", "--provider", "aws"], "resources.providers", ("gcp", "aws")),
    (["--region", "us-central1"], "resources.regions", ("us-central1",)),
    (["--input", "train=s3://b/t"], "inputs.uri", {"train": "s3://b/t"}),
    (["--input", "raw=s3://b/r", "--input-mode", "raw=stream"], "inputs.mode", {"raw": "stream"}),
    (["--outputs", "s3://b/runs/{job_id}"], "outputs", "s3://b/runs/{job_id}"),
    (["--outputs-exist-ok"], "outputs_exist_ok", True),
    (
        ["-p", "lr=1e-3", "--hparam", "layers=[2, 3]"],
        "hyperparameters",
        {"lr": 1e-3, "layers": [2, 3]},
    ),
    (["--env", "WANDB_MODE=offline"], "env", {"WANDB_MODE": "offline"}),
    (["--secret", "HF_TOKEN"], "secrets", ("HF_TOKEN",)),
    (["--max-runtime", "1h30m"], "limits.max_runtime", 5400.0),
    (["--max-cost", "20"], "limits.max_cost", 20.0),
    (["--stop-grace", "2m"], "limits.stop_grace", 120.0),
    (["--max-pending", "1h"], "limits.max_pending", 3600.0),
    (["--retries-on-preemption", "5"], "retries.on_preemption", 5),
    (["--retries", "2"], "retries.on_error", 2),
    (
        ["--retry-on-exit-code", "75", "--retry-on-exit-code", "134"],
        "retries.on_exit_codes",
        (75, 134),
    ),
    (["--checkpoint-every", "10m"], "checkpoint.every", 600.0),
    (["--checkpoint-keep", "5"], "checkpoint.keep", 5),
    (["--checkpoint-path", "snapshot.pt"], "checkpoint.paths", ("snapshot.pt",)),
    (["--backend", "local"], "backend", "local"),
    (["--est-runtime", "3h"], "est_runtime", 10800.0),
    (["--metric", "val_loss=val_loss: ([0-9.]+)"], "metrics", {"val_loss": "val_loss: ([0-9.]+)"}),
    (["--collect", "lightning_logs/**"], "collect", ("lightning_logs/**",)),
    (["--contract", "sagemaker"], "contract", "sagemaker"),
    (["--paths", "host"], "paths", "host"),
    (["--alert", "nan=false"], "alerts.nan", False),
    (["--alert", "no_progress=10m"], "alerts.no_progress", 600.0),
    (["--alert", "no_progress=off"], "alerts.no_progress", None),
    (["--alert", "gpu_util_below=20%"], "alerts.gpu_util_below", 20.0),
    (["--alert", "gpu_util_for=5m"], "alerts.gpu_util_for", 300.0),
    (["--alert", "memory_above=80"], "alerts.memory_above", 80.0),
    (["--alert", "gpu_memory_above=95"], "alerts.gpu_memory_above", 95.0),
    (["--alert", "on_end=failed,cancelled"], "alerts.on_end", ("failed", "cancelled")),
    (["--notify", "webhook=https://h/x"], "alerts.notify.webhook", "https://h/x"),
    (["--notify", "email=me@example.com"], "alerts.notify.email", "me@example.com"),
    (["--notify", "command=true"], "alerts.notify.command", "true"),
    (["--on-alert", "stop"], "alerts.on_alert", "stop"),
    (["--no-tensorboard"], "tracking.tensorboard", False),
    (["--mlflow", "sqlite:///m.db"], "tracking.mlflow", "sqlite:///m.db"),
    (["--mlflow-experiment", "digits"], "tracking.experiment", "digits"),
    (["--simulate-preempt-every", "90s"], "simulate.preempt_every", 90.0),
]


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The models an annotation holds (``X``, ``X | None``, ``dict[str, X]``, ``tuple[X, ...]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for part in typing.get_args(annotation) for model in _models(part)]


def _fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    """The spec's fields, dotted, down to those that hold no model."""
    out = []
    for name, info in model.model_fields.items():
        inner = _models(info.annotation)
        out += _fields(inner[0], f"{prefix}{name}.") if inner else [f"{prefix}{name}"]
    return out


def _option_strings(command: str) -> set[str]:
    parser = build_parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: set[str] = set()
    for action in sub.choices[command]._actions:
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):  # ferry cost estimate
            for subparser in action.choices.values():
                found.update(o for a in subparser._actions for o in a.option_strings)
    return found


def test_every_spec_field_has_a_flag_or_a_reason() -> None:
    fields = _fields(JobSpec)
    missing = [f for f in fields if f not in FLAGS and f not in FILE_ONLY]
    assert not missing, f"spec fields without a flag (add one, or a reason in FILE_ONLY): {missing}"
    stale = [f for f in [*FLAGS, *FILE_ONLY] if f not in fields]
    assert not stale, f"the tables name fields the spec does not have: {stale}"
    assert all(len(reason) > 20 for reason in FILE_ONLY.values())


def test_each_flag_is_taken_by_the_commands_that_read_a_spec() -> None:
    sweep_flags = {flag for field, flag in FLAGS.items() if field.startswith("sweep.")}
    job_flags = {flag for flag in FLAGS.values() if flag != "-- COMMAND"} - sweep_flags
    for command in ("run", "check", "cost"):
        missing = job_flags - _option_strings(command)
        assert not missing, f"ferry {command} lacks {sorted(missing)}"
    assert sweep_flags - _option_strings("sweep") == set()
    assert "--outputs" in _option_strings("check")  # (its lack was reported)


def test_each_flag_sets_its_field(tmp_path: Path) -> None:
    sampled = {field for _, field, _ in SAMPLES}
    unsampled = [f for f in FLAGS if not f.startswith("sweep.") and f not in sampled]
    assert not unsampled, f"fields whose flag no sample tries: {unsampled}"
    for words, field, expected in SAMPLES:
        spec = _spec(["run", *words])
        assert _get(spec.model_dump(), field) == expected, (words, field)


def test_flags_merge_into_the_file_key_by_key(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(
        "command: python t.py\ninputs: {raw: s3://b/raw, labels: {uri: s3://b/l, mode: stream}}\n"
        "alerts: {no_progress: 5m, memory_above: 70}\nlimits: {max_runtime: 1h}\n"
    )
    flags = ["--input-mode", "raw=mount", "--alert", "nan=false", "--max-cost", "3"]
    spec = _spec(["run", str(tmp_path / "job.yaml"), *flags])
    assert spec.inputs["raw"].uri == "s3://b/raw" and spec.inputs["raw"].mode == "mount"
    assert spec.inputs["labels"].mode == "stream"
    assert (spec.alerts.nan, spec.alerts.no_progress, spec.alerts.memory_above) == (False, 300, 70)
    assert (spec.limits.max_runtime, spec.limits.max_cost) == (3600, 3)


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (["--alert", "loudness=3"], "--alert has no rule 'loudness'"),
        (["--requirements", "r.txt", "--image", "i:1"], "--requirements and --image both"),
        (["--input-mode", "raw"], "--input-mode expects NAME=MODE, not 'raw'"),
        (["--metric", "loss"], "--metric expects NAME=REGEX"),
    ],
)
def test_flags_that_make_no_sense_are_refused_in_one_sentence(words: list[str], said: str) -> None:
    from ferry.errors import UsageError

    with pytest.raises(UsageError, match=said):
        _spec(["run", *words, "--", "true"])


def _spec(argv: list[str]) -> JobSpec:
    options, command = split_command(argv)
    args = build_parser(options[0]).parse_args(options)
    return load_spec(args.spec, overrides_from(args, command))


def _get(data: Any, field: str) -> Any:
    """The value at a dotted field; below a mapping of models (inputs), or a list of them
    (alerts.notify), the values of each entry that has it."""
    head, _, rest = field.partition(".")
    value = data[head]
    if not rest:
        return tuple(value) if isinstance(value, list | tuple) else value
    if head == "inputs":
        return {name: _get(item, rest) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return next(item[rest] for item in value if item.get(rest) is not None)
    return _get(value, rest)


def test_the_spec_reference_lists_each_fields_flag() -> None:
    text = (Path(__file__).parents[2] / "docs" / "spec.md").read_text()
    section = text[text.index("## Flags") :]
    rows = {line.split(" | ")[0] for line in section.splitlines() if line.startswith("| `")}
    for field, flag in FLAGS.items():
        row = next((line for line in section.splitlines() if f"`{field}`" in line), "")
        assert flag.split()[0] in row, f"docs/spec.md's Flags section lacks {field}: {flag}"
    for field in FILE_ONLY:
        assert any(f"`{field}`" in row for row in rows), field
