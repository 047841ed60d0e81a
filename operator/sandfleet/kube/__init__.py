"""An async Kubernetes REST client on aiohttp, for the operator, the SDK and the CLI.

    async with KubeClient(KubeConfig.load()) as kube:
        pod = await kube.get(resource_path("v1", "pods", "default", "web"))

It speaks JSON dicts, types errors by status and never imports kopf.
"""

from __future__ import annotations

from sandfleet.kube.client import (
    PATCH_CONTENT_TYPES,
    JsonObject,
    KubeClient,
    PatchKind,
    api_server_connector,
)
from sandfleet.kube.config import KubeConfig
from sandfleet.kube.errors import (
    ConflictError,
    ForbiddenError,
    GoneError,
    InvalidError,
    KubeApiError,
    KubeConfigError,
    KubeConnectionError,
    KubeError,
    NotFoundError,
    UnauthorizedError,
    WatchExpiredError,
)
from sandfleet.kube.paths import resource_path
from sandfleet.kube.rate_limit import TokenBucket
from sandfleet.kube.watch import WatchEvent, WatchEventType

__all__ = [
    "PATCH_CONTENT_TYPES",
    "ConflictError",
    "ForbiddenError",
    "GoneError",
    "InvalidError",
    "JsonObject",
    "KubeApiError",
    "KubeClient",
    "KubeConfig",
    "KubeConfigError",
    "KubeConnectionError",
    "KubeError",
    "NotFoundError",
    "PatchKind",
    "TokenBucket",
    "UnauthorizedError",
    "WatchEvent",
    "WatchEventType",
    "WatchExpiredError",
    "api_server_connector",
    "resource_path",
]
