"""The CLI's rich Consoles (stdout for traces and results, stderr for one-line errors) and
the counting words they print ("1 task", "2 tasks").

On a terminal rich fits output to the window. Into a pipe or a file (logs, CI, grep) it
would wrap or cut at 80 columns mid-word, so there lines are written whole: soft wrap, and
a width no line reaches, unless COLUMNS says otherwise.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from rich.console import Console

PIPE_WIDTH = 100_000
"""Columns of a Console that writes into a pipe or a file: wide enough that no line the CLI
prints is cut (tables are as wide as their content, not as the console)."""


class _OutputConsole(Console):
    """A Console whose reader may leave (`sandfleet show X --full | head -2`)."""

    def on_broken_pipe(self) -> None:
        # rich's own exits 1 on the spot; here main() decides (exit 0: the reader got what
        # it wanted). Later output goes nowhere, also the interpreter's last flush.
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):  # no real stdout (a StringIO): nothing to flush
            pass
        finally:
            os.close(devnull)
        raise BrokenPipeError("the reader of stdout went away")


def output_console(file: TextIO | None = None) -> Console:
    """The stdout Console of a subcommand (or of `file`)."""
    return _unwrapped_when_piped(_OutputConsole(file=file, highlight=False))


def error_console() -> Console:
    """The stderr Console: warnings and errors, one line each whatever their length."""
    return _unwrapped_when_piped(Console(stderr=True, highlight=False, soft_wrap=True))


def _unwrapped_when_piped(console: Console) -> Console:
    # rich's own test (honours FORCE_TERMINAL and TTY_COMPATIBLE); COLUMNS is the user's
    # explicit width and wins.
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = PIPE_WIDTH
        console.soft_wrap = True
    return console


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """`1 task`, `2 tasks`, `0 tasks`; `plural_form` for nouns that do not take an s."""
    return f"{count} {noun if count == 1 else (plural_form or noun + 's')}"
