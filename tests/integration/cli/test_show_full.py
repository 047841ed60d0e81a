"""Issue 27 items 6 and 10, through the real CLI: `show --full` prints a tool call's
arguments whole (the editor's file_text, line by line), and `show X --full | head -2`
exits 0 without a word when the reader leaves. Before, the call showed as
`→ str_replace_editor create /testbed/output/answer.txt` (the text only in the JSON), and
the broken pipe made the command exit 1.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.integration.cli.harness import cli_command, cli_environment, run_cli
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer, bash, submit, tool_call

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

FILE_TEXT = "first line of the answer\nsecond line, the one that matters: 42\n"


async def test_show_full_prints_arguments_whole_and_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    create = tool_call(
        "str_replace_editor",
        {"command": "create", "path": "/testbed/output/answer.txt", "file_text": FILE_TEXT},
    )
    script = [Reply(tool_calls=[create]), Reply(tool_calls=[bash("seq 1 200000")]),
              Reply(tool_calls=[submit()])]  # fmt: skip
    env = cli_environment(tmp_path / "home")
    results = ("--results-dir", str(tmp_path / "results"))
    async with ScriptedOpenAIServer(script) as server:
        ran = await run_cli(
            "run", "Write the answer.", "--id", "edit", "--model", "m", "--base-url",
            server.base_url, *results, "--state-dir", str(tmp_path / "state"),
            env=env, cwd=tmp_path,
        )  # fmt: skip
    assert ran.returncode == 0, ran

    shown = await run_cli("show", "edit", "--full", *results, env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown
    lines = shown.stdout.splitlines()
    start = lines.index("      file_text:")
    assert lines[start + 1 : start + 3] == [
        "        first line of the answer",
        "        second line, the one that matters: 42",
    ], shown.stdout
    assert "      command: create" in lines
    assert "      path: /testbed/output/answer.txt" in lines
    assert "199999" in shown.stdout  # the whole observation too

    piped = subprocess.run(  # noqa: ASYNC221 - a shell pipeline, once
        ["bash", "-c", f"{' '.join(cli_command('show', 'edit', '--full', *results))} | head -2;"
         " exit ${PIPESTATUS[0]}"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert piped.returncode == 0, piped
    assert piped.stderr == ""
    assert len(piped.stdout.splitlines()) == 2
