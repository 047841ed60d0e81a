"""Token-faithful trajectories end to end: the scripted endpoint (real HTTP, answering token
requests the way vLLM or llama.cpp does) drives a REAL local sandbox through a 3-turn tool
run; the trajectory's token records become training rows whose masks are checked against
ids built by hand from the toy tokenizer and the recorded observations."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sandfleet import Sandbox
from sandfleet.agent import (
    AgentConfig,
    StopReason,
    Task,
    TrajectoryWriter,
    openai_model,
    read_trajectory,
    run_agent,
)
from sandfleet.agent.training_rows import TrainingRowsError, training_rows
from tests.integration.cli.harness import cli_environment, run_cli
from tests.support.scripted_openai import (
    Reply,
    ScriptedOpenAIServer,
    TokenFamily,
    ToyTokens,
    bash,
    submit,
)

pytestmark = pytest.mark.integration

TASK = Task(id="tokens-1", prompt="Say hello twice, then submit.")
COMMANDS = ("echo hello", "echo hello again")


def three_turns() -> list[Reply]:
    return [
        Reply(tool_calls=[bash(COMMANDS[0])]),
        Reply(text="Once more.", tool_calls=[bash(COMMANDS[1])]),
        Reply(text="Done.", tool_calls=[submit()]),
    ]


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    async with Sandbox.local() as local:
        yield local


async def run_three_turns(
    sandbox: Sandbox, tmp_path: Path, tokens: TokenFamily | None, *, record_tokens: bool = True
) -> tuple[ScriptedOpenAIServer, list[dict[str, Any]], Path]:
    path = tmp_path / "trajectory.jsonl"
    async with ScriptedOpenAIServer(three_turns(), tokens=tokens) as server:
        config = AgentConfig(
            model="scripted", base_url=server.base_url, max_retries=0, record_tokens=record_tokens
        )
        model = openai_model(config)
        try:
            with TrajectoryWriter(path) as trajectory:
                result = await run_agent(TASK, sandbox, model, config, trajectory=trajectory)
        finally:
            await model.aclose()
    assert result.stop_reason is StopReason.SUBMITTED, result.error
    assert result.turns == 3
    return server, list(read_trajectory(path)), path


def of_kind(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [record for record in records if record["kind"] == kind]


def call_ids(command: str) -> list[int]:
    """The tokens of a reply that is one execute_bash call, as the toy template renders it."""
    arguments = json.dumps({"command": command})
    return [*ToyTokens.text(f"<call>execute_bash {arguments}</call>"), ToyTokens.END]


async def test_a_vllm_endpoint_gives_rows_whose_mask_covers_only_the_replies(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    server, records, path = await run_three_turns(sandbox, tmp_path, "vllm")

    for request in server.chat_requests:  # every request asked in vLLM's and SGLang's words
        assert request.body["logprobs"] is True
        assert request.body["top_logprobs"] == 1
        assert request.body["return_token_ids"] is True
        assert request.body["return_prompt_token_ids"] is True
    assert records[0]["record_tokens"] is True
    turns = of_kind(records, "tokens")
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert all(t["unavailable"] == {} for t in turns)
    assert turns[0]["source"]["prompt_ids"] == "prompt_token_ids"

    # By hand: the prompt is system + user + the generation marker; each reply's tokens are
    # its rendered text and the end token; between replies come the tool message (the
    # observation the trajectory recorded) and the next generation marker.
    system, user = (r["content"] for r in of_kind(records, "message") if r["turn"] == 0)
    prompt = [
        *ToyTokens.message({"role": "system", "content": system}),
        *ToyTokens.message({"role": "user", "content": user}),
        ToyTokens.GENERATION,
    ]
    observations = [r["output"] for r in of_kind(records, "observation")]
    assert "hello" in observations[0]
    replies = [
        call_ids(COMMANDS[0]),
        [*ToyTokens.text("Once more."), *call_ids(COMMANDS[1])],
        [*ToyTokens.text("Done."), *ToyTokens.text("<call>submit {}</call>"), ToyTokens.END],
    ]
    between = [
        [*ToyTokens.message({"role": "tool", "content": output}), ToyTokens.GENERATION]
        for output in observations[:2]
    ]
    expected_ids = replies[0] + between[0] + replies[1] + between[1] + replies[2]
    expected_mask = (
        [1] * len(replies[0])
        + [0] * len(between[0])
        + [1] * len(replies[1])
        + [0] * len(between[1])
        + [1] * len(replies[2])
    )

    [row] = training_rows(records, "rows", reward=0.5)
    assert row["prompt_ids"] == prompt
    assert row["response_ids"] == expected_ids
    assert row["response_mask"] == expected_mask
    assert row["response_logprobs"] == [
        ToyTokens.logprob(token) if masked else 0.0
        for token, masked in zip(expected_ids, expected_mask, strict=True)
    ]
    assert row["reward"] == 0.5

    # The same through the CLI, reward from an eval's samples file.
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"trajectory": str(path), "score": 1.0}) + "\n")
    env = cli_environment(tmp_path / "home")
    exported = await run_cli("export", str(path), "--samples", str(samples), env=env, cwd=tmp_path)
    assert exported.returncode == 0, exported
    [line] = exported.stdout.splitlines()
    assert json.loads(line) == {**row, "reward": 1.0}


async def test_llama_cpp_gives_completion_ids_but_no_prompt_ids_so_rows_are_refused(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    _, records, path = await run_three_turns(sandbox, tmp_path, "llama.cpp")
    first = of_kind(records, "tokens")[0]
    assert first["completion_ids"] == call_ids(COMMANDS[0])
    assert first["source"]["completion_ids"] == "choices[0].logprobs.content[].id"
    assert first["logprobs"] == [ToyTokens.logprob(t) for t in first["completion_ids"]]
    assert first["prompt_ids"] is None
    assert "no prompt_token_ids" in first["unavailable"]["prompt_ids"]

    with pytest.raises(TrainingRowsError, match="turn 1 has no prompt ids: the endpoint"):
        training_rows(records, "turns")
    env = cli_environment(tmp_path / "home")
    exported = await run_cli("export", str(path), env=env, cwd=tmp_path)
    assert exported.returncode == 2, exported
    assert "turn 1 has no prompt ids" in exported.stderr
    assert "Traceback" not in exported.stderr


async def test_an_endpoint_without_token_data_records_why_and_export_refuses(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    _, records, _ = await run_three_turns(sandbox, tmp_path, None)
    turns = of_kind(records, "tokens")
    assert len(turns) == 3
    for turn in turns:
        assert (turn["prompt_ids"], turn["completion_ids"], turn["logprobs"]) == (None,) * 3
        assert set(turn["unavailable"]) == {"prompt_ids", "completion_ids", "logprobs"}
    with pytest.raises(TrainingRowsError, match="turn 1 has no prompt ids"):
        training_rows(records, "rows")


async def test_without_the_option_requests_and_trajectories_are_as_before(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    server, records, _ = await run_three_turns(sandbox, tmp_path, "vllm", record_tokens=False)
    for request in server.chat_requests:
        assert not {"logprobs", "top_logprobs", "return_token_ids"} & set(request.body)
    assert "record_tokens" not in records[0]
    assert of_kind(records, "tokens") == []
    with pytest.raises(TrainingRowsError, match="no token records"):
        training_rows(records, "rows")
