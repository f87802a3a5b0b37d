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

A parameter may be drawn only when another, a ``choice``, took one of some values:
``svc_c=loguniform:1e-10:1e10 if classifier=SVC`` (or ``if classifier=SVC,LinearSVC``).
In a trial where the condition does not hold, the parameter is not drawn at all, so it is
neither in the trial's values nor passed to its job (Optuna's define-by-run: the study
stores only what was drawn). A condition may name a parameter that has one itself.

A trial's values reach its script as the job's hyperparameters, through the contract
(``--name=value``, ``SM_HP_NAME``, ``hyperparameters.json``), whatever the backend.

Optuna is imported only where a value is drawn (:meth:`Param.suggest`), never by
parsing: ``ferry sweep --help`` and a spec's check stay light.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ferry.errors import UsageError

KINDS = ("uniform", "loguniform", "int", "logint", "choice")
GRID_MAX = 10_000  # points a grid may have: more is a search, not a grid
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_EXAMPLE = "e.g. --param lr=loguniform:1e-4:1e-1 or --param batch=choice:32,64,128"
_IF = re.compile(r"\s+if(?:\s+|$)")  # what separates a parameter from its condition
_IF_EXAMPLE = "e.g. svc_c=loguniform:1e-10:1e10 if classifier=SVC"


@dataclasses.dataclass(frozen=True)
class Condition:
    """When a parameter is drawn: only in trials where the choice ``parent`` took one of
    ``values``."""

    parent: str
    values: tuple[Any, ...]

    def holds(self, drawn: Mapping[str, Any]) -> bool:
        """Whether the condition holds for a trial's values drawn so far (never when the
        parent was not drawn: a condition's parent may have one of its own)."""
        return self.parent in drawn and any(_same(drawn[self.parent], v) for v in self.values)

    def describe(self) -> str:
        return f"{self.parent}={','.join(_shown(v) for v in self.values)}"


@dataclasses.dataclass(frozen=True)
class Param:
    """One hyperparameter of the search space."""

    name: str
    kind: str  # one of KINDS
    low: float = 0.0
    high: float = 0.0
    step: float | None = None  # uniform and int: the values' spacing
    choices: tuple[Any, ...] = ()
    condition: Condition | None = None  # drawn only when it holds (None: in every trial)

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
            text = f"{self.name}=choice:{','.join(_shown(c) for c in self.choices)}"
        else:
            parts = [_shown(self.low), _shown(self.high)]
            if self.step is not None:
                parts.append(_shown(self.step))
            text = f"{self.name}={self.kind}:{':'.join(parts)}"
        return text if self.condition is None else f"{text} if {self.condition.describe()}"


def _same(a: Any, b: Any) -> bool:
    """Whether two choices are the same value (``true`` is not ``1``, as Python has it)."""
    return bool(a == b) and isinstance(a, bool) == isinstance(b, bool)


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def parse_param(text: str) -> Param:
    """``NAME=KIND:ARGS``, or ``NAME=KIND:ARGS if PARAM=VALUE[,VALUE…]``, as a
    :class:`Param`. Raises UsageError naming what is wrong (a condition is checked against
    the other parameters by :func:`parse_params`)."""
    head, *tail = _IF.split(text.strip(), maxsplit=1)
    param = _param(text, head)
    if not tail:
        return param
    return dataclasses.replace(param, condition=_condition(text, param.name, tail[0]))


def _condition(text: str, name: str, given: str) -> Condition:
    parent, eq, words = given.strip().partition("=")
    parent = parent.strip()
    values = [w.strip() for w in words.split(",")]
    if not eq or not _NAME.fullmatch(parent) or not words.strip() or any(not w for w in values):
        raise UsageError(
            f"--param {text!r}: its condition {given.strip() or '(nothing)'!r} is not "
            "PARAM=VALUE or PARAM=VALUE,VALUE",
            _IF_EXAMPLE,
        )
    if parent == name:
        raise UsageError(
            f"--param {text!r}: a parameter cannot be drawn on a condition of its own",
            "name another parameter, a choice, after if",
        )
    if len(set(values)) != len(values):
        raise UsageError(f"--param {text!r}: its condition gives a value twice", "give each once")
    return Condition(parent, tuple(_value(w) for w in values))


def _param(text: str, head: str) -> Param:
    """The parameter ``head`` (``text`` without its condition), named in errors as ``text``."""
    name, eq, rest = head.partition("=")
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
    """Every ``--param``, each after the one its condition names (else in the order
    given). Raises UsageError for a bad one, a name given twice, or a condition that names
    no choice of the sweep or a value that is not among its choices."""
    params = [parse_param(t) for t in texts]
    seen: set[str] = set()
    for param in params:
        if param.name in seen:
            raise UsageError(f"--param {param.name} is given twice", "give each name once")
        seen.add(param.name)
    if not params:
        raise UsageError("a sweep needs at least one --param", _EXAMPLE)
    by_name = {p.name: p for p in params}
    for param in params:
        if param.condition is not None:
            _check_condition(param, param.condition, by_name)
    return _parents_first(params)


def _check_condition(param: Param, condition: Condition, by_name: dict[str, Param]) -> None:
    parent = by_name.get(condition.parent)
    given = f"--param {param.name} is drawn only if {condition.describe()}"
    if parent is None:
        shown = ",".join(_shown(v) for v in condition.values)
        raise UsageError(
            f"{given}, but the sweep has no parameter {condition.parent}",
            f"add it as a choice, e.g. {condition.parent}=choice:{shown}, or fix the name",
        )
    if parent.kind != "choice":
        raise UsageError(
            f"{given}, but {parent.describe()} is not a choice",
            f"a condition names a choice: give {parent.name} as choice:…",
        )
    for value in condition.values:
        if not any(_same(value, c) for c in parent.choices):
            choices = ", ".join(_shown(c) for c in parent.choices)
            raise UsageError(
                f"{given}, but {_shown(value)} is not one of {parent.name}'s choices",
                f"name one of {choices}",
            )


def _parents_first(params: list[Param]) -> list[Param]:
    """``params`` with each after the one its condition names, else in the order given
    (a trial draws them in this order). Raises UsageError for conditions in a circle."""
    placed: list[Param] = []
    names: set[str] = set()
    left = list(params)
    while left:
        ready = [p for p in left if p.condition is None or p.condition.parent in names]
        if not ready:
            circle = ", ".join(p.describe() for p in left)
            raise UsageError(
                f"the conditions of --param {circle} go round in a circle, so none is ever drawn",
                "drop the condition of one of them",
            )
        placed.extend(ready)
        names.update(p.name for p in ready)
        left = [p for p in left if p not in ready]
    return placed


def grid_points(params: Sequence[Param]) -> list[dict[str, Any]]:
    """Every combination of the parameters' values that a trial can have, each parameter
    whose condition does not hold left out (so no two points differ only in a parameter
    that is not drawn). Raises UsageError as :meth:`Param.grid` does, or for more than
    ``GRID_MAX`` points."""
    points: list[dict[str, Any]] = [{}]
    for param in params:  # (parents first: a condition is judged on the values so far)
        values = param.grid()
        grown: list[dict[str, Any]] = []
        for point in points:
            if param.condition is None or param.condition.holds(point):
                grown.extend({**point, param.name: v} for v in values)
            else:
                grown.append(point)
        if len(grown) > GRID_MAX:
            raise UsageError(
                f"the --param values make a grid of more than {GRID_MAX} points, more "
                "than a grid takes",
                "give fewer values, or use another --sampler",
            )
        points = grown
    return points
