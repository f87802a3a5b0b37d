"""Constants in one place, each with the reason for its value."""

from __future__ import annotations

# Where Ferry keeps its store, job folders and config unless FERRY_HOME says otherwise.
HOME_DIRNAME = ".ferry"

# The supervisor refreshes its heartbeat this often (seconds) ...
HEARTBEAT_INTERVAL = 2.0
# ... and is presumed lost when the heartbeat is older than interval + grace and its
# process cannot be found (rq's rule: TTL = interval + grace).
HEARTBEAT_GRACE = 10.0

# How long a job gets between SIGTERM and SIGKILL when it is stopped (cancel, max_runtime).
STOP_GRACE = 30.0  # as a GCP spot VM gives; SageMaker gives 120 s

# A cloud attempt told to stop gets this long after its grace to send its last checkpoints
# and outputs, before the provider's job is cancelled (by the controller; for a gang of
# several machines, node 0 gives up on a node then too).
CLOUD_UPLOAD_ALLOWANCE = 300.0

# A code snapshot larger than this is refused (config: snapshot.max_size).
MAX_SNAPSHOT_BYTES = 200 * 1000**2

# The CLI polls the attempt log this often while following it (seconds): small enough that
# `ferry run` adds little latency, large enough to cost nothing measurable.
FOLLOW_POLL = 0.01

# A supervisor looks at the store for a cancel request at least this often (seconds);
# `ferry cancel` also wakes it at once with SIGUSR1.
CONTROL_POLL = 0.5

# Lines of the log kept in a failed attempt's reason.
REASON_LOG_LINES = 5

# SQLite waits this long for a lock before giving up (milliseconds). Many concurrent
# `ferry` processes each hold the write lock for well under a millisecond.
SQLITE_BUSY_TIMEOUT_MS = 30_000

# CPUs a job asks for when its spec says nothing: one core keeps a laptop responsive and
# makes the local queue behave like `xargs -P <cores>`.
DEFAULT_CPUS = 1.0

# A job whose id was claimed at submit but whose supervisor never registered is lost
# after this many seconds (the submitting process died between the two steps).
START_TIMEOUT = 60.0

# Admission looks at this many of the oldest queued jobs per pass: enough to fill any
# machine, and it keeps each pass cheap when thousands of jobs wait.
ADMISSION_WINDOW = 64

# A supervisor looks at the month's spending this often (seconds) when the monthly budget is
# hard: one query over the month's attempts, cheap at this pace.
BUDGET_POLL = 10.0

# An offering a backend reported without capacity or quota is passed over this long (seconds):
# long enough not to hammer a full zone, short enough to try again within the hour.
BLOCK_FOR = 30 * 60.0

# Buckets: how long a store may take before Ferry calls it unreachable. A connection must
# open within STORAGE_CONNECT_TIMEOUT seconds; a request that failed for a reason that may
# pass is tried again only while the next try starts within STORAGE_RETRY_WINDOW seconds of
# the first (S3 and Azure count attempts instead, to the same effect). Together: a failure
# is known within about 15 s, not the minutes of the libraries' own defaults. A read may
# stall for STORAGE_READ_TIMEOUT seconds (large objects in flight).
STORAGE_CONNECT_TIMEOUT = 4.0
STORAGE_RETRY_WINDOW = 8.0
STORAGE_READ_TIMEOUT = 30.0
STORAGE_S3_ATTEMPTS = 3  # botocore attempts in all (the first and two retries)
STORAGE_AZURE_RETRIES = 2  # Azure SDK retries after the first attempt

# A supervisor whose job ended, with none queued, waits this long for the next one handed
# over (ferry.handoff): long enough for a script or a sweep submitting one job after
# another, short enough that no process is left waiting after the last one.
SUPERVISOR_LINGER = 2.0
