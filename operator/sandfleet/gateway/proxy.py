"""The runtime proxy: every sandfleet.runtime.v1 call, forwarded undecoded to its session's pod.

The call names its session in `x-sandfleet-session: <namespace>/<name>` and carries two
tokens: its caller's Kubernetes token in `x-sandfleet-authorization` (reviewed through the
same caches as Claim and Connect, so a revoked caller loses its sandboxes too, not just new
claims) and the session's runtime token in `authorization`, which goes on unchanged for the
runtime to check. No such session, a namespace the caller may not use and a runtime token
that is not the session's all get one answer (REFUSED_CODE, the same message), and a name
the session index does not know costs the API server nothing: names cannot be probed.
Messages stay bytes end to end (identity serializers), so the gateway's cost is two cache
lookups, a channel from the cache and the copy gRPC makes anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from sandfleet.api import GATEWAY_SESSION_METADATA, Phase
from sandfleet.errors import QuotaExceededError, SandfleetError
from sandfleet.gateway.auth import (
    CALLER_METADATA,
    Authenticator,
    AuthUnavailableError,
    PermissionDeniedError,
    UnauthenticatedError,
    bearer_token,
)
from sandfleet.gateway.metrics import GatewayMetrics
from sandfleet.gateway.requests import InvalidRequestError, check_namespace
from sandfleet.gateway.resume import RESUME_WAIT_S, Resumer
from sandfleet.gateway.routes import Route, SessionRoutes
from sandfleet.logs import get_logger
from sandfleet_proto.runtime.v1 import (
    bash_service_pb2,
    editor_service_pb2,
    file_service_pb2,
    system_service_pb2,
)

log = get_logger(__name__)

if TYPE_CHECKING:
    _GenericHandler = grpc.GenericRpcHandler[bytes, bytes]
    _MethodHandler = grpc.RpcMethodHandler[bytes, bytes]
else:  # not subscriptable at run time
    _GenericHandler = grpc.GenericRpcHandler
    _MethodHandler = grpc.RpcMethodHandler

PROXIED_FILES = (bash_service_pb2, editor_service_pb2, file_service_pb2, system_service_pb2)
"""The runtime's services, from their generated descriptors (every method, every shape)."""

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""As the runtime and its client allow: a proxied message must fit both ends."""
PUMP_SETTLE_S = 2.0
"""How long a refused client stream may take to see the refusal before its reading is cancelled."""
PROXY_VERB = "create"
"""RBAC verb on sandboxsessions a proxied call's caller needs in the session's namespace: the
one Claim and Connect (which hand out runtime tokens) need."""
REFUSED_CODE = grpc.StatusCode.PERMISSION_DENIED
"""The one answer for: no such session, not the caller's namespace, not the session's token."""

CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # Each pod's channel is used by one session's calls only; no load balancing to share.
    ("grpc.use_local_subchannel_pool", 1),
)

# Phrases gRPC core puts in UNAVAILABLE details when no connection could be made (the
# runtime's own UNAVAILABLE answers, e.g. "shutting down", pass through as they are).
_NO_CONNECTION = (
    "failed to connect",
    "connection refused",
    "connections to all backends failing",
    "socket closed",
    "connection reset",
    "dns resolution failed",
    "no route to host",
    "deadline exceeded while connecting",
)


class ProxyRefusedError(SandfleetError):
    """A call the proxy answers itself (no session named, unknown, not ready)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


def proxied_methods() -> list[tuple[str, bool, bool]]:
    """(full method path, client streaming, server streaming) of every proxied method."""
    methods = []
    for module in PROXIED_FILES:
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                methods.append(
                    (
                        f"/{service.full_name}/{method.name}",
                        method.client_streaming,
                        method.server_streaming,
                    )
                )
    return methods


class _Upstream:
    """One open channel to one pod's runtime, with its multicallables made once per method."""

    __slots__ = ("calls", "channel")

    def __init__(self, address: str, channel: grpc.aio.Channel | None = None) -> None:
        self.channel = channel or grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        self.calls: dict[str, Any] = {}

    def call(self, method: str, client_streaming: bool, server_streaming: bool) -> Any:
        call = self.calls.get(method)
        if call is None:
            channel: Any = self.channel
            if client_streaming:
                make = channel.stream_stream if server_streaming else channel.stream_unary
            else:
                make = channel.unary_stream if server_streaming else channel.unary_unary
            # No serializers: bytes in, bytes out.
            call = make(method, request_serializer=None, response_deserializer=None)
            self.calls[method] = call
        return call


