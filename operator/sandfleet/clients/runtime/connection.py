"""RuntimeConnection: one gRPC channel to one runtime agent, its service stubs, the call
metadata (the runtime token, the gateway's routing) and the translation of gRPC failures.
RuntimeClient and its rollout calls both use one connection."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from sandfleet.api import CALLER_AUTHORIZATION, GATEWAY_SESSION_METADATA
from sandfleet.clients.grpc_channel import CallerToken, Tls, open_channel, retry_service_config
from sandfleet.clients.runtime.calls import DEADLINE_MARGIN_S, command_result, translate
from sandfleet.clients.runtime.results import CommandResult
from sandfleet_proto.runtime.v1 import bash_service_pb2 as bash_pb
from sandfleet_proto.runtime.v1 import bash_service_pb2_grpc as bash_grpc
from sandfleet_proto.runtime.v1 import editor_service_pb2_grpc as editor_grpc
from sandfleet_proto.runtime.v1 import file_service_pb2_grpc as file_grpc
from sandfleet_proto.runtime.v1 import system_service_pb2_grpc as system_grpc

T = TypeVar("T")

# Transport retries for calls the server never saw (UNAVAILABLE); nothing else is retried,
# because a command that reached the server may already have run.
_SERVICE_CONFIG = retry_service_config(
    [
        "sandfleet.runtime.v1.EditorService",
        "sandfleet.runtime.v1.SystemService",
        "sandfleet.runtime.v1.BashService",
    ]
)


RuntimeChannel = grpc.aio.Channel
"""The channel type RuntimeClient takes (for modules that keep grpc out of their imports)."""


def open_runtime_channel(
    address: str, tls: Tls | None = None, caller_token: Callable[[], str] | None = None
) -> grpc.aio.Channel:
    """A channel for RuntimeClients of `address`; through a gateway, every call on it
    carries `caller_token()` as the caller's Kubernetes token."""
    interceptors = (
        CallerToken(CALLER_AUTHORIZATION, caller_token).interceptors()
        if caller_token is not None
        else []
    )
    return open_channel(address, service_config=_SERVICE_CONFIG, tls=tls, interceptors=interceptors)


class RuntimeConnection:
    """The channel, stubs and metadata every runtime call goes through."""

    def __init__(
        self,
        address: str,
        token: str,
        *,
        rpc_timeout_s: float,
        session: str | None,
        tls: Tls | None,
        caller_token: Callable[[], str] | None,
        channel: RuntimeChannel | None = None,
    ) -> None:
        """`channel`: an open one that others share (open_runtime_channel; close() leaves
        it open), instead of one of the connection's own."""
        self.rpc_timeout_s = rpc_timeout_s
        """The deadline of calls that run no command (stats, editor, listings)."""
        self._routing: tuple[tuple[str, str], ...] = (
            ((GATEWAY_SESSION_METADATA, session),) if session else ()
        )
        self.metadata = self._with_token(token)
        """What every call carries: the runtime token and, through a gateway, the session."""
        self._channel = channel or open_runtime_channel(address, tls, caller_token)
        self._detached = channel is not None
        self.bash = bash_grpc.BashServiceStub(self._channel)
        self.editor = editor_grpc.EditorServiceStub(self._channel)
        self.files = file_grpc.FileServiceStub(self._channel)
        self.system = system_grpc.SystemServiceStub(self._channel)

    def _with_token(self, token: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {token}"), *self._routing)

    def rotate_token(self, token: str) -> None:
        self.metadata = self._with_token(token)

    async def close(self) -> None:
        if not self._detached:
            await self._channel.close(grace=None)

    def detach_channel(self) -> grpc.aio.Channel:
        """The open channel, now the caller's to close (a gateway hands the channel it
        warmed for a claim to its proxy); this connection must not be used any more."""
        self._detached = True
        return self._channel

    async def rpc(self, call: Callable[[], Awaitable[T]]) -> T:
        """`call`'s answer; a gRPC failure as ToolError (the model's to fix) or
        SandboxLostError (infrastructure)."""
        try:
            return await call()
        except grpc.aio.AioRpcError as exc:
            raise translate(exc) from exc

    async def run_command(self, request: bash_pb.RunCommandRequest) -> CommandResult:
        """One RunCommand call, with a deadline past the command's own timeout (an hour
        when it has none) so the runtime's answer, not ours, says when it timed out."""
        deadline = (request.timeout_seconds or 3600.0) + DEADLINE_MARGIN_S
        response = await self.rpc(
            lambda: self.bash.RunCommand(request, metadata=self.metadata, timeout=deadline)
        )
        return command_result(response)
