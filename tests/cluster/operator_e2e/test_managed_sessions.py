"""Managed sessions end to end: the operator drives a scripted model's loop in a real pod."""

from __future__ import annotations

import asyncio
import json
import sys
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
from tests.support.scripted_openai import Fail, Reply, ScriptedOpenAIServer, bash, submit

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def agent_spec(model: ScriptedOpenAIServer, **extra: object) -> dict[str, object]:
    return {"model": "scripted", "baseURL": model.base_url, "prompt": "write 42", **extra}


async def test_a_managed_session_runs_to_succeeded_and_its_sandbox_is_reclaimed(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    script = [
        Reply(
            tool_calls=[bash("mkdir -p /testbed/output && echo 42 > /testbed/output/answer.txt")]
        ),
        Reply(tool_calls=[submit()], prompt_tokens=20, completion_tokens=7),
    ]
    async with ScriptedOpenAIServer(script) as model:
        await create_session(
            kube,
            namespace,
            "solve",
            {"agent": agent_spec(model, maxTurns=5), "env": [{"name": "ANSWER", "value": "42"}]},
        )
        body = await wait_session(kube, namespace, "solve", phase_is("Succeeded", "Failed"))

    status = body["status"]
    assert status["phase"] == "Succeeded", status
    assert condition(body, "Completed")["reason"] == "Submitted"
    assert condition(body, "Ready")["status"] == "False"
    assert status["agent"]["turns"] == 2
    assert status["agent"]["stopReason"] == "submitted"
    assert status["agent"]["result"] == "42"
    assert status["agent"]["answerFromFile"] is True
    assert status["agent"]["promptTokens"] == 30
    assert status["observedGeneration"] == body["metadata"]["generation"]
    token = await tenant_token(kube, namespace)
    kinds = [r["kind"] for r in fetch_trajectory(operator, namespace, "solve", token)]
    assert kinds[0] == "meta"
    assert kinds[-1] == "result"
    await wait_no_leftovers(kube, namespace)
    # The sandbox is gone; the trajectory is not: the CLI fetches it from the operator.
    cli = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("sandfleet")), "trajectory", "solve",
        "-n", namespace, "--operator-url", operator.http_url, "--token", token,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(cli.communicate(), 60)
    assert cli.returncode == 0, stderr.decode()
    records = [json.loads(line) for line in stdout.decode().splitlines()]
    assert records[-1]["stop_reason"] == "submitted"


async def test_an_endpoint_that_keeps_failing_fails_the_session_after_the_sdk_retries(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    failures = [Fail(503, "overloaded", retry_after_s=0.1)] * 3
    async with ScriptedOpenAIServer(failures) as model:
        await create_session(kube, namespace, "flaky", {"agent": agent_spec(model)})
        body = await wait_session(kube, namespace, "flaky", phase_is("Succeeded", "Failed"))
        assert len(model.requests) == 3  # the first try and the SDK's two retries
    assert body["status"]["phase"] == "Failed"
    assert condition(body, "Completed")["reason"] == "ModelError"
    records = fetch_trajectory(operator, namespace, "flaky", await tenant_token(kube, namespace))
    assert records[-1]["stop_reason"] == "model_error"
    await wait_no_leftovers(kube, namespace)


async def test_a_rejected_model_request_fails_the_session_with_the_reason(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    async with ScriptedOpenAIServer([Fail(401, "invalid api key")]) as model:
        await create_session(kube, namespace, "denied", {"agent": agent_spec(model)})
        body = await wait_session(kube, namespace, "denied", phase_is("Succeeded", "Failed"))
    assert body["status"]["phase"] == "Failed"
    completed = condition(body, "Completed")
    assert completed["reason"] == "ModelError"
    assert "invalid api key" in completed["message"]
    await wait_no_leftovers(kube, namespace)


async def test_sampling_knobs_reach_the_endpoint_and_prose_replies_end_with_no_tool_call(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    knobs = {"topP": "0.9", "seed": 5, "extraBody": '{"top_k": 20}'}
    async with ScriptedOpenAIServer([Reply(text="It is 42.")] * 4) as model:
        await create_session(kube, namespace, "prose", {"agent": agent_spec(model, **knobs)})
        body = await wait_session(kube, namespace, "prose", phase_is("Succeeded", "Failed"))
        requests = [request.body for request in model.chat_requests]
    assert len(requests) == 4  # three nudges (the default), then the run stops
    for request in requests:
        assert (request["top_p"], request["seed"], request["top_k"]) == (0.9, 5, 20)
    status = body["status"]
    assert status["phase"] == "Failed"
    assert condition(body, "Completed")["reason"] == "NoToolCall"
    assert status["agent"]["stopReason"] == "no_tool_call"
    assert status["agent"]["result"] == "It is 42."
    assert status["agent"]["answerFromFile"] is False  # the prose, not an answer file
    records = fetch_trajectory(operator, namespace, "prose", await tenant_token(kube, namespace))
    assert records[-1]["stop_reason"] == "no_tool_call"
    await wait_no_leftovers(kube, namespace)
