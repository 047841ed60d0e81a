"""The Kubernetes backend of the SDK and CLI: SandboxSession objects made, followed, used."""

from __future__ import annotations

from sandfleet.clients.gateway.target import GatewayTarget, resolve_gateway
from sandfleet.cluster.backend import ClusterBackend, ClusterSandboxRequest, SessionFailedError
from sandfleet.cluster.gateway_backend import GatewayBackend, GatewaySandboxRequest
from sandfleet.cluster.manifests import ManifestError
from sandfleet.cluster.sessions import SessionClient, SessionGoneError, SessionWaitTimeoutError
from sandfleet.cluster.status import AgentProgress, Condition, SessionState

__all__ = [
    "AgentProgress",
    "ClusterBackend",
    "ClusterSandboxRequest",
    "Condition",
    "GatewayBackend",
    "GatewaySandboxRequest",
    "GatewayTarget",
    "ManifestError",
    "SessionClient",
    "SessionFailedError",
    "SessionGoneError",
    "SessionState",
    "SessionWaitTimeoutError",
    "resolve_gateway",
]
