"""The MCP endpoint on the cluster: `python -m sandfleet.mcp.endpoint`.

`sandfleet mcp`'s streamable HTTP server as its own small Deployment (the chart's
`mcp.enabled`), for agent frameworks anywhere with a Kubernetes bearer token. Every
request is authenticated as the gateway authenticates its calls: a TokenReview of the
bearer token and a SubjectAccessReview `create sandboxsessions` in the namespace the
caller names (header `Sandfleet-Namespace`, else the default); anything else gets 401.
Each session's sandbox is claimed through the gateway Service with the caller's own
token, so the gateway's tenancy, reviews and quotas stay the only ones: this server holds
no right to claim anything itself (its ServiceAccount may only create the reviews).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from sandfleet.api import GROUP, SESSION_PLURAL
from sandfleet.clients.gateway.target import GatewayConfigError, GatewayTarget, resolve_gateway
from sandfleet.kube import KubeClient, KubeConfig, KubeConfigError
from sandfleet.kube.access_review import Authenticator, AuthError, ResourceAccess
from sandfleet.logs import configure_logging, get_logger
from sandfleet.mcp import server
from sandfleet.mcp.openers import as_caller, claimed_sandbox
from sandfleet.mcp.tools import Caller, Identity, SandboxOpener
from sandfleet.sandbox.core import SandboxCore

log = get_logger(__name__)

NAMESPACE_HEADER = "sandfleet-namespace"
POOL_HEADER = "sandfleet-pool"
EXIT_BAD_SETTINGS = 2
_NO_SERVER_TOKEN = "-"  # never sent: every claim carries its caller's token


class EndpointSettings(BaseSettings):
    """SANDFLEET_MCP_* environment variables (the chart sets them)."""

    model_config = SettingsConfigDict(env_prefix="SANDFLEET_MCP_", frozen=True, extra="forbid")

    log_level: str = Field(default="INFO", validation_alias="SANDFLEET_LOG_LEVEL")
    host: str = "0.0.0.0"
    port: int = Field(default=8765, ge=0, le=65535)
    gateway: str = Field(min_length=1)
    """The gateway Service, host:port (https:// for TLS, with `gateway_ca_file`)."""
    gateway_ca_file: Path | None = None
    namespace: str | None = None
    """The namespace of callers that send no Sandfleet-Namespace header (None: they must)."""
    pool: str | None = None
    """The SandboxPool of callers that send no Sandfleet-Pool header (None: they must)."""
    idle_timeout_seconds: float = Field(default=1800, gt=0)
    max_sessions: int = Field(default=100, ge=1)
    tool_timeout_seconds: float = Field(default=0, ge=0)
    kubeconfig: Path | None = None
    """None: $KUBECONFIG, ~/.kube/config, then the in-cluster service account."""


class KubeCallerVerifier:
    """A request is its caller's when the API server accepts the token (TokenReview) and
    RBAC lets that identity create sandboxsessions in the namespace it names (SAR)."""

    def __init__(
        self, authenticator: Authenticator, *, namespace: str | None, pool: str | None
    ) -> None:
        self._authenticator = authenticator
        self._namespace = namespace
        self._pool = pool

    async def verify(self, token: str, headers: Mapping[str, str]) -> Identity | None:
        namespace = headers.get(NAMESPACE_HEADER) or self._namespace
        pool = headers.get(POOL_HEADER) or self._pool
        if not namespace or not pool:
            log.info("mcp_request_refused", reason="no namespace or pool named")
            return None
        try:
            caller = await self._authenticator.authenticate(token)
            await self._authenticator.check(
                caller, ResourceAccess("create", GROUP, SESSION_PLURAL, namespace)
            )
        except AuthError as error:  # refused, denied, or the reviews are unavailable
            log.info("mcp_request_refused", reason=str(error), namespace=namespace)
            return None
        # Bound to the identity, not the token: a rotated token keeps its sessions.
        return Identity(f"{caller.username}/{caller.uid}", Caller(token, namespace, pool))


def caller_opener(target: GatewayTarget, *, tool_timeout_s: float = 0) -> SandboxOpener:
    """Each session's sandbox, claimed through the gateway as its caller."""

    def open_for(caller: Caller) -> contextlib.AbstractAsyncContextManager[SandboxCore]:
        return claimed_sandbox(
            as_caller(target, caller.token),
            namespace=caller.namespace,
            pool=caller.pool,
            tool_timeout_s=tool_timeout_s,
        )

    return open_for


def gateway_target(settings: EndpointSettings) -> GatewayTarget:
    return resolve_gateway(
        settings.gateway, token=_NO_SERVER_TOKEN, ca_file=settings.gateway_ca_file, environ={}
    )


async def serve(settings: EndpointSettings) -> None:
    config = KubeConfig.load(settings.kubeconfig)
    async with KubeClient(config) as kube:
        verifier = KubeCallerVerifier(
            Authenticator(kube), namespace=settings.namespace, pool=settings.pool
        )
        app = server.http_app(
            caller_opener(gateway_target(settings), tool_timeout_s=settings.tool_timeout_seconds),
            verifier,
            idle_timeout_s=settings.idle_timeout_seconds,
            max_sessions=settings.max_sessions,
        )
        log.info("mcp_endpoint_serving", port=settings.port, gateway=settings.gateway)
        await server.serve_http(app, host=settings.host, port=settings.port)


def main() -> int:
    try:
        settings = EndpointSettings()  # type: ignore[call-arg]  # read from the environment
    except ValidationError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    configure_logging(level=settings.log_level, json=True)
    try:
        asyncio.run(serve(settings))
    except (KubeConfigError, GatewayConfigError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
