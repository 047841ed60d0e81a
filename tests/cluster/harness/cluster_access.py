"""What a cluster test is handed, and the skip-or-fail rule when no cluster can be had."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import NoReturn

import pytest

from tests.cluster.harness.kube_api import KubeApi


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterUnderTest:
    kubeconfig: Path
    api: KubeApi
    runtime_image: str | None
    """The sandbox image the nodes can start; None when an external cluster names none."""
    local: bool
    """True for the cluster these fixtures started: its pod IPs are reachable from here."""
    image_pull_policy: str


def unavailable(reason: str) -> NoReturn:
    """Skip, or fail when the run promised a cluster (SANDFLEET_REQUIRE_CLUSTER=1)."""
    if os.environ.get("SANDFLEET_REQUIRE_CLUSTER") == "1":
        pytest.fail(f"cluster required (SANDFLEET_REQUIRE_CLUSTER=1) but {reason}", pytrace=False)
    pytest.skip(reason)
