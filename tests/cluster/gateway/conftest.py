"""The gateway's claim path against the real cluster: the operator as a process (like
operator_e2e, with the fleet's session key and a short orphan-claim grace), and the claim
path in-process (`Claimer` over the admin kubeconfig; the gRPC server can front it later)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from sandfleet.gateway.claims import Claimer, ClaimSettings
from sandfleet.kube import KubeClient, KubeConfig
from tests.cluster.cluster_access import ClusterUnderTest, unavailable
from tests.cluster.operator_harness import OperatorProcess, running_operator

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
