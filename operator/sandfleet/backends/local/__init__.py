"""The embedded local backend: each sandbox is a runtime agent process in a private directory,
isolated with Linux namespaces (bubblewrap or unshare) where the machine allows them."""

from sandfleet.backends.local.backend import LocalBackend
from sandfleet.backends.local.config import LocalSandboxConfig
from sandfleet.backends.local.launcher import LocalRuntime, launch_local_runtime
from sandfleet.backends.local.registry import sweep_orphans
from sandfleet.backends.local.suspend import resume_local

__all__ = [
    "LocalBackend",
    "LocalRuntime",
    "LocalSandboxConfig",
    "launch_local_runtime",
    "resume_local",
    "sweep_orphans",
]
