"""The operator under test: one real `sandfleet.operator` process for the tests of this
folder, serving every namespace as its ServiceAccount (the ClusterRole in manifests/rbac,
nothing more). Tests that restart or kill it leave it running again. It stops when the
folder's last test is done, so it never acts on other tests' SandboxSessions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.harness.cluster_access import ClusterUnderTest, unavailable
from tests.cluster.harness.operator_harness import OperatorProcess, running_operator


@pytest.fixture(scope="package")
def operator(
    cluster_under_test: ClusterUnderTest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    if not cluster_under_test.local or cluster_under_test.runtime_image is None:
        unavailable("the operator tests need the local cluster (pod IPs reachable from here)")
    workdir: Path = tmp_path_factory.mktemp("operator")
    with running_operator(
        cluster_under_test.api,
        cluster_under_test.kubeconfig,
        cluster_under_test.runtime_image,
        workdir,
    ) as process:
        yield process
