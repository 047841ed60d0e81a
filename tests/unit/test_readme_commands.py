"""The README's two commands are the ones CI runs: the test command is shared verbatim."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST_COMMAND = ".venv/bin/python -m pytest -n 2"


def _fenced_blocks(text: str) -> list[str]:
    return [block.strip() for block in re.findall(r"```(?:bash|sh)?\n(.*?)```", text, re.S)]


def test_readme_shows_the_test_command_that_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert TEST_COMMAND in _fenced_blocks(readme)
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert TEST_COMMAND in ci_lines


def test_readme_main_job_command_sets_up_and_replays_a_shipped_trajectory() -> None:
    readme = (ROOT / "README.md").read_text()
    (main_job,) = [b for b in _fenced_blocks(readme) if "python3 -m venv .venv" in b]
    assert 'pip install -e ".[test]"' in main_job and "sandfleet replay" in main_job
    trajectory = re.search(r"sandfleet replay (\S+)", main_job)
    assert trajectory is not None and (ROOT / trajectory.group(1)).is_file()
