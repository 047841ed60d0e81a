"""What the SDK, the CLI and the gateway share about SandboxSession objects: manifests made,
sessions followed, their status read. The backends that use them are in sandfleet.backends."""

from __future__ import annotations

from sandfleet.fleet.manifests import ManifestError
from sandfleet.fleet.sessions import SessionClient, SessionGoneError, SessionWaitTimeoutError
from sandfleet.fleet.status import AgentProgress, Condition, SessionState

__all__ = [
    "AgentProgress",
    "Condition",
    "ManifestError",
    "SessionClient",
    "SessionGoneError",
    "SessionState",
    "SessionWaitTimeoutError",
]
