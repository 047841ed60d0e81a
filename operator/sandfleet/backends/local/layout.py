"""The filesystem a namespaced sandbox sees, as a pure list of mount operations.

A pod sees its image, not the node's data; a local sandbox sees the host's SYSTEM files (the
tools it runs) and none of its data. So the new root is an empty tmpfs with an allowlist:
- SYSTEM_DIRS of the host's / are bound read-only at their own paths (/usr, /etc, /lib*,
  /sys, package stores like /nix); top-level symlinks (/bin -> usr/bin) are recreated.
  /etc keeps the host's configuration but not its accounts: passwd and group (and their
  backups) are the sandbox's own, the shadow files empty.
- EMPTY_DIRS (/home, /mnt, /media, /srv, /opt, /var) exist but are empty and read-only:
  where hosts keep data. /var/tmp in it is private and writable like /tmp.
- Every other top-level entry (/work, /data, /boot, a new folder tomorrow) does not exist.
- /proc (new procfs), /dev (a minimal one, as bubblewrap builds), /tmp, /root (HOME), /run
  (the agent's socket, none of the host's) and the sandbox's working paths are private.
What the agent or the task needs comes back read-only on top: the agent's interpreter and
packages (`needed`), /opt/<tool> dirs on the sandbox's PATH, and explicit binds. `hidden`
paths (the state dir, results, a benchmark) get an empty read-only tmpfs wherever one of
those binds would show them; `masked` paths (the caller's working directory) likewise, but
what the agent needs below them comes back.
Each private path P lives on the host at <fs_root>/P, so the mapping needs no table.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Literal

from sandfleet.errors import SandboxStartError
from sandfleet.sandbox.backend import SandboxPaths

MountKind = Literal["bind", "symlink", "tmpfs", "dev", "proc", "readonly"]
HostEntryKind = Literal["dir", "file", "symlink"]

# Replaced rather than bound from the host: new procfs, minimal /dev, private /tmp and HOME.
_REPLACED = frozenset({"proc", "dev", "tmp", "root", "run"})
SYSTEM_DIRS = frozenset(
    {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "sys", "nix", "snap", "gnu"}
)
"""Top-level host dirs a sandbox sees (read-only): programs, libraries, configuration, and
the package stores of Nix, Snap and Guix. /sys is there for the cgroups the agent limits."""
EMPTY_DIRS = ("/home", "/mnt", "/media", "/opt", "/srv", "/var")
"""Present but empty and read-only: users' files, mounted disks, served data, add-on
packages and state (/var/lib, /var/log, /var/mail, /var/backups, /var/tmp) are host data.
/opt holds both tools and data with nothing to tell them apart: only /opt/<name> dirs on the
sandbox's PATH come back (opt_tools)."""
PRIVATE_SYSTEM_DIRS = ("/tmp", "/root", "/run", "/var/tmp")
"""Always private in a namespaced sandbox; /root is HOME (pip --user, caches, dotfiles)."""


@dataclasses.dataclass(frozen=True, slots=True)
class MountOp:
    """One step of building the sandbox root; `target` is the path inside the sandbox."""

    kind: MountKind
    target: str
    source: str = ""
    """Host path for "bind", link text for "symlink", unused otherwise."""
    readonly: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class HostEntry:
    """A top-level entry of the host's root directory."""

    name: str
    kind: HostEntryKind
    link: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class SandboxLayout:
    ops: tuple[MountOp, ...]
    private_dirs: tuple[str, ...]
    """Sandbox paths backed by <fs_root>/<path>; the launcher creates them before start."""


def scan_host_root(root: str = "/") -> list[HostEntry]:
    """The host's top-level entries (a few dozen; cheap enough to read at every launch)."""
    entries: list[HostEntry] = []
    with os.scandir(root) as it:
        for entry in it:
            if entry.is_symlink():
                entries.append(HostEntry(entry.name, "symlink", os.readlink(entry.path)))
            elif entry.is_dir(follow_symlinks=False):
                entries.append(HostEntry(entry.name, "dir"))
            elif entry.is_file(follow_symlinks=False):
                entries.append(HostEntry(entry.name, "file"))
    return sorted(entries, key=lambda e: e.name)


