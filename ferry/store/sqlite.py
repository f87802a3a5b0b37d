"""The default store: one SQLite file in WAL mode under FERRY_HOME.

Writes run in ``BEGIN IMMEDIATE`` transactions with a busy timeout, so many concurrent
``ferry`` processes queue for the write lock instead of failing; status changes are
``UPDATE ... WHERE id=? AND status IN (...)`` and must change exactly one row.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, overload

from ferry import defaults
from ferry.errors import JobNotFound, StoreError, TransitionError
from ferry.status import AttemptStatus, JobStatus
from ferry.store.base import AdmitFn, IdTaken, Store
from ferry.store.migrations import MIGRATIONS, SCHEMA_VERSION
from ferry.store.records import (
    Allocation,
    Attempt,
    Event,
    Job,
    MetricSummary,
    Spend,
    accrued,
)

_JOB_COLUMNS = (
    "id, name, seq, status, backend, spec, job_dir, outputs, created_at, updated_at, "
    "started_at, ended_at, exit_code, reason, allocation, supervisor_pid, supervisor_host, "
    "heartbeat_at, supervisor_started, preemptions, retries, code_retries"
)
_ATTEMPT_COLUMNS = (
    "job_id, number, status, backend, host, log_path, started_at, handle, ended_at, "
    "exit_code, reason, cost, price, offering, billed"
)
_JOB_FIELDS = frozenset(
    {
        "started_at",
        "ended_at",
        "exit_code",
        "reason",
        "allocation",
        "supervisor_pid",
        "supervisor_host",
        "heartbeat_at",
        "outputs",
        "supervisor_started",
        "preemptions",
        "retries",
        "code_retries",
    }
)
_ATTEMPT_FIELDS = frozenset(
    {
        "started_at",  # (moved to when its machine started, for one that waited for it)
        "status",
        "handle",
        "ended_at",
        "exit_code",
        "reason",
        "cost",
        "host",
        "price",
        "offering",
        "billed",
    }
)
# Every open store, so that their connections can be closed before this process forks:
# SQLite's per-process file state must not be inherited by a child (https://sqlite.org/howtocorrupt.html#fork).
_OPEN: weakref.WeakSet[SQLiteStore] = weakref.WeakSet()


def _close_all_before_fork() -> None:
    for store in list(_OPEN):
        store.release()


os.register_at_fork(before=_close_all_before_fork)


def _job(row: tuple[Any, ...]) -> Job:
    return Job(
        id=row[0],
        name=row[1],
        seq=row[2],
        status=JobStatus(row[3]),
        backend=row[4],
        spec=json.loads(row[5]),
        job_dir=row[6],
        outputs=row[7],
        created_at=row[8],
        updated_at=row[9],
        started_at=row[10],
        ended_at=row[11],
        exit_code=row[12],
        reason=row[13],
        allocation=Allocation.from_json(json.loads(row[14]) if row[14] else None),
        supervisor_pid=row[15],
        supervisor_host=row[16],
        heartbeat_at=row[17],
        supervisor_started=row[18],
        preemptions=row[19],
        retries=row[20],
        code_retries=row[21],
    )


def _attempt(row: tuple[Any, ...]) -> Attempt:
    return Attempt(
        job_id=row[0],
        number=row[1],
        status=AttemptStatus(row[2]),
        backend=row[3],
        host=row[4],
        log_path=row[5],
        started_at=row[6],
        handle=row[7],
        ended_at=row[8],
        exit_code=row[9],
        reason=row[10],
        cost=row[11],
        price=row[12],
        offering=row[13],
        billed=bool(row[14]),
    )


def _encode(field: str, value: Any) -> Any:
    if field == "allocation" and isinstance(value, Allocation):
        return json.dumps(value.to_json())
    if isinstance(value, AttemptStatus | JobStatus):
        return value.value
    return value


class _LazyJobs(Sequence[Job]):
    """Queued rows turned into Jobs only when admission looks at them (it usually stops
    after the first few, once the machine is full)."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self._rows = rows
        self._jobs: dict[int, Job] = {}

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> Job: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Job]: ...
    def __getitem__(self, index: int | slice) -> Job | Sequence[Job]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if index not in self._jobs:
            self._jobs[index] = _job(self._rows[index])
        return self._jobs[index]


