"""The run folder: one attempt's record, written by its runner and read by the controller.

A run folder is a local folder or a prefix in the job's bucket, one per attempt::

    state.json         the runner's state: starting, running or ended; its heartbeat; at
                       the end the exit code, the outcome and how many segments each
                       stream has
    log/000001 ...     the attempt's output, as the process wrote it
    metrics/000001 ... points the script reported or printed, one JSON object a line
    events/000001 ...  what the runner did (inputs staged, notice sent ...), JSON lines
    order.json         the run order, where the runner was started on another machine
    outputs.json       the files the runner sent to the bucket (on another machine)

Appending is adding the next segment: every segment is written once and never changed, so
the same format works on a disk and in a bucket, whose objects cannot be appended to.
``state.json`` is the only file that is replaced: on a disk it is written beside the
folder under a ``.tmp-`` name, synced, then renamed over the old one; in a bucket it is one
PUT. A reader therefore sees a whole file or none: a runner killed at any point leaves at
most a ``.tmp-`` file, which readers skip. When the attempt ends, ``state.json`` is written
last and names the number of segments of each stream, so a reader knows when it has all
of them (as the outputs' manifest is written last).

The runner never needs the job store, and the controller reads the same record whatever
the backend: a local process, a Ray job or a cloud training job.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferry.errors import FerryError
from ferry.procs import hostname
from ferry.storage.locations import Location, parse_uri

STOPPED = "stopped"  # in the run folder: the controller stopped the attempt
FORMAT = 1  # the layout above; a reader refuses a record written in a later format
STATE = "state.json"
STREAMS = ("log", "metrics", "events")
STARTING, RUNNING, ENDED = "starting", "running", "ended"
SEGMENT_BYTES = 4 << 20  # a stream's buffer is written out once it holds this much
_DIGITS = 6  # segment names: 000001, ... (read as numbers, so more digits still sort)


class RunFolderError(FerryError):
    """A run folder that cannot be read as one."""


@dataclass(frozen=True)
class RunState:
    """What ``state.json`` holds."""

    attempt: int
    state: str  # starting, running or ended
    host: str
    pid: int
    started_at: float
    beat_at: float  # the runner's last sign of life
    ended_at: float | None = None
    exit_code: int | None = None  # as the process reported it (-N: killed by signal N)
    # how the attempt ended as the runner saw it, in the policy's words (exited, preempted,
    # provider_failed ...), and in a person's
    outcome: str | None = None
    reason: str | None = None
    segments: dict[str, int] = field(default_factory=dict)  # per stream, when ended
    pids: list[int] = field(default_factory=list)  # the processes it started, while running
    # at the end: CPU seconds and the largest peak resident memory of those processes
    cpu_seconds: float | None = None
    peak_rss: float | None = None
    said: str | None = None  # what the script wrote of its failure (FERRY_FAILURE_FILE)
    # (wall clock) when the failing rank ended, where it failed of itself (before any
    # notice): a gang over several nodes names the node that failed first as its cause
    failed_at: float | None = None
    format: int = FORMAT

    def to_json(self) -> bytes:
        return json.dumps(self._fields(), sort_keys=True).encode()

    def _fields(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, data: bytes, where: str) -> RunState:
        try:
            raw = json.loads(data)
            if not isinstance(raw, dict):
                raise ValueError("not an object")
            if int(raw.get("format", 0)) > FORMAT:
                raise RunFolderError(
                    f"{where} was written by a newer Ferry (format {raw['format']})",
                    "upgrade Ferry here to follow this job",
                )
            known = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw}
            state = cls(**known)
        except RunFolderError:
            raise
        except (ValueError, TypeError) as exc:
            raise RunFolderError(
                f"{where} is not a run state ({exc})", "was it written by Ferry's runner?"
            ) from None
        return state

    @property
    def ended(self) -> bool:
        return self.state == ENDED

    def lost(self, now: float, ttl: float) -> bool:
        """Whether a runner that has not ended has given no sign of life for ``ttl`` s."""
        return not self.ended and now - self.beat_at > ttl


class _Place:
    """The run folder's files: on this machine's disk, or in a bucket through fsspec."""

    def __init__(self, uri: str, durable: bool = True) -> None:
        self.loc: Location = parse_uri(uri)
        self._fs: Any = None
        self._durable = durable  # on a disk: sync each file before it is renamed into place
        self._made: set[Path] = set()  # folders known to exist (on a disk)

    @property
    def fs(self) -> Any:
        if self._fs is None:
            from ferry.storage.registry import filesystem

            with self._errors(write=False):
                self._fs = filesystem(self.loc.protocol)
        return self._fs

    def _errors(self, write: bool) -> Any:
        from ferry.storage.failures import bucket_errors

        return bucket_errors(self.loc, write=write, context="run folder")

    def put(self, name: str, data: bytes) -> None:
        """Write ``name`` whole: readers see the old file or the new one, never a part."""
        if self.loc.is_local:
            path = Path(self.loc.path) / name
            if path.parent not in self._made:
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                self._made.add(path.parent)
            tmp = path.with_name(f".tmp-{path.name}.{os.getpid()}.{threading.get_ident()}")
            with open(tmp, "wb") as file:
                file.write(data)
                if self._durable:
                    file.flush()
                    os.fsync(file.fileno())
            os.replace(tmp, path)
            return
        with self._errors(write=True):
            self.fs.pipe_file(self.loc.child(name).path, data)

    def get(self, name: str) -> bytes | None:
        """``name``'s bytes, or None when there is no such file yet."""
        if self.loc.is_local:
            try:
                return (Path(self.loc.path) / name).read_bytes()
            except FileNotFoundError:
                return None
        try:
            with self._errors(write=False):
                data: bytes = self.fs.cat_file(self.loc.child(name).path)
        except FileNotFoundError:
            return None
        return data

    def remove(self, name: str) -> None:
        """Remove ``name`` (nothing when it is not there)."""
        if self.loc.is_local:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(Path(self.loc.path) / name)
            return
        with self._errors(write=True), contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self.loc.child(name).path)

    def numbers(self, stream: str) -> list[int]:
        """The numbers of the segments of ``stream`` there now, in order."""
        if self.loc.is_local and not os.path.isdir(self.loc.path):
            return []  # (a new run folder: one look for every stream)
        if self.loc.is_local:
            try:
                names = os.listdir(Path(self.loc.path) / stream)
            except FileNotFoundError:
                return []
        else:
            path = self.loc.child(stream).path
            try:
                with self._errors(write=False):
                    self.fs.invalidate_cache(path)
                    names = [
                        p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(path, detail=False)
                    ]
            except FileNotFoundError:
                return []
        return sorted(int(n) for n in names if n.isdigit())


