"""A stand-in for the sandfleet gateway, for the client side's tests (g1 writes the real one).

It serves the real GatewayService API on a real grpc.aio server on 127.0.0.1 and proxies
the runtime services, by `x-sandfleet-session`, to a real runtime agent: only the claim
path behind it is scripted (every session it hands out is the same runtime, no Kubernetes).
It records what callers sent (requests, metadata) and can answer a call with a chosen
status, so tests can check the client's token, routing and error mapping.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from sandfleet.api import GATEWAY_SESSION_METADATA
from sandfleet_proto.gateway.v1 import gateway_service_pb2 as gateway_pb
from sandfleet_proto.gateway.v1 import gateway_service_pb2_grpc as gateway_grpc

CALLER_TOKEN = "caller-kube-token"
"""The only bearer token the stand-in's GatewayService accepts."""
_SERVER_STREAMING = {
    "/sandfleet.runtime.v1.BashService/StreamCommand",
    "/sandfleet.runtime.v1.FileService/DownloadFile",
}
_CLIENT_STREAMING = {"/sandfleet.runtime.v1.FileService/UploadFile"}


@dataclasses.dataclass
class Failure:
    """Answer the next `times` calls of `method` (Claim, Connect, Release) with this status."""

    code: grpc.StatusCode
    message: str
    times: int = 1


class GatewayStandIn(gateway_grpc.GatewayServiceServicer):
    """GatewayService + runtime proxy in front of one real runtime (address, token)."""

    def __init__(self, runtime_address: str, runtime_token: str, working_dir: str) -> None:
        self.runtime_address = runtime_address
        self.runtime_token = runtime_token
        self.working_dir = working_dir
        self.sessions: dict[str, gateway_pb.ClaimedSandbox] = {}
        self.calls: list[tuple[str, Any, dict[str, str]]] = []
        """(method, request, metadata) of every GatewayService call."""
        self.proxied: list[tuple[str, dict[str, str]]] = []
        """(method, metadata) of every runtime call the proxy forwarded."""
        self.failures: dict[str, Failure] = {}
        self.port = 0
        self._server: grpc.aio.Server | None = None
        self._runtime: grpc.aio.Channel | None = None
        self._claimed = 0

    async def start(self, *, tls: tuple[bytes, bytes] | None = None) -> int:
        """Serve on 127.0.0.1:<free port>; `tls` = (certificate chain PEM, key PEM)."""
        self._runtime = grpc.aio.insecure_channel(self.runtime_address)
        server = grpc.aio.server()
        gateway_grpc.add_GatewayServiceServicer_to_server(self, server)
        server.add_generic_rpc_handlers((_Proxy(self),))
        if tls is None:
            self.port = server.add_insecure_port("127.0.0.1:0")
        else:
            credentials = grpc.ssl_server_credentials([(tls[1], tls[0])])
            self.port = server.add_secure_port("127.0.0.1:0", credentials)
        await server.start()
        self._server = server
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(None)
        if self._runtime is not None:
            await self._runtime.close()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def methods(self) -> list[str]:
        return [method for method, _, _ in self.calls]

    # --- GatewayService -----------------------------------------------------------------------
    async def Claim(
        self, request: gateway_pb.ClaimRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> gateway_pb.ClaimResponse:
        await self._admit("Claim", request, context)
        claimed = []
        for _ in range(request.count or 1):
            self._claimed += 1
            name = f"{request.generate_name or 'sandbox-'}{self._claimed}"
            sandbox = gateway_pb.ClaimedSandbox(
                namespace=request.namespace, name=name, token=self.runtime_token,
                pod=f"pool-pod-{self._claimed}", warm=bool(request.pool),
                working_dir=self.working_dir,
            )  # fmt: skip
            self.sessions[f"{request.namespace}/{name}"] = sandbox
            claimed.append(sandbox)
        return gateway_pb.ClaimResponse(sandboxes=claimed)

    async def Connect(
        self, request: gateway_pb.ConnectRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> gateway_pb.ConnectResponse:
        await self._admit("Connect", request, context)
        sandbox = self.sessions.get(f"{request.namespace}/{request.name}")
        if sandbox is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"no session {request.namespace}/{request.name}"
            )
        return gateway_pb.ConnectResponse(sandbox=sandbox)

    async def Release(
        self, request: gateway_pb.ReleaseRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> gateway_pb.ReleaseResponse:
        await self._admit("Release", request, context)
        gone = [self.sessions.pop(f"{request.namespace}/{n}", None) for n in request.names]
        return gateway_pb.ReleaseResponse(released=sum(s is not None for s in gone))

    async def _admit(
        self, method: str, request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        metadata = {key: str(value) for key, value in context.invocation_metadata() or ()}
        self.calls.append((method, request, metadata))
        failure = self.failures.get(method)
        if failure is not None and failure.times > 0:
            failure.times -= 1
            await context.abort(failure.code, failure.message)
        if metadata.get("authorization") != f"Bearer {CALLER_TOKEN}":
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "the token is not valid")


class _Proxy(grpc.GenericRpcHandler):
    """The runtime services, forwarded undecoded to the runtime of the named session."""

    def __init__(self, gateway: GatewayStandIn) -> None:
        self.gateway = gateway

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        method = handler_call_details.method
        if not method.startswith("/sandfleet.runtime.v1."):
            return None
        if method in _SERVER_STREAMING:
            return grpc.unary_stream_rpc_method_handler(self._server_stream(method))
        if method in _CLIENT_STREAMING:
            return grpc.stream_unary_rpc_method_handler(self._client_stream(method))
        return grpc.unary_unary_rpc_method_handler(self._unary(method))

    async def _route(
        self, method: str, context: grpc.aio.ServicerContext[Any, Any]
    ) -> tuple[grpc.aio.Channel, tuple[tuple[str, str], ...]]:
        metadata = {key: str(value) for key, value in context.invocation_metadata() or ()}
        self.gateway.proxied.append((method, metadata))
        session = metadata.get(GATEWAY_SESSION_METADATA, "")
        if session not in self.gateway.sessions:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no session {session!r}")
        assert self.gateway._runtime is not None
        forwarded = (("authorization", metadata.get("authorization", "")),)
        return self.gateway._runtime, forwarded

    def _unary(self, method: str) -> Callable[[bytes, Any], Awaitable[bytes]]:
        async def handle(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
            channel, metadata = await self._route(method, context)
            try:
                response: bytes = await channel.unary_unary(method)(request, metadata=metadata)
            except grpc.aio.AioRpcError as error:
                await context.abort(error.code(), error.details() or "")
            return response

        return handle

    def _server_stream(self, method: str) -> Callable[[bytes, Any], AsyncIterator[bytes]]:
        async def handle(
            request: bytes, context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[bytes]:
            channel, metadata = await self._route(method, context)
            try:
                async for message in channel.unary_stream(method)(request, metadata=metadata):
                    yield message
            except grpc.aio.AioRpcError as error:
                await context.abort(error.code(), error.details() or "")

        return handle

    def _client_stream(
        self, method: str
    ) -> Callable[[AsyncIterator[bytes], Any], Awaitable[bytes]]:
        async def handle(
            requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]
        ) -> bytes:
            channel, metadata = await self._route(method, context)
            try:
                response: bytes = await channel.stream_unary(method)(requests, metadata=metadata)
            except grpc.aio.AioRpcError as error:
                await context.abort(error.code(), error.details() or "")
            return response

        return handle