class ChannelCache:
    """Channels by pod address, kept open across calls and closed when the pod goes away."""

    def __init__(self) -> None:
        self._upstreams: dict[str, _Upstream] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._upstreams)

    def get(self, address: str) -> _Upstream:
        upstream = self._upstreams.get(address)
        if upstream is None:
            upstream = self._upstreams[address] = _Upstream(address)
        return upstream

    def adopt(self, address: str, channel: grpc.aio.Channel) -> None:
        """Keep `channel`, open and connected to `address` (the one the claim path warmed
        and bound over), for the session's calls: its first call then dials nothing."""
        if address in self._upstreams:
            self._close_later(channel)
        else:
            self._upstreams[address] = _Upstream(address, channel)

    def evict(self, address: str) -> None:
        upstream = self._upstreams.pop(address, None)
        if upstream is not None:
            self._close_later(upstream.channel)

    def _close_later(self, channel: grpc.aio.Channel) -> None:
        task = asyncio.get_running_loop().create_task(channel.close(grace=None))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        upstreams, self._upstreams = list(self._upstreams.values()), {}
        for upstream in upstreams:
            await upstream.channel.close(grace=None)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


class _Forward:
    """One upstream call, and the task writing the caller's messages into it (if streaming)."""

    __slots__ = ("call", "pump")

    def __init__(self, call: Any, pump: asyncio.Future[None] | None = None) -> None:
        self.call = call
        self.pump = pump

    async def settle(self) -> None:
        """After the upstream call ended early: let the pump notice (its next write fails)
        rather than cancel it mid-read of the caller's stream, which grpc's core answers
        with INTERNAL instead of the status we are about to send; cancel it only when the
        caller sends nothing more for a while."""
        if self.pump is not None and not self.pump.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.pump), PUMP_SETTLE_S)
        await self.stop()

    async def stop(self) -> None:
        """Cancel the upstream call (a no-op once it ended) and stop the pump."""
        self.call.cancel()
        if self.pump is not None and not self.pump.done():
            self.pump.cancel()
            await asyncio.gather(self.pump, return_exceptions=True)


async def _pump(requests: AsyncIterator[bytes], call: Any) -> None:
    try:
        async for message in requests:
            await call.write(message)
        await call.done_writing()
    except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
        return  # the call ended first: its status is the answer


