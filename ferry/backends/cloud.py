"""What the cloud backends (Vertex AI, SageMaker) share: the offering an attempt runs on,
the bucket its code and run folder go to, and how a provider's job is followed.

An attempt on a cloud is a provider job that runs Ferry's runner (:mod:`ferry.runner.cloud`)
with the run folder in the job's bucket. The controller's side follows it here:

- the run folder's log, metrics and events are copied to this machine as they come;
- the provider's state says whether it waits (pending, for at most ``limits.max_pending``,
  with how long it has waited in the events), runs, or has ended;
- when it has ended, the run folder's record says how (the exit code, the reason); where
  the runner recorded nothing, the provider's words do, and a refusal for capacity or
  quota passes that offering over so that the next attempt tries the next one;
- the stop notice is ``stopped`` written in the run folder, which the runner takes as
  SIGTERM with the whole grace to save and send; the provider's own cancel follows after
  the grace and the upload allowance, or at once for :meth:`CloudRun.kill`.

:mod:`ferry.backends.cloud_run` follows an attempt; this module holds the rest.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import TYPE_CHECKING, Any

from ferry import config, defaults
from ferry.backends.base import LaunchRequest
from ferry.errors import DoesNotFit, FerryError, SpecError

if TYPE_CHECKING:
    from ferry.catalog.optimizer import Option
    from ferry.store.plan import Plan
    from ferry.store.records import Job

RUNS_PREFIX = ".ferry/runs"  # in the job's bucket: the run folders of remote attempts
DEFAULT_MAX_PENDING = 30 * 60.0  # s a cloud attempt may wait for its machine
# s a flex-start attempt may wait: Vertex AI's own default maxWaitDuration (a day), since
# waiting for capacity is what flex-start is for
FLEX_START_MAX_PENDING = 24 * 3600.0


def bucket_root(outputs: str, protocol: str, backend: str) -> str:
    """The bucket of the job's outputs (``gs://bucket``), which its code and run folders
    share. Raises SpecError when the outputs are not in a ``protocol`` bucket."""
    from ferry.storage.locations import parse_uri

    place = parse_uri(outputs)
    if place.protocol != protocol:
        raise SpecError(
            f"the {backend} backend writes the job's outputs to a {protocol}:// bucket, "
            f"not to {outputs}",
            f"give outputs: {protocol}://BUCKET/runs/{{job_id}}, or: ferry config set "
            f"outputs_root {protocol}://BUCKET/runs",
        )
    return f"{place.protocol}://{place.bucket}"


def run_folder(outputs: str, name: str) -> str:
    """The run folder of the attempt whose provider job is ``name``, in the job's bucket."""
    from ferry.storage.locations import parse_uri

    place = parse_uri(outputs)
    return f"{place.protocol}://{place.bucket}/{RUNS_PREFIX}/{name}"


def choose(plan: Plan, backend: str) -> Option:
    """The offering the next attempt runs on: the cheapest that fits and is not passed
    over. Raises DoesNotFit saying why there is none."""
    from ferry.catalog.optimizer import Request
    from ferry.catalog.optimizer import plan as make_plan

    found = make_plan(Request.from_plan(plan), backends=[backend], include_local=False)
    usable = [o for o in found.options if o.backend == backend]
    if usable:
        return usable[0]
    passed = [o for o in found.skipped if o.backend == backend]
    if plan.resources.flex_start and passed:
        from ferry.backends.registry import flex_start_refusal

        refusal = flex_start_refusal(backend)
        if all(o.skipped == refusal for o in passed):
            raise DoesNotFit(
                f"{refusal}, and this job asks for {plan.resources.accelerator or 'no GPU'}",
                "ask for one of those GPUs, or leave out resources.spot: flex",
            )
    if passed:
        reasons = "; ".join(f"{o.describe()}: {o.skipped}" for o in passed[:3])
        raise DoesNotFit(
            f"every {backend} offering for {found.request.describe()} is passed over now "
            f"({reasons})",
            "wait, or widen resources.regions / the accelerator",
        )
    raise DoesNotFit(
        f"the {backend} backend has no offering for {found.request.describe()} in the "
        f"price catalog{_where(plan)}",
        "choose another accelerator (ferry catalog ls), or another backend",
    )


