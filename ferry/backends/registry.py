"""One registry of backends: a name maps to ``"module:Class"`` and an install hint.

Modules are imported on first use, so ``import ferry`` never pulls in a cloud SDK; a
missing extra gives the ``pip install`` line that fixes it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ferry.errors import BackendNotInstalled, UsageError, install_hint

if TYPE_CHECKING:
    from ferry.backends.base import Backend

# name -> (import path, extra that provides its dependencies or None)
BACKENDS: dict[str, tuple[str, str | None]] = {
    "local": ("ferry.backends.local:LocalBackend", None),
    "ray": ("ferry.backends.ray:RayBackend", "ray"),
    "vertex": ("ferry.backends.vertex:VertexBackend", "vertex"),
    "sagemaker": ("ferry.backends.sagemaker:SageMakerBackend", "sagemaker"),
}


# The providers whose offerings the price catalog lists -> the backend that launches them
# (None: no backend for it yet).
BACKEND_OF: dict[str, str | None] = {
    "aws": "sagemaker",
    "azure": "azure",
    "gcp": "vertex",
    "lambda": None,
}
PROVIDERS = tuple(BACKEND_OF)

# What a backend's service adds to the catalog's machine prices (Compute Engine's, EC2's):
# Vertex AI's training prices are Compute Engine's plus 15 % (its n1-standard-4 in
# us-central1: 0.21849885 USD/h against 0.189999, https://cloud.google.com/vertex-ai/pricing);
# SageMaker's depend on the instance family (ferry.backends.sagemaker_names.markup).
SERVICE_MARKUP: dict[str, float] = {"vertex": 1.15}


def service_markup(backend: str | None, instance_type: str, accelerated: bool) -> float:
    """What ``backend`` charges over the catalog's price of ``instance_type``."""
    if backend == "sagemaker":
        from ferry.backends.sagemaker_names import markup

        return markup(instance_type, accelerated)
    return SERVICE_MARKUP.get(backend or "", 1.0)


def launches(backend: str | None, instance_type: str) -> bool:
    """Whether ``backend`` can start the catalog's ``instance_type`` (SageMaker trains on
    fewer instance types than EC2 has)."""
    if backend == "sagemaker":
        from ferry.backends.sagemaker_names import trains_on

        return trains_on(instance_type)
    return True


def flex_start(backend: str | None, accelerator: str) -> bool:
    """Whether ``backend`` offers flex-start capacity for the GPU ``accelerator`` (a
    canonical name such as ``"A100"``): Vertex AI's Dynamic Workload Scheduler does, for
    a few GPUs; no other backend has it."""
    if backend == "vertex":
        from ferry.backends.vertex_names import VERTEX_FLEX_START_GPUS

        return accelerator in VERTEX_FLEX_START_GPUS
    return False


def flex_start_refusal(backend: str | None) -> str:
    """Why ``backend`` cannot run an offering on flex-start capacity, for messages."""
    if backend == "vertex":
        from ferry.backends.vertex_names import VERTEX_FLEX_START_GPUS

        return f"Vertex AI has flex-start capacity for {', '.join(VERTEX_FLEX_START_GPUS)} only"
    return "flex-start capacity is Vertex AI's (Dynamic Workload Scheduler)"


def known_backends() -> list[str]:
    """Backend names a spec may use."""
    return list(BACKENDS)


def get_backend(name: str) -> Backend:
    """An instance of the backend called ``name``."""
    try:
        target, extra = BACKENDS[name]
    except KeyError:
        raise UsageError(
            f"unknown backend {name!r}", f"choose one of: {', '.join(known_backends())}"
        ) from None
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendNotInstalled(
            f"the {name} backend needs packages that are not installed ({exc.name})",
            install_hint(extra) if extra else "reinstall ferry",
        ) from None
    backend: Backend = getattr(module, class_name)()
    return backend
