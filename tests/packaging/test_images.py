"""The prebuilt images a cloud job runs in: environment.framework, and the table."""

from __future__ import annotations

import pytest

from ferry.errors import SpecError
from ferry.packaging.images import parse_framework, sagemaker_image, vertex_image
from ferry.spec import spec_from_dict


def test_the_framework_picks_the_nearest_image_at_or_below_the_version_asked() -> None:
    exact = vertex_image("pytorch==2.3", "gpu", "europe-west4")
    assert exact.uri == "europe-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-3.py310:latest"
    assert exact.note == ""
    newer = vertex_image("torch==2.13", "cpu", "us-central1")  # (an alias)
    assert (
        newer.uri.endswith("/pytorch-xla.2-4.py310:latest") and "2.4 is the nearest" in newer.note
    )
    older = vertex_image("pytorch==1.9", "gpu", "asia-east1")  # below them all: the oldest
    assert older.version == "2.1" and older.uri.startswith("asia-docker.pkg.dev/")
    assert vertex_image("sklearn", "cpu", "us-east1").uri.endswith("/sklearn-cpu.1-6:latest")
    with pytest.raises(SpecError, match="no prebuilt xgboost image for TPU"):
        vertex_image("xgboost", "tpu", "us-central1")
    dlc = sagemaker_image("pytorch==2.8", True, "eu-west-1")
    assert dlc.uri == (
        "763104351884.dkr.ecr.eu-west-1.amazonaws.com/pytorch-training:"
        "2.8.0-gpu-py312-cu129-ubuntu22.04-sagemaker"
    )
    assert sagemaker_image("sklearn", False, "us-east-1").uri.startswith("683313688378.")


def test_a_framework_is_checked_with_the_spec() -> None:
    assert parse_framework("PyTorch==2.4").version == "2.4"
    spec = spec_from_dict({"command": "python t.py", "environment": {"framework": "xgboost"}})
    assert spec.environment.framework == "xgboost"
    with pytest.raises(SpecError, match=r"environment: framework 'cuda==12' is not a framework"):
        spec_from_dict({"command": "python t.py", "environment": {"framework": "cuda==12"}})
    with pytest.raises(SpecError, match="give it or image, not both"):
        spec_from_dict(
            {"command": "x", "environment": {"framework": "pytorch", "image": "my/image:1"}}
        )
