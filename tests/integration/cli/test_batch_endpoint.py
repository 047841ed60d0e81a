"""`sandfleet batch` against endpoints that fail: preflight, fail-fast, exit 3, --json, bad
lines all at once, and the tasks in flight on a terminal. Real console script, real HTTP."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

import pytest

from tests.integration.cli.harness import (
    CLI_TIMEOUT_S,
    TaskScripts,
    cli_environment,
    live_sandboxes,
    read_jsonl,
    read_until,
    run_cli,
    start_cli,
)
from tests.support.scripted_openai import Fail, Hang, Reply, ScriptedOpenAIServer, bash, submit

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]


def write_tasks(path: Path, count: int) -> list[str]:
    ids = [f"t{n}" for n in range(1, count + 1)]
    path.write_text("".join(json.dumps({"id": i, "prompt": f"Solve {i}."}) + "\n" for i in ids))
    return ids


def flags(base_url: str, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "--out", str(tmp_path / "results.jsonl"),
        "--model", "scripted-model",
        "--base-url", base_url,
        "--max-retries", "0",
        "--results-dir", str(tmp_path / "results"),
        "--state-dir", str(tmp_path / "state"),
        *extra,
    ]  # fmt: skip


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released): connections are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_dead_endpoint_fails_the_preflight_with_exit_3_before_any_task(
    tmp_path: Path,
) -> None:
    write_tasks(tmp_path / "tasks.jsonl", 5)
    request_lines: list[str] = []

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # An endpoint that reads the request and closes: no HTTP answer at all.
        request_lines.append((await reader.readline()).decode().strip())
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    env = cli_environment(tmp_path / "home")
    try:
        started = time.monotonic()
        hung_up = await run_cli(
            "batch", "tasks.jsonl", *flags(f"http://127.0.0.1:{port}/v1", tmp_path),
            env=env, cwd=tmp_path,
        )  # fmt: skip
        took_s = time.monotonic() - started
    finally:
        server.close()
        await server.wait_closed()
    refused = await run_cli(
        "batch", "tasks.jsonl", "--json", *flags(f"http://127.0.0.1:{closed_port()}/v1", tmp_path),
        env=env, cwd=tmp_path,
    )  # fmt: skip

    assert hung_up.returncode == 3, hung_up
    assert took_s < 30, took_s
    # The preflight only (aiohttp retries a GET once on a dropped connection); no task
    # asked the model.
    assert request_lines and set(request_lines) == {"GET /v1/models HTTP/1.1"}
    assert f"GET http://127.0.0.1:{port}/v1/models" in hung_up.stderr
    assert "no task was started" in hung_up.stderr
    assert not (tmp_path / "results.jsonl").exists() or not read_jsonl(tmp_path / "results.jsonl")
    assert live_sandboxes(tmp_path / "state") == []
    assert refused.returncode == 3, refused
    assert "unreachable" in refused.stderr
    assert [json.loads(line)["event"] for line in refused.stdout.splitlines()] == ["stopped"]


async def test_when_the_first_tasks_all_hit_model_errors_the_batch_stops_with_exit_3(
    tmp_path: Path,
) -> None:
    write_tasks(tmp_path / "tasks.jsonl", 6)
    env = cli_environment(tmp_path / "home")
    async with ScriptedOpenAIServer(responder=lambda _: Fail(500, "the GPU fell over")) as server:
        result = await run_cli(
            "batch", "tasks.jsonl", "--json", "--concurrency", "1", "--fail-fast", "3",
            *flags(server.base_url, tmp_path), env=env, cwd=tmp_path,
        )  # fmt: skip
        chat_requests = len(server.chat_requests)

    assert result.returncode == 3, result
    assert chat_requests == 3
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["event"] for e in events] == ["start", "task", "task", "task", "stopped", "summary"]
    assert events[0]["todo"] == 6 and events[0]["concurrency"] == 1
    assert [e["stop_reason"] for e in events[1:4]] == ["model_error"] * 3
    assert [e["done"] for e in events[1:4]] == [1, 2, 3]
    assert events[4]["reason"] == "fail_fast"
    assert events[5]["exit_code"] == 3 and events[5]["by_stop_reason"] == {"model_error": 3}
    assert "the first 3 tasks all failed with model_error" in result.stderr
    assert [line["id"] for line in read_jsonl(tmp_path / "results.jsonl")] == ["t1", "t2", "t3"]


async def test_a_batch_whose_every_task_hit_a_model_error_exits_3_not_1(tmp_path: Path) -> None:
    write_tasks(tmp_path / "tasks.jsonl", 2)
    async with ScriptedOpenAIServer(responder=lambda _: Fail(400, "no such model")) as server:
        result = await run_cli(
            "batch", "tasks.jsonl", "--fail-fast", "0", *flags(server.base_url, tmp_path),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip

    assert result.returncode == 3, result
    assert {line["stop_reason"] for line in read_jsonl(tmp_path / "results.jsonl")} == {
        "model_error"
    }


async def test_every_bad_task_line_is_reported_in_one_go(tmp_path: Path) -> None:
    (tmp_path / "tasks.jsonl").write_text(
        '{"id": "a", "prompt": "x"}\n{"id": \n{"prompt": "no id"}\n{"id": "a", "prompt": "y"}\n'
    )
    result = await run_cli(
        "batch", "tasks.jsonl", *flags(f"http://127.0.0.1:{closed_port()}/v1", tmp_path),
        env=cli_environment(tmp_path / "home"), cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 2, result
    assert "3 bad lines" in result.stderr
    for number in (2, 3, 4):
        assert f"tasks.jsonl:{number}:" in result.stderr
    assert "Traceback" not in result.stderr


async def test_a_terminal_shows_which_tasks_are_running_and_for_how_long(tmp_path: Path) -> None:
    write_tasks(tmp_path / "tasks.jsonl", 2)
    release = asyncio.Event()
    answer = [Reply(tool_calls=[bash("true")]), Reply(text="done", tool_calls=[submit()])]
    scripts = {
        "Solve t1": [Hang(release, then=answer[0]), answer[1]],
        "Solve t2": [Hang(release, then=answer[0]), answer[1]],
    }
    # A terminal as rich detects one (the output is still a pipe the test reads).
    env = cli_environment(tmp_path / "home", TTY_COMPATIBLE="1", TTY_INTERACTIVE="1")
    async with ScriptedOpenAIServer(responder=TaskScripts(scripts)) as server:
        process = await start_cli(
            "batch", "tasks.jsonl", "--concurrency", "2", *flags(server.base_url, tmp_path),
            env=env, cwd=tmp_path,
        )  # fmt: skip
        assert process.stdout is not None
        seen = await read_until(process.stdout, "running: ", timeout_s=CLI_TIMEOUT_S)
        seen += await read_until(process.stdout, "s, t", timeout_s=CLI_TIMEOUT_S)
        release.set()
        async with asyncio.timeout(CLI_TIMEOUT_S):
            seen += (await process.stdout.read()).decode(errors="replace")
            await process.wait()

    assert process.returncode == 0, seen
    assert "running: t1 " in seen or "running: t2 " in seen
    assert "ETA" in seen
