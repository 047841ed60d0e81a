"""The CLI's error contract, through the real console script: a garbage-answering endpoint
(real HTTP), bad prompt templates, a missing API key and hostile trajectories each give
their documented exit code, result.json where a run started, one line and no traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sandfleet.runs.replay import MAX_TRAJECTORY_BYTES
from tests.integration.cli.harness import (
    CliResult,
    cli_environment,
    live_sandboxes,
    read_jsonl,
    records_of,
    run_cli,
    run_folder,
)
from tests.support.scripted_openai import Raw, Reply, ScriptedCall, ScriptedOpenAIServer, submit

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

REPOSITORY = Path(__file__).resolve().parents[3]
SHIPPED = REPOSITORY / "examples" / "trajectories" / "sales_by_region.jsonl"


def run_flags(server: ScriptedOpenAIServer, tmp_path: Path) -> list[str]:
    return [
        "--id", "t", "--model", "m", "--base-url", server.base_url, "--max-retries", "0",
        "--results-dir", str(tmp_path / "results"), "--state-dir", str(tmp_path / "state"),
    ]  # fmt: skip


def assert_no_traceback(result: CliResult) -> None:
    assert "Traceback" not in result.stdout + result.stderr, result
    assert 'File "' not in result.stderr, result


def one_error_line(result: CliResult) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result
    assert lines[0].startswith("error: "), result
    return lines[0]


def completion(message: Any) -> dict[str, Any]:
    return {
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }  # fmt: skip


INTEGER_NAME = {"id": "c1", "type": "function", "function": {"name": 5, "arguments": "{}"}}
GARBAGE = {
    "broken-json": (Raw(b'{"id": "x", "choices": ['), "not JSON"),
    "html": (Raw(b"<html>busy</html>", content_type="text/html"), "not a chat completion"),
    "integer-function-name": (
        Raw(completion({"role": "assistant", "content": None, "tool_calls": [INTEGER_NAME]})),
        "function name is int",
    ),
    "missing-fields": (Raw({"id": "x"}), "no choices"),
    "tool-calls-not-a-list": (
        Raw(completion({"role": "assistant", "content": "hi", "tool_calls": "submit"})),
        "tool_calls is str",
    ),
    "json-array": (Raw([1, 2, 3]), "not a chat completion"),
}


@pytest.mark.parametrize("case", list(GARBAGE))
async def test_an_endpoint_answering_garbage_is_a_model_error_with_exit_3(
    tmp_path: Path, case: str
) -> None:
    step, words = GARBAGE[case]
    async with ScriptedOpenAIServer([step]) as server:
        result = await run_cli(
            "run", "hello", *run_flags(server, tmp_path),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip

    assert result.returncode == 3, result
    assert_no_traceback(result)
    outcome = json.loads((run_folder(tmp_path / "results", "t") / "result.json").read_text())
    assert outcome["stop_reason"] == "model_error"
    assert words in outcome["error"]
    assert "error the model endpoint" in result.stdout
    assert live_sandboxes(tmp_path / "state") == []


async def test_a_lone_surrogate_in_tool_arguments_is_the_models_mistake_not_a_crash(
    tmp_path: Path,
) -> None:
    script = [
        # JSON may escape a lone surrogate; it reaches the parser as an unpaired code point.
        Reply(tool_calls=[ScriptedCall("execute_bash", '{"command": "echo \\ud800"}')]),
        # ... and one sent raw in the reply text must not break the trajectory or terminal.
        Raw(
            b'{"id":"x","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,'
            b'"message":{"role":"assistant","content":"bad \\udc00 text","tool_calls":[{"id":'
            b'"c2","type":"function","function":{"name":"submit","arguments":"{}"}}]},'
            b'"finish_reason":"tool_calls"}]}'
        ),
    ]
    async with ScriptedOpenAIServer(script) as server:
        result = await run_cli(
            "run", "hello", *run_flags(server, tmp_path),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip

    assert result.returncode == 0, result
    assert_no_traceback(result)
    folder = run_folder(tmp_path / "results", "t")
    assert json.loads((folder / "result.json").read_text())["stop_reason"] == "submitted"
    observations = [r["output"] for r in records_of(folder / "trajectory.jsonl", "observation")]
    assert "lone UTF-16 surrogate (\\ud800)" in observations[0]
    texts = [r.get("content") for r in records_of(folder / "trajectory.jsonl", "message")]
    assert "bad \ufffd text" in texts


async def test_a_template_asking_for_a_terabyte_of_padding_is_bad_input(tmp_path: Path) -> None:
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "prompt.txt").write_text("Do it.\n")
    (folder / "prompt_config.yaml").write_text(
        "instance_prompt: '{problem_statement:>1000000000000}'\n"
    )
    async with ScriptedOpenAIServer([Reply(text="done", tool_calls=[submit()])]) as server:
        result = await run_cli(
            "run", str(folder), *run_flags(server, tmp_path),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        requests = len(server.requests)

    assert result.returncode == 2, result
    line = one_error_line(result)
    assert "instance_prompt" in line and "{problem_statement:>1000000000000}" in line
    assert "at most 10000" in line
    assert requests == 0


async def test_without_an_api_key_openai_itself_is_refused_with_how_to_set_one(
    tmp_path: Path,
) -> None:
    env = cli_environment(tmp_path / "home")
    del env["OPENAI_API_KEY"]
    result = await run_cli("run", "hello", "--model", "gpt-x", env=env, cwd=tmp_path)

    assert result.returncode == 2, result
    line = one_error_line(result)
    assert "export OPENAI_API_KEY=" in line and "--api-key-env" in line
    assert not (tmp_path / "sandfleet-results").exists()


async def test_a_named_key_variable_that_is_unset_is_an_error_not_a_silent_placeholder(
    tmp_path: Path,
) -> None:
    async with ScriptedOpenAIServer([Reply(text="done", tool_calls=[submit()])]) as server:
        result = await run_cli(
            "run", "hello", *run_flags(server, tmp_path), "--api-key-env", "TYPO_KEY",
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        requests = len(server.requests)

    assert result.returncode == 2, result
    assert "TYPO_KEY" in one_error_line(result)
    assert requests == 0


async def test_a_local_endpoint_needs_no_key_and_gets_a_placeholder(tmp_path: Path) -> None:
    env = cli_environment(tmp_path / "home")
    del env["OPENAI_API_KEY"]
    async with ScriptedOpenAIServer([Reply(text="done", tool_calls=[submit()])]) as server:
        result = await run_cli("run", "hello", *run_flags(server, tmp_path), env=env, cwd=tmp_path)
        authorization = server.chat_requests[0].headers["authorization"]

    assert result.returncode == 0, result
    assert authorization == "Bearer EMPTY"


def _meta(**changes: Any) -> dict[str, Any]:
    meta = next(r for r in read_jsonl(SHIPPED) if r["kind"] == "meta")
    return {**meta, **changes}


def _calls() -> list[dict[str, Any]]:
    return [r for r in read_jsonl(SHIPPED) if r["kind"] in ("tool_call", "observation")]


def _lines(*records: Any) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


HOSTILE_TRAJECTORIES = {
    "bad-json-line": (lambda: _lines(_meta(), "{not json", *_calls()), "cannot read"),
    "not-an-object": (lambda: _lines(_meta(), "[1, 2]", *_calls()), "JSON object"),
    "deep-nesting": (lambda: _lines(_meta(), "[" * 100_000 + "]" * 100_000), "cannot read"),
    "paths-of-wrong-type": (lambda: _lines(_meta(paths=5), *_calls()), "paths"),
    "paths-with-unknown-key": (
        lambda: _lines(_meta(paths={"root": "/"}), *_calls()),
        "not a valid trajectory",
    ),
    "max-turns-a-string": (lambda: _lines(_meta(max_turns="many"), *_calls()), "max_turns"),
    "turn-not-a-number": (
        lambda: _lines(_meta(), {"kind": "tool_call", "turn": "x", "name": "submit"}),
        "not a valid trajectory",
    ),
    "inputs-not-a-list": (lambda: _lines(_meta(input_files="a"), *_calls()), "input_files"),
    "input-entry-not-an-object": (
        lambda: _lines(_meta(input_files=[7]), *_calls()),
        "not a valid trajectory",
    ),
    "bad-base64": (
        lambda: _lines(
            _meta(input_files=[{"name": "x", "encoding": "base64", "content": "%%%"}]), *_calls()
        ),
        "not a valid trajectory",
    ),
    "mode-out-of-range": (
        lambda: _lines(_meta(input_files=[{"name": "x", "content": "a", "mode": -1}]), *_calls()),
        "invalid mode",
    ),
    "input-escaping-with-dots": (
        lambda: _lines(_meta(input_files=[{"name": "../../etc/x", "content": "a"}]), *_calls()),
        "outside the sandbox",
    ),
    "input-at-an-absolute-host-path": (
        lambda: _lines(_meta(input_files=[{"name": "/etc/cron.d/x", "content": "a"}]), *_calls()),
        "outside the sandbox",
    ),
    "input-with-nul": (
        lambda: _lines(_meta(input_files=[{"name": "a\x00b", "content": "a"}]), *_calls()),
        "NUL",
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE_TRAJECTORIES))
async def test_a_hostile_trajectory_is_bad_input_with_exit_2_and_one_line(
    tmp_path: Path, case: str
) -> None:
    make, words = HOSTILE_TRAJECTORIES[case]
    trajectory = tmp_path / "t.jsonl"
    trajectory.write_text(make())
    result = await run_cli(
        "replay", str(trajectory), "--state-dir", str(tmp_path / "state"),
        env=cli_environment(tmp_path / "home"), cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 2, result
    assert_no_traceback(result)
    assert words in one_error_line(result)
    assert live_sandboxes(tmp_path / "state") == []


@pytest.mark.parametrize("case", ["huge-file", "device"])
async def test_a_trajectory_too_big_or_not_a_file_is_refused_before_reading(
    tmp_path: Path, case: str
) -> None:
    if case == "huge-file":
        path = tmp_path / "huge.jsonl"
        with path.open("wb") as handle:  # sparse: no disk space, no time
            handle.truncate(MAX_TRAJECTORY_BYTES + 1)
        words = "replay reads at most"
    else:
        path, words = Path("/dev/zero"), "not a regular file"
    result = await run_cli(
        "replay", str(path), "--state-dir", str(tmp_path / "state"),
        env=cli_environment(tmp_path / "home"), cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 2, result
    assert words in one_error_line(result)


async def test_unknown_record_kinds_are_ignored_and_the_replay_still_matches(
    tmp_path: Path,
) -> None:
    records = read_jsonl(SHIPPED)
    trajectory = tmp_path / "t.jsonl"
    trajectory.write_text(
        _lines(records[0], {"kind": "from-the-future", "x": [1]}, {"no": "kind"}, *records[1:])
    )
    result = await run_cli(
        "replay", str(trajectory), "--state-dir", str(tmp_path / "state"),
        env=cli_environment(tmp_path / "home"), cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 0, result
    assert "all 6 observations match" in result.stdout
