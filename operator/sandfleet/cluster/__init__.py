"""The Kubernetes backend of the SDK and CLI: SandboxSession objects made, followed, used."""

from __future__ import annotations

from sandfleet.cluster.backend import ClusterBackend, ClusterSandboxRequest, SessionFailedError
from sandfleet.cluster.gateway_backend import GatewayBackend, GatewaySandboxRequest
from sandfleet.cluster.gateway_target import GatewayTarget, resolve_gateway
from sandfleet.fleet.manifests import ManifestError
from sandfleet.fleet.sessions import SessionClient, SessionGoneError, SessionWaitTimeoutError
from sandfleet.fleet.status import AgentProgress, Condition, SessionState

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
