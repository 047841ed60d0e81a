"""Suspended local sandboxes on disk: <state_dir>/suspended/<id>/{files.tar, manifest.json}.

The archive holds the sandbox's private writable paths as the host keeps them (see
layout.py: sandbox path P lives at <host_root>/P): the working tree with its input and
output folders, HOME (/root), /tmp and /var/tmp. /run is left out: it holds the runtime
agent's socket, and /run is empty after every boot anyway. The manifest is written last
(atomically, after the archive is re-read and its sha256 computed), so a folder without
one is an interrupted suspend, never a complete snapshot.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import json
import os
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandfleet.backends.local.registry import remove_tree
from sandfleet.errors import SnapshotCorruptError, SnapshotTooLargeError, SuspendError

ARCHIVE = "files.tar"
MANIFEST = "manifest.json"
SUSPENDED_DIR = "suspended"
LEFT_OUT = frozenset({"run"})
"""Top-level entries of a sandbox's host root that are not saved (the agent's socket)."""
_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True, slots=True)
class Manifest:
    """What a snapshot folder holds, and what is needed to bring the sandbox back."""

    sandbox_id: str
    suspended_at: float
    size_bytes: int
    sha256: str
    saved_paths: tuple[str, ...]
    sessions: dict[str, dict[str, Any]]
    """Session name -> {"cwd": str, "env": {name: value}} (exported variables)."""
    host_root: str
    """The host root the files came from (isolation "none" sees host paths: cwd and env
    values below it are moved to the new root on resume)."""
    config: dict[str, Any]
    """The LocalSandboxConfig fields a resume starts the sandbox with (config_fields)."""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        raw: dict[str, Any] = json.loads(text)
        return cls(
            sandbox_id=str(raw["sandbox_id"]),
            suspended_at=float(raw["suspended_at"]),
            size_bytes=int(raw["size_bytes"]),
            sha256=str(raw["sha256"]),
            saved_paths=tuple(str(p) for p in raw["saved_paths"]),
            sessions=dict(raw["sessions"]),
            host_root=str(raw["host_root"]),
            config=dict(raw["config"]),
        )


def suspended_root(state_dir: Path) -> Path:
    return state_dir / SUSPENDED_DIR


def snapshot_dir(state_dir: Path, sandbox_id: str) -> Path:
    if not sandbox_id or "/" in sandbox_id or sandbox_id.startswith("."):
        raise SnapshotCorruptError(f"not a sandbox id: {sandbox_id!r}")
    return suspended_root(state_dir) / sandbox_id


def saved_entries(host_root: Path) -> list[str]:
    """The top-level entries of a sandbox's host root that a snapshot saves."""
    return sorted(e.name for e in os.scandir(host_root) if e.name not in LEFT_OUT)


def check_size(host_root: Path, limit_bytes: int | None, *, top: int = 5) -> int:
    """The bytes a snapshot would hold; SnapshotTooLargeError (the limit and the biggest
    paths, as the sandbox sees them) when over `limit_bytes`."""
    total = 0
    sizes: list[tuple[int, str]] = []
    for entry in saved_entries(host_root):
        for folder, _dirs, files in os.walk(host_root / entry):
            for name in files:
                path = os.path.join(folder, name)
                try:
                    size = os.lstat(path).st_size
                except OSError:
                    continue
                total += size
                sizes.append((size, "/" + os.path.relpath(path, host_root)))
    if limit_bytes is None or total <= limit_bytes:
        return total
    biggest = ", ".join(f"{path} ({_mb(size)})" for size, path in heapq.nlargest(top, sizes))
    raise SnapshotTooLargeError(
        f"the sandbox holds {_mb(total)} of files, over the suspend limit of "
        f"{_mb(limit_bytes)} (LocalSandboxConfig.max_suspend_bytes); the biggest: {biggest}; "
        "the sandbox keeps running"
    )


def write_archive(host_root: Path, folder: Path) -> tuple[int, str]:
    """Tar the saved entries into folder/files.tar, fsync it, re-read it for its sha256;
    returns (size, sha256)."""
    folder.mkdir(parents=True, mode=0o700)
    archive = folder / ARCHIVE
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for entry in saved_entries(host_root):
            tar.add(host_root / entry, arcname=entry)  # sockets and fifos are skipped
    with archive.open("rb+") as handle:
        os.fsync(handle.fileno())
    return archive.stat().st_size, file_sha256(archive)


