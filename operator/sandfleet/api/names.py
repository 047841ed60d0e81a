"""The API's fixed names: group, version, kinds, plurals, and what every sandbox pod offers.

Everything that crosses a boundary is named once, here and in the sibling modules, so the
CRDs in manifests/crds, the operator, the SDK and the CLI cannot drift apart.
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "sandfleet.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

SESSION_KIND: Final = "SandboxSession"
SESSION_PLURAL: Final = "sandboxsessions"
TEMPLATE_KIND: Final = "SandboxTemplate"
TEMPLATE_PLURAL: Final = "sandboxtemplates"
POOL_KIND: Final = "SandboxPool"
POOL_PLURAL: Final = "sandboxpools"
SERVED_MODEL_KIND: Final = "ServedModel"
SERVED_MODEL_PLURAL: Final = "servedmodels"

FINALIZER: Final = f"{GROUP}/finalizer"

RUNTIME_PORT: Final = 50051
"""The runtime agent's gRPC port in every sandbox pod."""
RUNTIME_CONTAINER: Final = "runtime"
TOKEN_SECRET_KEY: Final = "token"
"""Key of the runtime bearer token in a session's (or pool's) token Secret."""
DEFAULT_WORKDIR: Final = "/testbed"

GATEWAY_PORT: Final = 50052
"""The gateway's gRPC port: GatewayService and the proxied runtime services."""
GATEWAY_SESSION_METADATA: Final = "x-sandfleet-session"
"""Call metadata naming the session ("<namespace>/<name>") a proxied runtime call is for."""
SUSPEND_REASON_METADATA: Final = "x-sandfleet-reason"
"""Trailing metadata of a refused gateway Suspend: the Suspended condition's reason."""
CALLER_AUTHORIZATION: Final = "x-sandfleet-authorization"
"""`Bearer <the caller's Kubernetes token>` where `authorization` cannot carry it: gRPC
metadata of a proxied runtime call (whose `authorization` is the session's runtime token),
and an HTTP header to the operator through the API server's service proxy (which strips
`Authorization`)."""


def bearer_token_of(value: str | None) -> str | None:
    """The token of an `Authorization`-style value `Bearer <token>` (the scheme in any case),
    or None when the value is missing, of another scheme, or has no token."""
    scheme, _, token = (value or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None