def segment_name(stream: str, number: int) -> str:
    return f"{stream}/{number:0{_DIGITS}d}"


class RunFolderWriter:
    """The runner's side: buffers each stream and writes it out as numbered segments,
    and keeps ``state.json`` current. Safe to call from several threads."""

    def __init__(
        self,
        uri: str,
        attempt: int,
        *,
        clock: Callable[[], float] = time.time,
        segment_bytes: int = SEGMENT_BYTES,
        durable: bool = True,
        announce: bool = True,
    ) -> None:
        """``durable``: on a disk, sync each file to it before it replaces the old one (a
        record that only this machine reads, next to a job store that is the truth, can
        skip the cost). ``announce``: write ``state.json`` (starting) now, rather than at
        the first beat (a runner that beats at once saves the write)."""
        self._place = _Place(uri, durable)
        self._clock = clock
        self._limit = segment_bytes
        self._lock = threading.RLock()
        self._buffers: dict[str, bytearray] = {s: bytearray() for s in STREAMS}
        # a runner started again on the same attempt goes on after what is there
        self._next = {s: (self._place.numbers(s) or [0])[-1] + 1 for s in STREAMS}
        now = clock()
        self._state = RunState(attempt, STARTING, hostname(), os.getpid(), now, now)
        if announce:
            self._place.put(STATE, self._state.to_json())

    @property
    def remote(self) -> bool:
        """Whether the folder is in a bucket (the controller is on another machine)."""
        return not self._place.loc.is_local

    def stopped(self) -> bool:
        """Whether the controller has stopped the attempt (``stopped`` in the folder)."""
        try:
            return self._place.get(STOPPED) is not None
        except FerryError:  # (the bucket did not answer: asked again at the next beat)
            return False

    @property
    def state(self) -> RunState:
        return self._state

    def write(self, stream: str, data: bytes) -> None:
        """Add ``data`` to ``stream`` (written out at the next flush, or once it is large)."""
        if stream not in self._buffers:
            raise ValueError(f"no stream {stream!r}; the streams are {', '.join(STREAMS)}")
        with self._lock:
            buffer = self._buffers[stream]
            buffer += data
            if len(buffer) >= self._limit:
                self._write_out(stream)

    def put(self, name: str, data: bytes) -> None:
        """Write a file of the run folder whole (``order.json``, ``outputs.json``)."""
        self._place.put(name, data)

    def event(self, message: str, **fields: Any) -> None:
        """Record something the runner did, with the time."""
        line = {"at": self._clock(), "message": message, **fields}
        self.write("events", json.dumps(line, sort_keys=True).encode() + b"\n")

    def flush(self) -> None:
        """Write out what each stream holds, as one new segment each."""
        with self._lock:
            for stream in STREAMS:
                self._write_out(stream)

    def beat(self, state: str = RUNNING, **fields: Any) -> None:
        """Flush, then say the runner is alive (and in ``state``, with ``fields`` of the
        state changed: its ``pids``)."""
        if state not in (STARTING, RUNNING):
            raise ValueError(f"a runner beats while starting or running, not {state!r}")
        with self._lock:
            self.flush()
            self._set(state=state, beat_at=self._clock(), **fields)

    def end(
        self,
        exit_code: int | None,
        outcome: str,
        reason: str | None = None,
        tell: Callable[[RunState], None] | None = None,
        **fields: Any,
    ) -> None:
        """Flush everything, then record the end, last: a reader that sees it can read all.
        ``fields``: more of the state (``cpu_seconds``, ``peak_rss``). ``tell`` hears the
        end just before it is written (a supervisor waiting on a pipe need not read it)."""
        with self._lock:
            self.flush()
            now = self._clock()
            counts = {s: self._next[s] - 1 for s in STREAMS}
            self._set(
                state=ENDED,
                beat_at=now,
                ended_at=now,
                exit_code=exit_code,
                outcome=outcome,
                reason=reason,
                segments=counts,
                tell=tell,
                **fields,
            )

    def _write_out(self, stream: str) -> None:
        buffer = self._buffers[stream]
        if not buffer:
            return
        self._place.put(segment_name(stream, self._next[stream]), bytes(buffer))
        self._next[stream] += 1
        buffer.clear()

    def _set(self, tell: Callable[[RunState], None] | None = None, **changes: Any) -> None:
        if self._state.ended:
            raise RunFolderError("the run folder already records the attempt's end")
        state = RunState(**{**self._state._fields(), **changes})
        if tell is not None:
            tell(state)
        self._place.put(STATE, state.to_json())
        self._state = state