class SQLiteStore(Store):
    """Jobs in ``<FERRY_HOME>/ferry.db``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._pid = os.getpid()
        self._db: sqlite3.Connection | None = None
        # one connection, one transaction at a time: the threads of a watcher share it
        self._lock = threading.RLock()
        try:
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise self._failure(exc, opening=True) from None

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(
            self.path,
            timeout=defaults.SQLITE_BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
        db.execute(f"PRAGMA busy_timeout = {defaults.SQLITE_BUSY_TIMEOUT_MS}")
        mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode != "wal":  # e.g. a network filesystem; still correct, just slower
            db.execute("PRAGMA journal_mode = DELETE")
        # NORMAL in WAL mode: a crash of any process never corrupts or loses committed data;
        # only a power cut may lose the last transactions.
        db.execute("PRAGMA synchronous = NORMAL")
        return db

    def _migrate(self) -> None:
        with self._lock:
            version = self._conn().execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the job store {self.path} was written by a newer Ferry "
                f"(schema {version}; this Ferry knows up to {SCHEMA_VERSION})",
                "upgrade Ferry (pip install -U ferry) or point FERRY_HOME elsewhere",
            )
        if version == SCHEMA_VERSION:
            return
        with self._write() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            for number in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[number].split(";"):
                    if statement.strip():
                        db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        os.chmod(self.path, 0o600)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield from self._written()

    def _written(self) -> Iterator[sqlite3.Connection]:
        try:
            db = self._conn()
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.DatabaseError as exc:
            raise self._failure(exc) from None
        try:
            yield db
            db.execute("COMMIT")
        except BaseException as exc:
            if db.in_transaction:  # SQLite may have rolled back already (disk full)
                db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.DatabaseError) and not isinstance(
                exc, sqlite3.IntegrityError
            ):
                raise self._failure(exc) from None
            raise

    def _disk_full(self) -> bool:
        try:
            stat = os.statvfs(self.path.parent)
        except OSError:
            return False
        return stat.f_bavail * stat.f_frsize < 64 * 1024 or stat.f_favail == 0

    def _failure(self, exc: sqlite3.Error, opening: bool = False) -> StoreError:
        """A person's words for what went wrong with the store file."""
        text = str(exc)
        # SQLite says "disk I/O error" when it cannot even create its WAL files
        if "full" in text or ("I/O" in text and self._disk_full()):
            return StoreError(
                f"the disk holding the job store {self.path} is full; nothing was changed",
                "free some space, or point FERRY_HOME at another disk",
            )
        if "locked" in text or "busy" in text:
            return StoreError(
                f"the job store {self.path} stayed locked by another process for "
                f"{defaults.SQLITE_BUSY_TIMEOUT_MS // 1000}s",
                "try again; if it persists, look for a stuck ferry process",
            )
        if opening:
            return StoreError(
                f"cannot open the job store {self.path}: {text}",
                "check the file and its folder's permissions, and the disk",
            )
        return StoreError(
            f"the job store {self.path} failed: {text}",
            "check the disk and the file's permissions",
        )

    def _conn(self) -> sqlite3.Connection:
        """The connection, opened on first use (and again after a fork released it)."""
        if self._db is None or self._pid != os.getpid():
            self._db = self._connect()
            self._pid = os.getpid()
            _OPEN.add(self)
        return self._db

    def release(self) -> None:
        """Close the connection; the next call opens a new one."""
        with self._lock:
            if self._db is not None and self._pid == os.getpid():
                self._db.close()
            self._db = None

    def _read(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._lock:
                return self._conn().execute(sql, tuple(params)).fetchall()
        except sqlite3.DatabaseError as exc:
            raise self._failure(exc) from None

    # -- jobs -----------------------------------------------------------------------------

    def create_job(
        self,
        *,
        job_id: str,
        name: str,
        backend: str,
        spec: dict[str, Any],
        job_dir: str,
        outputs: str,
    ) -> Job:
        now = time.time()
        try:
            with self._write() as db:
                db.execute(
                    "INSERT INTO jobs (id, name, status, backend, spec, job_dir, outputs,"
                    " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        job_id,
                        name,
                        JobStatus.QUEUED.value,
                        backend,
                        json.dumps(spec, sort_keys=True),
                        job_dir,
                        outputs,
                        now,
                        now,
                    ),
                )
                db.execute(
                    "INSERT INTO events (job_id, at, kind, new_status, message)"
                    " VALUES (?, ?, 'status', ?, 'submitted')",
                    (job_id, now, JobStatus.QUEUED.value),
                )
        except sqlite3.IntegrityError:
            raise IdTaken(job_id) from None
        return self.get_job(job_id)

    def get_job(self, job_id: str) -> Job:
        rows = self._read(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        if not rows:
            raise JobNotFound(f"no job {job_id!r}", "list jobs with: ferry jobs")
        return _job(rows[0])

    def find_jobs(self, prefix: str) -> list[Job]:
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = self._read(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id LIKE ? ESCAPE '\\' ORDER BY seq DESC"
            " LIMIT 50",
            (escaped + "%",),
        )
        jobs = [_job(r) for r in rows]
        exact = [j for j in jobs if j.id == prefix]
        return exact or jobs

    def list_jobs(
        self, statuses: Iterable[JobStatus] | None = None, limit: int | None = None
    ) -> list[Job]:
        sql = f"SELECT {_JOB_COLUMNS} FROM jobs"
        params: list[Any] = []
        if statuses is not None:
            wanted = [s.value for s in statuses]
            sql += f" WHERE status IN ({','.join('?' * len(wanted))})"
            params += wanted
        sql += " ORDER BY seq DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [_job(r) for r in self._read(sql, params)]

    def _transition(
        self,
        job_id: str,
        new: JobStatus,
        *,
        expected: frozenset[JobStatus],
        reason: str | None,
        attempt: tuple[int, dict[str, Any]] | None,
        supervised_by: tuple[int | None, float | None] | None,
        **fields: Any,
    ) -> Job:
        allowed = [s.value for s in expected]
        unknown = set(fields) - _JOB_FIELDS
        if unknown:
            raise ValueError(f"not job fields: {sorted(unknown)}")
        now = time.time()
        sets = ["status = ?", "updated_at = ?"]
        params: list[Any] = [new.value, now]
        if reason is not None:
            sets.append("reason = ?")
            params.append(reason)
        for key, value in fields.items():
            sets.append(f"{key} = ?")
            params.append(_encode(key, value))
        with self._write() as db:
            row = db.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(f"no job {job_id!r}", "list jobs with: ferry jobs")
            guard, guard_params = "", []
            if supervised_by is not None:
                guard = " AND supervisor_pid IS ? AND supervisor_started IS ?"
                guard_params = list(supervised_by)
            changed = db.execute(
                f"UPDATE jobs SET {', '.join(sets)} WHERE id = ?"
                f" AND status IN ({','.join('?' * len(allowed))}){guard}",
                [*params, job_id, *allowed, *guard_params],
            ).rowcount
            if changed != 1:
                raise TransitionError(
                    f"job {job_id} is {row[0]}, not {' or '.join(allowed)}"
                    + (" under the supervisor seen" if supervised_by is not None else "")
                    + f"; it was not moved to {new.value}"
                )
            db.execute(
                "INSERT INTO events (job_id, at, kind, old_status, new_status, message)"
                " VALUES (?, ?, 'status', ?, ?, ?)",
                (job_id, now, row[0], new.value, reason or ""),
            )
            if attempt is not None:
                self._update_attempt(db, job_id, *attempt)
            return _job(
                db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
            )

    def update_job(self, job_id: str, **fields: Any) -> None:
        unknown = set(fields) - _JOB_FIELDS
        if unknown:
            raise ValueError(f"not job fields: {sorted(unknown)}")
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self._write() as db:
            db.execute(
                f"UPDATE jobs SET {sets} WHERE id = ?",
                [*(_encode(k, v) for k, v in fields.items()), job_id],
            )

    def beat(self, job_ids: Sequence[str], pid: int, host: str, when: float) -> None:
        if not job_ids:
            return
        with self._write() as db:
            db.executemany(
                "UPDATE jobs SET heartbeat_at = ? WHERE id = ? AND supervisor_pid = ?"
                " AND supervisor_host = ?",
                [(when, job_id, pid, host) for job_id in job_ids],
            )

    def admit(self, decide: AdmitFn, backend: str) -> list[Job]:
        with self._lock:
            chosen = self._admit_pass(decide, backend)
        return [self.get_job(job_id) for job_id, _ in chosen]

    def _admit_pass(self, decide: AdmitFn, backend: str) -> list[tuple[str, Allocation]]:
        # Most passes admit nothing (the machine is full): decide under a plain read
        # transaction, and take the write lock only when there is something to write.
        try:
            db = self._conn()
            db.execute("BEGIN DEFERRED")
        except sqlite3.DatabaseError as exc:
            raise self._failure(exc) from None
        try:
            chosen = self._decide(db, decide, backend)
            if chosen:
                self._admit(db, chosen)
            db.execute("COMMIT")
        except sqlite3.OperationalError:
            # another process wrote since our read began (SQLITE_BUSY_SNAPSHOT), or worse:
            # redo the pass under the write lock, which reports real failures
            if db.in_transaction:
                db.execute("ROLLBACK")
            with self._write() as db:
                chosen = self._decide(db, decide, backend)
                self._admit(db, chosen)
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return chosen

    @staticmethod
    def _decide(
        db: sqlite3.Connection, decide: AdmitFn, backend: str
    ) -> list[tuple[str, Allocation]]:
        head = db.execute(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE status = ? AND backend = ?"
            " ORDER BY seq LIMIT ?",
            (JobStatus.QUEUED.value, backend, defaults.ADMISSION_WINDOW),
        ).fetchall()
        if not head:
            return []
        active_states = [s.value for s in JobStatus if s.is_active()]
        active = [
            _job(r)
            for r in db.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE backend = ? AND status IN"
                f" ({','.join('?' * len(active_states))})",
                (backend, *active_states),
            )
        ]
        return decide(_LazyJobs(head), active)

    @staticmethod
    def _admit(db: sqlite3.Connection, chosen: list[tuple[str, Allocation]]) -> None:
        now = time.time()
        for job_id, allocation in chosen:
            changed = db.execute(
                "UPDATE jobs SET status = ?, allocation = ?, updated_at = ?"
                " WHERE id = ? AND status = ?",
                (
                    JobStatus.STARTING.value,
                    json.dumps(allocation.to_json()),
                    now,
                    job_id,
                    JobStatus.QUEUED.value,
                ),
            ).rowcount
            if changed != 1:  # impossible inside one transaction; refuse to half-admit
                raise TransitionError(f"job {job_id} left the queue during admission")
            db.execute(
                "INSERT INTO events (job_id, at, kind, old_status, new_status, message)"
                " VALUES (?, ?, 'status', ?, ?, 'admitted')",
                (job_id, now, JobStatus.QUEUED.value, JobStatus.STARTING.value),
            )

    # -- attempts and events ---------------------------------------------------------------

    def add_attempt(
        self,
        job_id: str,
        *,
        backend: str,
        host: str,
        log_dir: str,
        price: float = 0.0,
        offering: str | None = None,
        **job_fields: Any,
    ) -> Attempt:
        unknown = set(job_fields) - _JOB_FIELDS
        if unknown:
            raise ValueError(f"not job fields: {sorted(unknown)}")
        now = time.time()
        with self._write() as db:
            if job_fields:
                db.execute(
                    f"UPDATE jobs SET {', '.join(f'{k} = ?' for k in job_fields)} WHERE id = ?",
                    [*(_encode(k, v) for k, v in job_fields.items()), job_id],
                )
            number = db.execute(
                "SELECT COALESCE(MAX(number), 0) + 1 FROM attempts WHERE job_id = ?", (job_id,)
            ).fetchone()[0]
            log_path = str(Path(log_dir) / f"attempt-{number}.log")
            db.execute(
                "INSERT INTO attempts (job_id, number, status, backend, host, log_path,"
                " started_at, price, offering) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    job_id,
                    number,
                    AttemptStatus.STARTING.value,
                    backend,
                    host,
                    log_path,
                    now,
                    price,
                    offering,
                ),
            )
        return self.attempts(job_id)[-1]

    @staticmethod
    def _update_attempt(
        db: sqlite3.Connection, job_id: str, number: int, fields: dict[str, Any]
    ) -> None:
        unknown = set(fields) - _ATTEMPT_FIELDS
        if unknown:
            raise ValueError(f"not attempt fields: {sorted(unknown)}")
        sets = ", ".join(f"{k} = ?" for k in fields)
        db.execute(
            f"UPDATE attempts SET {sets} WHERE job_id = ? AND number = ?",
            [*(_encode(k, v) for k, v in fields.items()), job_id, number],
        )

    def update_attempt(self, job_id: str, number: int, **fields: Any) -> Attempt:
        with self._write() as db:
            self._update_attempt(db, job_id, number, fields)
        rows = self._read(
            f"SELECT {_ATTEMPT_COLUMNS} FROM attempts WHERE job_id = ? AND number = ?",
            (job_id, number),
        )
        return _attempt(rows[0])

    def attempts(self, job_id: str) -> list[Attempt]:
        rows = self._read(
            f"SELECT {_ATTEMPT_COLUMNS} FROM attempts WHERE job_id = ? ORDER BY number",
            (job_id,),
        )
        return [_attempt(r) for r in rows]

    def spending(self, since: float, until: float | None = None) -> list[Spend]:
        now = time.time()
        until = now if until is None else until
        rows = self._read(
            "SELECT a.job_id, j.name, a.number, a.backend, j.spec, a.offering, a.price,"
            " a.started_at, a.ended_at, a.cost, a.billed FROM attempts a JOIN jobs j"
            " ON j.id = a.job_id"
            " WHERE COALESCE(a.ended_at, ?) > ? AND a.started_at < ? ORDER BY a.started_at",
            (now, since, until),
        )
        out = []
        for row in rows:
            accelerator = (json.loads(row[4]).get("resources") or {}).get("accelerator")
            start, end = row[7], row[8] if row[8] is not None else now
            whole = accrued(row[9], row[6], start, end, bool(row[10]))
            inside = max(0.0, min(end, until) - max(start, since))
            cost = whole * inside / (end - start) if end > start else whole
            out.append(
                Spend(
                    job_id=row[0],
                    job_name=row[1],
                    attempt=row[2],
                    backend=row[3],
                    accelerator=accelerator,
                    offering=row[5],
                    price=row[6],
                    started_at=start,
                    ended_at=row[8],
                    cost=cost,
                )
            )
        return out

    def add_event(self, job_id: str, message: str) -> None:
        with self._write() as db:
            db.execute(
                "INSERT INTO events (job_id, at, kind, message) VALUES (?, ?, 'note', ?)",
                (job_id, time.time(), message),
            )

    def events(self, job_id: str) -> list[Event]:
        rows = self._read(
            "SELECT job_id, at, kind, message, old_status, new_status FROM events"
            " WHERE job_id = ? ORDER BY id",
            (job_id,),
        )
        return [
            Event(
                r[0],
                r[1],
                r[2],
                r[3],
                JobStatus(r[4]) if r[4] else None,
                JobStatus(r[5]) if r[5] else None,
            )
            for r in rows
        ]

    def add_metrics(
        self, job_id: str, attempt: int, points: list[tuple[int, int | None, float, str, float]]
    ) -> None:
        if not points:
            return
        with self._write() as db:
            db.executemany(
                "INSERT INTO metrics (job_id, attempt, rank, step, t, name, value)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(job_id, attempt, *p) for p in points],
            )

    def metrics_after(
        self, job_id: str, after: int, limit: int = 10_000
    ) -> list[tuple[int, int, int, int | None, float, str, float | None]]:
        return self._read(
            "SELECT rowid, attempt, rank, step, t, name, value FROM metrics"
            " WHERE rowid > ? AND job_id = ? ORDER BY rowid LIMIT ?",
            (after, job_id, limit),
        )

    def metric_series(
        self, job_id: str, name: str, max_points: int = 2000
    ) -> list[tuple[float, int | None, float | None]]:
        count, first, last = self._read(
            "SELECT COUNT(*), MIN(t), MAX(t) FROM metrics WHERE job_id = ? AND name = ?",
            (job_id, name),
        )[0]
        if not count:
            return []
        if count <= max_points or last == first:
            rows = self._read(
                "SELECT t, step, value FROM metrics WHERE job_id = ? AND name = ? ORDER BY t",
                (job_id, name),
            )
        else:  # one averaged point per time bucket
            width = (last - first) / max_points
            rows = self._read(
                "SELECT AVG(t), MAX(step), AVG(value) FROM metrics WHERE job_id = ? AND name = ?"
                " GROUP BY CAST((t - ?) / ? AS INTEGER) ORDER BY 1",
                (job_id, name, first, width),
            )
        return [(float(t), step, value) for t, step, value in rows]

    def step_progress(self, job_id: str) -> tuple[int, float, int, float] | None:
        row = self._read(
            "SELECT MIN(step), MIN(t), MAX(step), MAX(t) FROM metrics"
            " WHERE job_id = ? AND step IS NOT NULL",
            (job_id,),
        )[0]
        return None if row[0] is None else (int(row[0]), float(row[1]), int(row[2]), float(row[3]))

    def metric_summaries(self, job_id: str) -> list[MetricSummary]:
        # NaN is stored as NULL by SQLite: counted, but never a minimum or maximum
        rows = self._read(
            "SELECT name, COUNT(*), MIN(value), MAX(value), MAX(t) FROM metrics"
            " WHERE job_id = ? GROUP BY name ORDER BY name",
            (job_id,),
        )
        summaries = []
        for name, count, low, high, last_t in rows:
            last = self._read(
                "SELECT value, step FROM metrics WHERE job_id = ? AND name = ? AND t = ?"
                " ORDER BY rowid DESC LIMIT 1",
                (job_id, name, last_t),
            )[0]
            summaries.append(MetricSummary(name, count, last[0], last[1], last_t, low, high))
        return summaries

    def close(self) -> None:
        self.release()

    def __del__(self) -> None:
        # A connection sits in a reference cycle with its statement cache, so without this
        # it would stay open (and be inherited by a fork) until the garbage collector runs.
        try:  # interpreter shutdown may have torn sqlite3 (and contextlib) down
            self.release()
        except Exception:
            return
