"""Machine types as accelerator requests: ``p4d.24xlarge``, ``ml.p4d.24xlarge``,
``a2-highgpu-8g`` or ``Standard_ND96asr_v4`` stands for the accelerators one such machine
carries. The backends' own tables (``ferry/backends/*_names.py``) are read first; other
machine types are looked up in the price catalog, loaded only then.

:func:`parse_request` reads what a user may write for ``resources.accelerator``: an
accelerator (``A100:8``, ``tpu-v5e-8``) or a machine type.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from ferry.accelerators import Accelerator, parse_accelerator, unknown_name

if TYPE_CHECKING:
    from ferry.catalog import Catalog


def parse_request(value: object) -> Accelerator:
    """An accelerator request as :func:`~ferry.accelerators.parse_accelerator` reads it, or
    a machine type (which takes no count); ``ValueError`` names the closest of either."""
    return parse_accelerator(value, _machine)


@cache
def _backend_machines() -> dict[str, Accelerator]:
    """Machine types the backend tables name (lower-case) -> what one machine carries."""
    from ferry.backends.sagemaker_names import SAGEMAKER_INSTANCES
    from ferry.backends.vertex_names import (
        VERTEX_ACCELERATOR_TYPES,
        VERTEX_GPU_MACHINES,
        VERTEX_TPU_MACHINES,
    )

    machines: dict[str, Accelerator] = {}
    for instance_type, (name, count) in SAGEMAKER_INSTANCES.items():
        machines[instance_type] = machines[instance_type.removeprefix("ml.")] = Accelerator(
            name, count
        )
    for machine_type, (vertex_type, count) in VERTEX_GPU_MACHINES.items():
        machines[machine_type] = Accelerator(VERTEX_ACCELERATOR_TYPES[vertex_type], count)
    for machine_type, (generation, chips) in VERTEX_TPU_MACHINES.items():
        machines[machine_type] = Accelerator(generation, chips)
    return machines


_catalog_index: tuple[Catalog, dict[str, tuple[str, frozenset[Accelerator]]]] | None = None


def _catalog_machines() -> dict[str, tuple[str, frozenset[Accelerator]]]:
    """The catalog's machine types (lower-case) -> (their spelling, the accelerators they come
    with: several for one that takes different GPUs, such as n1-standard-8, none for CPU-only
    ones). Imports and loads the catalog on first use; empty when it cannot be read."""
    global _catalog_index
    try:
        from ferry.catalog import load_catalog

        catalog = load_catalog()
    except (OSError, ValueError, KeyError, TypeError):  # a damaged file: no machine types then
        return {}
    if _catalog_index is None or _catalog_index[0] is not catalog:
        found: dict[str, tuple[str, set[Accelerator]]] = {}
        for o in [*catalog.offerings, *(f.offering for f in catalog.flagged)]:
            _, kinds = found.setdefault(o.instance_type.lower(), (o.instance_type, set()))
            if o.accelerator:
                kinds.add(Accelerator(o.accelerator, o.count))
        index = {k: (spelling, frozenset(kinds)) for k, (spelling, kinds) in found.items()}
        _catalog_index = (catalog, index)
    return _catalog_index[1]


def _machine(name: str) -> Accelerator:
    """What one machine of type ``name`` carries, or ``ValueError`` for a name that is no
    accelerator and no machine type with a single kind of accelerator."""
    key = name.lower()
    if key in _backend_machines():
        return _backend_machines()[key]
    catalog = _catalog_machines()
    for candidate in (key, f"standard_{key}"):  # Azure sizes are also written without it
        if candidate in catalog:
            spelling, kinds = catalog[candidate]
            if len(kinds) == 1:
                return next(iter(kinds))
            if not kinds:
                raise ValueError(
                    f"{spelling} has no accelerator; leave the accelerator out for a CPU-only job"
                )
            options = sorted(kinds, key=lambda a: (a.name, a.count))
            *others, last = sorted({a.name for a in options})
            raise ValueError(
                f"{spelling} takes {', '.join(others)} or {last} GPUs;"
                f" name the accelerator instead, e.g. {options[0]}"
            )
    ours = [k for k in _backend_machines() if k.startswith("ml.") == key.startswith("ml.")]
    spellings = dict(zip(ours, ours, strict=True)) | {k: s for k, (s, _) in catalog.items()}
    raise unknown_name(name, spellings)
