"""The SDK's and the CLI's Kubernetes backend against the real API server and node.

`Sandbox.on_cluster` creates a raw SandboxSession, waits for Ready, reads the token Secret
and drives the sandbox pod over gRPC; closing it deletes the session. `sandfleet run
--backend kubernetes` creates a managed session, follows it by watch, and exits with the
local backend's exit codes; Ctrl-C deletes the session.

INTERIM: the operator is being written in parallel, so `InterimOperator` below plays its
part with the real builders (token Secret and pod from sandfleet.operator.resources) and
writes the session status itself; for managed sessions it writes the status a finished
agent loop would, without running one. The lead replaces it with the real operator
fixture; the assertions on the SDK and CLI side stay as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sandfleet.cluster import ClusterSandbox, SessionFailedError
from sandfleet.kube import KubeClient, KubeConfig, WatchExpiredError, resource_path
from sandfleet.operator.api import API_VERSION, SESSION_PLURAL
from sandfleet.operator.naming import label_value, token_secret_name
from sandfleet.operator.resources import (
    ObjectRef,
    PlatformDefaults,
    resolve_pod_template,
    session_pod,
    session_token_secret,
)
from sandfleet.sandbox import Sandbox
from tests.cluster.cluster_access import ClusterUnderTest
from tests.cluster.kube_api import JsonObject, KubeApi
from tests.cluster.sandbox_pods import wait_ready
from tests.cluster.test_crds import crd_documents, install
from tests.integration.cli.harness import (
    CLI_TIMEOUT_S,
    cli_environment,
    press_ctrl_c,
    read_until,
    run_cli,
    start_cli,
)

pytestmark = pytest.mark.cluster

Behaviour = Callable[["InterimOperator", JsonObject], Awaitable[None]]


def condition(type_: str, status: bool, reason: str, message: str = "") -> dict[str, str]:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


class InterimOperator:
    """INTERIM stand-in for the operator (see the module docstring): runs `behaviour` once
    for every SandboxSession that appears in the namespace."""

    def __init__(self, kube: KubeClient, api: KubeApi, namespace: str, defaults: PlatformDefaults):
        self.kube = kube
        self.api = api
        self.namespace = namespace
        self.defaults = defaults
        self.behaviour: Behaviour | None = None
        self.sessions: list[JsonObject] = []
        """Every session as it was first seen (the spec the client sent)."""
        self._handlers: list[asyncio.Task[None]] = []

    def session_path(self, name: str | None = None, subresource: str | None = None) -> str:
        return resource_path(API_VERSION, SESSION_PLURAL, self.namespace, name, subresource)

    async def run(self) -> None:
        seen: set[str] = set()
        first_list = True
        while True:
            items, version = await self.kube.list_with_version(self.session_path())
            for item in items:
                if first_list:  # older sessions are not this test's
                    seen.add(item["metadata"]["uid"])
                else:
                    self._adopt(item, seen)
            first_list = False
            try:
                while True:
                    async for event in self.kube.watch(
                        self.session_path(), resource_version=version
                    ):
                        version = event.resource_version or version
                        if event.type == "ADDED":
                            self._adopt(event.object, seen)
            except WatchExpiredError:
                # A CRD re-installed by a parallel test session restarts the server's watch
                # cache at a newer version: list again.
                continue

    def _adopt(self, session: JsonObject, seen: set[str]) -> None:
        uid = session["metadata"]["uid"]
        if uid in seen:
            return
        seen.add(uid)
        self.sessions.append(session)
        if self.behaviour is not None:
            self._handlers.append(asyncio.create_task(self.behaviour(self, session)))

    async def stop(self) -> None:
        for handler in self._handlers:
            handler.cancel()
        for handler in self._handlers:
            with contextlib.suppress(asyncio.CancelledError):
                await handler
            if not handler.cancelled() and handler.exception() is not None:
                raise handler.exception()  # type: ignore[misc]

    async def set_status(self, name: str, **status: Any) -> None:
        await self.kube.patch(self.session_path(name, "status"), {"status": status})

    async def start_pod(self, session: JsonObject) -> JsonObject:
        """The session's token Secret and cold pod, as the operator's builders make them."""
        ref = ObjectRef.of(session)
        secrets_path = resource_path("v1", "secrets", self.namespace)
        token = secrets.token_urlsafe(32)
        await self.kube.create(secrets_path, session_token_secret(ref, token))
        pod = session_pod(
            ref,
            resolve_pod_template(None, self.defaults),
            token_secret_name(ref.name),
            self.defaults,
        )
        await self.kube.create(resource_path("v1", "pods", self.namespace), pod)
        selector = f"sandfleet.dev/session={label_value(ref.name)}"
        (ready,) = await wait_ready(self.api, self.namespace, selector, 1, timeout_s=120)
        return ready


async def serve_raw_session(operator: InterimOperator, session: JsonObject) -> None:
    name = session["metadata"]["name"]
    await operator.set_status(
        name, phase="Pending", conditions=[condition("Scheduled", False, "PodCreated")]
    )
    pod = await operator.start_pod(session)
    await operator.set_status(
        name,
        phase="Ready",
        podName=pod["metadata"]["name"],
        podIP=pod["status"]["podIP"],
        nodeName=pod["spec"]["nodeName"],
        tokenSecretName=token_secret_name(name),
        conditions=[
            condition("Scheduled", True, "PodScheduled"),
            condition("RuntimeReady", True, "RuntimeServing"),
            condition("Ready", True, "RuntimeServing"),
        ],
    )


async def fail_template_not_found(operator: InterimOperator, session: JsonObject) -> None:
    message = f"SandboxTemplate {operator.namespace}/missing not found"
    await operator.set_status(
        session["metadata"]["name"],
        phase="Failed",
        conditions=[
            condition("Ready", False, "TemplateNotFound", message),
            condition("Completed", True, "TemplateNotFound", message),
        ],
    )


def finished_agent(phase: str, reason: str, stop_reason: str, result: str | None) -> Behaviour:
    """Status a managed session goes through: Pending, Ready, two turns, then the end."""

    async def behave(operator: InterimOperator, session: JsonObject) -> None:
        name = session["metadata"]["name"]
        ready = [condition("Scheduled", True, "PodScheduled"), condition("Ready", True, "Bound")]
        await operator.set_status(name, phase="Pending", startTime="2026-01-01T00:00:00Z")
        await operator.set_status(name, phase="Ready", podName=name, conditions=ready)
        for turns in (1, 2):
            agent = {"turns": turns, "promptTokens": 100 * turns, "completionTokens": 10 * turns}
            await operator.set_status(name, phase="Running", agent=agent)
        final_agent = {"turns": 2, "promptTokens": 200, "completionTokens": 20,
                       "stopReason": stop_reason}  # fmt: skip
        if result is not None:
            final_agent["result"] = result
        await operator.set_status(
            name,
            phase=phase,
            completionTime="2026-01-01T00:00:12Z",
            agent=final_agent,
            conditions=[condition("Ready", False, reason), condition("Completed", True, reason)],
        )

    return behave


async def running_forever(operator: InterimOperator, session: JsonObject) -> None:
    name = session["metadata"]["name"]
    await operator.set_status(name, phase="Running", agent={"turns": 1})
    await asyncio.Event().wait()


@pytest.fixture(scope="module")
def crds(kube: KubeApi) -> None:
    for crd in crd_documents():
        install(kube, crd)


@pytest.fixture
async def interim_operator(
    crds: None, kube: KubeApi, namespace: str, cluster_under_test: ClusterUnderTest,
    runtime_image: str,
) -> AsyncIterator[InterimOperator]:  # fmt: skip
    defaults = PlatformDefaults(
        image=runtime_image,
        image_pull_policy=cluster_under_test.image_pull_policy,
        dns_policy="Default",
        operator_namespace="sandfleet-system",
        operator_pod_labels={"app.kubernetes.io/name": "sandfleet-operator"},
    )
    config = await asyncio.to_thread(KubeConfig.load, cluster_under_test.kubeconfig)
    async with KubeClient(config) as client:
        operator = InterimOperator(client, kube, namespace, defaults)
        runner = asyncio.create_task(operator.run())
        try:
            yield operator
        finally:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner
            await operator.stop()


def session_path(namespace: str, name: str) -> str:
    return resource_path(API_VERSION, SESSION_PLURAL, namespace, name)


async def test_a_raw_sandbox_on_the_cluster_answers_call_tool_and_close_deletes_its_session(
    interim_operator: InterimOperator, kube: KubeApi, namespace: str,
    cluster_under_test: ClusterUnderTest,
) -> None:  # fmt: skip
    if not cluster_under_test.local:
        pytest.skip("pod IPs of an external cluster are not reachable from the test process")
    interim_operator.behaviour = serve_raw_session

    sandbox = await Sandbox.on_cluster(
        namespace, kubeconfig=cluster_under_test.kubeconfig, ready_timeout_s=150
    )
    async with sandbox:
        bash = await sandbox.call_tool("execute_bash", {"command": "echo $((6 * 7)); pwd"})
        created = await sandbox.call_tool(
            "str_replace_editor",
            {"command": "create", "path": "/testbed/notes.txt", "file_text": "alpha\n"},
        )
        viewed = await sandbox.call_tool(
            "str_replace_editor", {"command": "view", "path": "/testbed/notes.txt"}
        )
        name = sandbox.name
        pod = sandbox.session.pod_name

    assert isinstance(sandbox, ClusterSandbox)
    assert sandbox.namespace == namespace and name.startswith("sbx-")
    (stored,) = interim_operator.sessions
    assert "agent" not in stored["spec"]  # a raw session
    assert "42\n/testbed" in bash
    assert "File created successfully" in created
    assert "alpha" in viewed
    gone = await kube.request("GET", session_path(namespace, name))
    assert gone.status == 404
    # The pod belongs to the session: the garbage collector takes it along.
    await kube.wait_for(
        f"/api/v1/namespaces/{namespace}/pods/{pod}", lambda r: r.status == 404, timeout_s=90
    )


async def test_a_session_that_fails_before_ready_raises_at_once_with_the_operators_reason(
    interim_operator: InterimOperator, kube: KubeApi, namespace: str,
    cluster_under_test: ClusterUnderTest,
) -> None:  # fmt: skip
    interim_operator.behaviour = fail_template_not_found

    with pytest.raises(SessionFailedError) as failed:
        await Sandbox.on_cluster(
            namespace,
            name="doomed",
            template="missing",
            kubeconfig=cluster_under_test.kubeconfig,
            ready_timeout_s=3600,  # the failure, not the timeout, must end the wait
        )

    assert f"TemplateNotFound: SandboxTemplate {namespace}/missing not found" in str(failed.value)
    assert failed.value.state is not None and failed.value.state.phase == "Failed"
    (stored,) = interim_operator.sessions
    assert stored["spec"] == {"templateRef": {"name": "missing"}}
    assert (await kube.request("GET", session_path(namespace, "doomed"))).status == 404


def cli_args(cluster_under_test: ClusterUnderTest, namespace: str, *extra: str) -> list[str]:
    return [
        "run", "--backend", "kubernetes", "--kubeconfig", str(cluster_under_test.kubeconfig),
        "-n", namespace, "--model", "scripted", "--base-url", "http://model.invalid/v1",
        "--max-turns", "9", *extra,
    ]  # fmt: skip


async def test_run_on_kubernetes_follows_the_session_and_prints_its_result(
    interim_operator: InterimOperator, kube: KubeApi, namespace: str,
    cluster_under_test: ClusterUnderTest, tmp_path: Path,
) -> None:  # fmt: skip
    interim_operator.behaviour = finished_agent("Succeeded", "Submitted", "submitted", "42")
    data = tmp_path / "numbers.txt"
    data.write_text("6 7\n")

    result = await run_cli(
        *cli_args(cluster_under_test, namespace, "Multiply the numbers.", "--id", "mul",
                  "-f", str(data), "--api-key-secret", "llm:key", "--rm"),
        env=cli_environment(tmp_path / "home"), cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 0, result
    (stored,) = interim_operator.sessions
    name = stored["metadata"]["name"]
    assert name.startswith("mul-")
    assert stored["spec"]["agent"] == {
        "model": "scripted",
        "prompt": "Multiply the numbers.",
        "baseURL": "http://model.invalid/v1",
        "apiKeySecretRef": {"name": "llm", "key": "key"},
        "maxTurns": 9,
        "toolTimeoutSeconds": 120,
    }
    assert stored["spec"]["files"] == [
        {"path": "/testbed/input/numbers.txt", "content": "6 7\n", "mode": 0o644}
    ]
    assert "sk-test-placeholder" not in json.dumps(stored)  # the local key stays local
    for line in ["phase Pending", "phase Running", "turn 1/9", "turn 2/9", "phase Succeeded"]:
        assert line in result.stderr, result
    assert "stop reason submitted" in result.stdout
    assert "42" in result.stdout
    assert f"{namespace}/{name}  (deleted)" in result.stdout
    assert (await kube.request("GET", session_path(namespace, name))).status == 404


async def test_run_on_kubernetes_exits_like_the_local_backend_and_keeps_the_session(
    interim_operator: InterimOperator, kube: KubeApi, namespace: str,
    cluster_under_test: ClusterUnderTest, tmp_path: Path,
) -> None:  # fmt: skip
    interim_operator.behaviour = finished_agent("Failed", "MaxTurnsReached", "max_turns", None)

    result = await run_cli(
        *cli_args(cluster_under_test, namespace, "Never finishes.", "--json", "--ttl", "600"),
        env=cli_environment(tmp_path / "home"), cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 1, result
    record = json.loads(result.stdout)
    (stored,) = interim_operator.sessions
    name = stored["metadata"]["name"]
    assert record["session"] == f"{namespace}/{name}"
    assert (record["stop_reason"], record["turns"], record["wall_time_s"]) == ("max_turns", 2, 12.0)
    assert record["error"] == "MaxTurnsReached"
    kept = await kube.checked("GET", session_path(namespace, name))
    assert kept["spec"]["lifecycle"] == {"ttlSecondsAfterFinished": 600}


async def test_ctrl_c_on_a_followed_run_deletes_its_session(
    interim_operator: InterimOperator, kube: KubeApi, namespace: str,
    cluster_under_test: ClusterUnderTest, tmp_path: Path,
) -> None:  # fmt: skip
    interim_operator.behaviour = running_forever
    process = await start_cli(
        *cli_args(cluster_under_test, namespace, "Loop forever."),
        env=cli_environment(tmp_path / "home"), cwd=tmp_path,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        await read_until(process.stderr, "turn 1/9", timeout_s=CLI_TIMEOUT_S)
        press_ctrl_c(process)
        async with asyncio.timeout(CLI_TIMEOUT_S):
            stdout, _ = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()

    assert process.returncode == 130
    (stored,) = interim_operator.sessions
    name = stored["metadata"]["name"]
    assert "interrupted" in stdout.decode()
    assert (await kube.request("GET", session_path(namespace, name))).status == 404
