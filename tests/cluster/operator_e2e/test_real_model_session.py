"""A managed session with the real model: the operator's loop talks to llama.cpp's server.

The operator under test runs on the host (operator_e2e/conftest.py), so the model server
listens on 127.0.0.1 like the scripted endpoints of test_managed_sessions.py; only the sandbox
is a pod. Needs both tiers: the test cluster and the model cache (tests/model/setup.sh).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.harness.gateway_clients import tenant_token
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import (
    OperatorProcess,
    condition,
    create_session,
    fetch_trajectory,
    phase_is,
    wait_no_leftovers,
    wait_session,
)
from tests.model.model_server import (
    ModelServer,
    ModelUnavailable,
    running_model_server,
    unavailable,
)

pytestmark = [pytest.mark.cluster, pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(1200)]

SESSION_TIMEOUT_S = 900.0
"""A real 1.5B model on a shared 2-core machine: a few turns take minutes."""


@pytest.fixture(scope="module")
def model_on_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServer]:
    log_dir: Path = tmp_path_factory.mktemp("model")
    try:
        with running_model_server(log_dir) as server:
            yield server
    except ModelUnavailable as error:
        unavailable(str(error))


async def test_a_managed_session_with_the_real_model_runs_its_tool_calls_in_the_pod(
    kube: KubeApi, namespace: str, operator: OperatorProcess, model_on_host: ModelServer
) -> None:
    agent = {
        "model": model_on_host.model,
        "baseURL": model_on_host.base_url,
        "prompt": "Run the shell command python3 -c 'print(123*457)' > "
        "/testbed/output/answer.txt with execute_bash, then call submit.",
        "maxTurns": 6,
        "temperature": "0",
        "toolTimeoutSeconds": 60,
    }
    await create_session(kube, namespace, "real-model", {"agent": agent})
    body = await wait_session(
        kube, namespace, "real-model", phase_is("Succeeded", "Failed"), SESSION_TIMEOUT_S
    )

    status = body["status"]
    assert status["agent"]["stopReason"] != "model_error", status
    assert status["phase"] == "Succeeded", status
    assert condition(body, "Completed")["reason"] == "Submitted"
    assert status["agent"]["turns"] >= 2 and status["agent"]["promptTokens"] > 0
    records = fetch_trajectory(
        operator, namespace, "real-model", await tenant_token(kube, namespace)
    )
    calls = [r for r in records if r["kind"] == "tool_call"]
    observations = {r["call_id"]: r for r in records if r["kind"] == "observation"}
    bash_calls = [c for c in calls if c["name"] == "execute_bash"]
    assert bash_calls, records
    for call in bash_calls:  # executed by bash in the sandbox pod
        assert str(observations[call["call_id"]]["output"]).startswith("Exit code: ")
    assert calls[-1]["name"] == "submit"
    assert records[-1]["kind"] == "result"
    await wait_no_leftovers(kube, namespace)
