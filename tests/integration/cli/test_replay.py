"""`sandfleet replay`: the shipped example matches, a tampered copy does not, and re-recording
the example reproduces the shipped file."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from tests.integration.cli.harness import (
    CLI_TIMEOUT_S,
    cli_environment,
    live_sandboxes,
    read_jsonl,
    run_cli,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

REPOSITORY = Path(__file__).resolve().parents[3]
SHIPPED = REPOSITORY / "examples" / "trajectories" / "sales_by_region.jsonl"
RECORDER = REPOSITORY / "examples" / "record_example.py"


def tool_exchange(path: Path) -> list[tuple[str, str, str]]:
    """(kind, name, arguments or output) of every tool call and observation, in order."""
    return [
        (r["kind"], r["name"], r["arguments"] if r["kind"] == "tool_call" else r["output"])
        for r in read_jsonl(path)
        if r["kind"] in ("tool_call", "observation")
    ]


async def test_the_shipped_example_replays_with_every_observation_matching(
    tmp_path: Path,
) -> None:
    result = await run_cli(
        "replay", str(SHIPPED), "--state-dir", str(tmp_path / "state"),
        env=cli_environment(tmp_path / "home"), cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 0, result
    assert "all 6 observations match; submit ended the replay" in result.stdout
    assert "differs" not in result.stdout
    assert live_sandboxes(tmp_path / "state") == []


async def test_a_tampered_trajectory_reports_the_difference_and_exits_1(tmp_path: Path) -> None:
    records = read_jsonl(SHIPPED)
    observations = [r for r in records if r["kind"] == "observation"]
    target = next(r for r in observations if "east,18998" in r["output"])
    target["output"] = target["output"].replace("east,18998", "east,19998")
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("".join(json.dumps(r) + "\n" for r in records))

    result = await run_cli(
        "replay", str(tampered), "--state-dir", str(tmp_path / "state"),
        env=cli_environment(tmp_path / "home"), cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 1, result
    assert "1 of 6 observations differ" in result.stdout
    assert "-east,19998" in result.stdout
    assert "+east,18998" in result.stdout


async def test_a_file_that_is_not_a_trajectory_is_a_usage_error(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.jsonl"
    bogus.write_text('{"kind": "message", "role": "user", "content": "hi"}\n')

    result = await run_cli(
        "replay", str(bogus), env=cli_environment(tmp_path / "home"), cwd=tmp_path
    )

    assert result.returncode == 2, result
    assert "no meta record" in result.stderr


async def test_recording_the_example_again_reproduces_the_shipped_trajectory(
    tmp_path: Path,
) -> None:
    fresh = tmp_path / "fresh.jsonl"
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(RECORDER), "--out", str(fresh),
        env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    async with asyncio.timeout(CLI_TIMEOUT_S):
        output, _ = await process.communicate()

    assert process.returncode == 0, output.decode()
    assert "submitted: 'east 18998'" in output.decode()
    assert tool_exchange(fresh) == tool_exchange(SHIPPED)


async def test_the_example_replays_without_namespaces_by_mapping_the_paths(
    tmp_path: Path,
) -> None:
    result = await run_cli(
        "replay", str(SHIPPED), "--isolation", "none", "--state-dir", str(tmp_path / "state"),
        env=cli_environment(tmp_path / "home"), cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 0, result
    assert "all 6 observations match" in result.stdout
