"""A scripted GatewayService for the client's status-mapping tests: no proxy, no claim path.

Only for what the real gateway (tests/support/client_gateway.py) cannot be made to answer
on cue: DEADLINE_EXCEEDED, INTERNAL, or an UNAVAILABLE for exactly one attempt (to count
the client's retries). Everything the real gateway can answer is tested against it. This
serves the real GatewayService API on a real grpc.aio server on 127.0.0.1, records what
callers sent and answers each call with its scripted status, or with made-up sandboxes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import grpc
import grpc.aio

from sandfleet_proto.gateway.v1 import gateway_service_pb2 as gateway_pb
from sandfleet_proto.gateway.v1 import gateway_service_pb2_grpc as gateway_grpc


@dataclasses.dataclass
class Failure:
    """Answer the next `times` calls of `method` (Claim, Connect, Release) with this status."""

    code: grpc.StatusCode
    message: str
    times: int = 1


class ScriptedGatewayService(gateway_grpc.GatewayServiceServicer):
    """Claim hands out sandboxes no runtime stands behind; Connect and Release know them."""

    def __init__(self) -> None:
        self.sessions: dict[str, gateway_pb.ClaimedSandbox] = {}
        self.calls: list[tuple[str, Any, dict[str, str]]] = []
        """(method, request, metadata) of every call."""
        self.failures: dict[str, Failure] = {}
        self.port = 0
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        server = grpc.aio.server()
        gateway_grpc.add_GatewayServiceServicer_to_server(self, server)
        self.port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(None)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def methods(self) -> list[str]:
        return [method for method, _, _ in self.calls]

    async def Claim(
        self, request: gateway_pb.ClaimRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> gateway_pb.ClaimResponse:
        await self._script("Claim", request, context)
        claimed = []
        for _ in range(request.count or 1):
            name = f"{request.generate_name or 'sandbox-'}{len(self.calls)}-{len(claimed)}"
            sandbox = gateway_pb.ClaimedSandbox(
                namespace=request.namespace, name=name, token="scripted-token", pod=f"{name}-pod"
            )
            self.sessions[f"{request.namespace}/{name}"] = sandbox
            claimed.append(sandbox)
        return gateway_pb.ClaimResponse(sandboxes=claimed)

    async def Connect(
        self, request: gateway_pb.ConnectRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> gateway_pb.ConnectResponse:
        await self._script("Connect", request, context)
        sandbox = self.sessions.get(f"{request.namespace}/{request.name}")
        if sandbox is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no session {request.name}")
        return gateway_pb.ConnectResponse(sandbox=sandbox)

    async def Release(
        self, request: gateway_pb.ReleaseRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> gateway_pb.ReleaseResponse:
        await self._script("Release", request, context)
        gone = [self.sessions.pop(f"{request.namespace}/{n}", None) for n in request.names]
        return gateway_pb.ReleaseResponse(released=sum(s is not None for s in gone))

    async def _script(
        self, method: str, request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        metadata = {key: str(value) for key, value in context.invocation_metadata() or ()}
        self.calls.append((method, request, metadata))
        failure = self.failures.get(method)
        if failure is not None and failure.times > 0:
            failure.times -= 1
            await context.abort(failure.code, failure.message)
