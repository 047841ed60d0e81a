"""The control plane's error hierarchy: what callers can catch, and what each class means."""

from __future__ import annotations

import warnings


class SandfleetError(Exception):
    """Root of every error Sandfleet raises on purpose."""


class SandboxLostError(SandfleetError):
    """The sandbox's runtime agent is unreachable or failed: infrastructure, not the model's fault.

    The agent loop ends the run with stop reason `sandbox_lost`; the operator fails the session
    with reason SandboxLost (or retries, if the spec asks).
    """


class ToolError(SandfleetError):
    """A tool call failed in a way the model can fix; the message is written for the model."""

    def __init__(self, message: str, *, code: str = "INVALID_ARGUMENT") -> None:
        super().__init__(message)
        self.code = code
        """The gRPC status name the runtime answered with (e.g. NOT_FOUND)."""


class ModelError(SandfleetError):
    """The model endpoint failed after retries or rejected the request; a run stops with
    model_error. (ModelEndpointError was this concept's second name: a deprecated alias.)"""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        """HTTP status of the last failed attempt; None for connection errors and timeouts."""


class SandboxStartError(SandfleetError):
    """A sandbox could not be started; the message carries the reason (e.g. the agent's stderr)."""


class GatewayError(SandfleetError):
    """The gateway refused or failed a control-plane call (claim, connect, release)."""

    def __init__(self, message: str, *, code: str = "UNKNOWN") -> None:
        super().__init__(message)
        self.code = code
        """The gRPC status name the gateway answered with (e.g. NOT_FOUND)."""


class GatewayConfigError(SandfleetError):
    """No gateway address or no usable credential is known; the message says how to give one."""


class GatewayUnreachableError(GatewayError):
    """No gateway answers at the configured address (wrong address, down, TLS mismatch)."""


class GatewayAuthError(GatewayError):
    """The gateway did not accept the caller's token (UNAUTHENTICATED) or Kubernetes RBAC
    does not allow the call (PERMISSION_DENIED)."""


class QuotaExceededError(GatewayError):
    """The namespace already has as many sessions as the gateway's quota allows
    (RESOURCE_EXHAUSTED): raised by the gateway's quotas, and by the gateway client when the
    gateway answers with it. One class for both sides: it is one concept."""

    def __init__(
        self, message: str, *, code: str = "RESOURCE_EXHAUSTED", namespace: str = ""
    ) -> None:
        super().__init__(message, code=code)
        self.namespace = namespace
        """The namespace whose quota is full ("" when the answer did not say)."""


class GatewayStartError(GatewayError, SandboxStartError):
    """The gateway could not start the sandboxes in time (UNAVAILABLE); a SandboxStartError
    too, so callers that handle start failures handle this one."""


_DEPRECATED_NAMES = {"ModelEndpointError": "ModelError"}
"""Old class names that still resolve, with a DeprecationWarning: old name -> new name."""


def __getattr__(name: str) -> type[SandfleetError]:
    if name in _DEPRECATED_NAMES:
        new = _DEPRECATED_NAMES[name]
        warnings.warn(
            f"sandfleet.errors.{name} is deprecated: use {new}", DeprecationWarning, stacklevel=2
        )
        found: type[SandfleetError] = globals()[new]
        return found
    raise AttributeError(f"module 'sandfleet.errors' has no attribute {name!r}")


class SuspendError(SandfleetError):
    """A sandbox could not be suspended (too large, unsupported by its backend, the store
    failed); the sandbox is left as it was, running."""


class SnapshotTooLargeError(SuspendError):
    """The sandbox's files exceed the suspend size limit; the message names the limit and
    the biggest paths."""


class SnapshotCorruptError(SandfleetError):
    """A suspended sandbox's snapshot is missing, unreadable or fails its checksum; resume
    changes nothing, and what is left stays on disk for inspection (the message names it)."""


class SandboxNotFoundError(SandfleetError):
    """No local sandbox, running or suspended, has this id in the state dir."""
