"""Vertex AI requests checked against the REST API's own description of them: the
``aiplatform.v1`` discovery document that google-api-python-client ships
(``googleapiclient/discovery_cache/documents/aiplatform.v1.json``).

Strict proto-plus parsing (what :func:`ferry.backends.vertex_request.validate` does) finds
unknown fields, bad enum names and wrong types. The discovery document says more of what
the API takes, and :func:`problems` holds a body to it:

- every field is one the message has, and none is output only (``readOnly``);
- the fields whose description begins "Required." are there;
- enum values are listed and not deprecated (``enumDeprecated``);
- ``int64`` and ``int32`` values are whole numbers (the JSON mapping writes an int64 as a
  string), ``google-duration`` values are seconds (``"3600s"``), booleans are booleans;
- the method's path parameters match their ``pattern`` (:func:`parent_problem`).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

CREATE = "aiplatform.projects.locations.customJobs.create"
_DURATION = re.compile(r"^-?\d+(\.\d{1,9})?s$")
_WHOLE = re.compile(r"^-?\d+$")
_INT32 = 2**31


@functools.cache
def document() -> dict[str, Any]:
    """The discovery document, as google-api-python-client ships it."""
    import googleapiclient

    path = (
        Path(googleapiclient.__file__).parent
        / "discovery_cache"
        / "documents"
        / "aiplatform.v1.json"
    )
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def method(method_id: str = CREATE) -> dict[str, Any]:
    """The method ``method_id`` (``aiplatform.projects.locations.customJobs.create``)."""

    def walk(resources: dict[str, Any]) -> dict[str, Any] | None:
        for resource in resources.values():
            for found in resource.get("methods", {}).values():
                if found["id"] == method_id:
                    return dict(found)
            deeper = walk(resource.get("resources", {}))
            if deeper is not None:
                return deeper
        return None

    found = walk(document()["resources"])
    assert found is not None, f"the discovery document has no {method_id}"
    return found


def problems(body: Any, method_id: str = CREATE) -> list[str]:
    """What the API would refuse in ``body``, the request of ``method_id``: one line each,
    naming the field by its path (empty: nothing)."""
    out: list[str] = []
    _check(body, {"$ref": method(method_id)["request"]["$ref"]}, "", out)
    return out


def parent_problem(parent: str, method_id: str = CREATE) -> str | None:
    """Why ``parent`` is not a path parameter ``method_id`` takes (None: it is)."""
    pattern = method(method_id)["parameters"]["parent"]["pattern"]
    return None if re.match(pattern, parent) else f"parent {parent!r} does not match {pattern}"


def _check(value: Any, schema: dict[str, Any], path: str, out: list[str]) -> None:
    if "$ref" in schema:
        ref = schema["$ref"]
        schema = document()["schemas"][ref]
    where = path or "the body"
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            out.append(f"{where}: expected an object, not {value!r:.40}")
            return
        fields = schema.get("properties")
        if fields is None:  # a map (labels): every value of one schema
            for key, item in value.items():
                _check(item, schema.get("additionalProperties", {}), f"{path}.{key}", out)
            return
        for key, item in value.items():
            field = fields.get(key)
            if field is None:
                out.append(f"{path}.{key}: not a field of {schema.get('id', 'this message')}")
            elif field.get("readOnly"):
                out.append(f"{path}.{key}: output only, not for a request")
            else:
                _check(item, field, f"{path}.{key}", out)
        for key, field in fields.items():
            if field.get("description", "").startswith("Required.") and key not in value:
                out.append(f"{path}.{key}: required")
    elif kind == "array":
        if not isinstance(value, list):
            out.append(f"{where}: expected a list, not {value!r:.40}")
            return
        for index, item in enumerate(value):
            _check(item, schema.get("items", {}), f"{path}[{index}]", out)
    elif kind == "string":
        _string(value, schema, where, out)
    elif kind == "integer":
        whole = isinstance(value, int) and not isinstance(value, bool)
        if not whole and not (isinstance(value, str) and _WHOLE.match(value)):
            out.append(f"{where}: expected a whole number, not {value!r:.40}")
        elif schema.get("format") == "int32" and not -_INT32 <= int(value) < _INT32:
            out.append(f"{where}: {value} is out of the int32 range")
    elif kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            out.append(f"{where}: expected a number, not {value!r:.40}")
    elif kind == "boolean" and not isinstance(value, bool):
        out.append(f"{where}: expected true or false, not {value!r:.40}")


def _string(value: Any, schema: dict[str, Any], where: str, out: list[str]) -> None:
    form = schema.get("format")
    if form in ("int64", "uint64"):  # (a string in the JSON mapping; a number is read too)
        whole = isinstance(value, int) and not isinstance(value, bool)
        if not whole and not (isinstance(value, str) and _WHOLE.match(value)):
            out.append(f"{where}: expected a whole number, not {value!r:.40}")
        return
    if not isinstance(value, str):
        out.append(f"{where}: expected a string, not {value!r:.40}")
        return
    if form == "google-duration" and not _DURATION.match(value):
        out.append(f"{where}: expected a duration in seconds such as '3600s', not {value!r}")
    names = schema.get("enum")
    if names is not None:
        if value not in names:
            out.append(f"{where}: {value!r} is not one of {', '.join(names)}")
        elif schema.get("enumDeprecated", [False] * len(names))[names.index(value)]:
            out.append(f"{where}: {value!r} is deprecated")
