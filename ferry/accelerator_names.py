"""Each backend's own names for an accelerator request, both ways.

:func:`backend_name` gives what Vertex AI (a ``MachineSpec``), SageMaker (an instance type) or
Ray (an ``accelerator_type`` label) calls a request; :func:`from_backend_name` reads such names
back into an :class:`~ferry.accelerators.Accelerator`. The tables are each backend's own
(``ferry/backends/*_names.py``), each with its sources.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, overload

from ferry.accelerators import Accelerator
from ferry.backends.ray_names import RAY_LABELS, TPU_POD_TYPE_PREFIXES
from ferry.backends.sagemaker_names import SAGEMAKER_INSTANCES
from ferry.backends.vertex_names import (
    VERTEX_ACCELERATOR_TYPES,
    VERTEX_CLOUD_TPU,
    VERTEX_CLOUD_TPU_GENERATIONS,
    VERTEX_GPU_MACHINES,
    VERTEX_N1_MACHINES,
    VERTEX_TPU_MACHINES,
    VERTEX_TPU_TOPOLOGIES,
)
from ferry.machines import parse_request

BACKENDS = ("vertex", "sagemaker", "ray")  # the backends backend_name() knows names for

# --- the mapping -----------------------------------------------------------------------------

_POD_TYPE_RE = re.compile(r"^v[0-9]+[a-z]*-[0-9]+$", re.IGNORECASE | re.ASCII)  # v5litepod-8
_RAY_HEAD_RE = re.compile(r"^TPU-(v[0-9]+[a-z]*-[0-9]+)-head$", re.IGNORECASE | re.ASCII)
_RAY_PREFIX = "accelerator_type:"  # how a Ray node lists its label among its resources


def _normal(name: str) -> str:
    """``name`` lower-case with "-" for "_", so NVIDIA_TESLA_A100 and nvidia-tesla-a100 match."""
    return name.strip().lower().replace("_", "-")


_VERTEX_TYPES = {_normal(k): v for k, v in VERTEX_ACCELERATOR_TYPES.items()}
_RAY_KEYS = {_normal(k): v for k, v in RAY_LABELS.items()}


@dataclass(frozen=True)
class VertexMachine:
    """A Vertex AI ``MachineSpec``: the machine of one replica of a worker pool."""

    machine_type: str  # "a2-highgpu-8g", "n1-standard-8", "ct5lp-hightpu-4t", "cloud-tpu"
    accelerator_type: str | None = None  # "NVIDIA_TESLA_A100", "TPU_V3"; None for TPU v5e/v6e
    accelerator_count: int = 0  # may exceed the request: the next size Vertex offers
    tpu_topology: str | None = None  # "2x4": TPU v5e/v6e slices only


@dataclass(frozen=True)
class SageMakerInstance:
    """A SageMaker training instance type and the GPUs one instance carries."""

    instance_type: str  # "ml.p4d.24xlarge"
    count: int  # may exceed the request: the smallest instance type with at least as many


@dataclass(frozen=True)
class RayRequest:
    """What a Ray task or actor asks for: ``num_gpus=count`` (``{"TPU": ...}`` for TPUs) and
    the node resource ``accelerator_type:<accelerator_type>``."""

    accelerator_type: str  # a label of ray.util.accelerators: "A100", "TPU-V5LITEPOD"
    count: int  # GPUs, or the slice size as in tpu_pod_type
    tpu_pod_type: str | None = None  # "v5litepod-8": TPUs only; "TPU-<it>-head" marks worker 0


BackendName = VertexMachine | SageMakerInstance | RayRequest


@overload
def backend_name(acc: Accelerator | str, backend: Literal["vertex"]) -> VertexMachine | None: ...
@overload
def backend_name(
    acc: Accelerator | str, backend: Literal["sagemaker"]
) -> SageMakerInstance | None: ...
@overload
def backend_name(acc: Accelerator | str, backend: Literal["ray"]) -> RayRequest | None: ...
@overload
def backend_name(acc: Accelerator | str, backend: str) -> BackendName | None: ...
def backend_name(acc: Accelerator | str, backend: str) -> BackendName | None:
    """The backend's own names for a request (an :class:`Accelerator` or text that
    :func:`~ferry.machines.parse_request` reads), or ``None`` where that backend offers no such
    accelerator in that number. ``ValueError`` for a backend not in :data:`BACKENDS`.

    Vertex AI and SageMaker give the smallest machine with at least ``count`` GPUs (its
    count says how many it has); a TPU slice is matched exactly. Ray takes any count.
    """
    request = acc if isinstance(acc, Accelerator) else parse_request(acc)
    if backend == "vertex":
        return _vertex_machine(request)
    if backend == "sagemaker":
        return _sagemaker_instance(request)
    if backend == "ray":
        return _ray_request(request)
    raise ValueError(f"no accelerator names for backend {backend!r}; known: {', '.join(BACKENDS)}")


def _first_key(table: dict[str, str], name: str) -> str | None:
    return next((key for key, value in table.items() if value == name), None)


def _vertex_machine(acc: Accelerator) -> VertexMachine | None:
    vertex_type = _first_key(VERTEX_ACCELERATOR_TYPES, acc.name)
    if acc.name in VERTEX_CLOUD_TPU_GENERATIONS and (acc.count == 8 or acc.count % 32 == 0):
        return VertexMachine(VERTEX_CLOUD_TPU, vertex_type, acc.count)
    if acc.is_tpu:
        per_vm = {n: m for m, (gen, n) in VERTEX_TPU_MACHINES.items() if gen == acc.name}
        topology = VERTEX_TPU_TOPOLOGIES.get(acc.count)
        if not per_vm or topology is None:
            return None
        return VertexMachine(per_vm.get(acc.count, per_vm[4]), tpu_topology=topology)
    sizes = [(n, m) for m, (t, n) in VERTEX_GPU_MACHINES.items() if t == vertex_type]
    sizes += [(n, m) for n, m in VERTEX_N1_MACHINES.get(vertex_type or "", {}).items()]
    fitting = [size for size in sizes if size[0] >= acc.count]
    if not fitting:
        return None
    count, machine = min(fitting, key=lambda size: size[0])  # the first listed among equals
    return VertexMachine(machine, vertex_type, count)


def _sagemaker_instance(acc: Accelerator) -> SageMakerInstance | None:
    fitting = [
        (count, instance_type)
        for instance_type, (name, count) in SAGEMAKER_INSTANCES.items()
        if name == acc.name and count >= acc.count
    ]
    if not fitting:
        return None
    count, instance_type = min(fitting, key=lambda size: size[0])
    return SageMakerInstance(instance_type, count)


def _ray_request(acc: Accelerator) -> RayRequest | None:
    label = _first_key(RAY_LABELS, acc.name)
    if label is None:
        return None
    pod_type = f"{TPU_POD_TYPE_PREFIXES[acc.name]}-{acc.count}" if acc.is_tpu else None
    return RayRequest(label, acc.count, pod_type)


def from_backend_name(name: str | BackendName, backend: str | None = None) -> Accelerator:
    """The request behind a backend's names: what :func:`backend_name` returns, or the text of
    one name with an optional count, such as ``NVIDIA_TESLA_A100:8``, ``a2-highgpu-8g``,
    ``ct5lp-hightpu-4t``, ``ml.p4d.24xlarge``, ``A100-80G`` or ``accelerator_type:A100``. With
    ``backend``, a name that backend does not use is refused; without, any name
    :func:`~ferry.machines.parse_request` reads is taken too. Raises ``ValueError`` naming
    what is wrong.
    """
    if isinstance(name, VertexMachine):
        return _from_vertex_machine(name)
    if isinstance(name, SageMakerInstance):
        return from_backend_name(name.instance_type, "sagemaker")
    if isinstance(name, RayRequest):
        return from_backend_name(f"{name.accelerator_type}:{name.count}", "ray")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"expected a backend's name for an accelerator, not {name!r}")
    text = name.strip()
    if backend in (None, "ray"):
        if text.lower().startswith(_RAY_PREFIX):
            text = text[len(_RAY_PREFIX) :].strip()
        if head := _RAY_HEAD_RE.match(text):
            text = head.group(1)
    if backend is not None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
        if not _is_backend_name(text.partition(":")[0], backend):
            raise ValueError(f"{name!r} is not a name {backend} uses; {_EXAMPLES[backend]}")
    return parse_request(text)


_EXAMPLES = {
    "vertex": "Vertex AI names look like NVIDIA_TESLA_A100, a2-highgpu-8g or ct5lp-hightpu-4t",
    "sagemaker": "SageMaker names look like ml.p4d.24xlarge or ml.g5.xlarge",
    "ray": "Ray labels look like A100, A100-80G or TPU-V5LITEPOD (or a pod type, v5litepod-8)",
}


def _is_backend_name(text: str, backend: str) -> bool:
    key = _normal(text)
    if backend == "vertex":
        return key in _VERTEX_TYPES or key in VERTEX_GPU_MACHINES or key in VERTEX_TPU_MACHINES
    if backend == "sagemaker":
        return key in SAGEMAKER_INSTANCES or f"ml.{key}" in SAGEMAKER_INSTANCES
    return key in _RAY_KEYS or _POD_TYPE_RE.match(text.strip()) is not None


def _from_vertex_machine(spec: VertexMachine) -> Accelerator:
    if spec.accelerator_type:
        name = _VERTEX_TYPES.get(_normal(spec.accelerator_type))
        if name is None:
            raise ValueError(
                f"{spec.accelerator_type!r} is not a Vertex AI accelerator type;"
                f" known: {', '.join(VERTEX_ACCELERATOR_TYPES)}"
            )
        if spec.accelerator_count < 1:
            raise ValueError(f"{spec} asks for {spec.accelerator_count} accelerators")
        return Accelerator(name, spec.accelerator_count)
    if spec.machine_type == VERTEX_CLOUD_TPU:
        raise ValueError(f"{spec} needs an accelerator type (TPU_V2 or TPU_V3) and a count")
    if not _is_backend_name(spec.machine_type, "vertex"):
        raise ValueError(
            f"{spec.machine_type} comes with no accelerator of its own;"
            " give accelerator_type and accelerator_count"
        )
    one_vm = from_backend_name(spec.machine_type, "vertex")
    if spec.tpu_topology is None:
        return one_vm
    sides = spec.tpu_topology.lower().split("x")
    if not all(side.isascii() and side.isdecimal() and int(side) > 0 for side in sides):
        raise ValueError(f"{spec.tpu_topology!r} is not a TPU topology such as 2x4")
    chips = 1
    for side in sides:
        chips *= int(side)
    return Accelerator(one_vm.name, chips)
