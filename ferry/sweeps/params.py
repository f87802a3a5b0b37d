"""A sweep's search space: ``--param NAME=KIND:ARGS``, one hyperparameter each.

=============================  ==============================================
``lr=loguniform:1e-4:1e-1``    a float, log-uniform between the bounds
``dropout=uniform:0:0.5``      a float, uniform (``uniform:0:0.5:0.1`` in steps)
``layers=int:2:6``             an integer, bounds included (``int:32:256:32``
                               in steps)
``width=logint:16:1024``       an integer, log-uniform
``batch=choice:32,64,128``     one of the values (numbers, ``true``/``false``,
                               or words)
=============================  ==============================================

A trial's values reach its script as the job's hyperparameters, through the contract
(``--name=value``, ``SM_HP_NAME``, ``hyperparameters.json``), whatever the backend.

Optuna is imported only where a value is drawn (:meth:`Param.suggest`), never by
parsing: ``ferry sweep --help`` and a spec's check stay light.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ferry.errors import UsageError

KINDS = ("uniform", "loguniform", "int", "logint", "choice")
GRID_MAX = 10_000  # points a grid may have: more is a search, not a grid
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_EXAMPLE = "e.g. --param lr=loguniform:1e-4:1e-1 or --param batch=choice:32,64,128"


@dataclass(frozen=True)
class Param:
    """One hyperparameter of the search space."""

    name: str
    kind: str  # one of KINDS
    low: float = 0.0
    high: float = 0.0
    step: float | None = None  # uniform and int: the values' spacing
    choices: tuple[Any, ...] = ()

    @property
    def integer(self) -> bool:
        return self.kind in ("int", "logint")

    def suggest(self, trial: Any) -> Any:
        """This parameter's value for the Optuna trial ``trial``."""
        if self.kind == "choice":
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.integer:
            step = int(self.step or 1)
            return trial.suggest_int(
                self.name, int(self.low), int(self.high), step=step, log=self.kind == "logint"
            )
        return trial.suggest_float(
            self.name, self.low, self.high, step=self.step, log=self.kind == "loguniform"
        )

    def grid(self) -> list[Any]:
        """Every value of this parameter, for a grid search. Raises UsageError for a
        continuous range without a step, or one with more than ``GRID_MAX`` values."""
        if self.kind == "choice":
            return list(self.choices)
        if self.kind in ("loguniform", "logint") or (self.kind == "uniform" and not self.step):
            raise UsageError(
                f"--param {self.describe()} is a continuous range, which a grid cannot cover",
                f"give it as choice:… or with a step ({self.name}=uniform:0:1:0.1), "
                "or use another --sampler",
            )
        step = self.step or 1
        count = math.floor((self.high - self.low) / step + 1e-9) + 1
        if count > GRID_MAX:
            raise UsageError(
                f"--param {self.describe()} has {count} values, more than a grid of "
                f"{GRID_MAX} takes",
                "widen its step, or use another --sampler",
            )
        values = [self.low + i * step for i in range(count)]
        if self.integer:
            return [int(v) for v in values]
        return [round(v, 12) for v in values]

    def describe(self) -> str:
        """The parameter as ``--param`` writes it."""
        if self.kind == "choice":
            return f"{self.name}=choice:{','.join(_shown(c) for c in self.choices)}"
        parts = [_shown(self.low), _shown(self.high)]
        if self.step is not None:
            parts.append(_shown(self.step))
        return f"{self.name}={self.kind}:{':'.join(parts)}"


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def parse_param(text: str) -> Param:
    """``NAME=KIND:ARGS`` as a :class:`Param`. Raises UsageError naming what is wrong."""
    name, eq, rest = text.partition("=")
    name = name.strip()
    if not eq or not name:
        raise UsageError(f"--param {text!r} is not NAME=KIND:ARGS", _EXAMPLE)
    if not _NAME.fullmatch(name):
        raise UsageError(
            f"--param {text!r}: {name!r} is not a hyperparameter name (letters, digits, "
            "_ . -, not starting with a digit)",
            _EXAMPLE,
        )
    kind, _, args = rest.partition(":")
    kind = kind.strip().lower()
    if kind not in KINDS:
        raise UsageError(
            f"--param {text!r}: {kind or '(nothing)'!r} is not a kind of parameter; the "
            f"kinds are {', '.join(KINDS)}",
            _EXAMPLE,
        )
    if kind == "choice":
        values = [v.strip() for v in args.split(",")]
        if not args.strip() or any(not v for v in values):
            raise UsageError(
                f"--param {text!r}: choice takes values separated by commas",
                f"e.g. --param {name}=choice:32,64,128",
            )
        if len(set(values)) != len(values):
            raise UsageError(f"--param {text!r}: a value is given twice", "give each once")
        return Param(name, kind, choices=tuple(_value(v) for v in values))
    return _range(text, name, kind, args.split(":") if args else [])


