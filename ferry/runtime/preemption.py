"""The stop notice: ``runtime.preempted()`` and ``runtime.on_preemption(fn)``.

When a job's capacity is taken back (a spot VM reclaimed, ``ferry preempt``, a simulated
preemption), when it reaches ``limits.max_runtime`` or is cancelled, its processes get
SIGTERM, then SIGKILL after the grace (``limits.stop_grace``, 30 s by default). A script
that does nothing is simply stopped and resumes from its latest checkpoint. One that asks
gets the notice:

- ``runtime.on_preemption(fn)``: ``fn()`` runs (in the main thread) when the notice comes,
  e.g. to save a checkpoint now; then the script exits (code 143), unless it polls
  ``preempted()``, in which case it stops at its own pace.
- ``runtime.preempted()``: True once the notice has come; check it in the training loop.

Outside Ferry the same holds for a SIGTERM sent by anyone. The handler is installed by the
first call to either function, so a script that only imports the runtime keeps Python's
default SIGTERM behaviour.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

_callbacks: list[Callable[[], Any]] = []
_noticed = threading.Event()
_installed = False
_polled = False
_previous: Any = signal.SIG_DFL


def _install() -> None:
    global _installed, _previous
    if _installed or threading.current_thread() is not threading.main_thread():
        return
    _previous = signal.signal(signal.SIGTERM, _on_notice)
    _installed = True


def _on_notice(signum: int, frame: Any) -> None:
    first = not _noticed.is_set()
    _noticed.set()
    if not first:
        return
    print("ferry: stop notice (SIGTERM) received", file=sys.stderr, flush=True)
    from ferry.runtime import checkpoint, metrics

    for fn in list(_callbacks):
        try:
            fn()
        except Exception as exc:  # one failing callback must not keep the others from running
            print(f"ferry: on_preemption callback {fn!r} failed: {exc!r}", file=sys.stderr)
    try:
        checkpoint.wait()  # a save in the background is finished before anything ends
    except Exception as exc:
        print(f"ferry: the last checkpoint could not be written: {exc}", file=sys.stderr)
    metrics.flush()
    if not _polled:  # nobody looks at preempted(): stop now, as SIGTERM would have
        raise SystemExit(128 + signal.SIGTERM)


def preempted() -> bool:
    """Whether the stop notice has come (SIGTERM: preemption, a limit, a cancel)."""
    global _polled
    if not _polled:
        _polled = True
        _install()
    return _noticed.is_set()


def on_preemption(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Run ``fn()`` when the stop notice comes (usable as a decorator)."""
    _callbacks.append(fn)
    _install()
    return fn
