"""Vertex AI's JobService as the vertex backend calls it: the official client
(``google-cloud-aiplatform``'s ``aiplatform_v1.JobServiceClient``, REST) for one region,
with its errors as FerryErrors in Vertex AI's own words and the fix where one is known."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from ferry import config
from ferry.backends.cloud_backend import ProviderError
from ferry.errors import FerryError, install_hint

RUN_LABEL = "ferry_run"  # the label that names one attempt's custom job (its run folder)


def project() -> str | None:
    """The Google Cloud project of Vertex AI jobs, when one is set."""
    given = config.get("vertex.project")
    return str(given) if given else (os.environ.get("GOOGLE_CLOUD_PROJECT") or None)


class VertexJobs:
    """The JobService of one region (or of ``vertex.endpoint``), with its errors as
    FerryErrors that carry Vertex AI's own words."""

    def __init__(self, region: str) -> None:
        require_sdk()
        from google.api_core.client_options import ClientOptions
        from google.cloud import aiplatform_v1

        endpoint = str(config.get("vertex.endpoint") or f"{region}-aiplatform.googleapis.com")
        credentials = None
        if endpoint.startswith("http://"):  # a test server here: nothing to authenticate to
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
        self.endpoint = endpoint
        try:
            self.client = aiplatform_v1.JobServiceClient(
                client_options=ClientOptions(api_endpoint=endpoint),
                transport="rest",
                credentials=credentials,
            )
        except Exception as exc:  # (google.auth: no credentials found)
            raise FerryError(
                f"Vertex AI cannot be reached: {exc}",
                "run: gcloud auth application-default login",
            ) from None

    @staticmethod
    def _retry() -> Any:
        """Retries for calls that may be repeated: the API's rate limit, a server error."""
        from google.api_core import exceptions, retry

        transient = retry.if_exception_type(
            exceptions.TooManyRequests,
            exceptions.ServiceUnavailable,
            exceptions.InternalServerError,
            exceptions.GatewayTimeout,
        )
        # (short: a poll must not hold up the process that follows; the next one asks again)
        return retry.Retry(predicate=transient, initial=1.0, maximum=4.0, timeout=10.0)

    def _call(self, what: str, call: Any) -> Any:
        from google.api_core import exceptions

        try:
            return call()
        except exceptions.GoogleAPICallError as exc:
            raise VertexError(what, exc) from None
        except Exception as exc:  # (credentials, transport, a retry that ran out)
            raise FerryError(
                f"Vertex AI: {what} failed: {exc}",
                "check the credentials (gcloud auth application-default login) and the network",
            ) from None

    def create(self, parent: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create the custom job ``body``. A call whose answer was lost (a timeout, a
        server error) may have made it: it is looked for by its ``ferry-run`` label before
        the error is raised, so no job runs unseen."""
        from google.api_core import exceptions

        from ferry.backends.vertex_request import validate

        job = validate(body)
        try:
            made = self.client.create_custom_job(parent=parent, custom_job=job, timeout=60)
        except exceptions.ClientError as exc:  # refused: nothing was made
            raise VertexError("creating the custom job", exc) from None
        except Exception as exc:  # no answer, or a server error: it may exist
            try:
                found = self.find(parent, str(body["labels"].get(RUN_LABEL, "")))
            except FerryError as again:
                raise FerryError(
                    f"Vertex AI: creating the custom job failed ({exc}), and whether it was "
                    f"made could not be seen ({again.message})",
                    "look for it in the console; Ferry told its runner to stop at once",
                ) from None
            if found is not None:
                return found
            raise FerryError(
                f"Vertex AI: creating the custom job failed: {exc}",
                "check the network, and try again",
            ) from None
        return _as_json(made)

    def find(self, parent: str, run: str) -> dict[str, Any] | None:
        """The custom job labelled ``ferry_run=run``, if there is one (asked three times,
        a few seconds apart: a create that finished late shows a little later). Raises
        FerryError when the list cannot be had."""
        if not run:
            return None
        from google.cloud.aiplatform_v1 import ListCustomJobsRequest

        asked = ListCustomJobsRequest(parent=parent, filter=f'labels.{RUN_LABEL}="{run}"')
        for attempt in range(3):
            if attempt:
                time.sleep(3.0)
            listed = self._call(
                "looking for the custom job",
                lambda: list(self.client.list_custom_jobs(request=asked, timeout=30)),
            )
            if listed:
                return _as_json(listed[0])
        return None

    def labelled(self, parent: str, key: str, value: str) -> list[dict[str, Any]]:
        """The custom jobs of ``parent`` whose label ``key`` is ``value``."""
        from google.cloud.aiplatform_v1 import ListCustomJobsRequest

        asked = ListCustomJobsRequest(parent=parent, filter=f'labels.{key}="{value}"')
        listed = self._call(
            "listing custom jobs",
            lambda: list(self.client.list_custom_jobs(request=asked, timeout=30)),
        )
        return [_as_json(j) for j in listed]

    def get(self, name: str) -> dict[str, Any]:
        got = self._call(
            "reading the custom job",
            lambda: self.client.get_custom_job(name=name, retry=self._retry(), timeout=30),
        )
        return _as_json(got)

    def cancel(self, name: str) -> None:
        from google.api_core import exceptions

        try:
            self.client.cancel_custom_job(name=name, retry=self._retry(), timeout=30)
        except exceptions.GoogleAPICallError as exc:
            if isinstance(exc, exceptions.FailedPrecondition) or status_of(exc) == (
                "FAILED_PRECONDITION"
            ):
                return  # it has ended already
            raise VertexError("cancelling the custom job", exc) from None
        except Exception as exc:  # (the network, credentials)
            raise FerryError(f"Vertex AI: cancelling the custom job failed: {exc}") from None


def status_of(exc: Any) -> str:
    """The ``google.rpc`` status an error carries (REST: in its JSON body), or ``""``."""
    code = getattr(exc, "grpc_status_code", None)
    if code is not None:
        return str(getattr(code, "name", code))
    with contextlib.suppress(Exception):
        return str(exc.response.json()["error"]["status"])
    return ""


def require_sdk() -> None:
    """Raise BackendNotInstalled when google-cloud-aiplatform is missing."""
    import importlib.util

    if importlib.util.find_spec("google.cloud.aiplatform_v1") is None:
        from ferry.errors import BackendNotInstalled

        raise BackendNotInstalled(
            "the vertex backend needs google-cloud-aiplatform, which is not installed",
            install_hint("vertex"),
        )


def _as_json(message: Any) -> dict[str, Any]:
    """A CustomJob as the REST API's JSON: field and enum names, defaults left out."""
    from google.cloud.aiplatform_v1 import CustomJob
    from google.protobuf.json_format import MessageToDict

    data: dict[str, Any] = MessageToDict(CustomJob.pb(message))
    return data


class VertexError(ProviderError):
    """Vertex AI refused a call; its message verbatim, with the fix when one is known."""

    def __init__(self, what: str, exc: Any) -> None:
        from google.api_core import exceptions

        # quota for machines (not the API's own rate limit, which a retry outlasts)
        exhausted = isinstance(
            exc, (exceptions.ResourceExhausted, exceptions.TooManyRequests)
        ) or status_of(exc) == ("RESOURCE_EXHAUSTED")
        words = str(exc.message).lower()
        self.quota = exhausted and ("exceed quota" in words or "custom_model_training" in words)
        hint = "see the message above"
        if isinstance(exc, (exceptions.PermissionDenied, exceptions.Forbidden)):
            hint = (
                "grant the role roles/aiplatform.user (and storage access to the bucket), "
                "or enable the API: gcloud services enable aiplatform.googleapis.com"
            )
        elif isinstance(exc, (exceptions.Unauthenticated, exceptions.Unauthorized)):
            hint = "run: gcloud auth application-default login"
        elif self.quota:
            hint = (
                "ask for more quota: https://console.cloud.google.com/iam-admin/quotas "
                "(service aiplatform.googleapis.com)"
            )
        elif isinstance(exc, exceptions.NotFound):
            hint = "check vertex.project and the region (ferry config list)"
        super().__init__(f"Vertex AI: {what} failed: {exc.message}", hint)
