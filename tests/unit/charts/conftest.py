"""The real helm binary for the chart's unit tests (no cluster: `helm template` and `lint`)."""

from __future__ import annotations

import pytest

from tests.cluster.harness.cluster_access import unavailable
from tests.cluster.harness.helm_cli import Helm, helm_binary_path, missing_helm_reason


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    reason = missing_helm_reason()
    if reason is not None:
        unavailable(reason)
    return Helm(helm_binary_path(), tmp_path_factory.mktemp("helm"))
