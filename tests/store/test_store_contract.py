"""The contract every job store keeps (run against each store; SQLite today), plus the
SQLite store's own promises: WAL, private files, versioned schema, many writers."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.errors import JobNotFound, StoreError, TransitionError
from ferry.status import ACTIVE, AttemptStatus, JobStatus
from ferry.store import Allocation, Store
from ferry.store.base import IdTaken
from ferry.store.sqlite import SQLiteStore

S = JobStatus


def make_store(kind: str, path: Path) -> Store:
    if kind == "sqlite":
        return SQLiteStore(path / "ferry.db")
    raise AssertionError(kind)


@pytest.fixture(params=["sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = make_store(request.param, tmp_path)
    yield s
    s.close()


def new_job(store: Store, job_id: str = "train-0001", **spec: object) -> str:
    store.create_job(
        job_id=job_id,
        name=job_id.rsplit("-", 1)[0],
        backend="local",
        spec={"command": ["python", "train.py"], **spec},
        job_dir=f"/jobs/{job_id}",
        outputs=f"/out/{job_id}",
    )
    return job_id


class TestStoreContract:
    def test_create_and_read_back(self, store: Store) -> None:
        new_job(store, "train-0001", hyperparameters={"lr": 0.1})
        job = store.get_job("train-0001")
        assert job.status is S.QUEUED
        assert job.name == "train"
        assert job.spec["hyperparameters"] == {"lr": 0.1}
        assert job.outputs == "/out/train-0001"
        assert [e.new_status for e in store.events(job.id)] == [S.QUEUED]

    def test_ids_are_unique(self, store: Store) -> None:
        new_job(store, "train-0001")
        with pytest.raises(IdTaken):
            new_job(store, "train-0001")

    def test_unknown_job(self, store: Store) -> None:
        with pytest.raises(JobNotFound):
            store.get_job("nope")

    def test_prefix_lookup_prefers_exact_match(self, store: Store) -> None:
        for job_id in ("train-0001", "train-0002", "train-0001x"):
            new_job(store, job_id)
        assert [j.id for j in store.find_jobs("train-0001")] == ["train-0001"]
        assert sorted(j.id for j in store.find_jobs("train-")) == [
            "train-0001",
            "train-0001x",
            "train-0002",
        ]
        assert store.find_jobs("zzz") == []
        assert store.find_jobs("train_") == []  # LIKE wildcards are taken literally
        assert store.find_jobs("%") == []

    def test_list_newest_first_and_by_status(self, store: Store) -> None:
        for i in range(3):
            new_job(store, f"job-{i}")
        store.transition("job-1", S.CANCELLED, expected={S.QUEUED})
        assert [j.id for j in store.list_jobs()] == ["job-2", "job-1", "job-0"]
        assert [j.id for j in store.list_jobs([S.CANCELLED])] == ["job-1"]
        assert len(store.list_jobs(limit=2)) == 2

    def test_guarded_transition(self, store: Store) -> None:
        job_id = new_job(store)
        with pytest.raises(TransitionError):
            store.transition(job_id, S.SUCCEEDED, expected={S.RUNNING})
        assert store.get_job(job_id).status is S.QUEUED
        job = store.transition(
            job_id, S.CANCELLED, expected={S.QUEUED}, reason="by hand", ended_at=5.0
        )
        assert job.status is S.CANCELLED and job.reason == "by hand" and job.ended_at == 5.0
        last = store.events(job_id)[-1]
        assert (last.old_status, last.new_status, last.message) == (
            S.QUEUED,
            S.CANCELLED,
            "by hand",
        )

    def test_retry_counters_change_with_the_transition_and_only_with_it(self, store: Store) -> None:
        job_id = new_job(store)
        assert store.get_job(job_id).preemptions == 0
        store.transition(job_id, S.STARTING, expected={S.QUEUED})
        store.transition(job_id, S.RUNNING, expected={S.STARTING})
        job = store.transition(job_id, S.RECOVERING, expected={S.RUNNING}, preemptions=1)
        assert (job.preemptions, job.retries, job.code_retries) == (1, 0, 0)
        with pytest.raises(TransitionError):  # a second claim of the same move changes nothing
            store.transition(job_id, S.RECOVERING, expected={S.RUNNING}, preemptions=2)
        store.transition(job_id, S.RUNNING, expected={S.RECOVERING})
        job = store.transition(job_id, S.RECOVERING, expected={S.RUNNING}, retries=1)
        job = store.transition(job_id, S.RUNNING, expected={S.RECOVERING})
        job = store.transition(job_id, S.RECOVERING, expected={S.RUNNING}, code_retries=1)
        assert (job.preemptions, job.retries, job.code_retries) == (1, 1, 1)
        assert store.get_job(job_id) == job

    def test_moves_outside_the_transition_table_are_refused(self, store: Store) -> None:
        job_id = new_job(store)
        with pytest.raises(TransitionError, match="never moves from QUEUED to RUNNING"):
            store.transition(job_id, S.RUNNING, expected={S.QUEUED})
        assert store.get_job(job_id).status is S.QUEUED
        assert [e.new_status for e in store.events(job_id)] == [S.QUEUED]
        # a wide `expected` is narrowed to the table: a finished job stays finished
        store.transition(job_id, S.FAILED, expected={S.QUEUED})
        with pytest.raises(TransitionError):
            store.transition(job_id, S.FAILED, expected={S.FAILED, S.QUEUED})
        assert store.get_job(job_id).status is S.FAILED

    def test_admit_moves_only_chosen_jobs_with_their_allocation(self, store: Store) -> None:
        for i in range(3):
            new_job(store, f"job-{i}")
        seen: list[list[str]] = []

        def decide(queued, active):  # type: ignore[no-untyped-def]
            seen.append([j.id for j in queued])
            return [(queued[0].id, Allocation(2.0, 1024, (0, 1)))]

        admitted = store.admit(decide, "local")
        assert seen == [["job-0", "job-1", "job-2"]]  # oldest first
        assert [j.id for j in admitted] == ["job-0"]
        job = store.get_job("job-0")
        assert job.status is S.STARTING
        assert job.allocation == Allocation(2.0, 1024, (0, 1))
        active_seen: list[list[str]] = []
        store.admit(lambda q, a: active_seen.append([j.id for j in a]) or [], "local")
        assert active_seen == [["job-0"]]

    def test_attempts_are_numbered(self, store: Store) -> None:
        job_id = new_job(store)
        first = store.add_attempt(job_id, backend="local", host="h", log_dir="/logs")
        second = store.add_attempt(job_id, backend="local", host="h", log_dir="/logs")
        assert (first.number, second.number) == (1, 2)
        assert second.log_path == "/logs/attempt-2.log"
        done = store.update_attempt(
            job_id, 1, status=AttemptStatus.FAILED, exit_code=3, reason="exit code 3"
        )
        assert (done.status, done.exit_code) == (AttemptStatus.FAILED, 3)
        assert [a.number for a in store.attempts(job_id)] == [1, 2]

    def test_spending_is_each_attempts_price_over_its_time_within_the_window(
        self, store: Store
    ) -> None:
        job_id = new_job(store, resources={"accelerator": "A100:1"})
        first = store.add_attempt(
            job_id, backend="local", host="h", log_dir="/l", price=10.0, offering="gcp x"
        )
        start = first.started_at
        store.update_attempt(job_id, 1, ended_at=start + 7200)  # two hours: 20 USD
        assert store.attempts(job_id)[0].cost_at(start + 1e6) == pytest.approx(20.0)
        whole = store.spending(start - 1, start + 7200)
        assert [(s.job_id, s.attempt, s.accelerator, s.offering) for s in whole] == [
            (job_id, 1, "A100:1", "gcp x")
        ]
        assert whole[0].cost == pytest.approx(20.0)
        # a window over its second hour (a month that began meanwhile) gets half
        assert store.spending(start + 3600, start + 7200)[0].cost == pytest.approx(10.0)
        assert store.spending(start + 7200, start + 9000) == []  # it had ended
        running = store.add_attempt(job_id, backend="local", host="h", log_dir="/l", price=3600.0)
        now_cost = [s.cost for s in store.spending(start - 1) if s.attempt == running.number]
        assert now_cost and 0 <= now_cost[0] < 60  # a running attempt, up to now

    def test_a_beat_reaches_only_the_jobs_the_supervisor_still_has(self, store: Store) -> None:
        mine, moved = new_job(store, "a-0001"), new_job(store, "b-0001")
        elsewhere = new_job(store, "c-0001")
        store.update_job(mine, supervisor_pid=41, supervisor_host="here")
        # claimed by another supervisor meanwhile; one of the same pid on another host
        store.update_job(moved, supervisor_pid=42, supervisor_host="here")
        store.update_job(elsewhere, supervisor_pid=41, supervisor_host="there")
        store.beat([mine, moved, elsewhere], 41, "here", 1234.5)
        assert store.get_job(mine).heartbeat_at == 1234.5
        assert store.get_job(moved).heartbeat_at != 1234.5
        assert store.get_job(elsewhere).heartbeat_at != 1234.5
        store.beat([], 41, "here", 1.0)  # (nothing to do)

    def test_notes(self, store: Store) -> None:
        job_id = new_job(store)
        store.add_event(job_id, "hello")
        assert store.events(job_id)[-1].kind == "note"
        assert store.events(job_id)[-1].message == "hello"


def _race(path: str, job_ids: list[str], wins: multiprocessing.Queue[str]) -> None:
    store = SQLiteStore(path)
    for job_id in job_ids:
        with contextlib.suppress(TransitionError):  # another process moved it first
            store.transition(job_id, S.STARTING, expected={S.QUEUED})
            wins.put(job_id)


def test_concurrent_guarded_transitions_have_one_winner(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "ferry.db")
    ids = [new_job(store, f"job-{i:03d}") for i in range(60)]
    ctx = multiprocessing.get_context("spawn")
    wins: multiprocessing.Queue[str] = ctx.Queue()
    procs = [
        ctx.Process(target=_race, args=(str(tmp_path / "ferry.db"), ids, wins)) for _ in range(6)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    won = [wins.get(timeout=5) for _ in range(60)]
    assert sorted(won) == ids  # every job moved exactly once
    assert all(store.get_job(i).status is S.STARTING for i in ids)


def test_threads_sharing_a_store_each_get_whole_transactions(tmp_path: Path) -> None:
    """A watcher's threads share one store (one connection): their transactions never
    interleave, and each guarded transition has one winner."""
    import threading

    store = SQLiteStore(tmp_path / "ferry.db")
    ids = [new_job(store, f"job-{i:03d}") for i in range(40)]
    wins: list[str] = []
    failures: list[BaseException] = []

    def race() -> None:
        try:
            for job_id in ids:
                with contextlib.suppress(TransitionError):
                    store.transition(job_id, S.STARTING, expected={S.QUEUED})
                    wins.append(job_id)
                store.add_event(job_id, "looked")
        except BaseException as exc:  # (e.g. "cannot start a transaction within a transaction")
            failures.append(exc)

    threads = [threading.Thread(target=race) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures
    assert sorted(wins) == ids
    assert all(len([e for e in store.events(i) if e.kind == "note"]) == 6 for i in ids)


def test_store_is_wal_and_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRY_HOME", str(tmp_path / "home"))
    from ferry.store import open_store

    open_store()
    assert oct((tmp_path / "home").stat().st_mode & 0o777) == "0o700"
    assert oct((tmp_path / "home" / "ferry.db").stat().st_mode & 0o777) == "0o600"
    mode = (
        sqlite3.connect(tmp_path / "home" / "ferry.db").execute("PRAGMA journal_mode").fetchone()[0]
    )
    assert mode == "wal"


def test_store_written_by_newer_ferry_is_refused(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "ferry.db").close()
    db = sqlite3.connect(tmp_path / "ferry.db")
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(StoreError, match="newer Ferry"):
        SQLiteStore(tmp_path / "ferry.db")


def test_migrations_are_applied_once(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "ferry.db").close()
    store = SQLiteStore(tmp_path / "ferry.db")  # a second open must not re-run migrations
    new_job(store)
    assert store.get_job("train-0001").status is S.QUEUED


def test_a_store_from_before_the_retry_counters_counts_its_preempted_attempts(
    tmp_path: Path,
) -> None:
    from ferry.store.migrations import MIGRATIONS

    db = sqlite3.connect(tmp_path / "ferry.db")  # the schema as Ferry wrote it before
    for script in MIGRATIONS[:3]:
        db.executescript(script)
    db.execute("PRAGMA user_version = 3")
    row = "(?, 'train', 'RECOVERING', 'local', '{}', '/j', '/o', 1, 1)"
    db.execute(
        "INSERT INTO jobs (id, name, status, backend, spec, job_dir, outputs, created_at,"
        f" updated_at) VALUES {row}, {row.replace('RECOVERING', 'QUEUED')}",
        ("a-1", "b-1"),
    )
    # a-1: preempted once, then its supervisor was lost (and the job resumed), then its
    # next supervisor was stopped by a reboot: that LOST attempt counts when the job is
    # resumed, as it would have before
    attempts = ["PREEMPTED", "LOST", "FAILED", "LOST"]
    for number, status in enumerate(attempts, 1):
        db.execute(
            "INSERT INTO attempts (job_id, number, status, backend, host, log_path, started_at)"
            " VALUES ('a-1', ?, ?, 'local', 'h', '/l', 1)",
            (number, status),
        )
    for message in ("submitted", "supervisor lost; resuming in a new attempt (2 of 20)"):
        db.execute(
            "INSERT INTO events (job_id, at, kind, message) VALUES ('a-1', 1, 'note', ?)",
            (message,),
        )
    db.commit()
    db.close()
    store = SQLiteStore(tmp_path / "ferry.db")
    assert store.get_job("a-1").preemptions == 2 and store.get_job("a-1").retries == 0
    assert store.get_job("b-1").preemptions == 0


def test_kill_9_in_the_middle_of_writes_never_corrupts(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    from tests.conftest import wait_for

    path = tmp_path / "ferry.db"
    SQLiteStore(path).close()
    writer = (
        (
            "import sys\nfrom ferry.store.sqlite import SQLiteStore\n"
            "s = SQLiteStore(sys.argv[1])\n"
            "i = 0\n"
            "while True:\n"
            "    s.create_job(job_id=f'j-{i}', name='j', backend='local', spec={'command': ['x']},"
            " job_dir='/d', outputs='/o')\n"
            "    s.transition(f'j-{i}', S, expected={Q})\n"
            "    i += 1\n"
        )
        .replace("S,", "JobStatus.CANCELLED,")
        .replace("{Q}", "{JobStatus.QUEUED}")
    )
    writer = "from ferry.status import JobStatus\n" + writer
    reader = SQLiteStore(path)
    for round_ in range(1, 6):
        proc = subprocess.Popen(
            [sys.executable, "-c", writer.replace("j-{i}", f"j{round_}-{{i}}"), str(path)]
        )
        # kill it mid-stream, once it has written a few dozen jobs
        target = 30 * round_
        wait_for(lambda: len(reader.list_jobs()) >= target, 30, "the writer to write")  # noqa: B023
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = SQLiteStore(path)
    jobs = store.list_jobs()
    assert jobs, "the writer wrote nothing"
    # each job is whole: created with its event, then cancelled with its event, or (the
    # last of a killed writer) only created
    for job in jobs:
        expected = [S.QUEUED, S.CANCELLED] if job.status is S.CANCELLED else [S.QUEUED]
        assert [e.new_status for e in store.events(job.id)] == expected
    assert sum(job.status is S.QUEUED for job in jobs) <= 5


def test_active_states_cover_everything_between_admission_and_end() -> None:
    assert {s for s in S if not s.is_terminal() and s is not S.QUEUED} == set(ACTIVE)


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB tmpfs (tests run as root in CI; elsewhere this test cannot run)."""
    import subprocess

    mount = tmp_path / "tiny"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True
    )
    assert made.returncode == 0, f"cannot mount a tmpfs here: {made.stderr!r}"
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_gives_a_clear_error_and_loses_nothing(
    tiny_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.conftest import assert_one_line_error, ferry, ferry_json

    home = tiny_disk / "home"
    monkeypatch.setenv("FERRY_HOME", str(home))
    project = tiny_disk / "project"
    project.mkdir()
    for i in range(3):
        assert ferry("run", "--name", f"before{i}", "--", "true", cwd=project).returncode == 0
    filler = tiny_disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)  # fill the disk to the last byte
    for chunk in (65536, 1):
        with contextlib.suppress(OSError):  # until the disk is full
            while True:
                os.write(fd, b"\0" * chunk)
    os.close(fd)
    result = ferry("run", "--name", "after", "--", "true", cwd=project)
    line = assert_one_line_error(result, 1)
    assert "full" in line or "No space left" in line, line
    filler.unlink()
    jobs = ferry_json("jobs")
    assert sorted(j["name"] for j in jobs if j["status"] == "SUCCEEDED") == [
        "before0",
        "before1",
        "before2",
    ]
    db = sqlite3.connect(home / "ferry.db")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert ferry("run", "--name", "again", "--", "true", cwd=project).returncode == 0