def write_manifest(folder: Path, manifest: Manifest) -> None:
    partial = folder / f".{MANIFEST}.tmp"
    partial.write_text(manifest.to_json())
    partial.chmod(0o600)
    partial.replace(folder / MANIFEST)


def read_verified(folder: Path) -> Manifest:
    """The manifest of a complete, intact snapshot; SnapshotCorruptError naming the file
    otherwise (nothing is removed)."""
    manifest_path, archive = folder / MANIFEST, folder / ARCHIVE
    if not folder.is_dir():
        raise SnapshotCorruptError(f"no suspended sandbox {folder.name!r}: {folder} is missing")
    try:
        manifest = Manifest.from_json(manifest_path.read_text())
    except FileNotFoundError:
        raise SnapshotCorruptError(
            f"the snapshot in {folder} is incomplete: {manifest_path} is missing (a suspend "
            "that did not finish); its files are kept for inspection"
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SnapshotCorruptError(f"unreadable manifest {manifest_path}: {exc}") from None
    try:
        size = archive.stat().st_size
        digest = file_sha256(archive)
    except OSError as exc:
        raise SnapshotCorruptError(f"the snapshot archive {archive} is unreadable: {exc}") from None
    if size != manifest.size_bytes or digest != manifest.sha256:
        raise SnapshotCorruptError(
            f"the snapshot archive {archive} is corrupt: {size} bytes with sha256 "
            f"{digest[:12]}..., the manifest says {manifest.size_bytes} bytes with "
            f"{manifest.sha256[:12]}...; it is kept for inspection"
        )
    return manifest


def extract_archive(folder: Path, host_root: Path) -> None:
    """Unpack a verified archive into a new sandbox's host root; members that would land
    outside it are refused (SnapshotCorruptError)."""
    archive = folder / ARCHIVE
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(host_root, filter=_keep_modes)
    except (tarfile.TarError, OSError) as exc:
        raise SnapshotCorruptError(f"cannot unpack the snapshot archive {archive}: {exc}") from None


def _keep_modes(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    """tarfile's "tar" filter (no absolute paths, nothing outside `dest`) without its mode
    changes: /tmp stays 1777 and group-writable files stay so (setuid/setgid are dropped)."""
    checked = tarfile.tar_filter(member, dest)
    return checked.replace(mode=member.mode & 0o1777, deep=False)


def list_manifests(state_dir: Path) -> list[tuple[Path, Manifest | None]]:
    """Every snapshot folder with its manifest (None: incomplete or unreadable)."""
    root = suspended_root(state_dir)
    found: list[tuple[Path, Manifest | None]] = []
    if not root.is_dir():
        return found
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        try:
            found.append((folder, Manifest.from_json((folder / MANIFEST).read_text())))
        except (OSError, ValueError, KeyError, TypeError):
            found.append((folder, None))
    return found


def remove_snapshot(folder: Path) -> None:
    remove_tree(folder)


def new_snapshot_folder(state_dir: Path, sandbox_id: str) -> Path:
    """Where a suspend of sandbox_id writes; SuspendError when a snapshot (or an interrupted
    one) is already there."""
    folder = snapshot_dir(state_dir, sandbox_id)
    if folder.exists():
        raise SuspendError(f"{folder} already exists: remove it first (sandfleet sandboxes rm)")
    return folder


def save_snapshot(
    folder: Path, host_root: Path, describe: Callable[[int, str], Manifest]
) -> Manifest:
    """Archive host_root into folder, then write describe(size, sha256) as its manifest, last.
    On any failure the folder is removed, and a write that failed (OSError) is a
    SuspendError: the caller has not stopped the sandbox, which keeps running."""
    try:
        size, digest = write_archive(host_root, folder)
        manifest = describe(size, digest)
        write_manifest(folder, manifest)
    except BaseException as exc:
        remove_snapshot(folder)
        if isinstance(exc, OSError):
            raise SuspendError(
                f"could not write the snapshot to {folder}: {exc}; the sandbox keeps running"
            ) from None
        raise
    return manifest


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size} bytes"