class RunFolderReader:
    """The controller's side: the runner's state, and each stream's new segments in order."""

    def __init__(self, uri: str) -> None:
        self._place = _Place(uri)
        self._read = dict.fromkeys(STREAMS, 0)  # segments read so far, per stream

    def state(self) -> RunState | None:
        """The runner's state now; None until the runner has written one."""
        data = self._place.get(STATE)
        if data is None:
            return None
        return RunState.from_json(data, f"{self._place.loc.uri}/{STATE}")

    def get(self, name: str) -> bytes | None:
        """A file of the run folder (``outputs.json``), or None when it is not there."""
        return self._place.get(name)

    def read(self, stream: str) -> bytes:
        """What ``stream`` gained since the last call: its next segments, in order (up to
        the first one not there yet)."""
        if stream not in self._read:
            raise ValueError(f"no stream {stream!r}; the streams are {', '.join(STREAMS)}")
        # the next numbers are asked for by name: no listing, which grows with the job
        out = bytearray()
        while (data := self._place.get(segment_name(stream, self._read[stream] + 1))) is not None:
            out += data
            self._read[stream] += 1
        return bytes(out)

    @property
    def positions(self) -> dict[str, int]:
        """How many segments of each stream have been read (to go on from, later)."""
        return dict(self._read)

    def go_on_from(self, positions: dict[str, int]) -> None:
        """Take as read what a reader before this one had read (its :attr:`positions`)."""
        for stream, count in positions.items():
            if stream in self._read:
                self._read[stream] = int(count)

    def complete(self, state: RunState) -> bool:
        """Whether ``state`` is the end and every segment it names has been read."""
        return state.ended and all(self._read[s] >= state.segments.get(s, 0) for s in STREAMS)
