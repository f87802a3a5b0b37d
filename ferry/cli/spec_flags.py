"""The job spec as flags: one flag for each field (or a reason it has none), shared by every
command that reads a spec (``ferry run``, ``ferry check``, ``ferry cost estimate``), and the
spec fields a command line sets. Flags win over the file; mappings merge key by key."""

from __future__ import annotations

import argparse
from typing import Any

from ferry.cli._common import add_spot_flag
from ferry.errors import UsageError

# Each field of the spec -> the flag that sets it. The sweep: section's flags are those of
# `ferry sweep`; every other flag is taken by `ferry run`, `ferry check` and `ferry cost
# estimate` alike. tests/cli/test_spec_flags.py fails on a field found in neither table.
FLAGS: dict[str, str] = {
    "name": "--name",
    "code": "--code",
    "command": "-- COMMAND",
    "shell": "--shell",
    "environment.requirements": "--requirements",
    "environment.image": "--image",
    "environment.framework": "--framework",
    "resources.accelerator": "--accelerator",
    "resources.cpus": "--cpus",
    "resources.memory": "--memory",
    "resources.spot": "--spot",
    "resources.nodes": "--nodes",
    "resources.procs_per_node": "--procs-per-node",
    "resources.providers": "--provider",
    "resources.regions": "--region",
    "inputs.uri": "--input",
    "inputs.mode": "--input-mode",
    "outputs": "--outputs",
    "outputs_exist_ok": "--outputs-exist-ok",
    "hyperparameters": "--hparam",
    "env": "--env",
    "secrets": "--secret",
    "limits.max_runtime": "--max-runtime",
    "limits.max_cost": "--max-cost",
    "limits.stop_grace": "--stop-grace",
    "limits.max_pending": "--max-pending",
    "retries.on_preemption": "--retries-on-preemption",
    "retries.on_error": "--retries",
    "retries.on_exit_codes": "--retry-on-exit-code",
    "checkpoint.every": "--checkpoint-every",
    "checkpoint.keep": "--checkpoint-keep",
    "checkpoint.paths": "--checkpoint-path",
    "backend": "--backend",
    "est_runtime": "--est-runtime",
    "metrics": "--metric",
    "collect": "--collect",
    "contract": "--contract",
    "paths": "--paths",
    "alerts.nan": "--alert",
    "alerts.no_progress": "--alert",
    "alerts.gpu_util_below": "--alert",
    "alerts.gpu_util_for": "--alert",
    "alerts.memory_above": "--alert",
    "alerts.gpu_memory_above": "--alert",
    "alerts.on_end": "--alert",
    "alerts.notify.webhook": "--notify",
    "alerts.notify.email": "--notify",
    "alerts.notify.command": "--notify",
    "alerts.on_alert": "--on-alert",
    "tracking.tensorboard": "--tensorboard",
    "tracking.mlflow": "--mlflow",
    "tracking.experiment": "--mlflow-experiment",
    "simulate.preempt_every": "--simulate-preempt-every",
    "sweep.params": "--param",
    "sweep.objective": "--objective",
    "sweep.trials": "--trials",
    "sweep.parallel": "--parallel",
    "sweep.sampler": "--sampler",
    "sweep.pruner": "--pruner",
    "sweep.seed": "--seed",
}

# Fields no flag sets, each with the reason.
FILE_ONLY: dict[str, str] = {
    "environment.python": "its one value, current, is what a job gets when neither "
    "--requirements nor --image is given",
}

# The alerts.* fields --alert KEY=VALUE sets (the rest have flags of their own).
ALERT_KEYS = tuple(k.split(".", 1)[1] for k, flag in FLAGS.items() if flag == "--alert")


def add_spec_flags(
    parser: argparse.ArgumentParser,
    backend_help: str = "where to run: local, ray, vertex, sagemaker, or auto (the cheapest "
    "offering that fits); default: the spec's, else the backend setting",
) -> None:
    """Add a flag for every spec field to ``parser``, in groups as ``--help`` shows them."""
    what = parser.add_argument_group("the job (each flag sets a spec field; flags win)")
    what.add_argument("--name", help="job name (default: from the spec or the script)")
    what.add_argument("--code", metavar="DIR", help="folder snapshotted for the job (default: .)")
    what.add_argument("--backend", help=backend_help)
    what.add_argument(
        "--shell", action="store_true", default=None, help="run the command through /bin/sh"
    )
    what.add_argument(
        "--requirements",
        metavar="FILE",
        help="a requirements file in the code folder: the job runs in a virtual environment "
        "built from it once and reused (environment.requirements)",
    )
    what.add_argument(
        "--image", metavar="IMAGE", help="a container image to run in (Vertex AI, SageMaker)"
    )
    what.add_argument(
        "--framework",
        metavar="NAME[==VERSION]",
        help="on a cloud, the prebuilt image of this framework, e.g. pytorch==2.4, sklearn",
    )
    what.add_argument(
        "--contract",
        choices=("ferry", "vertex", "sagemaker"),
        help="how the script expects to be called (vertex: --key=value hyperparameters; "
        "sagemaker: --key value and SageMaker's files)",
    )
    what.add_argument(
        "--paths",
        choices=("auto", "container", "host"),
        help="container: the job sees /opt/ml and /gcs/<bucket> paths; auto: when the code "
        "mentions them (default); host: never",
    )
    what.add_argument(
        "--hparam", "-p", action="append", metavar="KEY=VALUE", help="hyperparameter (YAML value)"
    )
    what.add_argument("--env", action="append", metavar="KEY=VALUE", help="environment variable")
    what.add_argument(
        "--secret", action="append", metavar="NAME", help="pass $NAME from here, never stored"
    )
    _add_resources(parser.add_argument_group("resources"))
    _add_data(parser.add_argument_group("data and results"))
    _add_limits(parser.add_argument_group("limits, retries and checkpoints"))
    _add_watching(parser.add_argument_group("alerts and tracking"))


