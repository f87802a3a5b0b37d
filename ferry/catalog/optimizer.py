"""Which offering runs a job: every one that fits its resources, cheapest first.

An offering fits when it has the accelerator (at least as many per machine, or exactly the
TPU slice), the CPUs and memory asked for, the accelerator memory (``--min-gpu-memory``),
spot capacity when the job asks for spot, and sits in an allowed provider and region. It is
usable when a backend of this Ferry can launch it and it is not blocked (a backend reported
no capacity or no quota there a short while ago). Options are ranked by their price for
the whole job (USD per hour times nodes), or by the estimated total when the runtime is
known. The local machine is an option too, at the price set with
``ferry config set local.price_hour`` (0 by default).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ferry.backends.registry import (
    BACKEND_OF,
    flex_start,
    flex_start_refusal,
    launches,
    service_markup,
)
from ferry.catalog.offerings import Catalog, Offering, load_catalog, refreshed_dir, replaced

if TYPE_CHECKING:
    from ferry.accelerators import Accelerator
    from ferry.spec import JobSpec
    from ferry.store.plan import Plan as JobPlan

_GIB = 1024**3


@dataclass(frozen=True)
class Request:
    """What one job needs, in the terms offerings are described in."""

    accelerator: Accelerator | None = None
    cpus: float | None = None
    memory_gib: float | None = None
    spot: bool = False
    flex_start: bool = False  # flex-start capacity: priced on demand, on backends that have it
    nodes: int = 1
    providers: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    min_accelerator_memory_gib: float | None = None
    hours: float | None = None  # the runtime estimate, when one is known

    @classmethod
    def from_spec(cls, spec: JobSpec, hours: float | None = None) -> Request:
        """The request of a job spec (``hours`` from :func:`runtime_estimate`)."""
        r = spec.resources
        return cls(
            accelerator=r.accelerator_request,
            cpus=r.cpus,
            memory_gib=r.memory / _GIB if r.memory else None,
            spot=r.spot is True,
            flex_start=r.flex_start,
            nodes=r.nodes,
            providers=r.providers,
            regions=r.regions,
            hours=hours,
        )

    @classmethod
    def from_plan(cls, plan: JobPlan, hours: float | None = None) -> Request:
        """The request of a stored job's typed spec."""
        from ferry.accelerators import parse_accelerator

        r = plan.resources
        return cls(
            accelerator=parse_accelerator(r.accelerator) if r.accelerator else None,
            cpus=r.cpus,
            memory_gib=r.memory / _GIB if r.memory else None,
            spot=r.spot,
            flex_start=r.flex_start,
            nodes=r.nodes,
            providers=r.providers,
            regions=r.regions,
            hours=hours,
        )

    def describe(self) -> str:
        """``'A100:1 on spot, 2 nodes'`` for messages."""
        words = [str(self.accelerator) if self.accelerator else "CPU only"]
        if self.spot:
            words.append("on spot")
        elif self.flex_start:
            words.append("on flex-start")
        text = " ".join(words)
        return f"{text}, {self.nodes} nodes" if self.nodes > 1 else text


@dataclass(frozen=True)
class Option:
    """An offering that fits, with its backend and the job's price on it."""

    offering: Offering
    backend: str | None  # the Ferry backend that launches it
    spot: bool
    price: float  # USD per hour for the whole job (every node)
    total: float | None = None  # USD for the runtime estimate
    skipped: str | None = None  # why it cannot be used now
    flex_start: bool = False  # flex-start capacity, priced as on demand (an upper bound)

    @property
    def capacity(self) -> str:
        """``"spot"``, ``"flex"`` or ``""`` (on demand)."""
        return "spot" if self.spot else "flex" if self.flex_start else ""

    @property
    def key(self) -> str:
        """What identifies it in the blocked list."""
        o = self.offering
        return f"{o.provider}/{o.region}/{o.zone}/{o.instance_type}/{self.capacity}"

    def describe(self) -> str:
        """``'gcp a2-highgpu-1g (A100:1) in us-central1, spot'``."""
        o = self.offering
        if o.provider == "local":
            return "this machine (local backend)"
        where = f" in {o.location}" if o.location else ""
        kind = {"spot": ", spot", "flex": ", flex-start"}.get(self.capacity, "")
        return f"{o.provider} {o.instance_type} ({o.accelerators}){where}{kind}"


