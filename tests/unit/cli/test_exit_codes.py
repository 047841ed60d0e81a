"""Every exit code has one meaning and is documented where users look: `--help` and README."""

from __future__ import annotations

import re
from pathlib import Path

from sandfleet.cli.exit_codes import ExitCode
from sandfleet.cli.main import build_parser

README = Path(__file__).resolve().parents[3] / "docs" / "concepts" / "local-sandboxes.md"


def test_a_failed_trajectory_fetch_has_its_own_code_not_the_not_submitted_one() -> None:
    assert ExitCode.FETCH_FAILED not in (ExitCode.NOT_SUBMITTED, ExitCode.USAGE)
    assert len({int(code) for code in ExitCode}) == len(ExitCode)  # no code means two things


def test_every_code_is_in_the_help_and_in_the_readme_table() -> None:
    help_text = " ".join(build_parser().format_help().split())
    table = re.findall(r"^\| (\d+) \|", README.read_text(encoding="utf-8"), flags=re.M)
    for code in ExitCode:
        assert re.search(rf"[;:] {int(code)} ", help_text), f"--help lacks exit code {code}"
        assert str(int(code)) in table, (
            f"the exit-code table (docs/concepts/local-sandboxes.md) lacks {code}"
        )
