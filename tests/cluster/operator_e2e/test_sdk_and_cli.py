"""The SDK's and the CLI's Kubernetes backend, against the real operator.

`ClusterSandbox.open(ClusterBackend(...))` creates a raw SandboxSession, waits for Ready, reads the
token Secret and drives the sandbox pod over gRPC; closing it deletes the session. `sandfleet
run --backend kubernetes --managed` creates a managed session, follows it by watch, and exits
with the local backend's exit codes; Ctrl-C deletes the session.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from sandfleet import ClusterBackend, ClusterSandbox, ClusterSandboxRequest, SessionFailedError
from tests.cluster.harness.cluster_access import ClusterUnderTest
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import SESSIONS, OperatorProcess, wait_no_leftovers
from tests.integration.cli.harness import (
    CLI_TIMEOUT_S,
    cli_environment,
    press_ctrl_c,
    read_until,
    run_cli,
    start_cli,
)
from tests.support.scripted_openai import Hang, Reply, ScriptedOpenAIServer, bash, submit

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def session_path(namespace: str, name: str) -> str:
    return f"{SESSIONS.format(ns=namespace)}/{name}"


async def test_a_raw_sandbox_on_the_cluster_answers_call_tool_and_close_deletes_its_session(
    operator: OperatorProcess, kube: KubeApi, namespace: str, cluster_under_test: ClusterUnderTest
) -> None:
    request = ClusterSandboxRequest(
        namespace,
        kubeconfig=cluster_under_test.kubeconfig,
        env={"ANSWER": "42"},
        files={"input/notes.txt": "alpha\n"},
        ready_timeout_s=150,
    )
    sandbox = await ClusterSandbox.open(ClusterBackend(request))
    async with sandbox:
        shell = await sandbox.call_tool("execute_bash", {"command": "echo $ANSWER; pwd"})
        viewed = await sandbox.call_tool(
            "str_replace_editor", {"command": "view", "path": "/testbed/input/notes.txt"}
        )
        name = sandbox.name

    assert isinstance(sandbox, ClusterSandbox)
    assert sandbox.namespace == namespace and name.startswith("sbx-")
    assert "42\n/testbed" in shell
    assert "alpha" in viewed
    # close() deleted the session; the operator's finalizer lets it go once reclaimed.
    await kube.wait_for(session_path(namespace, name), lambda r: r.status == 404, 30)
    await wait_no_leftovers(kube, namespace)


async def test_a_session_that_fails_before_ready_raises_at_once_with_the_operators_reason(
    operator: OperatorProcess, kube: KubeApi, namespace: str, cluster_under_test: ClusterUnderTest
) -> None:
    with pytest.raises(SessionFailedError) as failed:
        request = ClusterSandboxRequest(
            namespace,
            name="doomed",
            template="missing",
            kubeconfig=cluster_under_test.kubeconfig,
            ready_timeout_s=3600,  # the failure, not the timeout, must end the wait
        )
        await ClusterSandbox.open(ClusterBackend(request))
    assert f"TemplateNotFound: SandboxTemplate {namespace}/missing not found" in str(failed.value)
    await kube.wait_for(session_path(namespace, "doomed"), lambda r: r.status == 404, 30)


def cli_args(cluster: ClusterUnderTest, namespace: str, model: ScriptedOpenAIServer) -> list[str]:
    return [
        "run", "--backend", "kubernetes", "--managed", "--kubeconfig", str(cluster.kubeconfig),
        "-n", namespace, "--model", "scripted", "--base-url", model.base_url, "--max-turns", "9",
    ]  # fmt: skip


async def test_run_on_kubernetes_follows_the_session_and_prints_its_result(
    operator: OperatorProcess,
    kube: KubeApi,
    namespace: str,
    cluster_under_test: ClusterUnderTest,
    tmp_path: Path,
) -> None:
    data = tmp_path / "numbers.txt"
    data.write_text("6 7\n")
    script = [
        Reply(tool_calls=[bash("cat /testbed/input/numbers.txt")]),
        Reply(tool_calls=[bash("mkdir -p /testbed/output; echo 42 > /testbed/output/answer.txt")]),
        Reply(tool_calls=[submit()]),
    ]
    async with ScriptedOpenAIServer(script) as model:
        result = await run_cli(
            *cli_args(cluster_under_test, namespace, model),
            "Multiply the numbers.", "--id", "mul", "-f", str(data), "--rm",
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        observed = json.dumps(model.requests[1].body["messages"])

    assert result.returncode == 0, result
    assert "6 7" in observed  # the input file reached the sandbox
    # Progress is published at a bounded rate, so fast turns may be skipped; the last is not.
    for line in ["phase Running", "turn 3/9", "phase Succeeded"]:
        assert line in result.stderr, result
    assert "stop reason submitted" in result.stdout
    assert "42" in result.stdout
    await wait_no_leftovers(kube, namespace)


async def test_run_on_kubernetes_exits_like_the_local_backend_and_keeps_the_session(
    operator: OperatorProcess,
    kube: KubeApi,
    namespace: str,
    cluster_under_test: ClusterUnderTest,
    tmp_path: Path,
) -> None:
    async with ScriptedOpenAIServer([Reply(tool_calls=[bash("true")])] * 9) as model:
        result = await run_cli(
            *cli_args(cluster_under_test, namespace, model),
            "Never finishes.", "--json", "--ttl-seconds", "600",
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip

    assert result.returncode == 1, result
    record = json.loads(result.stdout)
    assert (record["stop_reason"], record["turns"]) == ("max_turns", 9)
    session_ns, name = record["session"].split("/")
    kept = await kube.checked("GET", session_path(session_ns, name))
    assert kept["status"]["phase"] == "Failed"
    assert kept["spec"]["lifecycle"] == {"ttlSecondsAfterFinished": 600}


async def test_ctrl_c_on_a_followed_run_deletes_its_session(
    operator: OperatorProcess,
    kube: KubeApi,
    namespace: str,
    cluster_under_test: ClusterUnderTest,
    tmp_path: Path,
) -> None:
    async with ScriptedOpenAIServer([Reply(tool_calls=[bash("true")]), Hang()]) as model:
        process = await start_cli(
            *cli_args(cluster_under_test, namespace, model), "Loop forever.",
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        try:
            assert process.stderr is not None
            await read_until(process.stderr, "turn 2/9", timeout_s=CLI_TIMEOUT_S)
            press_ctrl_c(process)
            async with asyncio.timeout(CLI_TIMEOUT_S):
                stdout, _ = await process.communicate()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()

    assert process.returncode == 130
    assert "interrupted" in stdout.decode()
    await wait_no_leftovers(kube, namespace)
    listed = await kube.checked("GET", SESSIONS.format(ns=namespace))
    assert listed["items"] == []
