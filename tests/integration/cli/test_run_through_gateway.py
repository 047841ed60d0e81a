"""`sandfleet run|batch --backend kubernetes` through the gateway: the console script runs the
loop, the sandbox is claimed through the gateway and used through its proxy, results land
locally, and the session is released.

The gateway is the real one in-process (tests/support/client_gateway.py) in front of a real
runtime agent; its claim path and the Kubernetes API server it asks are stand-ins, as no
cluster runs here.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.integration.cli.harness import cli_environment, run_cli, run_folder
from tests.support.client_gateway import (
    CALLER,
    CALLER_TOKEN,
    ClientGateway,
    gateway_over_child_runtime,
)
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer, bash, submit

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[ClientGateway]:
    async with gateway_over_child_runtime(tmp_path) as gateway:
        yield gateway


def gateway_flags(gateway: ClientGateway, model: ScriptedOpenAIServer, tmp_path: Path) -> list[str]:
    return [
        "--backend", "kubernetes", "--gateway", gateway.address, "-n", "team-a",
        "--pool", "py312", "--model", "scripted", "--base-url", model.base_url,
        "--results-dir", str(tmp_path / "results"),
    ]  # fmt: skip


async def test_run_claims_through_the_gateway_runs_the_loop_here_and_releases(
    gateway: ClientGateway, tmp_path: Path
) -> None:
    data = tmp_path / "numbers.txt"
    data.write_text("6 7\n")
    script = [
        Reply(tool_calls=[bash("cat input/numbers.txt")]),
        Reply(tool_calls=[bash("mkdir -p output && echo 42 > output/answer.txt")]),
        Reply(tool_calls=[submit()]),
    ]
    env = cli_environment(tmp_path / "home", SANDFLEET_GATEWAY_TOKEN=CALLER_TOKEN)
    async with ScriptedOpenAIServer(script) as model:
        result = await run_cli(
            "run", "Multiply the numbers.", "--id", "mul", "-f", str(data), "--json",
            *gateway_flags(gateway, model, tmp_path), env=env, cwd=tmp_path,
        )  # fmt: skip
        observed = json.dumps(model.chat_requests[1].body["messages"])

    assert result.returncode == 0, result
    record = json.loads(result.stdout)
    assert (record["stop_reason"], record["answer"]) == ("submitted", "42")
    assert "6 7" in observed  # the input file reached the sandbox through the proxy
    assert (run_folder(tmp_path / "results", "mul") / "output" / "answer.txt").read_text() == "42\n"
    assert gateway.methods() == ["Claim", "Release"]
    claim = gateway.calls[0][1]
    assert (claim.namespace, claim.pool, claim.generate_name) == ("team-a", "py312", "mul-")
    assert all(md["x-sandfleet-session"] == "team-a/mul-0" for _, md in gateway.proxied)
    assert not gateway.sessions


async def test_batch_claims_one_sandbox_per_task(gateway: ClientGateway, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": i, "prompt": "p"}) + "\n" for i in ("a", "b")))
    script = [Reply(tool_calls=[submit()])] * 2
    env = cli_environment(tmp_path / "home", SANDFLEET_GATEWAY_TOKEN=CALLER_TOKEN)
    async with ScriptedOpenAIServer(script) as model:
        result = await run_cli(
            "batch", str(tasks), "--out", str(tmp_path / "out.jsonl"), "-c", "1",
            *gateway_flags(gateway, model, tmp_path), env=env, cwd=tmp_path,
        )  # fmt: skip

    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [(line["id"], line["stop_reason"]) for line in lines] == [
        ("a", "submitted"), ("b", "submitted"),
    ], result  # fmt: skip
    assert gateway.methods() == ["Claim", "Release", "Claim", "Release"]
    assert [call[1].generate_name for call in gateway.calls if call[0] == "Claim"] == ["a-", "b-"]


async def test_a_failed_release_is_logged_and_the_run_keeps_its_result(
    gateway: ClientGateway, tmp_path: Path
) -> None:
    gateway.api.allowed.discard((CALLER, "delete", "team-a"))  # RBAC: create, not delete
    env = cli_environment(tmp_path / "home", SANDFLEET_GATEWAY_TOKEN=CALLER_TOKEN)
    async with ScriptedOpenAIServer([Reply(text="done", tool_calls=[submit()])]) as model:
        result = await run_cli(
            "run", "Anything.", "--id", "kept", *gateway_flags(gateway, model, tmp_path),
            env=env, cwd=tmp_path,
        )  # fmt: skip

    assert result.returncode == 0, result
    assert "gateway_release_failed" in result.stderr
    assert f"user {CALLER} may not delete sandboxsessions in namespace team-a" in result.stderr
    record = json.loads((run_folder(tmp_path / "results", "kept") / "result.json").read_text())
    assert record["stop_reason"] == "submitted"
