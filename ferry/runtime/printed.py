"""Metrics that a script only prints. The generic reader takes JSON-object lines and
``key=value`` pairs, and nothing from warning lines; ``key: value`` is read only through the
user's own regular expressions (``metrics: {val_loss: 'val_loss: ([0-9.e-]+)'}``, SageMaker's
MetricDefinitions). The supervisor reads the attempt's stdout as it is logged."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Collection
from pathlib import Path

from ferry.runtime.ingest import Follower, Point
from ferry.store import Store

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)"
# `loss=0.31`, `epoch=3/20` (a step and its total); a value must end where the word ends.
# `key: value` is left out: banners, summaries and scores print it (`Batchsize: 64`,
# `Trial 3 finished with value: 0.87`, `Test MSE: 0.24`) far more often than metrics.
_PAIR = re.compile(
    rf"(?<![\w.?&/])([A-Za-z_][\w.-]*)=\s?({_NUMBER})(?:/(\d+))?(?=[\s,;|)\]]|$)", re.IGNORECASE
)
# Lines a logger or a library prints as a warning or an error: their numbers describe the
# problem (`[LightGBM] [Warning] ... best gain: -inf`), they are not metrics.
_WARNING_LINE = re.compile(
    r"(?i:\[\s*(?:warn|warning|error|critical|fatal)\s*\])"  # [LightGBM] [Warning] ...
    r"|\b(?:WARN|WARNING|ERROR|CRITICAL|FATAL)\b(?!=)"  # WARNING:root:..., - ERROR - ...
    r"|\b[A-Z]\w*(?:Warning|Error):"  # UserWarning: ..., ValueError: ...
    r"|^\s*(?i:warn|warning|error|fatal)\s*:"  # warning: ...
    r"|^\[[WEC] \d"  # Optuna's [W 2024-05-01 10:00:00,123] ...
    r"|^[WEF]\d{4} \d\d:\d\d:\d\d"  # glog and absl: W0501 10:00:00.123456 ...
)
# the level of a JSON log record, under the names common loggers give it
_LEVEL_KEYS = ("level", "levelname", "severity")
# what a logger adds to each JSON record (python-json-logger, structlog, loguru): not metrics
_RECORD_FIELDS = frozenset(
    {"lineno", "line", "levelno", "process", "pid", "thread", "tid", "created", "msecs"}
    | {"relativeCreated", "timestamp", "time", "ts", "elapsed"}
)
# `CUDA_VISIBLE_DEVICES=0`, `OMP_NUM_THREADS=1`, `RANK=0`: environment variables a script
# shows while it sets up (capitals joined by underscores), not measurements; `MSE=0.24` and
# `F1=0.8` stay metrics
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9]*_[A-Z0-9_]*|RANK")
# `Namespace(lr=0.001, seed=42)`, `FrozenTrial(number=27, ..., trial_id=27)`: settings
# and records shown as a Python repr, not measurements; where one starts (its end is found by
# matching brackets, since reprs nest: `datetime.datetime(...)`, `{'x': FloatDistribution(...)}`)
_CALL = re.compile(r"\b[A-Za-z_][\w.]*\(")
_OPENS, _CLOSES = "([{", ")]}"
_PROBLEM_LEVELS = frozenset({"warn", "warning", "error", "critical", "fatal"})
_STEP_NAMES = ("step", "global_step", "iteration", "iter", "epoch")
STEPS_TOTAL = "steps_total"  # the N of a printed `epoch=3/N`
# Printed points wait this long (seconds) before they are stored, so that a value the script
# also reported, and printed right after, is known as reported by then: report() writes its
# points within its flush interval (0.5 s).
HOLD = 1.0
CHUNK = 4 << 20


def is_warning_line(text: str) -> bool:
    """Whether ``text`` is a warning or an error a logger or library printed."""
    return _WARNING_LINE.search(text) is not None


def parse_line(
    text: str, patterns: dict[str, re.Pattern[str]]
) -> tuple[int | None, dict[str, float]]:
    """(step, metrics) found in one printed line: a JSON object's numbers (unless it is a
    log record at warning level or above), or the line's ``key=value`` pairs (unless it is a
    warning line); and, on any line, what the user's ``patterns`` find."""
    metrics: dict[str, float] = {}
    step: int | None = None
    stripped = text.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        try:
            data = json.loads(stripped)
        except ValueError:
            data = None
        if isinstance(data, dict) and not _problem_record(data):
            record = any(key in data for key in _LEVEL_KEYS)
            for key, value in data.items():
                if record and key in _RECORD_FIELDS:
                    continue
                if isinstance(value, int | float) and not isinstance(value, bool):
                    metrics[str(key)] = float(value)
    elif not is_warning_line(text):
        for match in _PAIR.finditer(without_reprs(text)):
            if _ENV_NAME.fullmatch(match.group(1)):
                continue
            metrics[match.group(1)] = float(match.group(2))
            if match.group(3) and match.group(1) in _STEP_NAMES:  # epoch=3/20: 20 in all
                metrics[STEPS_TOTAL] = float(match.group(3))
    for name in _STEP_NAMES:
        if name in metrics:
            step = int(metrics.pop(name))
            break
    for name, pattern in patterns.items():
        found = pattern.search(text)
        if found:
            try:
                metrics[name] = float(found.group(1))
            except (IndexError, ValueError):
                continue
    return step, metrics


