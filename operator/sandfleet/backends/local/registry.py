"""Sandbox records on disk, and the sweep that reclaims sandboxes whose owner died.

Layout of a state dir: <id>.json (the record) next to <id>/ (the sandbox's files).
The record is written before the directory is filled and removed after it is gone, so a
directory never outlives its record. PR_SET_PDEATHSIG already kills a sandbox when its owner
dies; the sweep covers what that cannot: a crash before the signal was armed, a leftover
directory, a daemon that escaped the process tree of an un-namespaced sandbox.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import stat
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sandfleet.backends.local.cgroups import remove_cgroups
from sandfleet.backends.local.processes import ProcessIdentity, boot_id, kill_sandbox_processes
from sandfleet.logs import get_logger

log = get_logger(__name__)

RECORD_SUFFIX = ".json"


@dataclasses.dataclass(frozen=True, slots=True)
class SandboxRecord:
    sandbox_id: str
    boot_id: str
    owner: ProcessIdentity
    """The control-plane process that launched the sandbox."""
    mechanism: str
    leader: ProcessIdentity | None = None
    """Our direct child (setpriv/unshare, bwrap, or the agent itself); leads its process group."""
    created_at: float = 0.0
    cgroups: tuple[str, ...] = ()
    """The sandbox's parent cgroups (see cgroups.py), removed with it."""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> SandboxRecord:
        raw: dict[str, Any] = json.loads(text)
        leader = raw.get("leader")
        return cls(
            sandbox_id=str(raw["sandbox_id"]),
            boot_id=str(raw["boot_id"]),
            owner=ProcessIdentity(**raw["owner"]),
            mechanism=str(raw["mechanism"]),
            leader=ProcessIdentity(**leader) if leader else None,
            created_at=float(raw.get("created_at", 0.0)),
            cgroups=tuple(str(path) for path in raw.get("cgroups", ())),
        )


class Registry:
    """The records of one state dir."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    def record_path(self, sandbox_id: str) -> Path:
        return self.state_dir / f"{sandbox_id}{RECORD_SUFFIX}"

    def sandbox_dir(self, sandbox_id: str) -> Path:
        return self.state_dir / sandbox_id

    def write(self, record: SandboxRecord) -> None:
        """Atomically (rename), so a sweep never reads half a record."""
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self.record_path(record.sandbox_id)
        partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        partial.write_text(record.to_json())
        partial.replace(path)

    def remove(
        self, sandbox_id: str, *, keep_dir: bool = False, cgroups: Sequence[Path] = ()
    ) -> None:
        """Delete the sandbox's cgroups and directory (unless kept), then its record.
        Its processes must be gone already (a cgroup with members cannot be removed)."""
        remove_cgroups(cgroups)
        if not keep_dir:
            remove_tree(self.sandbox_dir(sandbox_id))
        self.record_path(sandbox_id).unlink(missing_ok=True)

    def records(self) -> list[SandboxRecord]:
        found: list[SandboxRecord] = []
        try:
            paths = sorted(self.state_dir.glob(f"*{RECORD_SUFFIX}"))
        except OSError:
            return found
        for path in paths:
            if path.name.startswith("."):
                continue
            try:
                found.append(SandboxRecord.from_json(path.read_text()))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("sandbox_record_unreadable", path=str(path), error=str(exc))
        return found


def owner_is_gone(record: SandboxRecord, current_boot: str) -> bool:
    return record.boot_id != current_boot or not record.owner.is_alive()


def sweep_orphans(state_dir: Path | None = None) -> int:
    """Reclaim sandboxes whose owner process is gone; return how many. Blocking: call it
    from a thread when an event loop is running."""
    from sandfleet.backends.local.config import default_state_dir

    registry = Registry(state_dir if state_dir is not None else default_state_dir())
    current_boot = boot_id()
    reclaimed = 0
    for record in registry.records():
        if not owner_is_gone(record, current_boot):
            continue
        cgroups = [Path(path) for path in record.cgroups]
        if record.boot_id == current_boot:  # after a reboot nothing of it can be running
            kill_sandbox_processes(record.sandbox_id, record.leader, cgroups)
        registry.remove(record.sandbox_id, cgroups=cgroups)
        reclaimed += 1
        log.info(
            "orphan_sandbox_reclaimed",
            sandbox=record.sandbox_id,
            owner_pid=record.owner.pid,
            age_s=round(time.time() - record.created_at, 1),
        )
    return reclaimed


def remove_tree(path: Path) -> None:
    """rmtree that also removes what the sandbox made read-only (chmod 0500 dirs and files)."""

    def make_writable_and_retry(func: Any, failed: str, exc: BaseException) -> None:
        if isinstance(exc, FileNotFoundError):
            return
        for target in (os.path.dirname(failed), failed):
            with contextlib.suppress(OSError):
                if not os.path.islink(target):
                    os.chmod(target, os.stat(target).st_mode | stat.S_IRWXU)
        if os.path.isdir(failed) and not os.path.islink(failed):
            shutil.rmtree(failed, ignore_errors=True)
            return
        with contextlib.suppress(FileNotFoundError):
            func(failed)

    if path.is_symlink():
        path.unlink()
    elif path.exists():
        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=make_writable_and_retry)
        else:
            shutil.rmtree(path, onerror=lambda f, p, info: make_writable_and_retry(f, p, info[1]))