@dataclass
class Plan:
    """The options for one request: usable ones cheapest first, then the skipped ones."""

    request: Request
    options: list[Option] = field(default_factory=list)
    skipped: list[Option] = field(default_factory=list)
    considered: int = 0  # offerings looked at

    @property
    def best(self) -> Option | None:
        """The cheapest usable option, or None."""
        return self.options[0] if self.options else None

    def why_none(self) -> str:
        """One sentence on why no option is usable (for the error message)."""
        what = self.request.describe()
        if not self.skipped:
            return f"no offering in the catalog fits {what}"
        cheapest = self.skipped[0]
        more = len(self.skipped) - 1
        tail = f" ({more} more offerings fit, none usable)" if more else ""
        return (
            f"no usable offering fits {what}: the cheapest, {cheapest.describe()} at "
            f"{cheapest.price:.2f} USD/h, {cheapest.skipped}{tail}"
        )


def local_offering(price: float | None = None) -> Offering:
    """This machine as an offering: its inventory at ``local.price_hour``."""
    from ferry import config
    from ferry.backends.local_inventory import local_inventory

    inventory = local_inventory()
    return Offering(
        provider="local",
        region="",
        zone="",
        instance_type="local",
        accelerator=inventory.gpu_type or "",
        count=inventory.gpus,
        accelerator_memory_gib=None,
        vcpus=inventory.cpus,
        memory_gib=inventory.memory / _GIB,
        price=float(config.get("local.price_hour")) if price is None else price,
        spot_price=None,
    )


def _fits(o: Offering, r: Request) -> str | None:
    """None when ``o`` can hold the request, else why not (for the local machine)."""
    acc = r.accelerator
    if acc is not None:
        if acc.is_tpu:
            if o.accelerator != acc.name or o.count != acc.count:
                return f"it has no {acc}"
        elif o.count < acc.count or (o.accelerator and o.accelerator != acc.name):
            return f"it has {o.count} {o.accelerator or 'GPU'}s, not {acc}"
        elif not o.accelerator and o.provider != "local":
            return f"it has no {acc.name}"
    if r.cpus and o.vcpus is not None and o.vcpus < r.cpus:
        return f"it has {o.vcpus:g} CPUs, not {r.cpus:g}"
    if r.memory_gib and o.memory_gib is not None and o.memory_gib + 1e-9 < r.memory_gib:
        return f"it has {o.memory_gib:.0f} GiB of memory, not {r.memory_gib:.0f}"
    if r.min_accelerator_memory_gib:
        memory = o.accelerator_memory_gib
        if memory is None:
            from ferry.accelerators import GPUS

            memory = GPUS.get(o.accelerator)
        if memory is None or memory + 0.5 < r.min_accelerator_memory_gib:
            return "its accelerators have less memory than asked"
    return None


