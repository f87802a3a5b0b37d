"""Cloud Storage FUSE on a Vertex AI double's VM, simulated: ``/gcs/<bucket>/<key>``.

What it simulates: Vertex AI mounts the buckets a job can reach under ``/gcs/`` with Cloud
Storage FUSE, so that a script may read and write ``/gcs/BUCKET/...`` in place of
``gs://BUCKET/...`` (https://cloud.google.com/vertex-ai/docs/training/cloud-storage-file-system).
Here each bucket the job's request names is copied into the VM's ``gcs`` folder before its
command starts (the VM sees that folder as ``/gcs``), and the files the command wrote there,
new or changed, are copied back to the bucket emulator when it ends. Not simulated: a
write reaching the bucket while the command runs, a deletion, and the objects under
Ferry's own ``.ferry/`` prefix (the bundles and run folders, which no script reads).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

_BUCKET = re.compile(r"gs://([a-z0-9][a-z0-9._-]{1,61}[a-z0-9])")
_FERRYS_OWN = ".ferry/"


def buckets_named(body: dict[str, Any]) -> list[str]:
    """The buckets a request names anywhere (its output directory, packages, args, env)."""
    return sorted(set(_BUCKET.findall(json.dumps(body))))


class GcsMount:
    """One VM's ``/gcs``: ``folder``, holding a copy of each of ``buckets``."""

    def __init__(self, folder: Path, buckets: list[str]) -> None:
        import gcsfs

        self.folder = folder
        self.buckets = buckets
        self.fs = gcsfs.GCSFileSystem(token="anon", skip_instance_cache=True)
        self._before: dict[Path, tuple[int, int]] = {}

    def fill(self) -> None:
        """Copy the buckets in, as the mount shows them when the command starts."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for bucket in self.buckets:
            (self.folder / bucket).mkdir(exist_ok=True)
            for key in self.fs.find(bucket):
                relative = key[len(bucket) + 1 :]
                if not relative or relative.startswith(_FERRYS_OWN) or relative.endswith("/"):
                    continue
                target = self.folder / bucket / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                self.fs.get_file(key, str(target))
        self._before = self._files()

    def send_back(self) -> int:
        """Copy what the command wrote under ``/gcs`` to the buckets; returns the number of
        files sent."""
        sent = 0
        for path, seen in self._files().items():
            if self._before.get(path) == seen:
                continue
            self.fs.put_file(str(path), path.relative_to(self.folder).as_posix())
            sent += 1
        return sent

    def _files(self) -> dict[Path, tuple[int, int]]:
        found = {}
        for path in self.folder.rglob("*"):
            if path.is_file() and not path.is_symlink():
                st = path.stat()
                found[path] = (st.st_size, st.st_mtime_ns)
        return found
