"""Versioned schema of the SQLite store. Append a migration; never edit a released one.

The schema version is SQLite's ``user_version``; a store written by a newer Ferry (higher
version than this list knows) is refused rather than misread.
"""

from __future__ import annotations

MIGRATIONS: list[str] = [
    # 1: jobs, attempts, events
    """
    CREATE TABLE jobs (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL,
        status TEXT NOT NULL,
        backend TEXT NOT NULL,
        spec TEXT NOT NULL,
        job_dir TEXT NOT NULL,
        outputs TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        started_at REAL,
        ended_at REAL,
        exit_code INTEGER,
        reason TEXT,
        allocation TEXT,
        supervisor_pid INTEGER,
        supervisor_host TEXT,
        supervisor_started REAL,
        heartbeat_at REAL
    );
    CREATE INDEX jobs_status ON jobs (status, seq);
    CREATE TABLE attempts (
        job_id TEXT NOT NULL REFERENCES jobs (id),
        number INTEGER NOT NULL,
        status TEXT NOT NULL,
        backend TEXT NOT NULL,
        host TEXT NOT NULL,
        log_path TEXT NOT NULL,
        started_at REAL NOT NULL,
        handle TEXT,
        ended_at REAL,
        exit_code INTEGER,
        reason TEXT,
        cost REAL NOT NULL DEFAULT 0,
        PRIMARY KEY (job_id, number)
    );
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id TEXT NOT NULL REFERENCES jobs (id),
        at REAL NOT NULL,
        kind TEXT NOT NULL,
        old_status TEXT,
        new_status TEXT,
        message TEXT NOT NULL
    );
    CREATE INDEX events_job ON events (job_id, id);
    """,
    # 2: metrics reported by jobs (one row a value; ~40 bytes each, a million fine)
    """
    CREATE TABLE metrics (
        job_id TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        rank INTEGER NOT NULL,
        step INTEGER,
        t REAL NOT NULL,
        name TEXT NOT NULL,
        value REAL
    );
    CREATE INDEX metrics_job_name ON metrics (job_id, name, t);
    """,
    # 3: what each attempt ran on and its price (USD per hour, recorded at launch), for
    # budgets and cost reports by time
    """
    ALTER TABLE attempts ADD COLUMN price REAL NOT NULL DEFAULT 0;
    ALTER TABLE attempts ADD COLUMN offering TEXT;
    CREATE INDEX attempts_started ON attempts (started_at);
    """,
    # 4: what a job's attempts used of its retries, kept with the job, so that whichever
    # process decides next (a new supervisor after a lost one) counts on from there. For
    # jobs stored before, the preemptions are counted as they are from now on: each
    # preempted attempt, and each resume after a lost supervisor (its event); an attempt
    # left LOST by a stopped supervisor counts when its job is resumed, not before. (The
    # statements are split at each semicolon: "_" stands for the one in the event's text.)
    """
    ALTER TABLE jobs ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN code_retries INTEGER NOT NULL DEFAULT 0;
    UPDATE jobs SET preemptions = (
        SELECT COUNT(*) FROM attempts
        WHERE attempts.job_id = jobs.id AND attempts.status = 'PREEMPTED'
    ) + (
        SELECT COUNT(*) FROM events
        WHERE events.job_id = jobs.id
        AND events.message LIKE 'supervisor lost_ resuming in a new attempt%'
    );
    """,
    # 5: an attempt's cost as its provider billed it (SageMaker's billable seconds), which
    # stands as it is rather than as the price over the time it ran
    """
    ALTER TABLE attempts ADD COLUMN billed INTEGER NOT NULL DEFAULT 0;
    """,
]

SCHEMA_VERSION = len(MIGRATIONS)
