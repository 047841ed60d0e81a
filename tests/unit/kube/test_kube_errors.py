"""Error statuses map to typed errors with readable messages; watch lines decode to events."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sandfleet.errors import SandfleetError
from sandfleet.kube import (
    ConflictError,
    ForbiddenError,
    GoneError,
    InvalidError,
    KubeApiError,
    NotFoundError,
    UnauthorizedError,
    WatchEvent,
    WatchExpiredError,
)
from sandfleet.kube.watch import decode_event


def status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }
    if details:
        body["details"] = details
    return body


@pytest.mark.parametrize(
    ("code", "error_class"),
    [
        (401, UnauthorizedError),
        (403, ForbiddenError),
        (404, NotFoundError),
        (409, ConflictError),
        (410, GoneError),
        (422, InvalidError),
        (500, KubeApiError),
    ],
)
def test_each_status_maps_to_its_error_class(code: int, error_class: type[KubeApiError]) -> None:
    body = status(code, "Something", "it went wrong")

    error = KubeApiError.from_status(code, body, method="GET", path="/api/v1/x")

    assert type(error) is error_class
    assert isinstance(error, SandfleetError)
    assert (error.status, error.reason, error.message, error.body) == (
        code,
        "Something",
        "it went wrong",
        body,
    )
    assert str(error) == f"GET /api/v1/x -> {code} Something: it went wrong"


def test_a_body_without_a_status_object_still_gets_a_reason() -> None:
    error = KubeApiError.from_status(503, {"message": "<html>bad gateway</html>"})

    assert error.reason == "ServiceUnavailable"
    assert str(error) == "503 ServiceUnavailable: <html>bad gateway</html>"


def test_invalid_errors_list_causes_the_message_left_out() -> None:
    body = status(
        422,
        "Invalid",
        'ConfigMap "Bad" is invalid',
        causes=[
            {
                "reason": "FieldValueInvalid",
                "message": 'Invalid value: "Bad": lowercase',
                "field": "metadata.name",
            },
            {"reason": "FieldValueRequired", "message": "Required value", "field": "data.x"},
        ],
    )

    error = KubeApiError.from_status(422, body)

    assert isinstance(error, InvalidError)
    assert error.causes == [
        'metadata.name: Invalid value: "Bad": lowercase',
        "data.x: Required value",
    ]
    assert error.message == (
        'ConfigMap "Bad" is invalid; metadata.name: Invalid value: "Bad": lowercase; '
        "data.x: Required value"
    )


def test_invalid_errors_do_not_repeat_causes_already_in_the_message() -> None:
    message = 'ConfigMap "Bad" is invalid: metadata.name: Invalid value: "Bad": lowercase'
    body = status(
        422,
        "Invalid",
        message,
        causes=[{"message": 'Invalid value: "Bad": lowercase', "field": "metadata.name"}],
    )

    assert KubeApiError.from_status(422, body).message == message


def line(event_type: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": event_type, "object": obj}).encode() + b"\n"


def test_watch_lines_decode_to_events_with_their_resource_version() -> None:
    obj = {"kind": "ConfigMap", "metadata": {"name": "a", "resourceVersion": "42"}}

    event = decode_event(line("MODIFIED", obj), path="/api/v1/configmaps")

    assert event == WatchEvent("MODIFIED", obj)
    assert event is not None
    assert event.resource_version == "42"


def test_blank_lines_and_unknown_event_types_are_skipped() -> None:
    assert decode_event(b"\n", path="/p") is None
    assert decode_event(line("SOMETHING_NEW", {}), path="/p") is None


def test_an_expired_error_event_raises_watch_expired() -> None:
    gone = status(410, "Expired", "too old resource version: 5 (900)")

    with pytest.raises(WatchExpiredError, match="too old resource version") as caught:
        decode_event(line("ERROR", gone), path="/api/v1/pods")

    assert caught.value.status == 410
    assert isinstance(caught.value, GoneError)


def test_other_error_events_raise_the_typed_error_they_carry() -> None:
    with pytest.raises(ForbiddenError, match="cannot watch"):
        decode_event(line("ERROR", status(403, "Forbidden", "cannot watch pods")), path="/p")
