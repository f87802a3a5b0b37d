"""The providers' prebuilt training images a cloud job runs in, without Docker.

A dated table (``AS_OF``) of the framework images Vertex AI and SageMaker publish, with
where each fact comes from. The image is chosen from ``environment.framework``
(``pytorch==2.4``, ``sklearn``, ``xgboost==2.1``) or, when it names none, from the
PyTorch installed here (else the newest PyTorch image). The version used is the newest
the provider has at or below the one asked for (else its oldest above it), and
:func:`choose` says so when it differs.

Sources (read 2026-08):

- Vertex AI: "Prebuilt containers for custom training",
  https://cloud.google.com/vertex-ai/docs/training/pre-built-containers. Each image is
  published under ``us-``, ``europe-`` and ``asia-docker.pkg.dev`` (any works; the
  nearest pulls fastest) and must be used with the ``latest`` tag. PyTorch CPU images are
  the ``pytorch-xla`` ones; 2.4 is the newest PyTorch image listed.
- SageMaker: the Deep Learning Containers' image list
  (https://github.com/aws/deep-learning-containers, ``available_images.md`` and
  ``docs/src/data``) and the SageMaker Python SDK's ``image_uri_config/pytorch.json``,
  ``sklearn.json`` and ``xgboost.json`` for the registry account of each region.
  PyTorch 2.11 and later moved to the ``pytorch`` repository (Amazon Linux 2023 tags).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ferry.errors import SpecError

AS_OF = "2026-08"
FRAMEWORKS = ("pytorch", "sklearn", "xgboost", "tensorflow")
_FRAMEWORK_RE = re.compile(r"^(?P<name>[a-z]+)(?:==(?P<version>\d+(?:\.\d+){0,2}))?$")

# -- Vertex AI ---------------------------------------------------------------------------
# framework -> version -> (CPU image, GPU image, TPU image); names under vertex-ai/training
_VERTEX: dict[str, dict[str, tuple[str | None, str | None, str | None]]] = {
    "pytorch": {
        "2.4": ("pytorch-xla.2-4.py310", "pytorch-gpu.2-4.py310", None),
        "2.3": ("pytorch-xla.2-3.py310", "pytorch-gpu.2-3.py310", None),
        "2.2": ("pytorch-xla.2-2.py310", "pytorch-gpu.2-2.py310", "pytorch-tpu.2-2.cp310"),
        "2.1": ("pytorch-xla.2-1.py310", "pytorch-gpu.2-1.py310", "pytorch-tpu.2-1.cp310"),
    },
    "sklearn": {"1.6": ("sklearn-cpu.1-6", "sklearn-gpu.1-6", None)},
    "xgboost": {"2.1": ("xgboost-cpu.2-1", "xgboost-gpu.2-1", None)},
    "tensorflow": {
        "2.17": ("tf-cpu.2-17.py310", "tf-gpu.2-17.py310", None),
        "2.16": ("tf-cpu.2-16.py310", "tf-gpu.2-16.py310", None),
        "2.15": ("tf-cpu.2-15.py310", "tf-gpu.2-15.py310", "tf-tpu.2-15.cp310"),
    },
}

# -- SageMaker ---------------------------------------------------------------------------
# The Deep Learning Containers' registry: 763104351884 in these regions, else the map.
_DLC_MAIN = "763104351884"
_DLC_REGIONS = frozenset(
    [
        "us-east-1",
        "us-east-2",
        "us-west-1",
        "us-west-2",
        "ca-central-1",
        "sa-east-1",
        "eu-central-1",
        "eu-north-1",
        "eu-west-1",
        "eu-west-2",
        "eu-west-3",
        "ap-northeast-1",
        "ap-northeast-2",
        "ap-south-1",
        "ap-southeast-1",
        "ap-southeast-2",
    ]
)
_DLC_OTHER = {
    "af-south-1": "626614931356",
    "ap-east-1": "871362719292",
    "ap-northeast-3": "364406365360",
    "ap-south-2": "772153158452",
    "ap-southeast-3": "907027046896",
    "ap-southeast-4": "457447274322",
    "ca-west-1": "204538143572",
    "eu-central-2": "380420809688",
    "eu-south-1": "692866216735",
    "eu-south-2": "503227376785",
    "il-central-1": "780543022126",
    "me-central-1": "914824155844",
    "me-south-1": "217643126080",
}
# scikit-learn and XGBoost images: SageMaker's own registry, one account per region
_ALGORITHMS = {
    "us-east-1": "683313688378",
    "us-east-2": "257758044811",
    "us-west-1": "746614075791",
    "us-west-2": "246618743249",
    "ca-central-1": "341280168497",
    "sa-east-1": "737474898029",
    "eu-central-1": "492215442770",
    "eu-north-1": "662702820516",
    "eu-west-1": "141502667606",
    "eu-west-2": "764974769150",
    "eu-west-3": "659782779980",
    "ap-northeast-1": "354813040037",
    "ap-northeast-2": "366743142698",
    "ap-south-1": "720646828776",
    "ap-southeast-1": "121021644041",
    "ap-southeast-2": "783357654285",
}
# framework -> version -> (repository, CPU tag, GPU tag)
_SAGEMAKER: dict[str, dict[str, tuple[str, str | None, str | None]]] = {
    "pytorch": {
        "2.13": ("pytorch", "2.13.0-cpu-amzn2023-sagemaker", "2.13.0-cu133-amzn2023-sagemaker"),
        "2.11": ("pytorch", "2.11.0-cpu-amzn2023-sagemaker", "2.11.0-cu130-amzn2023-sagemaker"),
        "2.10": (
            "pytorch-training",
            "2.10.0-cpu-py313-ubuntu22.04-sagemaker",
            "2.10.0-gpu-py313-cu130-ubuntu22.04-sagemaker",
        ),
        "2.9": (
            "pytorch-training",
            "2.9.0-cpu-py312-ubuntu22.04-sagemaker",
            "2.9.0-gpu-py312-cu130-ubuntu22.04-sagemaker",
        ),
        "2.8": (
            "pytorch-training",
            "2.8.0-cpu-py312-ubuntu22.04-sagemaker",
            "2.8.0-gpu-py312-cu129-ubuntu22.04-sagemaker",
        ),
        "2.7": (
            "pytorch-training",
            "2.7.1-cpu-py312-ubuntu22.04-sagemaker",
            "2.7.1-gpu-py312-cu128-ubuntu22.04-sagemaker",
        ),
        "2.6": (
            "pytorch-training",
            "2.6.0-cpu-py312-ubuntu22.04-sagemaker",
            "2.6.0-gpu-py312-cu126-ubuntu22.04-sagemaker",
        ),
    },
    "sklearn": {"1.2": ("sagemaker-scikit-learn", "1.2-1-cpu-py3", None)},
    "xgboost": {
        "3.0": ("sagemaker-xgboost", "3.0-5", "3.0-5"),
        "1.7": ("sagemaker-xgboost", "1.7-1", "1.7-1"),
    },
}


@dataclass(frozen=True)
class Framework:
    """What ``environment.framework`` asks for."""

    name: str
    version: str | None  # "2.4", "2.4.1"; None: the newest


def parse_framework(text: str) -> Framework:
    """``pytorch==2.4`` -> Framework. Raises SpecError naming what is valid."""
    found = _FRAMEWORK_RE.match(text.strip().lower())
    name = found.group("name") if found else ""
    aliases = {"torch": "pytorch", "scikit-learn": "sklearn", "tf": "tensorflow"}
    name = aliases.get(name, name)
    if found is None or name not in FRAMEWORKS:
        raise SpecError(
            f"environment.framework: {text!r} is not a framework this Ferry knows",
            f"write NAME or NAME==VERSION, NAME one of {', '.join(FRAMEWORKS)} (e.g. pytorch==2.4)",
        )
    return Framework(name, found.group("version"))


@dataclass(frozen=True)
class Image:
    """A prebuilt image chosen for a job, and why, in words."""

    uri: str
    framework: str
    version: str
    note: str = ""  # said when the version differs from the one asked for


def _minor(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:2])


def _pick(versions: list[str], wanted: str | None) -> str:
    ordered = sorted(versions, key=_minor)
    if wanted is None:
        return ordered[-1]
    at_or_below = [v for v in ordered if _minor(v) <= _minor(wanted)]
    return at_or_below[-1] if at_or_below else ordered[0]


def wanted_framework(framework: str | None) -> tuple[Framework, str]:
    """The framework a job asks for, and where that came from (words)."""
    if framework:
        return parse_framework(framework), "environment.framework"
    from importlib.metadata import PackageNotFoundError, version

    try:
        local = version("torch")
    except PackageNotFoundError:
        return Framework("pytorch", None), "the newest PyTorch image (no framework named)"
    return Framework("pytorch", local.split("+")[0]), f"the torch installed here ({local})"


def vertex_image(framework: str | None, accelerator: str, region: str) -> Image:
    """The Vertex AI executor image for a job (``accelerator``: ``cpu``, ``gpu``, ``tpu``)."""
    want, source = wanted_framework(framework)
    table = _VERTEX.get(want.name) or {}
    slot = {"cpu": 0, "gpu": 1, "tpu": 2}[accelerator]
    versions = [v for v, images in table.items() if images[slot]]
    if not versions:
        raise SpecError(
            f"Vertex AI has no prebuilt {want.name} image for {accelerator.upper()} "
            f"(as of {AS_OF})",
            "choose another framework, or give environment.image",
        )
    chosen = _pick(versions, want.version)
    name = table[chosen][slot]
    prefix = region.split("-", 1)[0]
    host = f"{prefix if prefix in ('us', 'europe', 'asia') else 'us'}-docker.pkg.dev"
    return Image(
        f"{host}/vertex-ai/training/{name}:latest", want.name, chosen, _note(want, chosen, source)
    )


def sagemaker_image(framework: str | None, gpu: bool, region: str) -> Image:
    """The SageMaker training image for a job in ``region``."""
    want, source = wanted_framework(framework)
    table = _SAGEMAKER.get(want.name) or {}
    slot = 2 if gpu else 1
    versions = [v for v, images in table.items() if images[slot]]
    if not versions:
        kind = "GPU" if gpu else "CPU"
        raise SpecError(
            f"SageMaker has no prebuilt {want.name} image for {kind} (as of {AS_OF})",
            "choose another framework, or give environment.image",
        )
    chosen = _pick(versions, want.version)
    repository, *tags = table[chosen]
    if want.name == "pytorch":
        account = _DLC_MAIN if region in _DLC_REGIONS else _DLC_OTHER.get(region)
    else:
        account = _ALGORITHMS.get(region)
    if account is None:
        raise SpecError(
            f"Ferry does not know SageMaker's image registry in {region} (as of {AS_OF})",
            "give environment.image, or choose another region (resources.regions)",
        )
    tag = tags[slot - 1]
    uri = f"{account}.dkr.ecr.{region}.amazonaws.com/{repository}:{tag}"
    return Image(uri, want.name, chosen, _note(want, chosen, source))


def _note(want: Framework, chosen: str, source: str) -> str:
    if want.version is None or _minor(want.version) == _minor(chosen):
        return ""
    return (
        f"{want.name} {want.version} ({source}) has no prebuilt image; {want.name} {chosen} is "
        f"the nearest (pin another with environment.framework, or install yours with "
        f"environment.requirements)"
    )
