"""Each backend's own names for an accelerator request, both ways.

:func:`backend_name` gives what Vertex AI (a ``MachineSpec``), SageMaker (an instance type) or
Ray (an ``accelerator_type`` label) calls a request; :func:`from_backend_name` reads such names
back into an :class:`~ferry.accelerators.Accelerator`. Every table below names its source; keys
are the backends' spellings, values Ferry's canonical names. A table lists each machine family
smallest first: where two machines fit a request equally, the one listed first is chosen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, overload

from ferry.accelerators import Accelerator, parse_accelerator

BACKENDS = ("vertex", "sagemaker", "ray")  # the backends backend_name() knows names for

# --- Vertex AI -------------------------------------------------------------------------------
# MachineSpec.acceleratorType values -> canonical name.
# https://cloud.google.com/vertex-ai/docs/reference/rest/v1/MachineSpec#acceleratortype
# The first Vertex name of a canonical name is the one Ferry asks for: NVIDIA_H100_80GB (A3
# High) rather than NVIDIA_H100_MEGA_80GB, the same GPU on A3 Mega machines.
VERTEX_ACCELERATOR_TYPES: dict[str, str] = {
    "NVIDIA_TESLA_K80": "K80",  # end of support, no machine left: /compute/docs/eol/k80-eol
    "NVIDIA_TESLA_P4": "P4",
    "NVIDIA_TESLA_P100": "P100",
    "NVIDIA_TESLA_V100": "V100",
    "NVIDIA_TESLA_T4": "T4",
    "NVIDIA_L4": "L4",
    "NVIDIA_TESLA_A100": "A100",  # the 40 GB A100
    "NVIDIA_A100_80GB": "A100-80GB",
    "NVIDIA_H100_80GB": "H100",
    "NVIDIA_H100_MEGA_80GB": "H100",
    "NVIDIA_H200_141GB": "H200",
    "NVIDIA_B200": "B200",
    "TPU_V2": "tpu-v2",
    "TPU_V3": "tpu-v3",
    "TPU_V4_POD": "tpu-v4",
    "TPU_V5_LITEPOD": "tpu-v5e",
}

# Training machine types that come with their GPUs -> (acceleratorType, acceleratorCount).
# https://cloud.google.com/vertex-ai/docs/training/configure-compute#gpu-compatibility-table
VERTEX_GPU_MACHINES: dict[str, tuple[str, int]] = {
    "a2-highgpu-1g": ("NVIDIA_TESLA_A100", 1),
    "a2-highgpu-2g": ("NVIDIA_TESLA_A100", 2),
    "a2-highgpu-4g": ("NVIDIA_TESLA_A100", 4),
    "a2-highgpu-8g": ("NVIDIA_TESLA_A100", 8),
    "a2-megagpu-16g": ("NVIDIA_TESLA_A100", 16),
    "a2-ultragpu-1g": ("NVIDIA_A100_80GB", 1),
    "a2-ultragpu-2g": ("NVIDIA_A100_80GB", 2),
    "a2-ultragpu-4g": ("NVIDIA_A100_80GB", 4),
    "a2-ultragpu-8g": ("NVIDIA_A100_80GB", 8),
    "a3-highgpu-1g": ("NVIDIA_H100_80GB", 1),
    "a3-highgpu-2g": ("NVIDIA_H100_80GB", 2),
    "a3-highgpu-4g": ("NVIDIA_H100_80GB", 4),
    "a3-highgpu-8g": ("NVIDIA_H100_80GB", 8),
    "a3-megagpu-8g": ("NVIDIA_H100_MEGA_80GB", 8),
    "a3-ultragpu-8g": ("NVIDIA_H200_141GB", 8),
    "a4-highgpu-8g": ("NVIDIA_B200", 8),
    "g2-standard-4": ("NVIDIA_L4", 1),
    "g2-standard-8": ("NVIDIA_L4", 1),
    "g2-standard-12": ("NVIDIA_L4", 1),
    "g2-standard-16": ("NVIDIA_L4", 1),
    "g2-standard-32": ("NVIDIA_L4", 1),
    "g2-standard-24": ("NVIDIA_L4", 2),
    "g2-standard-48": ("NVIDIA_L4", 4),
    "g2-standard-96": ("NVIDIA_L4", 8),
}

# N1 machine types take P4, P100, T4 or V100 GPUs attached, in the counts the same table
# allows (1, 2, 4; V100 also 8). Ferry gives each GPU 8 vCPUs, as the shipped catalog prices
# them: acceleratorType -> {acceleratorCount: machine type}.
VERTEX_N1_MACHINES: dict[str, dict[int, str]] = {
    gpu: {1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32"}
    for gpu in ("NVIDIA_TESLA_P4", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_T4")
} | {
    "NVIDIA_TESLA_V100": {
        1: "n1-standard-8",
        2: "n1-standard-16",
        4: "n1-standard-32",
        8: "n1-standard-64",
    },
}

# TPU v2 and v3 run on machine type "cloud-tpu" with acceleratorType TPU_V2/TPU_V3 and
# acceleratorCount 8 (one TPU) or a multiple of 32 (a Pod slice); TPU v4 and v5p have no
# training configuration on Vertex AI.
# https://cloud.google.com/vertex-ai/docs/training/configure-compute (section TPUs)
VERTEX_CLOUD_TPU = "cloud-tpu"
VERTEX_CLOUD_TPU_GENERATIONS = ("tpu-v2", "tpu-v3")

# TPU v5e and v6e: a machine type per VM (-> generation, chips on one VM) and a tpuTopology for
# the slice; a slice larger than one VM is made of the 4-chip machine type.
# https://cloud.google.com/vertex-ai/docs/training/configure-compute (TPU v5e, TPU v6e)
VERTEX_TPU_MACHINES: dict[str, tuple[str, int]] = {
    "ct5lp-hightpu-1t": ("tpu-v5e", 1),
    "ct5lp-hightpu-4t": ("tpu-v5e", 4),
    "ct5lp-hightpu-8t": ("tpu-v5e", 8),
    "ct6e-standard-1t": ("tpu-v6e", 1),
    "ct6e-standard-4t": ("tpu-v6e", 4),
    "ct6e-standard-8t": ("tpu-v6e", 8),
}
VERTEX_TPU_TOPOLOGIES: dict[int, str] = {  # chips in the slice -> tpuTopology (v5e and v6e)
    1: "1x1",
    4: "2x2",
    8: "2x4",
    16: "4x4",
    32: "4x8",
    64: "8x8",
    128: "8x16",
    256: "16x16",
}

# --- SageMaker -------------------------------------------------------------------------------
# Training instance types with GPUs -> (canonical name, GPUs on one instance). The names are
# the TrainingInstanceType values of the SageMaker API
# (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ResourceConfig.html); the GPUs
# of each are the EC2 type's (https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html).
# SageMaker has no TPUs.
SAGEMAKER_INSTANCES: dict[str, tuple[str, int]] = {
    "ml.p2.xlarge": ("K80", 1),
    "ml.p2.8xlarge": ("K80", 8),
    "ml.p2.16xlarge": ("K80", 16),
    "ml.p3.2xlarge": ("V100", 1),
    "ml.p3.8xlarge": ("V100", 4),
    "ml.p3.16xlarge": ("V100", 8),
    "ml.p3dn.24xlarge": ("V100-32GB", 8),
    "ml.g4dn.xlarge": ("T4", 1),
    "ml.g4dn.2xlarge": ("T4", 1),
    "ml.g4dn.4xlarge": ("T4", 1),
    "ml.g4dn.8xlarge": ("T4", 1),
    "ml.g4dn.16xlarge": ("T4", 1),
    "ml.g4dn.12xlarge": ("T4", 4),
    "ml.g5.xlarge": ("A10G", 1),
    "ml.g5.2xlarge": ("A10G", 1),
    "ml.g5.4xlarge": ("A10G", 1),
    "ml.g5.8xlarge": ("A10G", 1),
    "ml.g5.16xlarge": ("A10G", 1),
    "ml.g5.12xlarge": ("A10G", 4),
    "ml.g5.24xlarge": ("A10G", 4),
    "ml.g5.48xlarge": ("A10G", 8),
    "ml.g6.xlarge": ("L4", 1),
    "ml.g6.2xlarge": ("L4", 1),
    "ml.g6.4xlarge": ("L4", 1),
    "ml.g6.8xlarge": ("L4", 1),
    "ml.g6.16xlarge": ("L4", 1),
    "ml.g6.12xlarge": ("L4", 4),
    "ml.g6.24xlarge": ("L4", 4),
    "ml.g6.48xlarge": ("L4", 8),
    "ml.g6e.xlarge": ("L40S", 1),
    "ml.g6e.2xlarge": ("L40S", 1),
    "ml.g6e.4xlarge": ("L40S", 1),
    "ml.g6e.8xlarge": ("L40S", 1),
    "ml.g6e.16xlarge": ("L40S", 1),
    "ml.g6e.12xlarge": ("L40S", 4),
    "ml.g6e.24xlarge": ("L40S", 4),
    "ml.g6e.48xlarge": ("L40S", 8),
    "ml.p4d.24xlarge": ("A100", 8),
    "ml.p4de.24xlarge": ("A100-80GB", 8),
    "ml.p5.4xlarge": ("H100", 1),
    "ml.p5.48xlarge": ("H100", 8),
    "ml.p5en.48xlarge": ("H200", 8),  # before p5e: the shipped catalog prices p5en
    "ml.p5e.48xlarge": ("H200", 8),
    "ml.p6-b200.48xlarge": ("B200", 8),
}

# --- Ray -------------------------------------------------------------------------------------
# accelerator_type labels (the constants of ray/util/accelerators/accelerators.py; a node
# carries the resource "accelerator_type:<label>") -> canonical name. Ray labels a GPU node by
# its model alone ("A100" for 40 GB and 80 GB alike, "V100" for 16 GB and 32 GB alike); the
# sized A100 labels "A100-40G" and "A100-80G" are Ray's too, but a cluster's operator adds them
# by hand. The first label of a canonical name is the one Ferry asks for.
RAY_LABELS: dict[str, str] = {
    "K80": "K80",
    "P4": "P4",
    "P100": "P100",
    "V100": "V100",
    "T4": "T4",
    "A10G": "A10G",
    "L4": "L4",
    "L40S": "L40S",
    "A100": "A100",  # any A100 satisfies a request for the 40 GB one
    "A100-40G": "A100",
    "A100-80G": "A100-80GB",
    "H100": "H100",
    "H200": "H200",
    "B200": "B200",
    "AMD-Instinct-MI300X-OAM": "MI300X",
    "TPU-V2": "tpu-v2",
    "TPU-V3": "tpu-v3",
    "TPU-V4": "tpu-v4",
    "TPU-V5P": "tpu-v5p",
    "TPU-V5LITEPOD": "tpu-v5e",
    "TPU-V6E": "tpu-v6e",
}

# Cloud TPU accelerator-type prefixes ("v5litepod-8"): Ray reads a TPU node's pod type in this
# form and marks worker 0 of a slice with the resource "TPU-<pod type>-head"
# (ray/_private/accelerators/tpu.py; https://cloud.google.com/tpu/docs/v5e).
TPU_POD_TYPE_PREFIXES: dict[str, str] = {
    "tpu-v2": "v2",
    "tpu-v3": "v3",
    "tpu-v4": "v4",
    "tpu-v5e": "v5litepod",
    "tpu-v5p": "v5p",
    "tpu-v6e": "v6e",
}


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
    :func:`parse_accelerator` reads), or ``None`` where that backend offers no such
    accelerator in that number. ``ValueError`` for a backend not in :data:`BACKENDS`.

    Vertex AI and SageMaker give the smallest machine with at least ``count`` GPUs (its
    count says how many it has); a TPU slice is matched exactly. Ray takes any count.
    """
    request = acc if isinstance(acc, Accelerator) else parse_accelerator(acc)
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
    :func:`parse_accelerator` reads is taken too. Raises ``ValueError`` naming what is wrong.
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
    return parse_accelerator(text)


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
