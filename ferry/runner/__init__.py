"""What runs where the job runs, and how it reports back.

The runner stages a job's inputs, builds its contract environment, starts its process (or
gang), delivers the stop notice, reads its metrics and syncs its outputs, on whatever
machine the backend put it. It never touches the job store: everything it has to say goes
into the attempt's **run folder** (:mod:`ferry.runner.record`), a local folder or a prefix
in the job's bucket, which the controller reads whatever the backend.
"""