def _where(plan: Plan) -> str:
    regions = plan.resources.regions
    return f" in {', '.join(regions)}" if regions else ""


STOPPED_NAME = "stopped"  # (ferry.runner.record.STOPPED, without importing the runner here)


def env_for(job: Job, base_env: dict[str, str]) -> dict[str, str]:
    """The job's own variables (the spec's ``env``), as the provider's request carries
    them: never its secrets, which go through the run folder."""
    return {k: v for k, v in base_env.items() if k in job.plan.env}


def nonce() -> str:
    return os.urandom(3).hex()


def max_pending(plan: Plan) -> float:
    """How long an attempt of ``plan`` may wait for its machines: ``limits.max_pending``,
    else a day on flex-start capacity and half an hour on any other."""
    if plan.limits.max_pending:
        return plan.limits.max_pending
    return FLEX_START_MAX_PENDING if plan.resources.flex_start else DEFAULT_MAX_PENDING


def provider_timeout(plan: Plan, grace: float) -> float:
    """The provider's own limit: ``limits.max_runtime`` with room for the notice and the
    last upload (Ferry stops the job first), else ``cloud.max_runtime``."""
    if plan.limits.max_runtime:
        return plan.limits.max_runtime + grace + defaults.CLOUD_UPLOAD_ALLOWANCE
    return float(config.get("cloud.max_runtime"))


def secrets_folders(folder: str, nodes: int) -> list[str]:
    """Where the job's secrets wait for the runners of an attempt whose run folder is
    ``folder``: beside its order, or beside each node's share of it in a gang."""
    from ferry.runner.nodes import node_folder

    return [node_folder(folder, n) for n in range(nodes)] if nodes > 1 else [folder]


def forget_secrets(folder: str, nodes: int = 1) -> None:
    """Remove the job's secrets from a run folder (and its nodes') no runner will read."""
    from ferry.runner.record import _Place
    from ferry.runner.run import SECRETS

    for each in secrets_folders(folder, nodes):
        with contextlib.suppress(FerryError):
            _Place(each).remove(SECRETS)


def write_order(
    request: LaunchRequest, folder: str, machine_changes: dict[str, Any] | None = None
) -> None:
    """The runner's order, and the job's secrets beside it, in the run folder.
    ``machine_changes`` replace fields of the order's machine plan (where the provider
    puts the inputs, say). A gang's order has a host for each node, named by the
    provider on the machines (:mod:`ferry.runner.cloud_gang`), and the secrets wait in
    each node's folder, for its runner."""
    from ferry.runner.order import RunOrder
    from ferry.runner.record import _Place
    from ferry.runner.run import SECRETS

    plan = request.job.plan
    nodes = plan.resources.nodes
    machine = dict(request.machine or {})
    machine["requirements_into"] = "interpreter"  # the framework container's own Python
    if nodes > 1:  # how long the machines wait for each other (started, so billed)
        machine["max_pending"] = plan.limits.max_pending or DEFAULT_MAX_PENDING
    machine.update(machine_changes or {})
    RunOrder(
        attempt=request.attempt,
        argv=request.argv,
        cwd=".",  # the code, unpacked by ferry.runner.cloud
        env={},
        grace=request.grace,
        procs_per_node=request.procs_per_node,
        hosts=["127.0.0.1"] if nodes == 1 else ["?"] * nodes,
        machine=machine,
        echo=True,  # (the provider's log shows the job's output too)
        job_env=sorted(plan.env),
    ).write(folder)
    secrets = {k: request.env[k] for k in plan.secrets if k in request.env}
    if secrets:
        try:
            for each in secrets_folders(folder, nodes):
                _Place(each).put(SECRETS, json.dumps(secrets).encode())
        except BaseException:  # (none left behind in the folders written before)
            forget_secrets(folder, nodes)
            raise
