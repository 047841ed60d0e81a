"""The SDK's gRPC channels: plaintext or TLS, message limits, and which calls grpc may retry."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import grpc

MAX_MESSAGE_BYTES = 16 * 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Tls:
    """Talk TLS to the server: verify it against `root_certificates` (PEM bytes of a CA
    bundle) or, when None, against the system's trusted roots."""

    root_certificates: bytes | None = None
    server_name: str | None = None
    """The name its certificate must carry when it differs from the address's host (e.g.
    a port-forward to a gateway whose certificate names its Service)."""


def retry_service_config(services: Sequence[str], *, methods: Sequence[str] = ()) -> str:
    """A gRPC service config that retries UNAVAILABLE (a call the server never answered) for
    whole `services` and single "service/Method" `methods`.

    grpc retries a call only while no response has arrived, so a retry never repeats a call
    whose effect the caller saw; list only calls that are safe to repeat anyway.
    """
    names: list[dict[str, str]] = [{"service": service} for service in services]
    for method in methods:
        service, _, name = method.partition("/")
        names.append({"service": service, "method": name})
    policy = {
        "maxAttempts": 4,
        "initialBackoff": "0.1s",
        "maxBackoff": "2s",
        "backoffMultiplier": 2,
        "retryableStatusCodes": ["UNAVAILABLE"],
    }
    return json.dumps({"methodConfig": [{"name": names, "retryPolicy": policy}]})


if TYPE_CHECKING:
    _UnaryUnary = grpc.aio.UnaryUnaryClientInterceptor[Any, Any]
    _UnaryStream = grpc.aio.UnaryStreamClientInterceptor[Any, Any]
    _StreamUnary = grpc.aio.StreamUnaryClientInterceptor[Any, Any]
    _StreamStream = grpc.aio.StreamStreamClientInterceptor[Any, Any]
else:  # not subscriptable at run time
    _UnaryUnary = grpc.aio.UnaryUnaryClientInterceptor
    _UnaryStream = grpc.aio.UnaryStreamClientInterceptor
    _StreamUnary = grpc.aio.StreamUnaryClientInterceptor
    _StreamStream = grpc.aio.StreamStreamClientInterceptor


class CallerToken:
    """Adds `key: Bearer <token>` to every call of a channel, the token read from `source`
    again (in a thread: a kubeconfig exec plugin may run) once it is `refresh_s` old, so a
    token that rotates (a pod's service account token, an exec plugin's) stays current for
    hours. `interceptors()` goes to open_channel."""

    def __init__(self, key: str, source: Callable[[], str], *, refresh_s: float = 60.0) -> None:
        self._key = key
        self._source = source
        self._token = ""
        self._refresh_s = refresh_s
        self._read_at = -math.inf
        self._lock = asyncio.Lock()

    def interceptors(self) -> list[Any]:
        # grpc.aio files each interceptor under the first call type it implements: one
        # object per type.
        return [_UnaryUnaryCaller(self), _UnaryStreamCaller(self), _StreamUnaryCaller(self),
                _StreamStreamCaller(self)]  # fmt: skip

    async def details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        """The call's details with the token added to its metadata."""
        if time.monotonic() - self._read_at >= self._refresh_s:
            async with self._lock:
                if time.monotonic() - self._read_at >= self._refresh_s:
                    self._token = await asyncio.to_thread(self._source)
                    self._read_at = time.monotonic()
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        metadata[self._key] = f"Bearer {self._token}"
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )


class _UnaryUnaryCaller(_UnaryUnary):
    def __init__(self, token: CallerToken) -> None:
        self._token = token

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(await self._token.details(details), request)


class _UnaryStreamCaller(_UnaryStream):
    def __init__(self, token: CallerToken) -> None:
        self._token = token

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(await self._token.details(details), request)


class _StreamUnaryCaller(_StreamUnary):
    def __init__(self, token: CallerToken) -> None:
        self._token = token

    async def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(await self._token.details(details), requests)


class _StreamStreamCaller(_StreamStream):
    def __init__(self, token: CallerToken) -> None:
        self._token = token

    async def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(await self._token.details(details), requests)


def open_channel(
    address: str,
    *,
    service_config: str,
    tls: Tls | None = None,
    interceptors: Sequence[Any] = (),
) -> grpc.aio.Channel:
    """An asyncio channel to `address` (host:port, or unix:PATH without TLS)."""
    options: list[tuple[str, str | int]] = [
        ("grpc.service_config", service_config),
        ("grpc.enable_retries", 1),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ]
    if tls is None:
        return grpc.aio.insecure_channel(
            address, options=options, interceptors=interceptors or None
        )
    if tls.server_name:
        options.append(("grpc.ssl_target_name_override", tls.server_name))
    credentials = grpc.ssl_channel_credentials(root_certificates=tls.root_certificates)
    return grpc.aio.secure_channel(
        address, credentials, options=options, interceptors=interceptors or None
    )