def _range(text: str, name: str, kind: str, args: list[str]) -> Param:
    steps = kind in ("uniform", "int")
    usage = f"{kind}:LOW:HIGH" + ("[:STEP]" if steps else "")
    if len(args) not in ((2, 3) if steps else (2,)):
        raise UsageError(
            f"--param {text!r}: {kind} takes {usage}", f"e.g. --param {name}={_eg(kind)}"
        )
    try:
        numbers = [float(a) for a in args]
    except ValueError:
        raise UsageError(
            f"--param {text!r}: {usage} takes numbers", f"e.g. --param {name}={_eg(kind)}"
        ) from None
    if not all(math.isfinite(n) for n in numbers):
        raise UsageError(f"--param {text!r}: the bounds must be finite numbers", _EXAMPLE)
    low, high = numbers[0], numbers[1]
    step = numbers[2] if len(numbers) == 3 else None
    integer = kind in ("int", "logint")
    if integer and not all(n.is_integer() for n in numbers):
        raise UsageError(
            f"--param {text!r}: {kind} takes whole numbers", f"e.g. --param {name}={_eg(kind)}"
        )
    if low >= high:
        raise UsageError(
            f"--param {text!r}: LOW ({args[0]}) must be below HIGH ({args[1]})",
            f"e.g. --param {name}={_eg(kind)}",
        )
    if kind in ("loguniform", "logint") and low <= 0:
        raise UsageError(
            f"--param {text!r}: a log scale needs LOW above 0", f"e.g. --param {name}={_eg(kind)}"
        )
    if step is not None and (step <= 0 or step > high - low):
        raise UsageError(f"--param {text!r}: STEP must be above 0 and at most HIGH - LOW", _EXAMPLE)
    if step is not None:
        count = (high - low) / step
        if abs(count - round(count)) > 1e-9 * max(1.0, count):  # (Optuna would cut HIGH)
            top = low + math.floor(count + 1e-9) * step
            raise UsageError(
                f"--param {text!r}: STEP ({args[2]}) does not divide HIGH - LOW, so HIGH "
                "would never be reached",
                f"e.g. --param {name}={kind}:{args[0]}:{_shown(round(top, 12))}:{args[2]}",
            )
    return Param(name, kind, low, high, step)


def _eg(kind: str) -> str:
    return {
        "uniform": "uniform:0:0.5",
        "loguniform": "loguniform:1e-4:1e-1",
        "int": "int:2:6",
        "logint": "logint:16:1024",
    }[kind]


def _value(word: str) -> Any:
    """A choice as the script gets it: an int, a float, a bool, or the word."""
    lowered = word.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(word)
        except ValueError:
            continue
    return word


def parse_params(texts: list[str]) -> list[Param]:
    """Every ``--param``, in order. Raises UsageError for a bad one, or a name given twice."""
    params = [parse_param(t) for t in texts]
    seen: set[str] = set()
    for param in params:
        if param.name in seen:
            raise UsageError(f"--param {param.name} is given twice", "give each name once")
        seen.add(param.name)
    if not params:
        raise UsageError("a sweep needs at least one --param", _EXAMPLE)
    return params
