"""Real storage servers for the storage tests, started once per test session (per xdist
worker): S3 through moto's server mode and GCS through gcp-storage-emulator, over HTTP."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def gcs_endpoint() -> Iterator[str]:
    from gcp_storage_emulator.server import create_server

    logging.getLogger("gcp_storage_emulator").setLevel(logging.ERROR)
    server = create_server("127.0.0.1", 0, in_memory=True)
    server.start()
    port = server._api._httpd.server_address[1]
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def stores(
    home: Path, s3_endpoint: str, gcs_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, object]:
    """Both servers wired into this test's FERRY_HOME and environment (which the `ferry`
    commands and supervisors inherit); returns fsspec filesystems to set data up with."""
    from tests.conftest import ferry

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_endpoint)
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    assert ferry("config", "set", "storage.s3.endpoint_url", s3_endpoint).returncode == 0
    import gcsfs  # after the variables above: gcsfs reads them when imported
    import s3fs

    s3 = s3fs.S3FileSystem(
        endpoint_url=s3_endpoint, key="testing", secret="testing", skip_instance_cache=True
    )
    gs = gcsfs.GCSFileSystem(token="anon", project="test", skip_instance_cache=True)
    # a bucket of its own for each test
    bucket = f"t{os.urandom(4).hex()}"
    s3.mkdir(bucket)
    gs.mkdir(bucket)
    return {"s3": s3, "gs": gs, "bucket": bucket}
