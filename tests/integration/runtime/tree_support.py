"""Helpers for the reset and snapshot tests: a sample tree and a comparable picture of one."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

BINARY = bytes(range(256)) * 64


def make_sample_tree(root: Path) -> None:
    """Binary and text files with several modes, symlinks and a hard link inside, an empty
    directory."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "notes.txt").write_text("first line\nsecond line\n")
    (root / "src").mkdir()
    (root / "src" / "data.bin").write_bytes(BINARY)
    script = root / "src" / "run.sh"
    script.write_text("#!/bin/sh\necho run\n")
    script.chmod(0o755)
    secret = root / "src" / "private.key"
    secret.write_text("k")
    secret.chmod(0o600)
    (root / "empty").mkdir()
    (root / "link-to-notes").symlink_to("notes.txt")
    (root / "src" / "link-up").symlink_to("../notes.txt")
    os.link(root / "src" / "data.bin", root / "data-hardlink.bin")


def tree_picture(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every path below root -> (kind, permission bits, content or link target)."""
    picture: dict[str, tuple[str, int, bytes]] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory, name)
            info = path.lstat()
            relative = str(path.relative_to(root))
            if stat.S_ISLNK(info.st_mode):
                picture[relative] = ("link", 0, os.fsencode(os.readlink(path)))
            elif stat.S_ISDIR(info.st_mode):
                picture[relative] = ("dir", stat.S_IMODE(info.st_mode), b"")
            else:
                picture[relative] = ("file", stat.S_IMODE(info.st_mode), path.read_bytes())
    return picture


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as proc_stat:
            return proc_stat.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


async def eventually(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True
