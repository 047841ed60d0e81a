"""The MCP server on the official SDK's low-level Server: stdio and streamable HTTP.

Each MCP session gets its own `SessionTools` from the Server's lifespan, which the SDK
enters once per session (a stdio connection; an HTTP session from initialize to its
DELETE or idle timeout) and leaves when the session ends: leaving it releases the
session's sandbox, whatever ended the session.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import itertools
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

import anyio
from mcp import types
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, RequireAuthMiddleware
from mcp.server.auth.provider import AccessToken
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, AuthenticationBackend
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection, Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

import sandfleet
from sandfleet.api.names import bearer_token_of
from sandfleet.errors import SandboxLostError, SandfleetError
from sandfleet.logs import get_logger
from sandfleet.mcp.tools import (
    MAX_TRANSFER_BYTES,
    Caller,
    Identity,
    SandboxOpener,
    SessionTools,
    mcp_tool_specs,
)

log = get_logger(__name__)

SERVER_NAME = "sandfleet"
MCP_PATH = "/mcp"
_RELEASE_TIMEOUT_S = 60.0
# A base64 upload of the largest file, with room for the JSON-RPC envelope.
_MAX_REQUEST_BYTES = MAX_TRANSFER_BYTES * 4 // 3 + 64 * 1024
_session_numbers = itertools.count(1)

_NAMESPACE_CLAIM = "sandfleet.dev/namespace"
_POOL_CLAIM = "sandfleet.dev/pool"


class RequestVerifier(Protocol):
    """Decides who sent an HTTP request (bearer token and headers), or None: 401."""

    async def verify(self, token: str, headers: Mapping[str, str]) -> Identity | None: ...


def build_server(opener: SandboxOpener, *, tool_timeout_s: float = 0) -> Server[SessionTools, Any]:
    """The MCP server: its tools, and one sandbox per session opened with `opener`."""

    @contextlib.asynccontextmanager
    async def per_session(_: Server[SessionTools, Any]) -> AsyncIterator[SessionTools]:
        label = f"mcp-{next(_session_numbers)}"
        tools = SessionTools(opener, tool_timeout_s=tool_timeout_s, label=label)
        log.info("mcp_session_started", session=label)
        try:
            yield tools
        finally:
            # Shielded: an ending session (client gone, idle timeout, shutdown) is usually
            # being cancelled, and the sandbox must be released all the same.
            with anyio.CancelScope(shield=True), anyio.move_on_after(_RELEASE_TIMEOUT_S):
                try:
                    await tools.close()
                except SandfleetError as error:
                    log.warning("mcp_sandbox_release_failed", session=label, error=str(error))
            log.info("mcp_session_ended", session=label)

    server: Server[SessionTools, Any] = Server(
        SERVER_NAME,
        version=sandfleet.__version__,
        instructions="Each MCP session has its own Linux sandbox, opened at the first tool "
        "call and released when the session ends. Run commands with execute_bash, edit files "
        "with str_replace_editor.",
        lifespan=per_session,
    )
    listed = [
        types.Tool(name=spec.name, description=spec.description, inputSchema=dict(spec.parameters))
        for spec in mcp_tool_specs()
    ]

    @server.list_tools()  # type: ignore[untyped-decorator, no-untyped-call]
    async def list_tools() -> list[types.Tool]:
        return listed

    # validate_input=False: the one parser checks arguments, so a bad call gets the message
    # the agent loop would give, not a JSON-schema validator's.
    @server.call_tool(validate_input=False)  # type: ignore[untyped-decorator]
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        context = server.request_context
        tools = context.lifespan_context
        try:
            outcome = await tools.call(name, arguments, caller=_caller(context.request))
        except SandboxLostError as error:
            log.warning("mcp_tool_failed", tool=name, error=str(error))
            return _result(
                f"Error: the sandbox was lost ({error}); the next tool call starts a fresh one.",
                is_error=True,
            )
        except SandfleetError as error:  # the sandbox cannot be opened
            log.warning("mcp_tool_failed", tool=name, error=str(error))
            return _result(f"Error: the sandbox is not available: {error}", is_error=True)
        return _result(outcome.text, is_error=outcome.is_error)

    return server


def _result(text: str, *, is_error: bool) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], isError=is_error
    )


def _caller(request: Any) -> Caller:
    """Whom the HTTP request was authenticated as; an anonymous Caller over stdio."""
    user = request.scope.get("user") if isinstance(request, Request) else None
    if not isinstance(user, AuthenticatedUser):
        return Caller()
    access = user.access_token
    claims = access.claims or {}
    return Caller(access.token, claims.get(_NAMESPACE_CLAIM), claims.get(_POOL_CLAIM))


async def run_stdio(opener: SandboxOpener, *, tool_timeout_s: float = 0) -> None:
    """Serve one client over stdin/stdout until it disconnects; then release its sandbox."""
    server = build_server(opener, tool_timeout_s=tool_timeout_s)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


class StaticKeyVerifier:
    """Accepts one API key (compared in constant time): the local HTTP server's auth."""

    def __init__(self, key: str) -> None:
        if not key:
            raise ValueError("the API key must not be empty")
        self._key = key.encode()

    async def verify(self, token: str, headers: Mapping[str, str]) -> Identity | None:
        if not hmac.compare_digest(token.encode(), self._key):
            return None
        return Identity("api-key", Caller(token))


