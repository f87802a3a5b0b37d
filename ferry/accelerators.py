"""The accelerator vocabulary: one canonical name per kind, aliases, and ``A100:1`` parsing.

Canonical names follow the shipped price catalog (``../catalog``): GPUs by model
(``A100``, ``A100-80GB``, ``H100``), TPUs by generation (``tpu-v5e``) with the slice size as
the count (``tpu-v5e-8`` is 8 chips).
"""

from __future__ import annotations

import re
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

# TPU generations; the suffix of ``tpu-v5e-8`` is the number of chips in the slice.
TPUS = ("tpu-v2", "tpu-v3", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e")

# Other spellings people and providers use, lower-cased, -> canonical name.
ALIASES: dict[str, str] = {
    "a100-40gb": "A100",
    "a100-40g": "A100",
    "a100-80g": "A100-80GB",
    "a10g": "A10G",
    "nvidia-tesla-a100": "A100",
    "nvidia_tesla_a100": "A100",
    "nvidia-a100-80gb": "A100-80GB",
    "nvidia_a100_80gb": "A100-80GB",
    "nvidia-tesla-t4": "T4",
    "nvidia_tesla_t4": "T4",
    "nvidia-tesla-v100": "V100",
    "nvidia_tesla_v100": "V100",
    "nvidia-tesla-p100": "P100",
    "nvidia_tesla_p100": "P100",
    "nvidia-tesla-p4": "P4",
    "nvidia_tesla_p4": "P4",
    "nvidia-tesla-k80": "K80",
    "nvidia-l4": "L4",
    "nvidia_l4": "L4",
    "nvidia-h100-80gb": "H100",
    "nvidia_h100_80gb": "H100",
    "nvidia-h100-mega-80gb": "H100",
    "nvidia-h200-141gb": "H200",
    "nvidia_h200_141gb": "H200",
    "nvidia-b200": "B200",
    "h100-80gb": "H100",
    "rtx-6000": "RTX6000",
    "rtxa6000": "A6000",
    "rtx-a6000": "A6000",
    "tpu-v5litepod": "tpu-v5e",
    "v5litepod": "tpu-v5e",
    "tpu-v5lite": "tpu-v5e",
}

_BY_LOWER = {name.lower(): name for name in (*GPUS, *TPUS)}
_TPU_RE = re.compile(r"^(?:tpu-)?(v[0-9]+[a-z]*|v5litepod)-([0-9]+)$", re.IGNORECASE | re.ASCII)
_HELP = 'an accelerator such as "A100:1", "a100", "H100:8" or "tpu-v5e-8"'


@dataclass(frozen=True)
class Accelerator:
    """A request for ``count`` accelerators of one kind."""

    name: str  # canonical name, e.g. "A100" or "tpu-v5e"
    count: int  # devices (GPUs) or chips in the slice (TPUs)

    @property
    def is_tpu(self) -> bool:
        """Whether this is a TPU slice."""
        return self.name.startswith("tpu-")

    def __str__(self) -> str:
        if self.is_tpu:
            return f"{self.name}-{self.count}"
        return f"{self.name}:{self.count}"


def canonical_name(name: str) -> str:
    """Return the canonical name for ``name`` or raise ``ValueError`` with the closest ones."""
    key = name.strip().lower().replace(" ", "-")
    if key.startswith("nvidia-") and key[7:] in _BY_LOWER:
        key = key[7:]
    if key in _BY_LOWER:
        return _BY_LOWER[key]
    if key in ALIASES:
        return ALIASES[key]
    if not key.startswith("tpu-") and f"tpu-{key}" in _BY_LOWER:
        return _BY_LOWER[f"tpu-{key}"]
    import difflib

    known = [*GPUS, *TPUS]
    close = difflib.get_close_matches(name.strip().upper(), [k.upper() for k in known], n=3)
    names = [n for k in close for n in known if n.upper() == k]
    hint = f"did you mean {', '.join(names)}?" if names else f"known: {', '.join(known)}"
    raise ValueError(f"unknown accelerator {name!r}; {hint}")


def parse_accelerator(value: object) -> Accelerator:
    """Parse ``A100:1``, ``a100`` (count 1), ``H100:8``, ``tpu-v5e-8`` or ``v5litepod-8``."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected {_HELP}, not {value!r}")
    text = value.strip()
    tpu = _TPU_RE.match(text)
    if tpu and ":" not in text:
        name = canonical_name(f"tpu-{tpu.group(1)}")
        if int(tpu.group(2)) < 1:
            raise ValueError(f"a TPU slice has at least 1 chip, not {value!r}")
        return Accelerator(name, int(tpu.group(2)))
    name_part, sep, count_part = text.partition(":")
    count = 1
    if sep:
        digits = count_part.strip()
        if not (digits.isascii() and digits.isdecimal()) or int(digits) < 1:
            raise ValueError(f"the count in {value!r} must be a whole number of at least 1")
        count = int(count_part)
    name = canonical_name(name_part)
    if name.startswith("tpu-") and not sep:
        raise ValueError(f"say how many TPU chips, e.g. {name}-8, not {value!r}")
    return Accelerator(name, count)
