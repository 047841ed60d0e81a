"""The gateway's claim path against the real cluster: the operator as a process (like
operator_e2e, with the fleet's session key and a short orphan-claim grace), and the claim
path in-process (`Claimer` over the admin kubeconfig), and whole gateway replicas in-process
(`start_gateway`, as the gateway's own ServiceAccount with the RBAC in manifests/rbac)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandfleet.gateway.claims import Claimer, ClaimSettings
from sandfleet.gateway.server import GatewayServer
from sandfleet.gateway.settings import GatewaySettings
from sandfleet.kube import KubeClient, KubeConfig
from tests.cluster.harness.cluster_access import ClusterUnderTest, unavailable
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import (
    OPERATOR_NAMESPACE,
    OperatorProcess,
    running_operator,
    service_account_kubeconfig,
)

ORPHAN_CLAIM_GRACE_S = 3
MakeClaimer = Callable[[str], Awaitable[Claimer]]


@pytest.fixture(scope="package")
def session_key() -> bytes:
    return secrets.token_urlsafe(48).encode()


@pytest.fixture(scope="package")
def operator(
    cluster_under_test: ClusterUnderTest,
    tmp_path_factory: pytest.TempPathFactory,
    session_key: bytes,
) -> Iterator[OperatorProcess]:
    if not cluster_under_test.local or cluster_under_test.runtime_image is None:
        unavailable("the gateway tests need the local cluster (pod IPs reachable from here)")
    workdir: Path = tmp_path_factory.mktemp("gateway-operator")
    key_file = workdir / "session-key"
    key_file.write_bytes(session_key + b"\n")  # as a file written by hand would end
    with running_operator(
        cluster_under_test.api,
        cluster_under_test.kubeconfig,
        cluster_under_test.runtime_image,
        workdir,
        SANDFLEET_OPERATOR_SESSION_KEY_FILE=str(key_file),
        SANDFLEET_OPERATOR_ORPHAN_CLAIM_GRACE_SECONDS=str(ORPHAN_CLAIM_GRACE_S),
        SANDFLEET_OPERATOR_ORPHAN_SWEEP_INTERVAL_SECONDS="2",
    ) as process:
        yield process


@pytest.fixture
async def make_claimer(
    cluster_under_test: ClusterUnderTest, session_key: bytes
) -> AsyncIterator[MakeClaimer]:
    """Started Claimers (gateway "replicas") over one namespace, stopped after the test."""
    started: list[tuple[Claimer, KubeClient]] = []

    async def make(namespace: str) -> Claimer:
        kube = KubeClient(KubeConfig.load(cluster_under_test.kubeconfig))
        replica = f"gateway-{len(started)}"
        settings = ClaimSettings(namespaces=(namespace,), session_key=session_key, replica=replica)
        claimer = Claimer(kube, settings)
        started.append((claimer, kube))  # before start: a failed start's client is closed too
        await claimer.start()
        return claimer

    yield make
    for claimer, kube in started:
        try:
            await claimer.stop()
        finally:
            await kube.close()


GATEWAY_ACCOUNT = "sandfleet-gateway"
StartGateway = Callable[..., Awaitable[GatewayServer]]


@pytest.fixture
async def start_gateway(
    cluster_under_test: ClusterUnderTest,
    kube: KubeApi,
    operator: OperatorProcess,
    session_key: bytes,
    tmp_path: Path,
) -> AsyncIterator[StartGateway]:
    """Gateway replicas on 127.0.0.1 as the gateway's ServiceAccount, stopped after the test."""
    kubeconfig = service_account_kubeconfig(
        kube, cluster_under_test.kubeconfig, OPERATOR_NAMESPACE, GATEWAY_ACCOUNT,
        tmp_path / "gateway.kubeconfig",
    )  # fmt: skip
    key_file = tmp_path / "session-key"
    key_file.write_bytes(session_key)
    running: list[tuple[GatewayServer, KubeClient]] = []

    async def start(**settings: Any) -> GatewayServer:
        from sandfleet.gateway.__main__ import build_claimer

        values: dict[str, Any] = {
            "host": "127.0.0.1", "port": 0, "http_host": "127.0.0.1", "http_port": 0,
            "replica": f"gateway-{len(running)}", "session_key_file": key_file,
            "shutdown_grace_seconds": 1.0,
        }  # fmt: skip
        gateway_settings = GatewaySettings(**(values | settings))
        client = KubeClient(KubeConfig.load(kubeconfig))
        server = GatewayServer(
            gateway_settings,
            kube=client,
            claimer=build_claimer(client, gateway_settings, session_key),
        )
        running.append((server, client))  # before start: a failed start's client is closed too
        await server.start()
        return server

    yield start
    for server, client in running:
        with contextlib.suppress(Exception):
            await server.stop(grace_s=0)
        await client.close()


async def until_claimable(gateway: GatewayServer, namespace: str, pool: str, count: int) -> None:
    deadline = time.monotonic() + 120
    idle = gateway.claimer.idle  # type: ignore[attr-defined]
    while len(idle.candidates(namespace, pool)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"pool {namespace}/{pool} never had {count} warm pods")
        await asyncio.sleep(0.2)