def without_reprs(text: str) -> str:
    """``text`` with every Python repr that holds a ``name=`` (``Namespace(lr=0.1)``, Optuna's
    ``FrozenTrial(...)``, nested ones included) replaced by a space. A repr cut off before its
    closing bracket runs to the end of the line."""
    if "(" not in text or "=" not in text:
        return text
    out, at = [], 0
    while (start := _CALL.search(text, at)) is not None:
        end = _closing(text, start.end() - 1)
        if "=" in text[start.end() : end]:
            out += [text[at : start.start()], " "]
            at = end
        else:  # `Epoch(3) loss=0.3`: a call without settings leaves its pairs readable
            out.append(text[at : start.end()])
            at = start.end()
    out.append(text[at:])
    return "".join(out)


def _closing(text: str, opened: int) -> int:
    """The index after the bracket that closes the one at ``opened`` (the end of ``text``
    when none does), skipping brackets inside quoted strings."""
    depth, quote, i = 0, "", opened
    while i < len(text):
        char = text[i]
        if quote:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in _OPENS:
            depth += 1
        elif char in _CLOSES:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(text)


def _problem_record(record: dict[object, object]) -> bool:
    return any(str(record.get(key, "")).lower() in _PROBLEM_LEVELS for key in _LEVEL_KEYS)


class PrintedMetricsReader(Follower):
    """Follows one attempt's log and stores the metrics its stdout lines print, except the
    values of names the script reports through runtime.report: those are stored once, as
    reported."""

    def __init__(
        self,
        store: Store,
        job_id: str,
        attempt: int,
        log: Path,
        patterns: dict[str, str],
        listener: Callable[[list[Point]], None] | None = None,
    ) -> None:
        super().__init__(store, job_id, attempt, log, listener)
        self.patterns = {name: re.compile(p) for name, p in patterns.items()}
        self.offset = 0
        self.held: list[Point] = []  # printed less than HOLD ago: not stored yet

    def read(self, reported: Collection[str] = (), final: bool = False) -> int:
        """Store what the lines logged since the last call print, once ``HOLD`` old (all of
        it when ``final``: the script has exited and its reports are written), leaving out
        the names in ``reported``, and the printed step total when the script reports (its
        reported steps may count something else). Returns the points stored."""
        from ferry.logs import read_block

        stored = 0
        while True:
            block, offset = read_block(str(self.path), self.offset, CHUNK)
            self.offset = offset
            for raw in block.split(b"\n")[:-1]:
                if raw[25:27] != b"O ":  # stdout lines only, of rank 0 (a gang's others: O1 ...)
                    continue
                at, text = raw[:24].decode(errors="replace"), raw[27:].decode(errors="replace")
                step, metrics = parse_line(text, self.patterns)
                if metrics:
                    t = _epoch(at)
                    self.held += [(0, step, t, k, v) for k, v in metrics.items()]
            stored += self._release(reported, final)
            if not block:
                return stored

    def _release(self, reported: Collection[str], final: bool) -> int:
        cutoff = time.time() - HOLD
        ready = self.held if final else [p for p in self.held if p[2] <= cutoff]
        if not ready:
            return 0
        self.held = [] if final else [p for p in self.held if p[2] > cutoff]
        left_out = {*reported, STEPS_TOTAL} if reported else ()
        return self.keep([p for p in ready if p[3] not in left_out])


def _epoch(stamp: str) -> float:
    import calendar

    try:
        seconds = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
        return seconds + int(stamp[20:23]) / 1000
    except ValueError:
        return time.time()
