"""The sandbox's own /etc/passwd and /etc/group: its users, not the host's.

The host's /etc is bound read-only into a namespaced sandbox (programs need its
configuration), but its account files name the host's users and would give the sandbox's
uid (SANDBOX_UID, 1000) a host user's name. The sandbox gets files of its own instead, and
empty ones over the shadow files and the account backups (passwd-, group-, ...).
"""

from __future__ import annotations

import os
from pathlib import Path

from sandfleet.backends.local.isolation import NOBODY, SANDBOX_UID

SANDBOX_USER = "sandbox"
ACCOUNT_FILES = ("passwd", "group")
SECRET_FILES = ("shadow", "gshadow")


def account_files(home: str) -> dict[str, str]:
    """File name in /etc -> contents, for a sandbox whose user's HOME is `home`."""
    shell = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
    passwd = (
        f"root:x:0:0:root:/root:{shell}\n"
        f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_UID}:{SANDBOX_USER}:{home}:{shell}\n"
        f"nobody:x:{NOBODY}:{NOBODY}:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    group = f"root:x:0:\n{SANDBOX_USER}:x:{SANDBOX_UID}:\nnogroup:x:{NOBODY}:\n"
    return {"passwd": passwd, "group": group}


def write_account_files(directory: Path, *, home: str, host_etc: str = "/etc") -> dict[str, str]:
    """Write the sandbox's account files below `directory`; return sandbox path -> host file
    for each one that has a host file to cover (a bind needs an existing target)."""
    directory.mkdir(parents=True, exist_ok=True)
    contents = account_files(home)
    sources: dict[str, Path] = {}
    for name, text in contents.items():
        sources[name] = directory / name
        _write_readable(sources[name], text)
    empty = directory / "empty"
    _write_readable(empty, "")
    binds: dict[str, str] = {}
    for name in ACCOUNT_FILES:
        for variant in (name, f"{name}-"):
            if os.path.isfile(os.path.join(host_etc, variant)):
                binds[f"/etc/{variant}"] = str(sources[name])
    for name in SECRET_FILES:
        for variant in (name, f"{name}-"):
            if os.path.isfile(os.path.join(host_etc, variant)):
                binds[f"/etc/{variant}"] = str(empty)
    return binds


def _write_readable(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(0o644)  # the sandbox's uid reads it, whatever our umask
