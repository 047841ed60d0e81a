"""While a slow model call is in flight, `sandfleet run` on a terminal shows how long it has
waited; piped into a log it prints nothing extra. A real HTTP endpoint delays its answer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.cli.harness import cli_environment, run_cli
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer, submit

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

DELAY_S = 3.0


async def run_slow(tmp_path: Path, name: str, **env: str) -> str:
    async with ScriptedOpenAIServer(
        [Reply(text="done", tool_calls=[submit()], delay_s=DELAY_S)]
    ) as server:
        result = await run_cli(
            "run", "Just submit.", "--id", name,
            "--model", "scripted-model", "--base-url", server.base_url,
            "--results-dir", str(tmp_path / "results"), "--state-dir", str(tmp_path / "state"),
            env=cli_environment(tmp_path / "home", **env), cwd=tmp_path,
        )  # fmt: skip
    assert result.returncode == 0, result
    return result.stdout


async def test_a_terminal_shows_the_seconds_waited_for_the_model(tmp_path: Path) -> None:
    # A terminal as rich detects one (the output is still a pipe the test reads).
    shown = await run_slow(tmp_path, "tty", TTY_COMPATIBLE="1", TTY_INTERACTIVE="1")

    seconds = {int(s) for s in re.findall(r"waiting for the model (\d+)s", shown)}
    assert {0, 1, 2} <= seconds, shown  # it ticks while the call is in flight
    assert "submitted" in shown


async def test_piped_output_gets_no_waiting_lines(tmp_path: Path) -> None:
    piped = await run_slow(tmp_path, "pipe")

    assert "waiting for the model" not in piped
    assert "turn 1/" in piped and "submitted" in piped