def private_roots(paths: SandboxPaths) -> list[str]:
    """The fewest directories that hold every configured path (input/output under /testbed
    need no mounts of their own)."""
    wanted = {
        paths.working_dir,
        paths.input_dir,
        paths.output_dir,
        str(PurePosixPath(paths.answer_file).parent),
    }
    for path in wanted:
        if not PurePosixPath(path).is_absolute() or path != os.path.normpath(path):
            raise SandboxStartError(f"sandbox paths must be absolute and normalized: {path!r}")
        if path == "/":
            raise SandboxStartError("a sandbox path cannot be / itself")
    roots: list[str] = []
    for path in sorted(wanted, key=lambda p: (len(PurePosixPath(p).parts), p)):
        if not any(_is_under(path, root) for root in roots):
            roots.append(path)
    return roots


def plan_layout(
    paths: SandboxPaths,
    *,
    fs_root: Path,
    host_entries: Sequence[HostEntry],
    hidden: Iterable[str] = (),
    needed: Iterable[str] = (),
    shared: Iterable[str] = (),
    masked: Iterable[str] = (),
    read_only: Iterable[str] = (),
    files: Mapping[str, str] | None = None,
    host_is_dir: Callable[[str], bool] = os.path.isdir,
) -> SandboxLayout:
    """Mount operations for one sandbox.

    `hidden`: host paths (real paths) the sandbox must not see, e.g. the state dir.
    `needed`: host paths (real paths) the runtime agent needs, e.g. a Python installed under
    /root/.pyenv or a virtual environment in a project folder.
    `shared`: host paths that stay writable inside, e.g. the sandbox's own cgroup, so the
    runtime agent can create the cgroups that limit its shells.
    `masked`: host paths covered by an empty tmpfs (`needed` paths below them come back).
    `read_only`: host paths the task may read (LocalSandboxConfig.read_only_binds); one
    inside a hidden path is refused.
    `files`: sandbox file path -> host file bound over it read-only (/etc/passwd).
    """
    work_roots = private_roots(paths)
    private = sorted({*PRIVATE_SYSTEM_DIRS, *work_roots}, key=_depth_then_name)
    by_name = {entry.name: entry for entry in host_entries}
    for root in work_roots:
        _check_mountable(root, by_name, host_is_dir)

    empty = [path for path in EMPTY_DIRS if path not in private]
    ops: list[MountOp] = []
    system: list[str] = []
    for entry in host_entries:
        target = f"/{entry.name}"
        if entry.name in _REPLACED or target in private or target in EMPTY_DIRS:
            continue
        if entry.kind == "symlink":
            ops.append(MountOp("symlink", target, source=entry.link))
        elif entry.name in SYSTEM_DIRS:
            ops.append(MountOp("bind", target, source=target, readonly=True))
            system.append(target)
    ops.extend(
        MountOp("bind", target, source=source, readonly=True)
        for target, source in sorted((files or {}).items())
    )
    ops.extend(MountOp("bind", path, source=path) for path in sorted(set(shared)))
    ops.append(MountOp("dev", "/dev"))
    ops.append(MountOp("proc", "/proc"))
    ops.extend(MountOp("tmpfs", path) for path in empty)  # read-only once the binds are in
    ops.extend(MountOp("bind", root, source=str(host_path(fs_root, root))) for root in private)

    hidden_paths = _outermost(hidden)
    masks = _outermost(masked)
    # Masks inside a host system dir go on before the binds, so what is needed comes back.
    early = [m for m in masks if _under_any(m, system) and not _under_any(m, private)]
    ops.extend(MountOp("tmpfs", path) for path in early)
    exposed: list[str] = []
    wanted = [(p, False) for p in set(needed)] + [(p, True) for p in set(read_only)]
    for path, explicit in sorted(wanted, key=lambda item: _depth_then_name(item[0])):
        cover = next((top for top in hidden_paths if _is_under(path, top)), None)
        if cover is not None:
            raise SandboxStartError(_inside_hidden(path, cover, explicit=explicit))
        if any(_is_under(path, done) for done in exposed):
            continue
        if _under_any(path, system) and not _under_any(path, early):
            continue  # already visible
        ops.append(MountOp("bind", path, source=path, readonly=True))
        exposed.append(path)
    # A path shows the host's files when the deepest mount over it is a host bind.
    covers = [*private, *empty, "/proc", "/dev"]
    shows = [*system, *exposed]
    late = [m for m in masks if m not in early and _shown(m, shows, covers)]
    ops.extend(MountOp("tmpfs", path, readonly=True) for path in late)
    ops.extend(
        MountOp("tmpfs", path, readonly=True)
        for path in hidden_paths
        if _shown(path, shows, covers)
    )
    ops.extend(MountOp("readonly", path) for path in [*empty, *early])
    return SandboxLayout(ops=tuple(ops), private_dirs=tuple(private))


