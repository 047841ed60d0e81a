"""Every run keeps its own folder, and the local runs can be listed and read back:
`run` twice, `runs`, `show`, `trajectory FILE --render`, through the console script and a
scripted HTTP endpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.cli.harness import cli_environment, run_cli, run_folders
from tests.support.scripted_openai import Fail, Reply, ScriptedOpenAIServer, bash, submit

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

LONG_COMMAND = "seq -s, 1 400"
"""One observation line of about 1,500 characters: the short trace cuts it, --full not."""


def flags(server: ScriptedOpenAIServer, tmp_path: Path) -> list[str]:
    return [
        "--model", "scripted-model",
        "--base-url", server.base_url,
        "--max-retries", "0",
        "--results-dir", str(tmp_path / "results"),
        "--state-dir", str(tmp_path / "state"),
    ]  # fmt: skip


async def test_a_failing_rerun_keeps_the_earlier_run_and_both_can_be_listed_and_shown(
    tmp_path: Path,
) -> None:
    env = cli_environment(tmp_path / "home")
    results = tmp_path / "results"
    script = [
        Reply(tool_calls=[bash("echo 42 > output/answer.txt")]),
        Reply(tool_calls=[bash(LONG_COMMAND)]),
        Reply(tool_calls=[submit()]),
        Fail(400, "the rerun is rejected"),
    ]
    async with ScriptedOpenAIServer(script) as server:
        first = await run_cli(
            "run", "Write 42.", "--id", "sales", *flags(server, tmp_path), env=env, cwd=tmp_path
        )
        second = await run_cli(
            "run", "Write 42.", "--id", "sales", *flags(server, tmp_path), env=env, cwd=tmp_path
        )

    assert first.returncode == 0, first
    assert second.returncode == 3, second
    earlier, later = run_folders(results, "sales")
    assert (earlier / "output" / "answer.txt").read_text() == "42\n"
    assert json.loads((earlier / "result.json").read_text())["stop_reason"] == "submitted"
    assert json.loads((later / "result.json").read_text())["stop_reason"] == "model_error"
    assert json.loads((earlier / "result.json").read_text())["run_id"] == earlier.name
    assert str(later) in second.stdout  # the header names the new run's folder

    listed = await run_cli("runs", "--json", "--results-dir", str(results), env=env, cwd=tmp_path)
    assert listed.returncode == 0, listed
    records = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [r["run_id"] for r in records] == [later.name, earlier.name]  # newest first
    assert [r["stop_reason"] for r in records] == ["model_error", "submitted"]
    assert records[1]["turns"] == 3 and records[1]["submitted"] is True
    assert records[1]["task_id"] == "sales"

    table = await run_cli("runs", "--results-dir", str(results), env=env, cwd=tmp_path)
    assert table.returncode == 0, table
    assert earlier.name in table.stdout and "submitted" in table.stdout

    short = await run_cli(
        "show", earlier.name, "--results-dir", str(results), env=env, cwd=tmp_path
    )
    full = await run_cli(
        "show", earlier.name, "--full", "--results-dir", str(results), env=env, cwd=tmp_path
    )
    assert short.returncode == 0 and full.returncode == 0, (short, full)
    whole = ",".join(str(n) for n in range(1, 401))
    assert "turn 3" in short.stdout and "submitted" in short.stdout
    assert whole not in short.stdout  # one line per observation, cut
    assert whole in full.stdout  # the whole observation

    newest = await run_cli("show", "sales", "--results-dir", str(results), env=env, cwd=tmp_path)
    assert newest.returncode == 0 and "model_error" in newest.stdout, newest  # the rerun

    ambiguous = await run_cli(
        "show", "sales-", "--results-dir", str(results), env=env, cwd=tmp_path
    )
    assert ambiguous.returncode == 2 and "matches 2 runs" in ambiguous.stderr, ambiguous

    rendered = await run_cli(
        "trajectory", str(earlier / "trajectory.jsonl"), "--render", "--full",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert rendered.returncode == 0, rendered
    assert whole in rendered.stdout and "submitted" in rendered.stdout
    raw = await run_cli("trajectory", str(earlier / "trajectory.jsonl"), env=env, cwd=tmp_path)
    assert raw.stdout == (earlier / "trajectory.jsonl").read_text()
