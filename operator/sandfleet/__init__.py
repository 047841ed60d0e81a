"""Sandfleet: run LLM agents inside lightweight Linux sandboxes, locally or on Kubernetes.

`from sandfleet import Sandbox` is the SDK entry point. Attributes load lazily so that
`import sandfleet` stays cheap for the CLI and for code that needs only one part.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandfleet.version import __version__ as __version__

__all__ = [
    "GatewayError",
    "RuntimeClient",
    "Sandbox",
    "SandboxLostError",
    "SandboxPaths",
    "SandfleetError",
    "SyncSandbox",
    "ToolError",
]

_LAZY = {
    "Sandbox": "sandfleet.sandbox.facade",
    "SandboxPaths": "sandfleet.sandbox.backend",
    "RuntimeClient": "sandfleet.clients.runtime.client",
    "SandfleetError": "sandfleet.errors",
    "SandboxLostError": "sandfleet.errors",
    "ToolError": "sandfleet.errors",
    "GatewayError": "sandfleet.errors",
    "SyncSandbox": "sandfleet.sandbox.sync",
}

if TYPE_CHECKING:
    from sandfleet.clients.runtime.client import RuntimeClient
    from sandfleet.errors import GatewayError, SandboxLostError, SandfleetError, ToolError
    from sandfleet.sandbox.backend import SandboxPaths
    from sandfleet.sandbox.facade import Sandbox
    from sandfleet.sandbox.sync import SyncSandbox


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sandfleet' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
