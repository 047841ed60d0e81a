"""`sandfleet run` against the real model: the console script in a subprocess, its records read.

The tier's own runner (not tests/integration/cli/harness.run_cli) because a real model on a
loaded 2-core machine needs minutes, not the scripted tests' seconds, and every run here pins
the sampling (temperature 0) so a run is repeatable for one server and template.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

from tests.integration.cli.harness import (
    CliResult,
    cli_command,
    cli_environment,
    read_jsonl,
    run_folders,
)
from tests.model.model_server import ModelServer

RUN_TIMEOUT_S = 900.0
"""A real model at ~20 tokens/s shares the machine; a hung run must still fail, not stall."""


@dataclasses.dataclass(frozen=True)
class RealRun:
    """One finished `sandfleet run`: its exit, its result.json and its trajectory."""

    cli: CliResult
    folder: Path
    outcome: dict[str, Any]
    records: list[dict[str, Any]]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [record for record in self.records if record.get("kind") == kind]

    def notices(self) -> set[str]:
        return {str(record.get("event")) for record in self.of_kind("notice")}


async def run_with_model(
    model: ModelServer, task: str, tmp_path: Path, *, task_id: str, max_turns: int
) -> RealRun:
    args = [
        "run", task, "--id", task_id,
        "--model", model.model, "--base-url", model.base_url,
        "--results-dir", str(tmp_path / "results"), "--state-dir", str(tmp_path / "state"),
        "--max-turns", str(max_turns), "--temperature", "0", "--tool-timeout-seconds", "60",
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *cli_command(*args),
        env=cli_environment(tmp_path / "home"),
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(RUN_TIMEOUT_S):
            stdout, stderr = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    cli = CliResult(process.returncode, stdout.decode(), stderr.decode())
    folders = run_folders(tmp_path / "results", task_id)
    assert folders, f"no run folder\n{cli}"
    folder = folders[-1]  # this run: the newest of the task's
    result_file = folder / "result.json"
    assert result_file.is_file(), f"no result.json\n{cli}"
    return RealRun(
        cli=cli,
        folder=folder,
        outcome=json.loads(result_file.read_text()),
        records=read_jsonl(folder / "trajectory.jsonl"),
    )