class CallerTokenVerifier:
    """--backend kubernetes over HTTP: any bearer token is accepted here as the caller's
    identity (a session then answers only to that token); the gateway's TokenReview
    decides, when the session's sandbox is claimed with it, whether it is a Kubernetes
    identity allowed to have one."""

    async def verify(self, token: str, headers: Mapping[str, str]) -> Identity | None:
        digest = hashlib.sha256(token.encode()).hexdigest()[:32]
        return Identity(f"bearer-{digest}", Caller(token))


def http_app(
    opener: SandboxOpener,
    verifier: RequestVerifier,
    *,
    tool_timeout_s: float = 0,
    idle_timeout_s: float = 1800,
    allowed_hosts: list[str] | None = None,
    max_sessions: int | None = 100,
) -> Starlette:
    """The streamable HTTP app at /mcp: every request needs a bearer token `verifier`
    accepts, and a session answers only to the caller that opened it (the SDK compares).

    `allowed_hosts` (Host header values) turns on the SDK's DNS-rebinding protection, for
    a server on a loopback address a browser could be tricked into calling.
    """
    server = build_server(opener, tool_timeout_s=tool_timeout_s)
    security = None
    if allowed_hosts:
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=allowed_hosts
        )
    manager = StreamableHTTPSessionManager(
        app=server,
        security_settings=security,
        session_idle_timeout=idle_timeout_s,
        max_request_body_size=_MAX_REQUEST_BYTES,
        max_sessions=max_sessions,
    )

    async def handle(scope: Scope, receive: Receive, send: Send) -> None:
        await manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with manager.run():  # ends every session, so every sandbox, at shutdown
            yield

    return Starlette(
        routes=[Route(MCP_PATH, endpoint=RequireAuthMiddleware(handle, [], None))],
        middleware=[
            Middleware(AuthenticationMiddleware, backend=_BearerBackend(verifier)),
            Middleware(AuthContextMiddleware),
        ],
        lifespan=lifespan,
    )


class _BearerBackend(AuthenticationBackend):
    """`Authorization: Bearer <token>` checked by a RequestVerifier, which also sees the
    request's headers (a caller may name a namespace and pool in them)."""

    def __init__(self, verifier: RequestVerifier) -> None:
        self._verifier = verifier

    async def authenticate(
        self, conn: HTTPConnection
    ) -> tuple[AuthCredentials, AuthenticatedUser] | None:
        token = bearer_token_of(conn.headers.get("authorization"))
        if token is None:
            return None
        identity = await self._verifier.verify(token, conn.headers)
        if identity is None:
            return None
        caller = identity.caller
        claims = {_NAMESPACE_CLAIM: caller.namespace, _POOL_CLAIM: caller.pool}
        # The SDK binds each session to client_id and subject (its AuthorizationContext).
        access = AccessToken(
            token=token, client_id=identity.name, subject=identity.name, scopes=[], claims=claims
        )
        return AuthCredentials([]), AuthenticatedUser(access)


async def serve_http(app: Starlette, *, host: str, port: int) -> None:
    """Serve `app` with uvicorn until cancelled (Ctrl-C): sessions end, sandboxes go."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
