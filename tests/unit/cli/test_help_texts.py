"""What `--help` lists (issue 27 item 7): eval has one exit-code section, and doctor and
config list only the flags that change what they do, while still taking run's command line."""

from __future__ import annotations

import argparse

import pytest

from sandfleet.cli.main import build_parser


def help_of(command: str) -> str:
    parser = build_parser()
    subparsers = next(
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    )
    return subparsers.choices[command].format_help()


def test_eval_help_has_one_exit_code_section() -> None:
    text = help_of("eval")
    assert text.count("exit codes:") == 1
    assert "0 every sample scored" in text


def test_run_help_documents_exit_code_5() -> None:
    assert "5 submitted without an" in " ".join(help_of("run").split())


@pytest.mark.parametrize("command", ["doctor", "config"])
def test_doctor_and_config_list_no_agent_flags_that_do_nothing_there(command: str) -> None:
    text = help_of(command)
    for flag in ("--max-turns", "--record-tokens", "--max-nudges", "--system-prompt"):
        assert flag not in text, flag
    # ... yet run's command line still works there (config shows what it would use).
    args = build_parser().parse_args([command, "--max-turns", "5", "--record-tokens"])
    assert args.max_turns == 5


def test_doctor_lists_the_flags_its_checks_read() -> None:
    text = help_of("doctor")
    for flag in ("--base-url", "--model", "--api-key-env", "--isolation", "--concurrency"):
        assert flag in text, flag
