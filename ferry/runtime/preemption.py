"""The stop notice: ``runtime.preempted()`` and ``runtime.on_preemption(fn)``.

When a job's capacity is taken back (a spot VM reclaimed, ``ferry preempt``, a simulated
preemption), when it reaches ``limits.max_runtime`` or is cancelled, its processes get
SIGTERM, then SIGKILL after the grace (``limits.stop_grace``, 30 s by default). A script
that does nothing is simply stopped and resumes from its latest checkpoint. One that asks
gets the notice:

- ``runtime.on_preemption(fn)``: ``fn()`` runs (in the main thread) when the notice comes,
  e.g. to save a checkpoint now; then the script ends as SIGTERM would have ended it,
  unless it polls ``preempted()``, in which case it stops at its own pace.
- ``runtime.preempted()``: True once the notice has come; check it in the training loop.

Outside Ferry the same holds for a SIGTERM sent by anyone. The handler is installed by the
first call to either function, so a script that only imports the runtime keeps Python's
default SIGTERM behaviour.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

_callbacks: list[Callable[[], Any]] = []
_noticed = threading.Event()
_installed_in = 0  # the process that installed the handler (a forked child did not)
_polled = False
_previous: Any = signal.SIG_DFL


def _install() -> None:
    global _installed_in, _previous
    if _installed_in == os.getpid():
        return
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers; the next call from it will
    previous = signal.signal(signal.SIGTERM, _on_notice)
    if previous is not _on_notice:  # (a forked child inherits ours: not a handler to chain)
        _previous = previous
    _installed_in = os.getpid()


def _die_by_sigterm() -> None:
    """End the process as SIGTERM does by default (no Python code can catch this)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _on_notice(signum: int, frame: Any) -> None:
    if os.getpid() != _installed_in:  # a forked child (multiprocessing): not ours to save
        _die_by_sigterm()
        return
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
    if callable(_previous):  # a handler the script (or a framework) had set before ours
        try:
            _previous(signum, frame)
        except Exception as exc:
            print(f"ferry: the earlier SIGTERM handler failed: {exc!r}", file=sys.stderr)
    try:
        checkpoint.wait()  # a save in the background is finished before anything ends
    except Exception as exc:
        print(f"ferry: the last checkpoint could not be written: {exc}", file=sys.stderr)
    metrics.flush(blocking=False)
    if not _polled:  # nobody looks at preempted(): stop now, as SIGTERM would have
        sys.stderr.flush()
        _die_by_sigterm()


def preempted() -> bool:
    """Whether the stop notice has come (SIGTERM: preemption, a limit, a cancel)."""
    global _polled
    _polled = True
    _install()
    return _noticed.is_set()


def on_preemption(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Run ``fn()`` when the stop notice comes (usable as a decorator)."""
    _callbacks.append(fn)
    _install()
    return fn