def _add_resources(group: Any) -> None:
    group.add_argument("--accelerator", metavar="KIND[:N]", help="e.g. A100:1, H100:8, tpu-v5e-8")
    group.add_argument("--cpus", type=float, help="CPU cores per node")
    group.add_argument("--memory", help="memory per node, e.g. 32GB")
    add_spot_flag(group)
    group.add_argument("--nodes", type=int, help="number of nodes")
    group.add_argument(
        "--procs-per-node",
        type=int,
        metavar="N",
        help="processes per node, each told its rank as torchrun would (default: one per GPU)",
    )
    group.add_argument(
        "--provider",
        action="append",
        metavar="NAME",
        help="where --backend auto may look: aws, azure, gcp, lambda (repeatable)",
    )
    group.add_argument(
        "--region", action="append", metavar="REGION", help="a region --backend auto may use"
    )


def _add_data(group: Any) -> None:
    group.add_argument("--input", action="append", metavar="NAME=URI", help="an input")
    group.add_argument(
        "--input-mode",
        action="append",
        metavar="NAME=MODE",
        help="how an input reaches the job: copy (default), mount or stream",
    )
    group.add_argument(
        "--outputs", metavar="URI", help="where results go (default: outputs_root/{job_id})"
    )
    group.add_argument(
        "--outputs-exist-ok",
        action="store_true",
        default=None,
        help="allow --outputs to hold files already (the manifest lists only this job's)",
    )
    group.add_argument(
        "--collect",
        action="append",
        metavar="GLOB",
        help="files the script leaves in its working folder that belong in the outputs",
    )
    group.add_argument(
        "--metric",
        action="append",
        metavar="NAME=REGEX",
        help="a metric read from printed lines: the regular expression's first group",
    )


def _add_limits(group: Any) -> None:
    group.add_argument(
        "--max-runtime", metavar="DURATION", help="stop the job after this long, e.g. 6h"
    )
    group.add_argument("--max-cost", type=float, metavar="USD", help="stop the job at this cost")
    group.add_argument(
        "--stop-grace", metavar="DURATION", help="between the stop notice and SIGKILL, e.g. 2m"
    )
    group.add_argument(
        "--max-pending", metavar="DURATION", help="how long an attempt may wait for a machine"
    )
    group.add_argument(
        "--est-runtime", metavar="DURATION", help="expected runtime, for the price estimate"
    )
    group.add_argument(
        "--retries", type=int, metavar="N", help="retries after a failing exit (retries.on_error)"
    )
    group.add_argument(
        "--retries-on-preemption", type=int, metavar="N", help="new attempts after preemptions"
    )
    group.add_argument(
        "--retry-on-exit-code",
        type=int,
        action="append",
        metavar="CODE",
        help="an exit code always retried, not counted (repeatable)",
    )
    group.add_argument(
        "--checkpoint-every", metavar="DURATION", help="a hint: FERRY_CHECKPOINT_EVERY"
    )
    group.add_argument(
        "--checkpoint-keep", type=int, metavar="N", help="checkpoints runtime.checkpoint keeps"
    )
    group.add_argument(
        "--checkpoint-path",
        action="append",
        metavar="GLOB",
        help="files in the working folder that are checkpoint state (repeatable)",
    )
    group.add_argument(
        "--simulate-preempt-every",
        metavar="DURATION",
        help="rehearse spot: preempt the job at random about this often (e.g. 90s)",
    )


def _add_watching(group: Any) -> None:
    group.add_argument(
        "--alert",
        action="append",
        metavar="KEY=VALUE",
        help=f"an alert rule: {', '.join(ALERT_KEYS)} (e.g. no_progress=10m, nan=false)",
    )
    group.add_argument(
        "--notify",
        action="append",
        metavar="KIND=TARGET",
        help="send alerts to webhook=URL, email=ADDRESS or command=CMD (repeatable)",
    )
    group.add_argument(
        "--on-alert",
        choices=("notify", "stop"),
        help="stop: end the job at its first alert (NaN, no progress, low GPU use, memory)",
    )
    group.add_argument(
        "--tensorboard",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write metrics as TensorBoard event files (default: yes)",
    )
    group.add_argument("--mlflow", metavar="URI", help="also send metrics to this MLflow URI")
    group.add_argument(
        "--mlflow-experiment", metavar="NAME", help="MLflow experiment (default: the job's name)"
    )


