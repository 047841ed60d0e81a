"""Sandfleet: run LLM agents inside lightweight Linux sandboxes, locally or on Kubernetes.

`from sandfleet import Sandbox` is the SDK entry point, and this module is the whole public
SDK: every name in `__all__`, every exception the SDK raises on purpose included. The agent
loop (`sandfleet.agent`), the RL environment (`sandfleet.rl`), the tool-call contract
(`sandfleet.tool_calls`) and the resource types (`sandfleet.api`) are public packages of
their own. Every other module (sandfleet.sandbox.*, sandfleet.backends.*,
sandfleet.clients.*, sandfleet.cluster, sandfleet.kube, the CLI, the operator, the gateway)
is internal: its names may move or change without notice.

Attributes load lazily so that `import sandfleet` stays cheap for the CLI and for code that
needs only one part.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sandfleet.version import __version__ as __version__

_LAZY = {
    # Sandboxes and the ways to open them.
    "Sandbox": "sandfleet.sandbox.facade",
    "ClusterSandbox": "sandfleet.sandbox.facade",
    "SandboxCore": "sandfleet.sandbox.core",
    "SyncSandbox": "sandfleet.sandbox.sync",
    "Opening": "sandfleet.sandbox.opening",
    "ClusterOptions": "sandfleet.sandbox.opening",
    "SandboxPaths": "sandfleet.sandbox.backend",
    "SandboxBackend": "sandfleet.sandbox.backend",
    "OpenedSandbox": "sandfleet.sandbox.backend",
    # Backends, for Sandbox.open(backend).
    "LocalBackend": "sandfleet.backends.local",
    "LocalSandboxConfig": "sandfleet.backends.local",
    "GatewayBackend": "sandfleet.backends.gateway",
    "GatewaySandboxRequest": "sandfleet.backends.gateway",
    "ClusterBackend": "sandfleet.backends.direct",
    "ClusterSandboxRequest": "sandfleet.backends.direct",
    # What sandboxes return.
    "CommandResult": "sandfleet.clients.runtime.results",
    "FileEntry": "sandfleet.clients.runtime.results",
    "SandboxStats": "sandfleet.clients.runtime.results",
    "UploadResult": "sandfleet.clients.runtime.results",
    "ResetResult": "sandfleet.clients.runtime.rollouts",
    "TreeSnapshot": "sandfleet.sandbox.tree_snapshot",
    "SuspendedSandbox": "sandfleet.sandbox.suspension",
    "CopyLimits": "sandfleet.sandbox.copy_back",
    "CopyReport": "sandfleet.sandbox.copy_back",
    "GatewaySandboxInfo": "sandfleet.clients.gateway.client",
    "SessionState": "sandfleet.fleet.status",
    # The runtime agent's client, for programs that need the raw calls.
    "RuntimeClient": "sandfleet.clients.runtime.client",
    # Errors.
    "SandfleetError": "sandfleet.errors",
    "SandboxLostError": "sandfleet.errors",
    "SandboxStartError": "sandfleet.errors",
    "SuspendError": "sandfleet.errors",
    "SandboxNotFoundError": "sandfleet.errors",
    "SnapshotTooLargeError": "sandfleet.errors",
    "SnapshotCorruptError": "sandfleet.errors",
    "ToolError": "sandfleet.errors",
    "ModelError": "sandfleet.errors",
    "GatewayError": "sandfleet.errors",
    "GatewayConfigError": "sandfleet.errors",
    "GatewayUnreachableError": "sandfleet.errors",
    "GatewayAuthError": "sandfleet.errors",
    "GatewayStartError": "sandfleet.errors",
    "QuotaExceededError": "sandfleet.errors",
    "SessionFailedError": "sandfleet.backends.direct",
    "ManifestError": "sandfleet.fleet.manifests",
    "CopyBackError": "sandfleet.sandbox.copy_back",
    "ToolCallError": "sandfleet.tool_calls",
}

__all__ = [
    "ClusterBackend",
    "ClusterOptions",
    "ClusterSandbox",
    "ClusterSandboxRequest",
    "CommandResult",
    "CopyBackError",
    "CopyLimits",
    "CopyReport",
    "FileEntry",
    "GatewayAuthError",
    "GatewayBackend",
    "GatewayConfigError",
    "GatewayError",
    "GatewaySandboxInfo",
    "GatewaySandboxRequest",
    "GatewayStartError",
    "GatewayUnreachableError",
    "LocalBackend",
    "LocalSandboxConfig",
    "ManifestError",
    "ModelError",
    "OpenedSandbox",
    "Opening",
    "QuotaExceededError",
    "ResetResult",
    "RuntimeClient",
    "Sandbox",
    "SandboxBackend",
    "SandboxCore",
    "SandboxLostError",
    "SandboxNotFoundError",
    "SandboxPaths",
    "SandboxStartError",
    "SandboxStats",
    "SandfleetError",
    "SessionFailedError",
    "SessionState",
    "SnapshotCorruptError",
    "SnapshotTooLargeError",
    "SuspendError",
    "SuspendedSandbox",
    "SyncSandbox",
    "ToolCallError",
    "ToolError",
    "TreeSnapshot",
    "UploadResult",
]

if TYPE_CHECKING:
    from sandfleet.backends.direct import (
        ClusterBackend,
        ClusterSandboxRequest,
        SessionFailedError,
    )
    from sandfleet.backends.gateway import GatewayBackend, GatewaySandboxRequest
    from sandfleet.backends.local import LocalBackend, LocalSandboxConfig
    from sandfleet.clients.gateway.client import GatewaySandboxInfo
    from sandfleet.clients.runtime.client import RuntimeClient
    from sandfleet.clients.runtime.results import (
        CommandResult,
        FileEntry,
        SandboxStats,
        UploadResult,
    )
    from sandfleet.clients.runtime.rollouts import ResetResult
    from sandfleet.errors import (
        GatewayAuthError,
        GatewayConfigError,
        GatewayError,
        GatewayStartError,
        GatewayUnreachableError,
        ModelError,
        QuotaExceededError,
        SandboxLostError,
        SandboxNotFoundError,
        SandboxStartError,
        SandfleetError,
        SnapshotCorruptError,
        SnapshotTooLargeError,
        SuspendError,
        ToolError,
    )
    from sandfleet.fleet.manifests import ManifestError
    from sandfleet.fleet.status import SessionState
    from sandfleet.sandbox.backend import OpenedSandbox, SandboxBackend, SandboxPaths
    from sandfleet.sandbox.copy_back import CopyBackError, CopyLimits, CopyReport
    from sandfleet.sandbox.core import SandboxCore
    from sandfleet.sandbox.facade import ClusterSandbox, Sandbox
    from sandfleet.sandbox.opening import ClusterOptions, Opening
    from sandfleet.sandbox.suspension import SuspendedSandbox
    from sandfleet.sandbox.sync import SyncSandbox
    from sandfleet.sandbox.tree_snapshot import TreeSnapshot
    from sandfleet.tool_calls import ToolCallError


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sandfleet' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
