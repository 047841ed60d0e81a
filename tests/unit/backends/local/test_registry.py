"""Sandbox records and the orphan sweep's decisions (no child processes: owners are fabricated)."""

from __future__ import annotations

import os
from pathlib import Path

from sandfleet.backends.local.processes import ProcessIdentity, boot_id, start_time
from sandfleet.backends.local.registry import Registry, SandboxRecord, remove_tree, sweep_orphans


def me() -> ProcessIdentity:
    identity = ProcessIdentity.of(os.getpid())
    assert identity is not None
    return identity


def make_sandbox(registry: Registry, sandbox_id: str, owner: ProcessIdentity, boot: str) -> Path:
    registry.write(SandboxRecord(sandbox_id, boot, owner, mechanism="none", created_at=1.0))
    files = registry.sandbox_dir(sandbox_id) / "root" / "testbed"
    files.mkdir(parents=True)
    (files / "answer.txt").write_text("42")
    return registry.sandbox_dir(sandbox_id)


def test_a_record_round_trips_through_json(tmp_path: Path) -> None:
    registry = Registry(tmp_path)
    record = SandboxRecord("sbx-1", "boot", me(), "unshare", leader=ProcessIdentity(7, 99))
    registry.write(record)
    assert registry.records() == [record]


def test_sandboxes_of_a_live_owner_are_left_alone(tmp_path: Path) -> None:
    registry = Registry(tmp_path)
    directory = make_sandbox(registry, "sbx-live", me(), boot_id())
    assert sweep_orphans(tmp_path) == 0
    assert directory.is_dir()
    assert registry.record_path("sbx-live").exists()


def test_a_reused_owner_pid_counts_as_a_dead_owner(tmp_path: Path) -> None:
    registry = Registry(tmp_path)
    impostor = ProcessIdentity(os.getpid(), me().start_time + 1)  # same pid, other process
    directory = make_sandbox(registry, "sbx-dead", impostor, boot_id())
    assert sweep_orphans(tmp_path) == 1
    assert not directory.exists()
    assert registry.records() == []


def test_records_from_another_boot_are_reclaimed(tmp_path: Path) -> None:
    registry = Registry(tmp_path)
    directory = make_sandbox(registry, "sbx-old", me(), "another-boot")
    assert sweep_orphans(tmp_path) == 1
    assert not directory.exists()


def test_an_unreadable_record_is_skipped_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "sbx-bad.json").write_text("{not json")
    assert sweep_orphans(tmp_path) == 0


def test_a_missing_state_dir_sweeps_nothing(tmp_path: Path) -> None:
    assert sweep_orphans(tmp_path / "absent") == 0


def test_remove_tree_removes_what_the_sandbox_made_read_only(tmp_path: Path) -> None:
    locked = tmp_path / "box" / "locked"
    locked.mkdir(parents=True)
    (locked / "file").write_text("x")
    locked.chmod(0o500)
    (tmp_path / "box" / "unlistable").mkdir(mode=0o000)
    remove_tree(tmp_path / "box")
    assert not (tmp_path / "box").exists()


def test_start_time_is_none_for_a_pid_that_does_not_exist() -> None:
    assert start_time(2**22 + 1) is None  # above the default pid_max
