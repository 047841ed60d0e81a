"""The SDK's gRPC channels: plaintext or TLS, message limits, and which calls grpc may retry."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

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


def open_channel(address: str, *, service_config: str, tls: Tls | None = None) -> grpc.aio.Channel:
    """An asyncio channel to `address` (host:port, or unix:PATH without TLS)."""
    options: list[tuple[str, str | int]] = [
        ("grpc.service_config", service_config),
        ("grpc.enable_retries", 1),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ]
    if tls is None:
        return grpc.aio.insecure_channel(address, options=options)
    if tls.server_name:
        options.append(("grpc.ssl_target_name_override", tls.server_name))
    credentials = grpc.ssl_channel_credentials(root_certificates=tls.root_certificates)
    return grpc.aio.secure_channel(address, credentials, options=options)
