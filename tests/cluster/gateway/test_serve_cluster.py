"""`sandfleet serve` in cluster mode on the real cluster: the official `openai` client talks
to serve (in this process, real HTTP), whose loop (against a scripted upstream over real
HTTP) runs its command in a pool pod claimed through the real gateway as a tenant
ServiceAccount, and releases the session when the answer or the conversation is done; a
conversation continues on another serve replica (two servers, one identity)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.cluster.gateway.conftest import StartGateway, until_claimable
from tests.cluster.gateway.test_claims import create_pool, pool_pods
from tests.cluster.harness.gateway_clients import tenant_token
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import POOLS, SESSIONS, wait_no_leftovers
from tests.integration.serve.harness import MODEL, serving
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer, bash, submit

pytestmark = pytest.mark.cluster

TOKEN_ENV = "SANDFLEET_TEST_SERVE_GATEWAY_TOKEN"
ANSWER = "output/answer.txt"
HEADER = "x-sandfleet-conversation"


def cluster_config(folder: Path, upstream: str, gateway: str, namespace: str) -> Path:
    path = folder / "serve.toml"
    path.write_text(
        f'[server]\nstate_dir = "{folder / "state"}"\n\n'
        f'[gateway]\naddress = "{gateway}"\ntoken_env = "{TOKEN_ENV}"\n'
        f'namespace = "{namespace}"\n\n'
        f'[models.{MODEL}]\nupstream.base_url = "{upstream}"\nupstream.model = "m"\n'
        'max_retries = 0\nsandbox = "cluster"\npool = "serve"\n'
    )
    return path


async def until_no_sessions(kube: KubeApi, namespace: str, timeout_s: float = 60) -> None:
    """Until serve's sessions are gone (released through the gateway, deleted)."""
    deadline = time.monotonic() + timeout_s
    while items := (await kube.checked("GET", SESSIONS.format(ns=namespace)))["items"]:
        if time.monotonic() > deadline:
            names = [item["metadata"]["name"] for item in items]
            raise AssertionError(f"sessions not released after {timeout_s}s: {names}")
        await asyncio.sleep(0.2)


async def test_serve_answers_from_a_pool_pod_and_a_conversation_moves_between_replicas(
    kube: KubeApi,
    namespace: str,
    start_gateway: StartGateway,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await create_pool(kube, namespace, "serve", 2)
    gateway = await start_gateway()
    monkeypatch.setenv(TOKEN_ENV, await tenant_token(kube, namespace))
    await until_claimable(gateway, namespace, "serve", 2)
    pods = {pod["metadata"]["name"] for pod in await pool_pods(kube, namespace, "idle")}

    async with ScriptedOpenAIServer() as upstream:
        config = cluster_config(tmp_path, upstream.base_url, gateway.address, namespace)
        async with serving(config) as server, server.client() as client:
            # One chat request: one command in a claimed pool pod, its output the answer.
            upstream.add(
                Reply(tool_calls=[bash(f"mkdir -p output && cat /etc/hostname > {ANSWER}")]),
                Reply(tool_calls=[submit()]),
            )  # fmt: skip
            chat = await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "which pod are you?"}]
            )
            assert chat.choices[0].message.content in pods
            await until_no_sessions(kube, namespace)

            # A conversation continued by another replica: same session, file and history
            # kept; the first replica refreshes the history the second one added.
            async with serving(config) as other, other.client() as other_client:
                upstream.add(
                    Reply(tool_calls=[bash("echo kept > notes.txt")]),
                    Reply(text="noted", tool_calls=[submit()]),
                    Reply(tool_calls=[bash(f"mkdir -p output && cat notes.txt > {ANSWER}")]),
                    Reply(tool_calls=[submit()]),
                    Reply(tool_calls=[bash(f"mkdir -p output && cat /etc/hostname > {ANSWER}")]),
                    Reply(tool_calls=[submit()]),
                )  # fmt: skip
                first = await client.responses.create(model=MODEL, input="remember this")
                second = await other_client.responses.create(
                    model=MODEL, input="what did you keep?", previous_response_id=first.id
                )
                assert second.output_text == "kept"
                third = await client.responses.create(
                    model=MODEL, input="and where?", previous_response_id=second.id
                )
                prompts = [r.body["messages"][1]["content"] for r in upstream.chat_requests]
                assert "remember this" in prompts[4]  # the second replica knew the first turn
                assert "what did you keep?" in prompts[6]  # and the first one the second
                # The conversation's one session, still held, ran every turn's command.
                (session,) = (await kube.checked("GET", SESSIONS.format(ns=namespace)))["items"]
                assert third.output_text == session["status"]["podName"]
                # DELETE reaching the replica that did not answer it still ends it.
                await other_client.responses.delete(third.id)
                await until_no_sessions(kube, namespace)

                # A chat conversation (its id in a header) moves between replicas as well.
                upstream.add(
                    Reply(tool_calls=[bash("echo chat-kept > c.txt")]),
                    Reply(text="ok", tool_calls=[submit()]),
                    Reply(tool_calls=[bash(f"mkdir -p output && cat c.txt > {ANSWER}")]),
                    Reply(tool_calls=[submit()]),
                )  # fmt: skip
                started = await client.chat.completions.with_raw_response.create(
                    model=MODEL, messages=[{"role": "user", "content": "keep a note"}],
                    extra_headers={HEADER: "new"},
                )  # fmt: skip
                conversation = started.headers[HEADER]
                follow_up = await other_client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "the note?"}],
                    extra_headers={HEADER: conversation},
                )  # fmt: skip
                assert follow_up.choices[0].message.content == "chat-kept"
    await until_no_sessions(kube, namespace)  # both servers stopped: conversations released
    await kube.checked("DELETE", f"{POOLS.format(ns=namespace)}/serve")
    await wait_no_leftovers(kube, namespace, timeout_s=60)
