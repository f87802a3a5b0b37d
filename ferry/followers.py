"""What follows an admitted job, and starting it: the :data:`ferry.controller.Starter` that
the CLI and the API hand the controller.

A job whose attempts run on this machine gets a supervisor of its own
(:mod:`ferry.supervisor`: its processes are that supervisor's children); a job whose
attempts run elsewhere (its backend's ``runs_here`` is false: Ray, the clouds) is followed
by the watcher (:mod:`ferry.watcher`), one process for all of them. The controller decides
which jobs to admit, resume or follow again, and calls this to start what follows them: it
starts no process itself, so it never imports the processes that run it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ferry.store import Job


def start(job: Job) -> None:
    """Have ``job`` followed: by the watcher when it runs elsewhere, else by a supervisor
    of its own (an idle one, the standby one ``ferry run`` forked, or a new one)."""
    from ferry import supervisor, watcher

    if watcher.follows(job):
        supervisor.release_standby()  # (forked by `ferry run` for a job that runs here)
        watcher.follow(job)
    else:
        supervisor.start(job)
