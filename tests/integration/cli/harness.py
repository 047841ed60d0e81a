"""Driving the real `sandfleet` console script in a subprocess, with per-task model scripts."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.scripted_openai import Fail, RecordedRequest, Step

CONSOLE_SCRIPT = Path(sys.executable).with_name("sandfleet")
CLI_TIMEOUT_S = 240.0
"""Generous: the machine is shared, and a hung CLI must fail the test, not stall it."""


@dataclasses.dataclass(frozen=True)
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:  # shown by pytest when an assertion on the result fails
        return f"exit {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def cli_command(*args: str) -> list[str]:
    if CONSOLE_SCRIPT.exists():
        return [str(CONSOLE_SCRIPT), *args]
    return [sys.executable, "-m", "sandfleet.cli", *args]


def cli_environment(home: Path, **extra: str) -> dict[str, str]:
    """A clean environment: no user config file, caches below home, a placeholder API key."""
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "LANG": "C.UTF-8",
        "COLUMNS": "200",  # rich wraps at 80 columns when stdout is a pipe
        "OPENAI_API_KEY": "sk-test-placeholder",
        **extra,
    }


async def start_cli(*args: str, env: Mapping[str, str], cwd: Path) -> asyncio.subprocess.Process:
    """The CLI in its own process group, so `press_ctrl_c` reaches it the way a terminal's
    ^C does: every process of the foreground group gets SIGINT."""
    return await asyncio.create_subprocess_exec(
        *cli_command(*args),
        env=dict(env),
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )


def press_ctrl_c(process: asyncio.subprocess.Process) -> None:
    os.killpg(process.pid, signal.SIGINT)


async def run_cli(*args: str, env: Mapping[str, str], cwd: Path) -> CliResult:
    process = await start_cli(*args, env=env, cwd=cwd)
    try:
        async with asyncio.timeout(CLI_TIMEOUT_S):
            stdout, stderr = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return CliResult(process.returncode, stdout.decode(), stderr.decode())


async def read_until(stream: asyncio.StreamReader, marker: str, *, timeout_s: float) -> str:
    """Read a process's output until `marker` appears; returns what was read."""
    seen = ""
    async with asyncio.timeout(timeout_s):
        while marker not in seen:
            chunk = await stream.read(4096)
            if not chunk:
                raise AssertionError(f"output ended before {marker!r}:\n{seen}")
            seen += chunk.decode(errors="replace")
    return seen


class TaskScripts:
    """A stateless responder for concurrent runs: picks the script whose key occurs in the
    conversation's first user message and answers with the step for the current turn."""

    def __init__(self, scripts: Mapping[str, Sequence[Step]]) -> None:
        self.scripts = scripts
        """Kept by reference: a test may swap a script between two CLI invocations."""

    def __call__(self, request: RecordedRequest) -> Step:
        messages: list[dict[str, Any]] = request.body.get("messages", [])
        first_user = next((m for m in messages if m.get("role") == "user"), {})
        content = str(first_user.get("content", ""))
        key = next((k for k in self.scripts if k in content), None)
        if key is None:
            return Fail(400, f"no script for this conversation: {content[:80]!r}")
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        steps = self.scripts[key]
        return steps[turn] if turn < len(steps) else Fail(400, f"script {key} is exhausted")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def records_of(path: Path, kind: str) -> Iterator[dict[str, Any]]:
    return (record for record in read_jsonl(path) if record.get("kind") == kind)


def live_sandboxes(state_dir: Path) -> list[Path]:
    """What local sandboxes left in their state dir (empty once every sandbox is reclaimed)."""
    if not state_dir.exists():
        return []
    return sorted(state_dir.iterdir())


def run_folders(results_dir: Path, task_id: str) -> list[Path]:
    """The run folders of one task (<task-id>-<UTC time>[-n]), oldest first."""
    pattern = re.compile(re.escape(task_id) + r"-\d{8}T\d{6}Z(?:-(\d+))?$")
    found = [
        (folder.name[: len(task_id) + 17], int(match.group(1) or 1), folder)
        for folder in (results_dir.iterdir() if results_dir.exists() else ())
        if (match := pattern.match(folder.name))
    ]
    return [folder for _, _, folder in sorted(found)]


def run_folder(results_dir: Path, task_id: str) -> Path:
    """The one run folder of a task that ran once."""
    folders = run_folders(results_dir, task_id)
    assert len(folders) == 1, f"expected one run of {task_id}, found {folders}"
    return folders[0]
