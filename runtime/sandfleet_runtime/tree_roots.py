"""Extra roots of a tree archive: writable directories outside the working tree (the home
directory, /tmp, /var/tmp) that SnapshotTree may archive and RestoreTree put back with it.

In the archive, the working tree's members keep their names relative to it (as an archive
without extra roots has them) and an extra root's members are named by absolute path
(`/tmp/notes.txt`): `tar tf` shows where each file lives, and a runtime that predates extra
roots refuses such an archive (it refuses absolute names) instead of unpacking /tmp's files
into the working tree.

A root that does not exist, is not a writable directory, or overlaps the working tree or an
earlier root is left out: a restore replaces each root whole, which nested roots would undo.
"""

from __future__ import annotations

import copy
import os
import tarfile
from collections.abc import Sequence
from pathlib import Path

from sandfleet_runtime.errors import InvalidArgumentError

__all__ = ["resolve_extra_roots", "route_member", "tag_member"]

HOME = "~"
"""How a request names the runtime's home directory ($HOME of the runtime's environment)."""


def _overlaps(a: Path, b: Path) -> bool:
    return a == b or a in b.parents or b in a.parents


def resolve_extra_roots(names: Sequence[str], workdir: Path, home: str) -> tuple[Path, ...]:
    """The requested roots as resolved absolute directories, in request order, without the
    ones left out (see the module). InvalidArgumentError for a relative name."""
    roots: list[Path] = []
    for name in names:
        text = home if name == HOME else name
        if not os.path.isabs(text):
            raise InvalidArgumentError(f"the extra root {name!r} is neither absolute nor '~'")
        path = Path(text).resolve()
        if not path.is_dir() or not os.access(path, os.W_OK | os.X_OK):
            continue
        if path.parent == path or any(_overlaps(path, r) for r in (workdir, *roots)):
            continue
        roots.append(path)
    return tuple(roots)


def tag_member(member: tarfile.TarInfo, root: Path) -> tarfile.TarInfo:
    """An extra root's member named by absolute path (tarfile strips the leading '/' of
    every name it is given, and of a hard link's target)."""
    member.name = f"{root}/{member.name}"
    if member.islnk():
        member.linkname = f"{root}/{member.linkname}"
    return member


def _relative_to(name: str, root: Path) -> str | None:
    prefix = f"{root}/"
    if name == str(root):
        return ""
    return name[len(prefix) :] if name.startswith(prefix) else None


def route_member(
    member: tarfile.TarInfo, roots: Sequence[Path]
) -> tuple[Path | None, tarfile.TarInfo]:
    """(the extra root an absolutely named member belongs to, the member renamed relative to
    that root); (None, member) for a working-tree member. InvalidArgumentError for an
    absolute name under none of `roots`, or a hard link into another root."""
    if not member.name.startswith("/"):
        return None, member
    for root in roots:
        relative = _relative_to(member.name, root)
        if relative is None:
            continue
        routed = copy.copy(member)
        routed.name = relative or "."
        if member.islnk():
            target = _relative_to(member.linkname, root)
            if not target:
                raise InvalidArgumentError(
                    f"the archive member {member.name!r} is a hard link out of {root}"
                )
            routed.linkname = target
        return root, routed
    listed = ", ".join(str(r) for r in roots) or "none"
    raise InvalidArgumentError(
        f"the archive member {member.name!r} has an absolute path outside the extra roots "
        f"of the restore ({listed})"
    )
