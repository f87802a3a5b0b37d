"""The run folder as a prefix in a bucket (S3 through moto, GCS through its emulator, Azure
through Azurite): the same record as on a disk, read back while it grows."""

from __future__ import annotations

import json

import pytest

from ferry.runner.record import ENDED, RunFolderReader, RunFolderWriter
from ferry.storage.failures import StorageError


@pytest.mark.parametrize("scheme", ["s3", "gs", "az"])
def test_a_run_folder_in_a_bucket_is_read_while_it_grows(
    stores: dict[str, object], scheme: str
) -> None:
    uri = f"{scheme}://{stores['bucket']}/runs/job-1/attempt-1"
    reader = RunFolderReader(uri)
    assert reader.state() is None and reader.read("log") == b""
    writer = RunFolderWriter(uri, attempt=1)
    writer.write("log", b"step 1\n")
    writer.beat()
    assert reader.read("log") == b"step 1\n"
    writer.write("log", b"step 2\n")
    writer.write("metrics", b'{"step": 2, "loss": 0.25}\n')
    writer.event("checkpoint synced", step=2)
    writer.end(0, "exited")
    state = reader.state()
    assert state is not None and state.state == ENDED and state.exit_code == 0
    assert reader.read("log") == b"step 2\n"
    assert json.loads(reader.read("metrics"))["loss"] == 0.25
    assert json.loads(reader.read("events"))["message"] == "checkpoint synced"
    assert reader.complete(state)
    again = RunFolderWriter(uri, attempt=1)  # a runner started again adds, never overwrites
    again.write("log", b"more\n")
    again.flush()
    assert reader.read("log") == b"more\n"


def test_a_run_folder_in_a_bucket_that_does_not_exist_is_one_sentence(
    stores: dict[str, object],
) -> None:
    with pytest.raises(StorageError) as info:
        RunFolderWriter("s3://no-such-bucket-here/runs/a", attempt=1)
    assert info.value.message.startswith("run folder: ")
    assert "no-such-bucket-here" in info.value.message
