"""The bash observation as a terminal would leave the output: escapes and redraws removed."""

from __future__ import annotations

import pytest

from sandfleet.clients.runtime.client import CommandResult
from sandfleet.tool_calls import bash_observation
from sandfleet.tool_calls.observations import terminal_text


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[1;31mred\x1b[0m\n", "red\n"),  # SGR colours
        ("\x1b[2K\x1b[1Gline\n", "line\n"),  # erase line, cursor to column 1
        ("\x1b]0;title\x07x\x1b]8;;http://a\x1b\\link\x1b]8;;\x1b\\\n", "xlink\n"),  # OSC
        ("\x1b(Bplain\x1b7\x1b8\n", "plain\n"),  # charset designation, save/restore cursor
        ("10%\r50%\r100%\ndone\n", "100%\ndone\n"),  # progress redraws keep the last state
        ("a\r\nb\r\n", "a\nb\n"),  # CRLF output is not a redraw
        ("spin\r", "spin"),  # a final CR without newline
        ("no escapes\n", "no escapes\n"),
    ],
)
def test_terminal_text(raw: str, shown: str) -> None:
    assert terminal_text(raw) == shown


def test_both_streams_of_the_bash_observation_are_cleaned() -> None:
    result = CommandResult(
        stdout="\x1b[32mok\x1b[0m\n",
        stderr="\x1b[33mwarn\x1b[0m\n",
        exit_code=0,
        timed_out=False,
        interrupted=False,
        shell_exited=False,
        truncated=False,
        duration_s=0.1,
        cwd="/testbed",
    )
    assert bash_observation(result) == (
        "Exit code: 0\nExecution output of \\[execute_bash]:\n\\[STDOUT]\nok\n\n\\[STDERR]\nwarn\n"
    )


def test_stderr_of_only_escape_sequences_gets_no_section() -> None:
    result = CommandResult("x\n", "\x1b[0m", 0, False, False, False, False, 0.1, "/")
    assert "STDERR" not in bash_observation(result)
