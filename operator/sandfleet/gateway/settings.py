"""The gateway's settings: read once from SANDFLEET_GATEWAY_* at start-up."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from sandfleet.api import GATEWAY_PORT


def _default_replica() -> str:
    # The chart passes the pod's name through the downward API; elsewhere the host's name.
    return os.environ.get("POD_NAME") or socket.gethostname()


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="SANDFLEET_GATEWAY_",
        frozen=True,
        extra="forbid",
        env_nested_delimiter="__",
    )

    log_level: str = Field(default="INFO", validation_alias="SANDFLEET_LOG_LEVEL")
    """Shares SANDFLEET_LOG_LEVEL with the CLI and the operator (no SANDFLEET_GATEWAY_ prefix)."""

    host: str = "0.0.0.0"
    port: int = Field(default=GATEWAY_PORT, ge=0, le=65535)
    """gRPC: GatewayService and the proxied runtime services; 0 picks a free port (tests)."""
    http_host: str = "0.0.0.0"
    http_port: int = Field(default=9090, ge=0, le=65535)
    """/metrics, /healthz and /readyz; 0 picks a free port (tests)."""

    namespaces: list[str] = []
    """Namespaces to serve; empty serves the whole cluster (needs the ClusterRole)."""
    kubeconfig: Path | None = None
    """None: $KUBECONFIG, ~/.kube/config, then the in-cluster service account."""
    replica: str = Field(default_factory=_default_replica)
    """This replica's name, recorded on the sessions it claims (sandfleet.dev/claimed-by)."""

    quota_default: int = Field(default=0, ge=0)
    """Concurrent (not finished) sessions a namespace may hold; 0 means unlimited."""
    quotas: dict[str, int] = {}
    """Per-namespace limits overriding `quota_default` (0: unlimited for that namespace)."""
    quota_ledger_namespace: str | None = None
    """Where the quota ledger's Leases live (the gateway's own namespace; the chart sets it):
    replicas reserve each claim's sessions there, so quotas hold across replicas. None: no
    ledger, each replica counts only its own claims (right for a single replica)."""
    quota_hold_seconds: float = Field(default=15.0, gt=0)
    """How long a ledger reservation counts: long enough for a claim to create its sessions
    and for every replica's watch to show them."""

    token_review_ttl_seconds: float = Field(default=5.0, ge=0)
    """How long an accepted bearer token is trusted without asking the API server again: a
    revoked token keeps working here this long after the API server refuses it, so keep it
    below the API server's own token cache (kube-apiserver caches accepted tokens 10 s)."""
    token_review_negative_ttl_seconds: float = Field(default=5.0, ge=0)
    """How long a refused token stays refused: a retry storm with a bad token costs little."""
    access_review_ttl_seconds: float = Field(default=10.0, ge=0)
    """How long an RBAC answer (per user, groups, verb, namespace) is reused."""
    auth_cache_entries: int = Field(default=10_000, ge=1)
    route_wait_seconds: float = Field(default=2.0, ge=0)
    """How long a proxied call naming a session the watch has not brought (yet) waits for it
    (a session claimed through another replica an instant ago) before it is refused."""

    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    """Serve TLS when both are set (PEM files); plaintext otherwise (TLS ends at an Ingress)."""

    session_key_file: Path | None = None
    """The chart's session key (shared with the operator): warm claims derive each session's
    runtime token from it. Read once at start-up; `sandfleet-gateway` refuses to start
    without it."""

    cold_start_timeout_seconds: float = Field(default=300.0, gt=0)
    """How long a cold start may take when a Claim names no timeout."""
    shutdown_grace_seconds: float = Field(default=30.0, ge=0)
    """On SIGTERM: new calls are refused at once, calls in flight get this long to finish."""

    kube_qps: float = Field(default=200.0, gt=0)
    """Sustained Kubernetes API requests per second (a token bucket)."""
    kube_burst: int = Field(default=400, ge=1)

    @model_validator(mode="after")
    def _check(self) -> Self:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("set both tls_cert_file and tls_key_file (or neither)")
        negative = sorted(ns for ns, limit in self.quotas.items() if limit < 0)
        if negative:
            raise ValueError(f"quotas must be 0 (unlimited) or more: {', '.join(negative)}")
        return self

    @property
    def tls(self) -> bool:
        return self.tls_cert_file is not None and self.tls_key_file is not None
