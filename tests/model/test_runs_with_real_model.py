"""`sandfleet run` with a real model (Qwen2.5-Coder-1.5B behind llama.cpp) on local sandboxes.

The assertions are on what Sandfleet did with the model's replies (calls parsed and executed,
outcomes recorded, files copied back, limits kept), never on whether the model was clever.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.model.cli_runs import run_with_model
from tests.model.model_server import ModelServer

pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(1200)]

MODEL_ERROR_EXIT = 3


async def test_a_solved_task_has_its_calls_executed_recorded_and_its_answer_copied_back(
    model_server: ModelServer, tmp_path: Path
) -> None:
    task = (
        "Run the shell command python3 -c 'print(123*457)' > /testbed/output/answer.txt "
        "with execute_bash, then call submit."
    )
    run = await run_with_model(model_server, task, tmp_path, task_id="product", max_turns=6)

    assert run.cli.returncode == 0, run.cli
    assert run.outcome["stop_reason"] == "submitted"
    calls = run.of_kind("tool_call")
    observations = {record["call_id"]: record for record in run.of_kind("observation")}
    bash_calls = [call for call in calls if call["name"] == "execute_bash"]
    assert bash_calls, run.records
    for call in calls:  # every parsed call carries JSON arguments and got its observation
        assert isinstance(json.loads(call["arguments"]), dict)
        assert call["call_id"] in observations
    for call in bash_calls:  # executed by real bash: the exit code is in the observation
        assert observations[call["call_id"]]["output"].startswith("Exit code: ")
    assert calls[-1]["name"] == "submit"
    assert run.outcome["turns"] == len({call["turn"] for call in calls})
    assert run.outcome["prompt_tokens"] > 0 and run.outcome["completion_tokens"] > 0
    usage = run.of_kind("usage")
    assert sum(record["prompt_tokens"] for record in usage) == run.outcome["prompt_tokens"]
    assert run.records[-1]["kind"] == "result"
    assert run.records[-1]["stop_reason"] == run.outcome["stop_reason"]
    # The answer file came back from /testbed/output, and the answer is read from it.
    answer_file = run.folder / "output" / "answer.txt"
    assert run.outcome["output_files"] == ["answer.txt"]
    assert run.outcome["answer"] == answer_file.read_text().strip()


async def test_prose_replies_end_the_run_after_bounded_nudges_with_the_prose_as_result(
    model_server: ModelServer, tmp_path: Path
) -> None:
    task = "Do not use any tools and do not call any function. Just say hello in plain text."
    max_turns = 10
    run = await run_with_model(model_server, task, tmp_path, task_id="hello", max_turns=max_turns)

    assert run.outcome["stop_reason"] == "no_tool_call", run.outcome
    assert run.outcome["turns"] < max_turns
    assert run.of_kind("tool_call") == []
    replies = [r for r in run.of_kind("message") if r["role"] == "assistant"]
    assert replies and replies[-1]["content"].strip()
    assert run.outcome["answer"] == replies[-1]["content"].strip()
    assert run.cli.returncode != MODEL_ERROR_EXIT