def test_the_typed_view_of_a_stored_spec_reads_what_the_spec_says_and_its_defaults() -> None:
    from ferry.spec import JobSpec
    from ferry.store.plan import Plan

    stored = JobSpec.model_validate(
        {
            "command": ["python", "t.py"],
            "resources": {"accelerator": "T4:2", "cpus": 3, "nodes": 2},
            "limits": {"max_runtime": "1h", "stop_grace": "5s"},
            "checkpoint": {"paths": ["a.txt"], "keep": 5},
            "secrets": ["TOKEN"],
            "simulate": {"preempt_every": "2m"},
        }
    ).to_json()
    plan = Plan.of(stored)
    assert plan.resources.accelerator == "T4:2" and plan.resources.nodes == 2
    assert plan.resources.cpus == 3.0 and plan.resources.memory is None
    assert (plan.limits.max_runtime, plan.limits.stop_grace) == (3600.0, 5.0)
    assert plan.limits.max_cost is None
    assert plan.checkpoint.paths == ("a.txt",) and plan.checkpoint.keep == 5
    assert plan.secrets == ("TOKEN",) and plan.preempt_every == 120.0
    assert plan.contract == "ferry" and plan.tracking.tensorboard  # defaults, as stored
    assert Plan.of({}) == Plan()  # an old record without a section reads as the defaults
