"""SageMaker's training instance types with GPUs, with their source; keys are SageMaker's
spellings, values Ferry's canonical names, smallest first. Data only:
``ferry.accelerator_names`` maps requests to these names and back."""

from __future__ import annotations

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

# Training instance types without GPUs that the shipped catalog prices (cpu_offerings.csv
# lists them by their EC2 names, at SageMaker's training prices).
SAGEMAKER_CPU_INSTANCES = frozenset({"ml.m5.xlarge", "ml.m5.2xlarge", "ml.m5.4xlarge"})

# What SageMaker's training prices add to EC2's, by instance family: the GPU rows of the
# catalog carry EC2's prices. Ratios of the us-east-1 on-demand list prices (SageMaker
# pricing page, "Training"; EC2 on-demand pricing), for example ml.g5.xlarge 1.408 USD/h
# against g5.xlarge 1.006, ml.p3.2xlarge 3.825 against 3.06, ml.p4d.24xlarge 37.688
# against 32.7726. An estimate before the job; after it, the cost is SageMaker's billable
# seconds at the same price.
SAGEMAKER_MARKUP: dict[str, float] = {
    "p3": 1.25,
    "p3dn": 1.25,
    "p4d": 1.15,
    "p4de": 1.15,
    "p5": 1.15,
    "p5e": 1.15,
    "p5en": 1.15,
    "p6-b200": 1.15,
    "g4dn": 1.40,
    "g5": 1.40,
    "g6": 1.40,
    "g6e": 1.40,
}


def sagemaker_type(ec2_type: str) -> str:
    """SageMaker's name for the catalog's EC2 instance type (``g5.xlarge`` -> ``ml.g5.xlarge``)."""
    return ec2_type if ec2_type.startswith("ml.") else f"ml.{ec2_type}"


def trains_on(ec2_type: str) -> bool:
    """Whether SageMaker has a training instance of the catalog's EC2 type."""
    name = sagemaker_type(ec2_type)
    return name in SAGEMAKER_INSTANCES or name in SAGEMAKER_CPU_INSTANCES


def markup(ec2_type: str, accelerated: bool) -> float:
    """SageMaker's training price over the catalog's for ``ec2_type`` (CPU rows carry
    SageMaker's own prices already)."""
    if not accelerated:
        return 1.0
    return SAGEMAKER_MARKUP.get(ec2_type.removeprefix("ml.").split(".")[0], 1.25)
