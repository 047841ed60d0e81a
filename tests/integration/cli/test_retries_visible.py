"""Issue 27 item 2, through the real CLI against a scripted endpoint on 127.0.0.1: every
retry of a model request, its cause and its wait are shown in the trace, recorded in the
trajectory (a `retry` record) and, for `batch --json`, printed as a "retry" object.

Before, the SDK retried inside the request: a reply that took 788 s (a timed-out attempt
and a second one) looked like one slow answer, on screen and in the trajectory alike.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.cli.harness import (
    cli_environment,
    records_of,
    run_cli,
    run_folder,
)
from tests.support.scripted_openai import (
    Fail,
    Reply,
    ScriptedOpenAIServer,
    bash,
    submit,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

ANSWER = bash("echo 42 > /testbed/output/answer.txt")


async def test_a_stalled_request_and_an_overloaded_endpoint_show_as_retries(
    tmp_path: Path,
) -> None:
    script = [
        Reply(tool_calls=[ANSWER], delay_s=6.0),  # stalls past --request-timeout-seconds 2
        Fail(503, "server overloaded", retry_after_s=0.5),
        Reply(tool_calls=[ANSWER]),  # the third attempt of turn 1
        Reply(tool_calls=[submit()]),
    ]
    async with ScriptedOpenAIServer(script) as server:
        result = await run_cli(
            "run", "Write 42.", "--id", "retry", "--model", "m", "--base-url", server.base_url,
            "--request-timeout-seconds", "2", "--max-retries", "2",
            "--results-dir", str(tmp_path / "results"), "--state-dir", str(tmp_path / "state"),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip

    assert result.returncode == 0, result
    trace = result.stdout
    assert "model request failed (attempt 1/3" in trace, trace
    assert "no answer within 2 s; retrying in" in trace
    assert "model request failed (attempt 2/3" in trace
    assert "HTTP 503: server overloaded; retrying in 0.5s" in trace
    retries = list(records_of(run_folder(tmp_path / "results", "retry") / "trajectory.jsonl",
                              "retry"))  # fmt: skip
    assert [(r["turn"], r["attempt"], r["attempts"]) for r in retries] == [(1, 1, 3), (1, 2, 3)]
    assert retries[0]["cause"] == "no answer within 2 s"
    assert retries[0]["status_code"] is None and retries[0]["attempt_s"] >= 2.0
    assert retries[1]["cause"] == "HTTP 503: server overloaded"
    assert (retries[1]["status_code"], retries[1]["wait_s"]) == (503, 0.5)
    assert len(server.chat_requests) == 4
    # `show` replays the trajectory's retries in the trace too.
    shown = await run_cli(
        "show", "retry", "--results-dir", str(tmp_path / "results"),
        env=cli_environment(tmp_path / "home"), cwd=tmp_path,
    )  # fmt: skip
    assert "HTTP 503: server overloaded; retrying in 0.5s" in shown.stdout, shown


async def test_batch_json_prints_each_retry(tmp_path: Path) -> None:
    script = [Fail(500, "boom", retry_after_s=0.2), Reply(tool_calls=[ANSWER]),
              Reply(tool_calls=[submit()])]  # fmt: skip
    (tmp_path / "tasks.jsonl").write_text('{"id": "a", "prompt": "first"}\n')
    async with ScriptedOpenAIServer(script) as server:
        result = await run_cli(
            "batch", str(tmp_path / "tasks.jsonl"), "--out", str(tmp_path / "out.jsonl"),
            "--json", "--no-preflight", "--model", "m", "--base-url", server.base_url,
            "--results-dir", str(tmp_path / "results"), "--state-dir", str(tmp_path / "state"),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip

    assert result.returncode == 0, result
    events = [json.loads(line) for line in result.stdout.splitlines()]
    retries = [e for e in events if e["event"] == "retry"]
    assert len(retries) == 1, events
    assert retries[0] | {"attempt_s": 0} == {
        "event": "retry", "id": "a", "turn": 1, "attempt": 1, "attempts": 3,
        "cause": "HTTP 500: boom", "attempt_s": 0, "wait_s": 0.2,
    }  # fmt: skip
    assert [e["event"] for e in events] == ["start", "retry", "task", "summary"]
