"""An in-process gateway for tests, with an in-test Claimer stand-in.

The stand-in hands out sandboxes that are real runtimes on 127.0.0.1 (the claim path itself,
sandfleet.gateway.claims, needs a cluster and is g2's, tested in the cluster tier); the
gateway around it (auth, quotas, routes, proxy) is the real one.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import grpc.aio

from sandfleet.gateway.claim_types import Claimed, ClaimError, ClaimFailure, ClaimSpec
from sandfleet.gateway.server import GatewayServer
from sandfleet.gateway.settings import GatewaySettings
from sandfleet.kube import KubeClient


class StandInClaimer:
    """Claims from a fixed list of (pod, address, token) runtimes, in order."""

    def __init__(self, sandboxes: Sequence[tuple[str, str, str]] = (), workdir: str = "/") -> None:
        self.free = list(sandboxes)
        self.workdir = workdir
        self.specs: list[ClaimSpec] = []
        self.released: list[tuple[str, list[str]]] = []
        self.sessions: dict[tuple[str, str], Claimed] = {}
        self.fail_with: BaseException | None = None
        self.pod_addresses: dict[tuple[str, str], str] = {}
        """(namespace, pod) -> host:port: what the real claimer's pod index would know."""
        self.started = False
        self.stopped = False
        self.hand_over: Callable[[str, grpc.aio.Channel], None] | None = None

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    def pod_address(self, namespace: str, pod: str) -> str | None:
        return self.pod_addresses.get((namespace, pod))

    async def claim(self, spec: ClaimSpec) -> list[Claimed]:
        self.specs.append(spec)
        if self.fail_with is not None:
            raise self.fail_with
        claimed = []
        for i in range(spec.count):
            pod, address, token = self.free.pop(0)
            name = f"{spec.generate_name}{len(self.sessions) + i}"
            claimed.append(
                Claimed(
                    namespace=spec.namespace,
                    name=name,
                    token=token,
                    pod=pod,
                    address=address,
                    warm=True,
                    workdir=self.workdir,
                )
            )
        for sandbox in claimed:
            self.sessions[(sandbox.namespace, sandbox.name)] = sandbox
        return claimed

    async def connect(
        self, namespace: str, name: str, timeout_s: float, *, resume: Any = None
    ) -> Claimed:
        if self.fail_with is not None:
            raise self.fail_with
        try:
            return self.sessions[(namespace, name)]
        except KeyError:
            raise ClaimError(ClaimFailure.NOT_FOUND, f"no session {namespace}/{name}") from None

    async def release(self, namespace: str, names: Sequence[str]) -> int:
        self.released.append((namespace, list(names)))
        return sum(1 for n in names if self.sessions.pop((namespace, n), None) is not None)


def gateway_settings(**overrides: Any) -> GatewaySettings:
    values: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "http_host": "127.0.0.1"}
    values |= {"http_port": 0, "replica": "gateway-test", "shutdown_grace_seconds": 1.0}
    return GatewaySettings(**(values | overrides))


@contextlib.asynccontextmanager
async def running_gateway(
    kube: KubeClient,
    claimer: StandInClaimer,
    *,
    interceptors: Sequence[grpc.aio.ServerInterceptor[Any, Any]] = (),
    **overrides: Any,
) -> AsyncIterator[GatewayServer]:
    server = GatewayServer(
        gateway_settings(**overrides), kube=kube, claimer=claimer, interceptors=interceptors
    )
    try:
        await server.start()
        yield server
    finally:
        await server.stop(grace_s=0.5)
