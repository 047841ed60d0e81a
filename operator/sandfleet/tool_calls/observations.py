"""Tool results as the model sees them (LLM-in-Sandbox compatible observation text).

The texts follow the seed project's observation strings, which the paper's models were
trained on, including the backslash-escaped section headers (`\\[STDOUT]`) that its
rich-markup escaping leaked into the conversation.

Bash output is shown as a terminal would leave it, as the seed does: colour and other
escape sequences are removed, and a line redrawn with carriage returns (a progress bar)
keeps only its last state. `Sandbox.bash()` still returns the raw output.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sandfleet.clients.runtime.client import CommandResult

SUBMITTED_OBSERVATION = "Submitted."
"""What the model sees for `submit` (the agent loop records it and ends the run)."""
_BASH_HEADER = "Execution output of \\[execute_bash]:"
_EDITOR_HEADER = "Execution output of \\[str_replace_editor]:"
# CSI (colours, cursor moves), OSC (titles, hyperlinks; ended by BEL or ESC \), character
# set designations, and the other two-byte escapes (ESC 7, ESC M, ...).
_ESCAPE_SEQUENCE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[0-Z\\^_]"
)


def bash_observation(result: CommandResult) -> str:
    if result.timed_out:
        code = "-1"
    elif result.exit_code == 0:
        code = "0"
    else:
        code = f"Error: Exit code {result.exit_code}"
    stdout, stderr = terminal_text(result.stdout), terminal_text(result.stderr)
    text = f"Exit code: {code}\n{_BASH_HEADER}\n\\[STDOUT]\n{stdout}"
    if stderr.strip():
        text += f"\n\\[STDERR]\n{stderr}"
    if result.timed_out:
        text += (
            f"\n\\[NOTE]\nThe command timed out after {result.duration_s:.0f} seconds and its "
            "processes were killed. Run long jobs in the background with output redirected "
            "to a file (`cmd > log.txt 2>&1 &`)."
        )
    elif result.interrupted:
        text += "\n\\[NOTE]\nThe command was interrupted."
    elif result.shell_exited:
        text += (
            "\n\\[NOTE]\nThe command ended the shell; a fresh shell was started. Working "
            "directory, variables and functions from earlier commands are gone."
        )
    return text


def editor_observation(output: str) -> str:
    return f"{_EDITOR_HEADER}\n{output}"


def editor_error_observation(message: str) -> str:
    return f"{_EDITOR_HEADER}\nError: {message}"


def terminal_text(output: str) -> str:
    """`output` as a terminal would leave it: escape sequences removed, and of each line
    redrawn with carriage returns only its last state (a final CR, as in CRLF, is ignored)."""
    if "\x1b" in output:
        output = _ESCAPE_SEQUENCE.sub("", output)
    if "\r" not in output:
        return output
    lines = output.split("\n")
    return "\n".join(line.rstrip("\r").rpartition("\r")[2] for line in lines)
