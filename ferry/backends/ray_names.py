"""Ray's accelerator_type labels and the TPU pod types it reads, with their sources; keys are
Ray's spellings, values Ferry's canonical names. Data only: ``ferry.accelerator_names`` maps
requests to these names and back."""

from __future__ import annotations

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