def opt_tools(search_path: str) -> list[str]:
    """The /opt/<name> dirs that hold programs on this PATH: tools, not data."""
    found = set()
    for entry in search_path.split(":"):
        parts = PurePosixPath(os.path.normpath(entry)).parts if entry.startswith("/") else ()
        if len(parts) >= 3 and parts[1] == "opt":
            found.add(f"/opt/{parts[2]}")
    return sorted(found)


def _inside_hidden(path: str, cover: str, *, explicit: bool) -> str:
    if explicit:
        return (
            f"cannot bind {path} into the sandbox: it is inside {cover}, which sandboxes must "
            "not see (the state dir, the results or the benchmark)"
        )
    return (
        f"the runtime agent needs {path}, which is inside the hidden dir {cover}; "
        "choose a state_dir (and results dir) that does not contain the Python installation"
    )


def _outermost(paths: Iterable[str]) -> list[str]:
    """The paths that are not below another one of them."""
    kept: list[str] = []
    for path in sorted(set(paths), key=_depth_then_name):
        if not _under_any(path, kept):
            kept.append(path)
    return kept


def _shown(path: str, shows: Sequence[str], covers: Sequence[str]) -> bool:
    """Whether `path` shows host files: its deepest mount is one of `shows`, not `covers`."""
    return _depth_below(path, shows) > _depth_below(path, covers)


def _depth_below(path: str, roots: Iterable[str]) -> int:
    """Parts of the deepest root that holds `path` (0: none)."""
    return max((len(PurePosixPath(r).parts) for r in roots if _is_under(path, r)), default=0)


def _under_any(path: str, roots: Iterable[str]) -> bool:
    return any(_is_under(path, root) for root in roots)


def host_path(fs_root: Path, sandbox_path: str) -> Path:
    """Where a private sandbox path lives on the host."""
    return fs_root / sandbox_path.lstrip("/")


def _check_mountable(
    root: str, by_name: dict[str, HostEntry], host_is_dir: Callable[[str], bool]
) -> None:
    """A private path under a host directory needs an existing mount point: the host's
    directories are read-only inside, so it cannot be created there."""
    parts = PurePosixPath(root).parts
    if parts[1] in ("proc", "dev"):
        raise SandboxStartError(f"a sandbox path cannot be under /{parts[1]}: {root}")
    top = by_name.get(parts[1])
    if top is None or parts[1] not in SYSTEM_DIRS or len(parts) == 2:
        return  # a mount point in the sandbox's own root or in an empty dir: made at start
    if top.kind != "dir" or not host_is_dir(root) or os.path.realpath(root) != root:
        raise SandboxStartError(
            f"cannot make {root} private: /{parts[1]} is the host's (read-only in the sandbox) "
            f"and {root} is not an existing directory there; use a path under a new "
            "top-level directory such as /testbed"
        )


def _is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _depth_then_name(path: str) -> tuple[int, str]:
    return (len(PurePosixPath(path).parts), path)
