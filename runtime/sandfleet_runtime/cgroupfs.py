"""Where this process's cgroups live and how to write to cgroupfs (stdlib only).

Shared by the runtime's session limits and the control plane's local sandboxes, which both
need to find their own cgroup in each hierarchy before creating children below it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path


def write_value(path: Path, value: str) -> None:
    """Write `value` in one write() call: cgroupfs parses each write on its own."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def all_mounts() -> list[tuple[str, str, str, set[str]]]:
    """(root, mount point, fs type, super options) of each mount, from /proc/self/mountinfo."""
    found = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            before, _, after = line.partition(" - ")
            fields, tail = before.split(), after.split()
            if len(fields) < 5 or len(tail) < 3:
                continue
            options = set(tail[2].split(","))
            found.append((_unescape(fields[3]), _unescape(fields[4]), tail[0], options))
    return found


def own_cgroups() -> dict[str, str]:
    """Controller ("" for the v2 unified hierarchy) -> this process's cgroup path."""
    own = {}
    with open("/proc/self/cgroup") as cgroups:
        for line in cgroups:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                own[controller] = path
    return own


def cgroup_directory(mount_root: str, mount_point: str, cgroup_path: str) -> Path | None:
    """Where a cgroup path shows up under a mount that may expose only a subtree."""
    relative = os.path.relpath(cgroup_path, mount_root)
    if relative.startswith(".."):
        return None
    return Path(os.path.normpath(os.path.join(mount_point, relative)))
