"""The real gateway in-process in front of real runtimes, for the client side's tests.

GatewayServer (auth, quotas, session routes, the runtime proxy) is the real one. Behind it,
two stand-ins, because no cluster runs in these tests: the claim path (StandInClaimer hands
out the given runtimes on 127.0.0.1) and the Kubernetes API server (answers the gateway's
TokenReviews and SubjectAccessReviews); the cluster tier covers the real ones. A
CallRecorder interceptor on the gateway records what callers sent, so tests can check the
client's token, requests and session routing.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from sandfleet.gateway.claim_types import Claimed
from sandfleet.gateway.server import GATEWAY_SERVICE, GatewayServer
from tests.support.gateway_api import StandInApiServer, running_api
from tests.support.gateway_server import StandInClaimer, running_gateway
from tests.support.runtime_server import spawn_runtime_process

CALLER = "system:serviceaccount:rl:trainer"
CALLER_TOKEN = "caller-kube-token"
"""The bearer token the stand-in API server accepts (as CALLER's)."""
NAMESPACE = "team-a"
"""Where CALLER may create and delete sandboxsessions."""
CLAIMS_PER_RUNTIME = 16
"""StandInClaimer hands each (pod, address, token) out once: each runtime is offered this
often (as pods runtime-0-0, runtime-0-1, ...), enough for any test's claims."""

Metadata = dict[str, str]


class CallRecorder(grpc.aio.ServerInterceptor):
    """Records every call the gateway receives, in order, before it is handled."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, Metadata]] = []
        """(method name, decoded request, metadata) of every GatewayService call."""
        self.proxied: list[tuple[str, Metadata]] = []
        """(full method, metadata) of every other call (the runtime services)."""

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        method = handler_call_details.method
        metadata = {
            key: value
            for key, value in handler_call_details.invocation_metadata or ()
            if isinstance(value, str)
        }
        handler = await continuation(handler_call_details)
        gateway_call = method.startswith(f"/{GATEWAY_SERVICE}/")
        if handler is None or not gateway_call or handler.unary_unary is None:
            self.proxied.append((method, metadata))
            return handler
        # GatewayService is all unary: wrap the behaviour to see the decoded request.
        behaviour = handler.unary_unary
        name = method.rsplit("/", 1)[1]

        async def recorded(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            self.calls.append((name, request, metadata))
            return await behaviour(request, context)

        return grpc.unary_unary_rpc_method_handler(
            recorded,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


class ClientGateway:
    """The running gateway and its stand-ins, with what it recorded."""

    def __init__(
        self,
        server: GatewayServer,
        api: StandInApiServer,
        claimer: StandInClaimer,
        recorder: CallRecorder,
        runtimes: Sequence[tuple[str, str]],
    ) -> None:
        self.server = server
        self.api = api
        self.claimer = claimer
        self.recorder = recorder
        self.runtimes = list(runtimes)

    @property
    def address(self) -> str:
        return self.server.address

    @property
    def workdir(self) -> str:
        return self.claimer.workdir

    @property
    def runtime_token(self) -> str:
        """The first runtime's token: what the sessions claimed from it carry."""
        return self.runtimes[0][1]

    @property
    def calls(self) -> list[tuple[str, Any, Metadata]]:
        return self.recorder.calls

    @property
    def proxied(self) -> list[tuple[str, Metadata]]:
        return self.recorder.proxied

    def methods(self) -> list[str]:
        """The GatewayService methods called, in order."""
        return [method for method, _, _ in self.recorder.calls]

    @property
    def sessions(self) -> list[str]:
        """ "namespace/name" of the sessions claimed (or added) and not released."""
        return sorted(f"{namespace}/{name}" for namespace, name in self.claimer.sessions)

    def add_session(self, name: str, runtime: int = 0) -> Claimed:
        """A session the gateway did not claim (made with kubectl, say) on that runtime:
        Connect finds it, and the proxy routes to it as if the session index had seen it."""
        address, token = self.runtimes[runtime]
        claimed = Claimed(
            namespace=NAMESPACE,
            name=name,
            token=token,
            pod=f"pod-{name}",
            address=address,
            warm=False,
            workdir=self.workdir,
        )
        self.claimer.sessions[(NAMESPACE, name)] = claimed
        self.server.routes.record(claimed)
        return claimed


@contextlib.asynccontextmanager
async def client_gateway(
    runtimes: Sequence[tuple[str, str]], workdir: str, **settings: Any
) -> AsyncIterator[ClientGateway]:
    """The real gateway on 127.0.0.1:<free port> handing out `runtimes` ((address, token)
    each) in turn; CALLER_TOKEN may create and delete sessions in NAMESPACE. `settings`
    override GatewaySettings fields (quotas, TLS files, review cache TTLs)."""
    sandboxes = [
        (f"runtime-{i}-{n}", address, token)
        for n in range(CLAIMS_PER_RUNTIME)
        for i, (address, token) in enumerate(runtimes)
    ]
    async with running_api() as (api, kube):
        api.accept(CALLER_TOKEN, CALLER)
        api.allow(CALLER, "create", NAMESPACE)
        api.allow(CALLER, "delete", NAMESPACE)
        claimer = StandInClaimer(sandboxes, workdir=workdir)
        recorder = CallRecorder()
        async with running_gateway(kube, claimer, interceptors=[recorder], **settings) as server:
            yield ClientGateway(server, api, claimer, recorder, runtimes)


@contextlib.asynccontextmanager
async def gateway_over_child_runtime(folder: Path) -> AsyncIterator[ClientGateway]:
    """client_gateway handing out one runtime agent run as a child process (working tree
    `folder`/sandbox). A child process, not in-process: the in-process runtime reaps every
    child of this process (its ChildReaper), which would hide a CLI's or an MCP server's
    exit status from the test."""
    workdir = folder / "sandbox"
    workdir.mkdir()
    token = secrets.token_urlsafe(16)
    process, port = await asyncio.to_thread(spawn_runtime_process, workdir, token)
    try:
        async with client_gateway([(f"127.0.0.1:{port}", token)], str(workdir)) as gateway:
            yield gateway
    finally:
        process.terminate()
        await asyncio.to_thread(process.wait, 30)
