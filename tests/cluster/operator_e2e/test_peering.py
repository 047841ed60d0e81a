"""Two operator replicas with kopf peering: one works, the other stands by and takes over
when the first dies."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.kube_api import KubeApi
from tests.cluster.operator_harness import (
    OperatorProcess,
    create_session,
    phase_is,
    wait_session,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

PEERING = "sf-test-peering"
PEERINGS = "/apis/kopf.dev/v1/clusterkopfpeerings"


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
        assert "first" in replicas["active"].log_path.read_text()
        assert "first" not in replicas["standby"].log_path.read_text()

        replicas["active"].kill()
        await create_session(kube, namespace, "second", {})
        await wait_session(kube, namespace, "second", phase_is("Ready"), timeout_s=60)
        assert "second" in replicas["standby"].log_path.read_text()
    finally:
        for replica in replicas.values():
            replica.stop()
        await kube.request("DELETE", f"{PEERINGS}/{PEERING}")
        operator.start()