def plan(
    request: Request,
    *,
    catalog: Catalog | None = None,
    backends: Iterable[str] | None = None,
    include_local: bool = True,
    blocked: dict[str, tuple[float, str]] | None = None,
    now: float | None = None,
) -> Plan:
    """Every offering that fits ``request``, usable ones cheapest first.

    Args:
        request: what the job needs.
        catalog: the offerings (default: :func:`load_catalog`).
        backends: the backends this Ferry can launch on (default: the registry's).
        include_local: whether this machine is an option (``--backend auto``).
        blocked: offering key -> (until, reason) (default: :func:`blocked_offerings`).
        now: the time blocks are judged at (default: now).
    """
    if backends is None:
        from ferry.backends.registry import known_backends

        backends = known_backends()
    available = set(backends)
    catalog = catalog or load_catalog()
    blocked = blocked_offerings() if blocked is None else blocked
    now = time.time() if now is None else now
    result = Plan(request)
    candidates: list[Offering] = list(catalog.offerings)
    if include_local and "local" in available:
        candidates.insert(0, local_offering())
    wanted = request.accelerator
    for o in candidates:
        result.considered += 1
        local = o.provider == "local"
        if not local:
            if (o.accelerator or None) != (wanted.name if wanted else None):
                continue  # (a job without accelerators: the machines without them)
            if request.providers and o.provider not in request.providers:
                continue
            if request.regions and o.region not in request.regions:
                continue
        if _fits(o, request) is not None:
            continue
        spot = request.spot and not local
        unit = o.price_for(spot)
        if unit is None:
            continue
        backend = "local" if local else BACKEND_OF.get(o.provider)
        markup = service_markup(backend, o.instance_type, bool(o.accelerator))
        price = unit * request.nodes * markup
        total = price * request.hours if request.hours is not None else None
        option = Option(o, backend, spot, price, total, flex_start=request.flex_start)
        why = _unusable(option, request, available, blocked, now)
        if why:
            result.skipped.append(_with(option, why))
        else:
            result.options.append(option)

    def rank(option: Option) -> tuple[float, float, str]:
        cost = option.total if option.total is not None else option.price
        return (cost, option.price, option.key)

    result.options.sort(key=rank)
    result.skipped.sort(key=rank)
    return result


def _with(option: Option, skipped: str) -> Option:
    from dataclasses import replace

    return replace(option, skipped=skipped)


def _unusable(
    option: Option,
    request: Request,
    available: set[str],
    blocked: dict[str, tuple[float, str]],
    now: float,
) -> str | None:
    if option.offering.provider == "local":
        if request.spot:
            return "this machine is not spot capacity"
        if request.flex_start:
            return "this machine is not flex-start capacity"
        if request.providers:
            return f"resources.providers asks for {', '.join(request.providers)}"
        if request.nodes > 1:
            return "the local backend runs one node"
        if request.accelerator is not None and request.accelerator.is_tpu:
            return "this machine has no TPUs"
        return None
    if option.backend is None:
        return f"no backend for {option.offering.provider} yet"
    if option.backend not in available:
        return f"needs the {option.backend} backend (not in this Ferry yet)"
    if not launches(option.backend, option.offering.instance_type):
        return f"{option.backend} has no training instance {option.offering.instance_type}"
    if request.flex_start and not flex_start(option.backend, option.offering.accelerator):
        return flex_start_refusal(option.backend)
    block = blocked.get(option.key)
    if block and block[0] > now:
        until = time.strftime("%H:%M", time.localtime(block[0]))
        return f"{block[1]} (passed over until {until})"
    return None


# -- offerings a backend could not start (no capacity, no quota) ---------------------------


def _blocked_path() -> Path:
    return refreshed_dir() / "blocked.json"


def blocked_offerings(now: float | None = None) -> dict[str, tuple[float, str]]:
    """Offerings passed over for now: key -> (until, reason)."""
    now = time.time() if now is None else now
    try:
        with open(_blocked_path()) as file:
            raw = json.load(file)
        return {
            str(k): (float(v[0]), str(v[1]))
            for k, v in raw.items()
            if isinstance(v, list) and float(v[0]) > now
        }
    except (OSError, ValueError, TypeError, IndexError):
        return {}


def block(option: Option, reason: str, seconds: float | None = None) -> None:
    """Pass over ``option`` for ``seconds`` (default ``defaults.BLOCK_FOR``): a backend
    reported no capacity or no quota there. The next plan tries the next offering."""
    from ferry import defaults

    seconds = defaults.BLOCK_FOR if seconds is None else seconds
    path = _blocked_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = blocked_offerings()
    entries[option.key] = (time.time() + seconds, reason)
    with replaced(path) as file:
        json.dump({k: list(v) for k, v in entries.items()}, file)
