"""What a remote attempt's run folder holds, copied to this machine as it grows.

A backend whose attempts run elsewhere (Ray, the clouds) follows them through their run
folder: the log and metrics its runner appends are copied to the attempt's files here, and
its events are kept for the job's events. How far each folder was read is kept beside the
attempt's log, so a supervisor that follows the attempt again copies nothing twice.
"""

from __future__ import annotations

import json
import os

from ferry.runner.record import RunFolderReader


class RunMirror:
    """The run folder ``folder`` (and each node's under it, for a gang of ``nodes``),
    copied into ``log_path`` and ``metrics_path``."""

    def __init__(self, folder: str, nodes: int, log_path: str, metrics_path: str) -> None:
        from ferry.runner.nodes import node_folder

        self.reader = RunFolderReader(folder)
        # the attempt's own record, and each node's runner's in a gang
        self.streams = [self.reader] + (
            [RunFolderReader(node_folder(folder, n)) for n in range(nodes)] if nodes > 1 else []
        )
        self.log_path = log_path
        self.metrics_path = metrics_path
        self._events: list[str] = []

    def _positions_file(self) -> str:
        return f"{self.log_path}.copied"  # beside the attempt's log: how far each was read

    def go_on(self) -> None:
        """Following the attempt again: what a process before this one copied (log,
        metrics, events of each folder) is not copied twice."""
        try:
            with open(self._positions_file()) as file:
                known = json.load(file)
        except (OSError, ValueError):
            return
        for reader, positions in zip(self.streams, known, strict=False):
            if isinstance(positions, dict):
                reader.go_on_from(positions)

    def _save_positions(self) -> None:
        path = self._positions_file()
        with open(f"{path}.tmp", "w") as file:
            json.dump([reader.positions for reader in self.streams], file)
        os.replace(f"{path}.tmp", path)

    def copy(self) -> None:
        """Copy the folders' new log and metrics to this machine's files (a gang's: each
        node's, whose lines carry their global rank); keep their events for
        :meth:`events`. Raises FerryError when a folder cannot be read."""
        from ferry.backends.base import event_messages

        copied = False
        for reader in self.streams:
            log = reader.read("log")
            metrics = reader.read("metrics")
            if log:
                with open(self.log_path, "ab") as file:
                    file.write(log)
            if metrics and self.metrics_path:
                with open(self.metrics_path, "ab") as file:
                    file.write(metrics)
            events = event_messages(reader)
            self._events += events
            copied = copied or bool(log or metrics or events)
        if copied:  # (after the copies: at worst a line is copied twice, never lost)
            self._save_positions()

    def events(self) -> list[str]:
        """The events copied since the last call."""
        taken, self._events = self._events, []
        return taken
