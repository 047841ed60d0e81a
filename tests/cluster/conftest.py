"""Session fixtures for the cluster tests: the local single-node cluster, or another one.

Local: started once per session from the cache that `bash tests/cluster/setup.sh` fills,
stopped at the end (logs kept in the cache when a test failed). Another cluster: set
SANDFLEET_TEST_KUBECONFIG (and SANDFLEET_TEST_RUNTIME_IMAGE to an image its nodes can run).
Without either the tests are skipped with the reason, unless SANDFLEET_REQUIRE_CLUSTER=1 (CI),
which turns every such skip into a failure.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.cluster.harness import cluster
from tests.cluster.harness.cluster_access import ClusterUnderTest, unavailable
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.layout import Layout, Ports


@pytest.fixture(scope="session")
def cluster_under_test(request: pytest.FixtureRequest) -> Iterator[ClusterUnderTest]:
    external = os.environ.get("SANDFLEET_TEST_KUBECONFIG")
    if external:
        kubeconfig = Path(external)
        yield ClusterUnderTest(
            kubeconfig=kubeconfig,
            api=KubeApi.from_kubeconfig(kubeconfig),
            runtime_image=os.environ.get("SANDFLEET_TEST_RUNTIME_IMAGE"),
            local=False,
            image_pull_policy="IfNotPresent",
        )
        return
    layout = Layout.default()
    running = cluster.running_kubeconfig(layout)
    if running is not None:
        # Started by hand (`python -m tests.cluster.harness.cluster up`): use it, leave it up.
        # setup.sh may have rebuilt the sandbox image since it started: bring that one in.
        cluster.import_missing_images(layout)
        yield ClusterUnderTest(
            kubeconfig=running,
            api=KubeApi.from_kubeconfig(running),
            runtime_image=layout.read_images()["runtime"].ref,
            local=True,
            image_pull_policy="Never",
        )
        return
    problems = cluster.missing_prerequisites(layout)
    if problems:
        unavailable("no local test cluster: " + "; ".join(problems))
    info = cluster.up(layout, Ports.from_environment())
    print(f"\ntest cluster up in {info.start_seconds:.1f}s (KUBECONFIG={info.kubeconfig})")
    try:
        yield ClusterUnderTest(
            kubeconfig=info.kubeconfig,
            api=KubeApi.from_kubeconfig(info.kubeconfig),
            runtime_image=info.images["runtime"],
            local=True,
            image_pull_policy="Never",
        )
    finally:
        failed = request.session.testsfailed > 0
        kept = cluster.down(layout, keep_logs=failed)
        if kept:
            print(f"\ntest cluster logs kept in {kept}")


@pytest.fixture(scope="session")
def kube(cluster_under_test: ClusterUnderTest) -> KubeApi:
    return cluster_under_test.api


@pytest.fixture(scope="session")
def runtime_image(cluster_under_test: ClusterUnderTest) -> str:
    if cluster_under_test.runtime_image is None:
        unavailable("SANDFLEET_TEST_RUNTIME_IMAGE names no sandbox image for the external cluster")
    return cluster_under_test.runtime_image


@pytest.fixture
async def namespace(kube: KubeApi) -> AsyncIterator[str]:
    """A fresh namespace, deleted (without waiting) after the test."""
    name = f"sf-test-{secrets.token_hex(4)}"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    await kube.checked("POST", "/api/v1/namespaces", body)
    # Pods are refused until the service account controller has made "default" here.
    await kube.wait_for(
        f"/api/v1/namespaces/{name}/serviceaccounts/default", lambda r: r.status == 200, 30
    )
    yield name
    await kube.request("DELETE", f"/api/v1/namespaces/{name}")
