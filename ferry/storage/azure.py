"""Azure Blob Storage as Ferry drives it: adlfs, with a bounded time to fail.

adlfs builds its client with the Azure SDK's default retries: three more tries after waits
of about 15, 18 and 24 s, so an unreachable account took a minute to report. Here the same
client (same account URL and credential) is built again with waits of about 2 s and
Ferry's connect and read timeouts.
"""

from __future__ import annotations

from typing import Any

import adlfs
from azure.storage.blob.aio import ExponentialRetry

from ferry import defaults


class AzureBlob(adlfs.AzureBlobFileSystem):  # type: ignore[misc]
    """adlfs with Ferry's timeouts and retries."""

    service_client: Any  # adlfs's BlobServiceClient (azure.storage.blob.aio)

    def do_connect(self) -> None:
        super().do_connect()
        built = self.service_client  # unused yet: it holds no connection to close
        self.service_client = type(built)(
            built.url,
            credential=built.credential,
            retry_policy=ExponentialRetry(
                initial_backoff=1,
                increment_base=1,  # each wait 1 + 1**n = 2 s, give or take 1 s
                retry_total=defaults.STORAGE_AZURE_RETRIES,
                random_jitter_range=1,
            ),
            connection_timeout=defaults.STORAGE_CONNECT_TIMEOUT,
            read_timeout=defaults.STORAGE_READ_TIMEOUT,
        )
