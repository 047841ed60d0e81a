"""Two operator replicas with kopf peering: one works, the other stands by and takes over
when the first dies."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import (
    OperatorProcess,
    create_session,
    phase_is,
    wait_session,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

PEERING = "sf-test-peering"
PEERINGS = "/apis/kopf.dev/v1/clusterkopfpeerings"


async def logged(replica: OperatorProcess, text: str, timeout_s: float = 15.0) -> bool:
    """Whether the replica's log mentions `text` within `timeout_s`: the status patch that made
    the session Ready can be seen before the replica's own log line is written."""
    deadline = time.monotonic() + timeout_s
    while text not in replica.log_path.read_text():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.2)
    return True


async def test_a_standby_replica_takes_over_when_the_active_one_dies(
    kube: KubeApi, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    peering = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering",
               "metadata": {"name": PEERING}}  # fmt: skip
    await kube.request("DELETE", f"{PEERINGS}/{PEERING}")
    await kube.checked("POST", PEERINGS, peering)
    operator.stop()  # the shared standalone operator would act beside the peers
    replicas = {
        name: OperatorProcess(
            operator.kubeconfig,
            operator.runtime_image,
            (tmp_path / name),
            SANDFLEET_OPERATOR_PEERING=PEERING,
            SANDFLEET_OPERATOR_PEERING_PRIORITY=str(priority),
            SANDFLEET_OPERATOR_PEERING_LIFETIME_SECONDS="3",
        )
        for name, priority in (("standby", 10), ("active", 20))
    }
    try:
        for name, replica in replicas.items():
            (tmp_path / name).mkdir()
            replica.start()
        await create_session(kube, namespace, "first", {})
        await wait_session(kube, namespace, "first", phase_is("Ready"))
        assert await logged(replicas["active"], "first")
        assert "first" not in replicas["standby"].log_path.read_text()

        replicas["active"].kill()
        await create_session(kube, namespace, "second", {})
        await wait_session(kube, namespace, "second", phase_is("Ready"), timeout_s=60)
        assert await logged(replicas["standby"], "second")
    finally:
        for replica in replicas.values():
            replica.stop()
        await kube.request("DELETE", f"{PEERINGS}/{PEERING}")
        operator.start()
