"""The accelerator vocabulary: one canonical name per kind, aliases, and ``A100:1`` parsing.

Canonical names follow the shipped price catalog (``catalog/``): GPUs by model (``A100``,
``A100-80GB``, ``H100``), TPUs by generation (``tpu-v5e``) with the slice size as the count
(``tpu-v5e-8``). A machine type (``p4d.24xlarge``, ``a2-highgpu-8g``, ``Standard_ND96asr_v4``)
stands for the accelerators it carries: ``machines.py`` reads those (from the backends'
tables and the price catalog, which both build on this module). Each backend's own names
for a request are in ``accelerator_names.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# Canonical GPU names -> memory per device in GiB (informational; the catalog is the
# authority for offerings and prices).
GPUS: dict[str, float] = {
    "K80": 12,
    "M60": 8,
    "P4": 8,
    "P100": 16,
    "V100": 16,
    "V100-32GB": 32,
    "T4": 16,
    "T4g": 16,
    "A10": 24,
    "A10G": 24,
    "A6000": 48,
    "RTX6000": 24,
    "L4": 24,
    "L40S": 48,
    "A100": 40,
    "A100-80GB": 80,
    "H100": 80,
    "H200": 141,
    "GH200": 96,
    "B200": 180,
    "MI25": 16,
    "MI300X": 192,
}

# TPU generations; the suffix of ``tpu-v5e-8`` is the slice's size as Cloud TPU names it:
# chips for v5e and v6e, TensorCores (two a chip) for v2, v3, v4 and v5p.
TPUS = ("tpu-v2", "tpu-v3", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e")

# Other spellings people and providers use -> canonical name. Keys are lower-case with "-"
# for "_" and spaces, as canonical_name() compares them: "nvidia-tesla-a100" also covers
# Vertex AI's NVIDIA_TESLA_A100. Every name in accelerator_names' tables of Vertex AI
# accelerator types and Ray labels is a canonical name or one of these.
ALIASES: dict[str, str] = {
    "a100-40gb": "A100",
    "a100-40g": "A100",
    "a100-80g": "A100-80GB",
    "nvidia-tesla-a100": "A100",
    "nvidia-a100-80gb": "A100-80GB",
    "nvidia-tesla-t4": "T4",
    "nvidia-tesla-v100": "V100",
    "nvidia-tesla-p100": "P100",
    "nvidia-tesla-p4": "P4",
    "nvidia-tesla-k80": "K80",
    "nvidia-h100-80gb": "H100",
    "nvidia-h100-mega-80gb": "H100",
    "nvidia-h200-141gb": "H200",
    "h100-80gb": "H100",
    "rtx-6000": "RTX6000",
    "rtxa6000": "A6000",
    "rtx-a6000": "A6000",
    "amd-instinct-mi300x-oam": "MI300X",
    "tpu-v4-pod": "tpu-v4",
    "tpu-v5-litepod": "tpu-v5e",
    "tpu-v5litepod": "tpu-v5e",
    "v5litepod": "tpu-v5e",
    "tpu-v5lite": "tpu-v5e",
}

_BY_LOWER = {name.lower(): name for name in (*GPUS, *TPUS)}
_SLICE_RE = re.compile(r"^(.+)-([0-9]+)$", re.ASCII)  # a TPU slice: generation-size
_HELP = 'an accelerator such as "A100:1", "a100", "H100:8" or "tpu-v5e-8"'


@dataclass(frozen=True)
class Accelerator:
    """A request for ``count`` accelerators of one kind."""

    name: str  # canonical name, e.g. "A100" or "tpu-v5e"
    count: int  # devices (GPUs), or the slice size of a TPU (the 8 of tpu-v5e-8)

    @property
    def is_tpu(self) -> bool:
        """Whether this is a TPU slice."""
        return self.name.startswith("tpu-")

    def __str__(self) -> str:
        if self.is_tpu:
            return f"{self.name}-{self.count}"
        return f"{self.name}:{self.count}"


def _key(name: str) -> str:
    """``name`` as ALIASES spells its keys."""
    return name.strip().lower().replace(" ", "-").replace("_", "-")


def _lookup(name: str) -> str | None:
    key = _key(name)
    if key.startswith("nvidia-") and key[7:] in _BY_LOWER:
        key = key[7:]
    if key in _BY_LOWER:
        return _BY_LOWER[key]
    if key in ALIASES:
        return ALIASES[key]
    if not key.startswith("tpu-") and f"tpu-{key}" in _BY_LOWER:
        return _BY_LOWER[f"tpu-{key}"]
    return None


def unknown_name(name: str, machines: dict[str, str] | None = None) -> ValueError:
    """The error for a name that is no accelerator, naming the closest ones (and the closest
    machine types, when ``machines`` maps their lower-case names to their spelling)."""
    import difflib

    known = [*GPUS, *TPUS]
    close = difflib.get_close_matches(name.strip().upper(), [k.upper() for k in known], n=3)
    names = [n for k in close for n in known if n.upper() == k]
    if machines and len(names) < 3:
        near = difflib.get_close_matches(name.strip().lower(), list(machines), n=3 - len(names))
        names += [machines[m] for m in near]
    hint = f"did you mean {', '.join(names)}?" if names else f"known: {', '.join(known)}"
    return ValueError(f"unknown accelerator {name!r}; {hint}")


def canonical_name(name: str) -> str:
    """Return the canonical name for ``name`` or raise ``ValueError`` with the closest ones."""
    found = _lookup(name)
    if found is None:
        raise unknown_name(name)
    return found


def parse_accelerator(
    value: object, machine: Callable[[str], Accelerator] | None = None
) -> Accelerator:
    """Parse ``A100:1``, ``a100`` (count 1), ``H100:8``, ``tpu-v5e-8`` or ``v5litepod-8``.

    ``machine`` reads a name that is no accelerator as a machine type, which stands for the
    accelerators it carries and takes no count; without it, such a name is refused with the
    closest accelerator names. :func:`ferry.machines.parse_request` passes the one that knows
    the backends' machine types and the price catalog's."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected {_HELP}, not {value!r}")
    text = value.strip()
    slice_ = _SLICE_RE.match(text)
    generation = _lookup(slice_.group(1)) if slice_ and ":" not in text else None
    if slice_ and generation and generation.startswith("tpu-"):
        if int(slice_.group(2)) < 1:
            raise ValueError(f"a TPU slice has at least 1 chip, not {value!r}")
        return Accelerator(generation, int(slice_.group(2)))
    name_part, sep, count_part = text.partition(":")
    count = 1
    if sep:
        digits = count_part.strip()
        if not (digits.isascii() and digits.isdecimal()) or int(digits) < 1:
            raise ValueError(f"the count in {value!r} must be a whole number of at least 1")
        count = int(count_part)
    found = _lookup(name_part)
    if found is None:
        if machine is None:
            raise unknown_name(name_part.strip())
        carried = machine(name_part.strip())
        if sep:
            wanted = Accelerator(carried.name, count)
            raise ValueError(
                f"{name_part.strip()} is a machine type with {carried}, so it takes no count;"
                f' write "{name_part.strip()}" for one such machine, or "{wanted}"'
            )
        return carried
    if found.startswith("tpu-") and not sep:
        raise ValueError(f"say how many TPU chips, e.g. {found}-8, not {value!r}")
    return Accelerator(found, count)
