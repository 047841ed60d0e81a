"""Running the real `sandfleet` console script on a pseudo-terminal, as a person at a
terminal would: stdout and stderr are the same tty, so rich draws its live displays and
anything else written meanwhile lands in the same stream, exactly where a person sees it."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from collections.abc import Mapping
from pathlib import Path

from tests.integration.cli.harness import CLI_TIMEOUT_S, cli_command

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_TOKENS = re.compile(r"(\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r|\n)")
_ERASE_LINE = "\x1b[2K"


def run_on_terminal(
    *args: str, env: Mapping[str, str], cwd: Path, columns: int = 200
) -> tuple[int, str]:
    """Exit code and everything the terminal received (escape sequences included).
    Blocking: call it in a thread when an asyncio server must keep answering."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    environ = {**env, "TERM": "xterm-256color", "COLUMNS": str(columns)}
    process = subprocess.Popen(
        cli_command(*args), stdin=slave, stdout=slave, stderr=slave, env=environ, cwd=cwd,
        start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    received = bytearray()
    deadline = time.monotonic() + CLI_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the terminal's last writer is gone
                    break
                if not chunk:
                    break
                received += chunk
            elif process.poll() is not None:
                break
        else:
            process.kill()
            raise AssertionError(f"still running after {CLI_TIMEOUT_S} s:\n{received.decode()}")
    finally:
        os.close(master)
    return process.wait(timeout=30), received.decode(errors="replace")


def visible_lines(raw: str) -> list[str]:
    """What each terminal line ends up showing, roughly: escape sequences dropped, and of
    a line rewritten in place (carriage returns) only the last writing."""
    lines = []
    for line in raw.split("\n"):
        text = _ANSI.sub("", line)
        lines.append(text.rsplit("\r", 1)[-1] if text.strip("\r") else "")
    return lines


def lines_written(raw: str) -> list[str]:
    """Each line as the terminal had it when the cursor left it (a newline, a carriage
    return or an erase of the whole line): what was written on it since it was last
    cleared, escape sequences dropped. A line that text from two writers tore shows both."""
    written: list[str] = []
    current = ""
    for token in _TOKENS.split(raw):
        if token in ("\r", "\n", _ERASE_LINE):
            if current:
                written.append(current)
            current = ""
        elif token and not _ANSI.fullmatch(token):
            current += token
    if current:
        written.append(current)
    return written
