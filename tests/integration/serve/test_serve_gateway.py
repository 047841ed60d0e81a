"""`sandfleet serve` in cluster mode on the host: the official `openai` client against serve,
serve claiming through the real gateway (in-process, its claim path and API server stood in)
in front of a real runtime agent; a full namespace quota is a 429, not a 503. The real
cluster's version is tests/cluster/gateway/test_serve_cluster.py."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest

from tests.integration.serve.harness import MODEL, serving
from tests.support.client_gateway import CALLER_TOKEN, NAMESPACE, ClientGateway, client_gateway
from tests.support.runtime_server import spawn_runtime_process
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer, bash, submit

pytestmark = [pytest.mark.integration]

TOKEN_ENV = "SANDFLEET_TEST_SERVE_GATEWAY_TOKEN"


def cluster_config(folder: Path, upstream: str, gateway: str, identity: str = "serve") -> Path:
    path = folder / "serve.toml"
    path.write_text(
        f'[gateway]\naddress = "{gateway}"\ntoken_env = "{TOKEN_ENV}"\n'
        f'namespace = "{NAMESPACE}"\nidentity = "{identity}"\n\n'
        f'[models.{MODEL}]\nupstream.base_url = "{upstream}"\nupstream.model = "m"\n'
        'max_retries = 0\nsandbox = "cluster"\n'
    )
    return path


async def until_released(gateway: ClientGateway, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while gateway.sessions:
        assert time.monotonic() < deadline, f"not released: {gateway.sessions}"
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def runtime(folder: Path) -> AsyncIterator[tuple[str, str]]:
    """A runtime agent as a child process: its address and token."""
    workdir = folder / "sandbox"
    workdir.mkdir()
    token = secrets.token_urlsafe(16)
    process, port = await asyncio.to_thread(spawn_runtime_process, workdir, token)
    try:
        yield f"127.0.0.1:{port}", token
    finally:
        process.terminate()
        await asyncio.to_thread(process.wait, 30)


async def test_a_claimed_sandbox_answers_and_a_full_quota_is_a_429(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workdir = tmp_path / "sandbox"
    monkeypatch.setenv(TOKEN_ENV, CALLER_TOKEN)
    async with (
        runtime(tmp_path) as (address, token),
        client_gateway([(address, token)], str(workdir), quotas={NAMESPACE: 1}) as gateway,
        ScriptedOpenAIServer() as upstream,
    ):
        config = cluster_config(tmp_path, upstream.base_url, gateway.address)
        async with serving(config) as server, server.client() as client:
            upstream.add(
                Reply(tool_calls=[bash("mkdir -p output && echo claimed > output/answer.txt")]),
                Reply(tool_calls=[submit()]),
            )  # fmt: skip
            kept = await client.responses.create(model=MODEL, input="hello")
            assert kept.output_text == "claimed"
            assert len(gateway.sessions) == 1  # the conversation holds the quota's one
            with pytest.raises(openai.RateLimitError) as refused:
                await client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "another"}]
                )
            assert refused.value.code == "sandbox_quota_exceeded"
            assert refused.value.response.headers["retry-after"] == "5"
            await client.responses.delete(kept.id)
            await until_released(gateway)


async def test_with_client_identity_each_clients_own_token_claims(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "serves-own-token-unused-for-claims")
    async with (
        runtime(tmp_path) as (address, token),
        client_gateway([(address, token)], str(tmp_path / "sandbox")) as gateway,
        ScriptedOpenAIServer() as upstream,
    ):
        config = cluster_config(tmp_path, upstream.base_url, gateway.address, "client")
        async with serving(config) as server:
            upstream.add(
                Reply(tool_calls=[bash("mkdir -p output && echo mine > output/answer.txt")]),
                Reply(tool_calls=[submit()]),
            )  # fmt: skip
            async with server.client(api_key=CALLER_TOKEN) as client:
                answer = await client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "whose?"}]
                )
            assert answer.choices[0].message.content == "mine"
            claims = [metadata for method, _, metadata in gateway.calls if method == "Claim"]
            assert [m["authorization"] for m in claims] == [f"Bearer {CALLER_TOKEN}"]
            # A token the API server does not accept: the gateway refuses, the client hears 401.
            async with server.client(api_key="not-a-kubernetes-token") as stranger:
                with pytest.raises(openai.AuthenticationError) as refused:
                    await stranger.chat.completions.create(
                        model=MODEL, messages=[{"role": "user", "content": "whose?"}]
                    )
            assert refused.value.code == "sandbox_claim_refused"
            await until_released(gateway)