class RuntimeProxy(_GenericHandler):
    """A generic handler for every proxied method; add it to the gateway's grpc.aio server."""

    def __init__(
        self,
        routes: SessionRoutes,
        channels: ChannelCache,
        metrics: GatewayMetrics,
        auth: Authenticator,
        namespaces: tuple[str, ...] = (),
        *,
        resumer: Resumer | None = None,
    ) -> None:
        self._routes = routes
        self._resumer = resumer
        """Resumes a Suspended session a call names (None: such calls are refused)."""
        self._auth = auth
        self._namespaces = namespaces
        """Served namespaces (empty: all); a call naming another is refused unreviewed."""
        self._channels = channels
        self._metrics = metrics
        self._handlers = {
            method: self._handler(method, client_streaming, server_streaming)
            for method, client_streaming, server_streaming in proxied_methods()
        }

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> _MethodHandler | None:
        return self._handlers.get(handler_call_details.method)

    def _handler(
        self, method: str, client_streaming: bool, server_streaming: bool
    ) -> _MethodHandler:
        label = method.rsplit(".", 1)[-1]  # "BashService/RunCommand"
        target = self._target

        def start(
            request: Any, context: grpc.aio.ServicerContext[Any, Any], route: Route
        ) -> _Forward:
            upstream = self._channels.get(route.address or "")
            multicallable = upstream.call(method, client_streaming, server_streaming)
            metadata, timeout = _forwarded(context), _remaining(context)
            if not client_streaming:
                return _Forward(multicallable(request, metadata=metadata, timeout=timeout))
            # Client streaming: our own pump writes the caller's messages, so that when the
            # call ends early (the runtime refuses the header) the reading stops before the
            # answer goes back; gRPC's own request poller would keep reading the server call.
            call = multicallable(metadata=metadata, timeout=timeout)
            return _Forward(call, asyncio.ensure_future(_pump(request, call)))

        if server_streaming:

            async def streaming(
                request: Any, context: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[bytes]:
                started = time.monotonic()
                route = await target(context)
                if route is None:
                    return
                forward = start(request, context, route)
                try:
                    async for message in forward.call:
                        yield message
                except grpc.aio.AioRpcError as error:
                    await forward.settle()
                    await _abort_upstream(context, error, route)
                finally:
                    await forward.stop()  # cancels upstream when the client went away
                    self._metrics.call_finished(label, time.monotonic() - started)

            return (
                grpc.stream_stream_rpc_method_handler(streaming)
                if client_streaming
                else grpc.unary_stream_rpc_method_handler(streaming)
            )

        async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
            started = time.monotonic()
            route = await target(context)
            if route is None:
                return b""
            forward = start(request, context, route)
            try:
                response: bytes = await forward.call
                return response
            except grpc.aio.AioRpcError as error:
                await forward.settle()
                await _abort_upstream(context, error, route)
                raise AssertionError("unreachable: abort raises") from error
            finally:
                await forward.stop()  # cancels upstream when the client went away
                self._metrics.call_finished(label, time.monotonic() - started)

        return (
            grpc.stream_unary_rpc_method_handler(unary)
            if client_streaming
            else grpc.unary_unary_rpc_method_handler(unary)
        )

    async def _target(self, context: grpc.aio.ServicerContext[Any, Any]) -> Route | None:
        """The route of the session the call names; aborts the call (and returns None, for
        the type checker) when there is none to go to."""
        remaining = _remaining(context)
        # A resume leaves the call a moment of its deadline for the call itself.
        wait_s = RESUME_WAIT_S if remaining is None else max(remaining - 0.5, 0.0)
        try:
            return await self._resolve(context.invocation_metadata() or (), wait_s)
        except ProxyRefusedError as refusal:
            await context.abort(refusal.code, refusal.details)
        return None

    async def _resolve(
        self, metadata: Iterable[tuple[str, Any]], resume_wait_s: float = RESUME_WAIT_S
    ) -> Route:
        named = next((v for k, v in metadata if k == GATEWAY_SESSION_METADATA), None)
        if not isinstance(named, str) or not named:
            raise ProxyRefusedError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the call names no session: send '{GATEWAY_SESSION_METADATA}: "
                "<namespace>/<name>' metadata (from Claim or Connect) with every runtime call",
            )
        namespace, _, name = named.partition("/")
        if not namespace or not name or "/" in name:
            raise ProxyRefusedError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{GATEWAY_SESSION_METADATA}: {named!r} is not '<namespace>/<name>'",
            )
        await self._authorize(metadata, namespace, named)
        route = await self._routes.resolve(namespace, name)
        if route is None:
            log.debug("gateway_proxy_refused", session=named, reason="no_session")
            raise refused(named)
        if route.finished:
            raise ProxyRefusedError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"session {named} has ended (phase {route.phase}): its sandbox is gone; "
                "claim a new one",
            )
        if route.phase == Phase.SUSPENDED and self._resumer is not None:
            route = await self._resume(route, named, resume_wait_s)
        if not route.ready:
            raise ProxyRefusedError(
                grpc.StatusCode.UNAVAILABLE,
                f"session {named} is not ready yet (phase {route.phase or 'unknown'}); "
                "try again when Connect says it is Ready",
            )
        return route

    async def _resume(self, route: Route, named: str, wait_s: float) -> Route:
        """The session resumed (asked once per replica, however many calls wait) and Ready,
        within `wait_s`; UNAVAILABLE when the resume cannot be asked for or takes longer."""
        assert self._resumer is not None
        try:
            await self._resumer.request(route.namespace, route.name)
        except QuotaExceededError as error:
            self._metrics.quota_rejected(route.namespace)
            raise ProxyRefusedError(
                grpc.StatusCode.RESOURCE_EXHAUSTED, f"session {named} is suspended: {error}"
            ) from None
        except SandfleetError as error:
            raise ProxyRefusedError(
                grpc.StatusCode.UNAVAILABLE, f"session {named} is suspended: {error}"
            ) from None
        resumed = await self._routes.wait_resumed(route.namespace, route.name, wait_s)
        if resumed is None or not resumed.ready:
            phase = resumed.phase if resumed is not None else "gone"
            raise ProxyRefusedError(
                grpc.StatusCode.UNAVAILABLE,
                f"session {named} was suspended and is not resumed within {wait_s:.1f}s "
                f"(phase {phase}); try again",
            )
        return resumed

    async def _authorize(
        self, metadata: Iterable[tuple[str, Any]], namespace: str, named: str
    ) -> None:
        """The caller's Kubernetes token is valid and RBAC lets it use sessions in the
        namespace. What it says depends on the token only, never on the session's name."""
        try:
            token = bearer_token(metadata, CALLER_METADATA)
            caller = await self._auth.authenticate(token)
        except UnauthenticatedError as error:
            self._metrics.auth_failed("unauthenticated")
            raise ProxyRefusedError(grpc.StatusCode.UNAUTHENTICATED, str(error)) from None
        except AuthUnavailableError as error:
            self._metrics.auth_failed("unavailable")
            raise ProxyRefusedError(grpc.StatusCode.UNAVAILABLE, str(error)) from None
        try:
            check_namespace(namespace, self._namespaces)
        except InvalidRequestError:
            # No review of a namespace that cannot hold a served session: the same answer.
            self._metrics.auth_failed("denied")
            log.debug("gateway_proxy_refused", session=named, reason="not_served")
            raise refused(named) from None
        try:
            await self._auth.authorize(caller, PROXY_VERB, namespace)
        except PermissionDeniedError as error:
            self._metrics.auth_failed("denied")
            log.debug("gateway_proxy_refused", session=named, reason="denied", error=str(error))
            raise refused(named) from None
        except AuthUnavailableError as error:
            self._metrics.auth_failed("unavailable")
            raise ProxyRefusedError(grpc.StatusCode.UNAVAILABLE, str(error)) from None


