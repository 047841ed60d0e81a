"""examples/rl/rollouts.py, run as a user runs it, against the scripted endpoint answering
token requests the way vLLM does, on REAL local sandboxes: every finished episode becomes a
row whose ids, mask and logprobs are checked against the toy tokenizer's rendering of the
conversation the endpoint saw (tool turns, and a malformed call, in between)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from sandfleet.tool_calls import parse_tool_call
from sandfleet.tool_calls.requests import ToolCallError
from tests.support.scripted_openai import (
    RecordedRequest,
    Reply,
    ScriptedCall,
    ScriptedOpenAIServer,
    Step,
    ToyTokens,
    bash,
    submit,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "rl" / "rollouts.py"
MALFORMED = '{"command": "ls'


def policy(request: RecordedRequest) -> Step:
    """Per conversation: look, send a malformed call, write the answer, submit."""
    messages = request.body["messages"]
    done = sum(1 for m in messages if m["role"] == "tool")
    if done == 0:
        return Reply(tool_calls=[bash("cat input/*")])
    if done == 1:
        return Reply(text="Oops.", tool_calls=[ScriptedCall("execute_bash", MALFORMED)])
    if done == 2:
        if "sum" in messages[1]["content"]:
            command = "awk '{s+=$1} END {print s}' input/numbers.txt > output/answer.txt"
        else:
            command = "wc -l < input/poem.txt > output/answer.txt"
        return Reply(tool_calls=[bash(command)])
    return Reply(text="Done.", tool_calls=[submit()])


SUBMIT_COMPLETION = ToyTokens.completion(
    {"role": "assistant", "content": "Done.",
     "tool_calls": [{"function": {"name": "submit", "arguments": "{}"}}]}
)  # fmt: skip


def expected_mask(messages: list[dict[str, Any]]) -> list[int]:
    """1 on every assistant completion (body + end token), 0 on tool messages and on each
    generation prompt the environment's turn adds; the final submit completes it."""
    mask: list[int] = []
    for index, message in enumerate(messages[2:]):
        if message["role"] == "assistant":
            if index > 0:
                mask.append(0)  # the generation prompt after the tool messages
            mask += [1] * len(ToyTokens.completion(message))
        else:
            mask += [0] * len(ToyTokens.message(message))
    return [*mask, 0, *([1] * len(SUBMIT_COMPLETION))]


async def test_the_rl_example_exports_rows_with_masks_over_tool_turns(tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    async with ScriptedOpenAIServer(responder=policy, tokens="vllm") as server:
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(EXAMPLE), "--base-url", server.base_url, "--envs", "2",
            "--rounds", "2", "--out", str(out),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
        )  # fmt: skip
        stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
        requests = server.chat_requests
    assert process.returncode == 0, stderr.decode()[-3000:]
    summary = json.loads(stdout.decode().strip().splitlines()[-1])
    assert (summary["episodes"], summary["rows"], summary["masked"]) == (4, 4, 0)
    assert summary["mean_reward"] == 1.0

    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(row["task_id"] for row in rows) == ["lines-1", "sum-1", "sum-1", "sum-2"]
    # Every request asked for token ids and logprobs.
    assert all(r.body.get("return_token_ids") and r.body.get("logprobs") for r in requests)
    finals = [
        r.body["messages"]
        for r in requests
        if sum(m["role"] == "tool" for m in r.body["messages"]) == 3
    ]
    assert len(finals) == 4
    for row in rows:
        full = row["prompt_ids"] + row["response_ids"]
        matches = [
            messages for messages in finals
            if full == ToyTokens.prompt(messages) + SUBMIT_COMPLETION
            and row["prompt_ids"] == ToyTokens.prompt(messages[:2])
        ]  # fmt: skip
        assert matches, f"row of {row['task_id']} matches no conversation the endpoint saw"
        messages = matches[0]
        assert row["response_mask"] == expected_mask(messages)
        assert (row["turns"], row["stop_reason"], row["reward"]) == (4, "submitted", 1.0)
        for token, mask, logprob in zip(
            row["response_ids"], row["response_mask"], row["response_logprobs"], strict=True
        ):
            assert logprob == (ToyTokens.logprob(token) if mask else 0.0)
        # The malformed call's observation is the tool-call contract's message.
        with pytest.raises(ToolCallError) as malformed:
            parse_tool_call("execute_bash", MALFORMED)
        tool_texts = [m["content"] for m in messages if m["role"] == "tool"]
        assert tool_texts[1] == str(malformed.value)
        assert tool_texts[0].startswith("Exit code: 0\n")
