"""Failures mid-loop: a pod deleted under a running agent, and the operator killed."""

from __future__ import annotations

import json

import pytest

from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import (
    OperatorProcess,
    condition,
    create_session,
    phase_is,
    wait_no_leftovers,
    wait_session,
)
from tests.support.scripted_openai import Hang, Reply, ScriptedOpenAIServer, bash, submit

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def agent(model: ScriptedOpenAIServer) -> dict[str, object]:
    return {"model": "m", "baseURL": model.base_url, "prompt": "go", "maxTurns": 10}


async def test_a_pod_deleted_mid_loop_fails_the_session_as_sandbox_lost(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    async with ScriptedOpenAIServer([Reply(tool_calls=[bash("true")]), Hang()]) as model:
        await create_session(kube, namespace, "fragile", {"agent": agent(model)})
        await model.wait_for_requests(2, timeout_s=90)
        running = await wait_session(kube, namespace, "fragile", phase_is("Running"))
        pod = running["status"]["podName"]
        await kube.checked("DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod}")
        body = await wait_session(kube, namespace, "fragile", phase_is("Failed", "Succeeded"))
    assert body["status"]["phase"] == "Failed"
    assert condition(body, "Completed")["reason"] == "SandboxLost"
    await wait_no_leftovers(kube, namespace)


async def test_a_lost_pod_is_replaced_when_the_spec_allows_retries(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    script = [Reply(tool_calls=[bash("true")]), Hang(), Reply(tool_calls=[submit()])]
    async with ScriptedOpenAIServer(script) as model:
        spec = {"agent": agent(model), "lifecycle": {"sandboxLostRetries": 1}}
        await create_session(kube, namespace, "resilient", spec)
        await model.wait_for_requests(2, timeout_s=90)
        running = await wait_session(kube, namespace, "resilient", phase_is("Running"))
        first_pod = running["status"]["podName"]
        await kube.checked("DELETE", f"/api/v1/namespaces/{namespace}/pods/{first_pod}")
        body = await wait_session(kube, namespace, "resilient", phase_is("Failed", "Succeeded"))
    assert body["status"]["phase"] == "Succeeded", body["status"]
    assert body["status"]["restarts"] == 1
    await wait_no_leftovers(kube, namespace)


async def test_a_loop_survives_the_operator_being_killed_and_resumes_where_it_was(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    script = [
        Reply(tool_calls=[bash("echo remembered > /testbed/state.txt")]),
        Hang(),  # the operator dies while waiting for this reply
        Reply(tool_calls=[bash("cat /testbed/state.txt")]),
        Reply(tool_calls=[submit()]),
    ]
    async with ScriptedOpenAIServer(script) as model:
        await create_session(kube, namespace, "durable", {"agent": agent(model)})
        await model.wait_for_requests(2, timeout_s=90)
        operator.kill()
        operator.start()
        body = await wait_session(kube, namespace, "durable", phase_is("Failed", "Succeeded"))
        requests = [r.body for r in model.requests if r.path.endswith("/chat/completions")]
    assert body["status"]["phase"] == "Succeeded", body["status"]
    # After the restart the model saw the whole earlier conversation, and the sandbox kept
    # the file the first operator's loop wrote.
    resumed = json.dumps(requests[2]["messages"])
    assert "echo remembered" in resumed
    assert "remembered" in json.dumps(requests[3]["messages"][-1])
    await wait_no_leftovers(kube, namespace)
