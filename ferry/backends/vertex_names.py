"""Vertex AI's names for accelerators and training machines (MachineSpec values), with their
sources; keys are Vertex AI's spellings, values Ferry's canonical names. A table lists each
machine family smallest first: where two machines fit a request equally, the first is chosen.
Data only: ``ferry.accelerator_names`` maps requests to these names and back."""

from __future__ import annotations

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

# The GPUs Vertex AI's Dynamic Workload Scheduler starts on flex-start capacity
# (scheduling.strategy FLEX_START; the job waits for all its machines, then runs at most 7 days).
# https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws (Requirements)
VERTEX_FLEX_START_GPUS = ("L4", "A100", "A100-80GB", "H100", "H200", "B200")
VERTEX_FLEX_START_MAX_RUNTIME = 7 * 24 * 3600.0  # s: a flex-start job's timeout at most

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
