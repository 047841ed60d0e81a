"""`sandfleet doctor` against the real test cluster: the kubeconfig's API server answers
GET /version, through the real console script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cluster.harness.cluster_access import ClusterUnderTest
from tests.integration.cli.harness import cli_environment, run_cli

pytestmark = pytest.mark.cluster


async def test_doctor_finds_the_cluster_of_the_kubeconfig(
    cluster_under_test: ClusterUnderTest, tmp_path: Path
) -> None:
    kubeconfig = cluster_under_test.kubeconfig
    environ = cli_environment(tmp_path / "home")
    del environ["OPENAI_API_KEY"]  # no endpoint configured: the model check stays offline
    result = await run_cli(
        "doctor", "--kubeconfig", str(kubeconfig), "--isolation", "none", "--json",
        env=environ, cwd=tmp_path,
    )  # fmt: skip

    checks = {check["check"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["cluster"]["status"] == "ok", result
    assert "Kubernetes v1." in checks["cluster"]["detail"], result