def pairs(values: list[str] | None, flag: str, what: str = "KEY=VALUE") -> dict[str, str]:
    """``KEY=VALUE`` items of a repeatable flag, as a mapping."""
    out: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} expects {what}, not {item!r}")
        out[key] = value
    return out


def _value(text: str) -> Any:
    """A flag's value read as YAML (``false``, ``3``, ``[a, b]``), numbers as numbers
    (YAML 1.1 reads ``1e-3`` as text), else the text itself."""
    import yaml

    if not text:
        return ""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str):
        for kind in (int, float):
            try:
                return kind(value)
            except ValueError:
                continue
    return value


def _set(out: dict[str, Any], path: str, value: Any) -> None:
    """Put ``value`` at the dotted ``path`` of ``out``."""
    *parents, last = path.split(".")
    for part in parents:
        out = out.setdefault(part, {})
    out[last] = value


# flag's dest -> the spec field it sets as given
_PLAIN = {
    "name": "name",
    "code": "code",
    "backend": "backend",
    "shell": "shell",
    "contract": "contract",
    "paths": "paths",
    "accelerator": "resources.accelerator",
    "cpus": "resources.cpus",
    "memory": "resources.memory",
    "spot": "resources.spot",
    "nodes": "resources.nodes",
    "procs_per_node": "resources.procs_per_node",
    "provider": "resources.providers",
    "region": "resources.regions",
    "outputs": "outputs",
    "outputs_exist_ok": "outputs_exist_ok",
    "collect": "collect",
    "secret": "secrets",
    "max_runtime": "limits.max_runtime",
    "max_cost": "limits.max_cost",
    "stop_grace": "limits.stop_grace",
    "max_pending": "limits.max_pending",
    "est_runtime": "est_runtime",
    "retries": "retries.on_error",
    "retries_on_preemption": "retries.on_preemption",
    "retry_on_exit_code": "retries.on_exit_codes",
    "checkpoint_every": "checkpoint.every",
    "checkpoint_keep": "checkpoint.keep",
    "checkpoint_path": "checkpoint.paths",
    "simulate_preempt_every": "simulate.preempt_every",
    "on_alert": "alerts.on_alert",
    "tensorboard": "tracking.tensorboard",
    "mlflow": "tracking.mlflow",
    "mlflow_experiment": "tracking.experiment",
}


def overrides_from(args: argparse.Namespace, command: list[str] | None) -> dict[str, Any]:
    """The spec fields the flags in ``args`` (and the command after ``--``) set."""
    out: dict[str, Any] = {}
    for dest, path in _PLAIN.items():
        value = getattr(args, dest, None)
        if value is not None:
            _set(out, path, value)
    if args.requirements and args.image:
        raise UsageError(
            "--requirements and --image both say where the software comes from",
            "give one of them",
        )
    if args.requirements:  # (in place of what the spec says the software is)
        out["environment"] = {"requirements": args.requirements, "python": None, "image": None}
    if args.image:
        out["environment"] = {"image": args.image, "python": None, "requirements": None}
    if args.framework is not None:
        out.setdefault("environment", {})["framework"] = args.framework
    inputs: dict[str, Any] = dict(pairs(args.input, "--input", "NAME=URI"))
    for name, mode in pairs(args.input_mode, "--input-mode", "NAME=MODE").items():
        given = inputs.get(name)
        inputs[name] = {"mode": mode} if given is None else {"uri": given, "mode": mode}
    if inputs:
        out["inputs"] = inputs
    if args.env:
        out["env"] = pairs(args.env, "--env")
    if args.metric:
        out["metrics"] = pairs(args.metric, "--metric", "NAME=REGEX")
    if args.hparam:
        out["hyperparameters"] = {k: _value(v) for k, v in pairs(args.hparam, "--hparam").items()}
    alerts = _alerts(args)
    if alerts:
        out.setdefault("alerts", {}).update(alerts)
    if command:
        out["command"] = command
    return out


def _alerts(args: argparse.Namespace) -> dict[str, Any]:
    alerts: dict[str, Any] = {}
    for key, text in pairs(args.alert, "--alert").items():
        if key not in ALERT_KEYS:
            raise UsageError(
                f"--alert has no rule {key!r}", f"give one of: {', '.join(ALERT_KEYS)}"
            )
        # (as text: the spec reads `off`, `10m` and `20%` as the file would have them)
        alerts[key] = [v.strip() for v in text.split(",") if v.strip()] if key == "on_end" else text
    if args.notify:
        alerts["notify"] = []
        for item in args.notify:
            kind, sep, target = item.partition("=")
            if not sep or kind not in ("webhook", "email", "command") or not target:
                raise UsageError(
                    f"--notify expects webhook=URL, email=ADDRESS or command=CMD, not {item!r}"
                )
            alerts["notify"].append({kind: target})
    return alerts
