"""The local sandboxes of a state dir, running and suspended, for `sandfleet sandboxes`;
and what that command does to one: suspend it from outside its program, remove it.

A running local sandbox belongs to the program that opened it (it dies with it, and only
that program holds its runtime agent's token). Suspending it from outside therefore saves
its files only (not its bash sessions' cwd and environment, which need the agent), ends its
processes, and leaves its program with a lost sandbox (SandboxLostError on the next call).
`Sandbox.suspend()` in the program itself saves everything.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Literal

from sandfleet.backends.local.processes import boot_id, kill_sandbox_processes
from sandfleet.backends.local.registry import Registry, SandboxRecord, owner_is_gone
from sandfleet.backends.local.snapshot_store import (
    Manifest,
    check_size,
    list_manifests,
    new_snapshot_folder,
    remove_snapshot,
    save_snapshot,
    saved_entries,
    snapshot_dir,
)
from sandfleet.errors import SandboxNotFoundError, SandfleetError, SuspendError
from sandfleet.logs import get_logger
from sandfleet.sandbox.backend import SandboxPaths

log = get_logger(__name__)

_SYSTEM_ENTRIES = frozenset({"tmp", "root", "var"})
"""Entries of a sandbox's host root that are not its working paths (layout.py)."""

SandboxState = Literal["running", "orphaned", "suspended", "incomplete"]


@dataclasses.dataclass(frozen=True, slots=True)
class LocalSandboxEntry:
    """One line of `sandfleet sandboxes`."""

    id: str
    state: SandboxState
    """running; orphaned (its program is gone, the next start sweeps it); suspended;
    incomplete (a suspend that did not finish: kept for inspection, `rm` removes it)."""
    since: float
    """Started (running) or suspended at (Unix time); 0 when unknown."""
    size_bytes: int = 0
    """The snapshot's size (suspended)."""
    owner_pid: int = 0
    """The program that opened it (running)."""


def list_sandboxes(state_dir: Path) -> list[LocalSandboxEntry]:
    """Every local sandbox of `state_dir`, running ones first, then by id."""
    current_boot = boot_id()
    entries = [
        LocalSandboxEntry(
            id=record.sandbox_id,
            state="orphaned" if owner_is_gone(record, current_boot) else "running",
            since=record.created_at,
            owner_pid=record.owner.pid,
        )
        for record in Registry(state_dir).records()
    ]
    for folder, manifest in list_manifests(state_dir):
        if manifest is None:
            entries.append(LocalSandboxEntry(id=folder.name, state="incomplete", since=0.0))
        else:
            entry = LocalSandboxEntry(
                id=manifest.sandbox_id, state="suspended", since=manifest.suspended_at,
                size_bytes=manifest.size_bytes,
            )  # fmt: skip
            entries.append(entry)
    return entries


def suspend_from_outside(state_dir: Path, sandbox_id: str, *, limit_bytes: int | None) -> Manifest:
    """Save a running sandbox's files (verified), then end it (see the module's docstring)."""
    record = _running_record(state_dir, sandbox_id)
    registry = Registry(state_dir)
    host_root = registry.sandbox_dir(sandbox_id) / "root"
    folder = new_snapshot_folder(state_dir, sandbox_id)
    check_size(host_root, limit_bytes)
    manifest = save_snapshot(
        folder, host_root,
        lambda size, digest: Manifest(
            sandbox_id=sandbox_id, suspended_at=time.time(), size_bytes=size, sha256=digest,
            saved_paths=tuple(f"/{name}" for name in saved_entries(host_root)), sessions={},
            host_root=str(host_root), config=_config_of(record, saved_entries(host_root)),
        ),
    )  # fmt: skip
    cgroups = [Path(path) for path in record.cgroups]
    kill_sandbox_processes(sandbox_id, record.leader, cgroups)
    registry.remove(sandbox_id, cgroups=cgroups)
    log.info("sandbox_suspended_from_outside", sandbox=sandbox_id, bytes=manifest.size_bytes)
    return manifest


def remove_sandbox(state_dir: Path, sandbox_id: str, *, force: bool = False) -> SandboxState:
    """Remove a suspended (or incomplete) sandbox's snapshot; a running one only with
    `force` (its processes are ended and its files deleted). Returns the state it had."""
    registry = Registry(state_dir)
    record = next((r for r in registry.records() if r.sandbox_id == sandbox_id), None)
    if record is not None:
        gone = owner_is_gone(record, boot_id())
        if gone or force:
            cgroups = [Path(path) for path in record.cgroups]
            kill_sandbox_processes(sandbox_id, record.leader, cgroups)
            registry.remove(sandbox_id, cgroups=cgroups)
            return "orphaned" if gone else "running"
        raise SandfleetError(
            f"sandbox {sandbox_id} is running (its program is pid {record.owner.pid}): "
            "close it there, suspend it, or remove it with --force"
        )
    folder = snapshot_dir(state_dir, sandbox_id)
    if not folder.is_dir():
        raise SandboxNotFoundError(f"no local sandbox {sandbox_id} in {state_dir}")
    remove_snapshot(folder)
    return "suspended"


def _running_record(state_dir: Path, sandbox_id: str) -> SandboxRecord:
    for record in Registry(state_dir).records():
        if record.sandbox_id == sandbox_id:
            if record.mechanism == "none":
                raise SuspendError(
                    f"sandbox {sandbox_id} runs without namespaces: its paths are host "
                    "paths its program chose; suspend it from that program (sandbox.suspend())"
                )
            return record
    if snapshot_dir(state_dir, sandbox_id).is_dir():
        raise SuspendError(f"sandbox {sandbox_id} is already suspended")
    raise SandboxNotFoundError(f"no running local sandbox {sandbox_id} in {state_dir}")


def _config_of(record: SandboxRecord, entries: list[str]) -> dict[str, object]:
    """What a resume starts with: the mechanism it ran with, and paths below its one
    working root (the record does not keep the config; `Sandbox.resume(id, config=...)`
    overrides both)."""
    roots = [name for name in entries if name not in _SYSTEM_ENTRIES]
    paths = SandboxPaths.under(f"/{roots[0]}") if len(roots) == 1 else SandboxPaths()
    return {
        "isolation": "namespaces",
        "namespace_tool": record.mechanism,
        "paths": dataclasses.asdict(paths),
        "env": {},
    }
