"""Who calls the gateway and what RBAC lets them do, over sandfleet.kube.access_review.

The reviews and their caches are the shared Authenticator's; this module adds what is the
gateway's own: the bearer token in gRPC metadata, and the question it asks about sessions.
"""

from __future__ import annotations

from typing import Any

from sandfleet.api import CALLER_AUTHORIZATION, GROUP, SESSION_PLURAL
from sandfleet.api.names import bearer_token_of
from sandfleet.kube import access_review
from sandfleet.kube.access_review import (
    ACCESS_REVIEWS,
    TOKEN_REVIEWS,
    AuthError,
    AuthUnavailableError,
    Caller,
    PermissionDeniedError,
    ResourceAccess,
    UnauthenticatedError,
)

__all__ = [
    "ACCESS_REVIEWS",
    "CALLER_METADATA",
    "TOKEN_REVIEWS",
    "AuthError",
    "AuthUnavailableError",
    "Authenticator",
    "Caller",
    "PermissionDeniedError",
    "UnauthenticatedError",
    "bearer_token",
]

CALLER_METADATA = CALLER_AUTHORIZATION
"""Where a proxied runtime call carries its caller's Kubernetes token (`Bearer <token>`):
its `authorization` is the session's runtime token, which goes on to the runtime."""


def bearer_token(metadata: Any, key: str = "authorization") -> str:
    """The bearer token under `key` in call metadata (a sequence of (key, value) pairs)."""
    for name, value in metadata or ():
        if name == key and isinstance(value, str):
            token = bearer_token_of(value)
            if token is not None:
                return token
            break
    raise UnauthenticatedError(
        f"no bearer token: send '{key}: Bearer <token>' with a token the Kubernetes "
        "API server accepts (a ServiceAccount token, `kubectl create token`, an OIDC token)"
    )


class Authenticator(access_review.Authenticator):
    """The shared Authenticator, asking about SandboxSessions."""

    async def authorize(self, caller: Caller, verb: str, namespace: str) -> None:
        """PermissionDeniedError unless RBAC lets `caller` `verb` sandboxsessions in `namespace`."""
        await self.check(caller, ResourceAccess(verb, GROUP, SESSION_PLURAL, namespace))
