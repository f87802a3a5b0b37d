"""Real storage servers for the storage tests, started once per test session (per xdist
worker): S3 and GCS (tests/conftest.py) and Azure Blob through Azurite, all over HTTP on
127.0.0.1."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

AZURITE = Path(__file__).parents[2] / ".venv" / "node" / "node_modules" / ".bin" / "azurite-blob"
# Azurite's well-known development account (published in its documentation; not a secret)
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


@pytest.fixture(scope="session")
def azure_connection(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import socket
    import subprocess
    import time

    assert AZURITE.exists(), (
        f"Azurite is not installed at {AZURITE}: run `make test`, which installs it"
    )
    with socket.socket() as probe:  # a free port for it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data = tmp_path_factory.mktemp("azurite")
    server = subprocess.Popen(
        [
            str(AZURITE),
            "--silent",
            "--location",
            str(data),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--skipApiVersionCheck",
            "--loose",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:  # wait until it accepts connections
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, "Azurite did not start"
            time.sleep(0.1)
    yield (
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        f"AccountKey={AZURITE_KEY};BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
    )
    server.terminate()
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:  # it may linger over open connections: no need to wait
        server.kill()
        server.wait(10)


@pytest.fixture
def stores(
    home: Path,
    s3_endpoint: str,
    gcs_endpoint: str,
    azure_connection: str,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, object]:
    """The three servers wired into this test's FERRY_HOME and environment (which the `ferry`
    commands and supervisors inherit); returns fsspec filesystems to set data up with."""
    from tests.conftest import ferry

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_endpoint)
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azure_connection)
    assert ferry("config", "set", "storage.s3.endpoint_url", s3_endpoint).returncode == 0
    import adlfs
    import gcsfs  # after the variables above: gcsfs reads them when imported
    import s3fs

    s3 = s3fs.S3FileSystem(
        endpoint_url=s3_endpoint, key="testing", secret="testing", skip_instance_cache=True
    )
    gs = gcsfs.GCSFileSystem(token="anon", project="test", skip_instance_cache=True)
    az = adlfs.AzureBlobFileSystem(connection_string=azure_connection, skip_instance_cache=True)
    # a bucket of its own for each test
    bucket = f"t{os.urandom(4).hex()}"
    s3.mkdir(bucket)
    gs.mkdir(bucket)
    az.mkdir(bucket)
    return {"s3": s3, "gs": gs, "az": az, "bucket": bucket}