def refused(named: str) -> ProxyRefusedError:
    """The one refusal for a session that does not exist, is in a namespace the caller may
    not use, or whose runtime token the call does not carry: same code, same message."""
    return ProxyRefusedError(
        REFUSED_CODE,
        f"session {named} is not available to this caller: no such session, no right to "
        "use sessions in its namespace, or not its runtime token (from Claim or Connect)",
    )


def _forwarded(context: grpc.aio.ServicerContext[Any, Any]) -> Sequence[tuple[str, str | bytes]]:
    """The caller's authorization, as it came: the runtime checks the session token."""
    return tuple(
        (key, value) for key, value in context.invocation_metadata() or () if key == "authorization"
    )


def _remaining(context: grpc.aio.ServicerContext[Any, Any]) -> float | None:
    remaining = context.time_remaining()
    # No deadline reads as a huge number of seconds; upstream then has none either.
    return remaining if remaining is not None and remaining < 10**8 else None


async def _abort_upstream(
    context: grpc.aio.ServicerContext[Any, Any], error: grpc.aio.AioRpcError, route: Route
) -> None:
    """End the call as upstream ended it: same code, details and trailers; a pod that does
    not answer at all gets a message that says so, a runtime token the runtime refuses the
    proxy's own refusal (a wrong token must read as a wrong name)."""
    code, details = error.code(), error.details() or ""
    if code == grpc.StatusCode.UNAUTHENTICATED:
        log.debug(
            "gateway_proxy_refused", session=f"{route.namespace}/{route.name}", reason="token"
        )
        refusal = refused(f"{route.namespace}/{route.name}")
        await context.abort(refusal.code, refusal.details)
    if code == grpc.StatusCode.UNAVAILABLE and any(p in details.lower() for p in _NO_CONNECTION):
        details = (
            f"sandbox {route.namespace}/{route.name} (pod {route.pod or '?'} at "
            f"{route.address}) does not answer: {details}"
        )
    trailers: Any = error.trailing_metadata() or ()
    await context.abort(code, details, trailing_metadata=trailers)
