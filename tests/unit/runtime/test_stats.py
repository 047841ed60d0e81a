"""Resource stats against real processes and fake cgroup trees; the activity clock."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandfleet_runtime.stats import (
    ActivityClock,
    ProcessTree,
    StatsSnapshot,
    collect_stats,
    read_cgroup_memory,
    scan_process_tree,
)


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def no_cgroup() -> None:
    return None


def wait_for_process_count(root_pid: int, expected: int) -> StatsSnapshot:
    """Polls (with a deadline) until the tree below root_pid has `expected` processes."""
    activity = ActivityClock()
    deadline = time.monotonic() + 10
    while True:
        snapshot = collect_stats(activity, cgroup_memory=no_cgroup, root_pid=root_pid)
        if snapshot.process_count == expected or time.monotonic() > deadline:
            return snapshot
        time.sleep(0.01)  # poll interval, not a wait for state


def settled_tree(root_pid: int, expected: int) -> tuple[StatsSnapshot, ProcessTree]:
    """A snapshot of `expected` processes and a scan that agrees with it on memory: a child
    forked but not yet exec'd into `sleep` still changes size between two scans (seen on a
    loaded machine), so poll, with a deadline, until two scans agree."""
    deadline = time.monotonic() + 10
    while True:
        snapshot = wait_for_process_count(root_pid, expected)
        tree = scan_process_tree(root_pid)
        if tree.rss_bytes == snapshot.memory_current_bytes or time.monotonic() > deadline:
            return snapshot, tree
        time.sleep(0.01)  # poll interval, not a wait for state


@pytest.fixture
def shell_with_two_sleeps() -> Iterator[subprocess.Popen[bytes]]:
    shell = subprocess.Popen(["bash", "-c", "sleep 60 & sleep 60 & wait"], start_new_session=True)
    try:
        yield shell
    finally:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()


def test_the_activity_clock_reports_uptime_and_idle_time_from_its_clocks() -> None:
    wall, mono = FakeClock(1_000.0), FakeClock(50.0)
    activity = ActivityClock(clock=wall, monotonic=mono)
    assert (activity.started_unix, activity.last_activity_unix) == (1_000.0, 1_000.0)
    wall.now, mono.now = 1_030.0, 80.0
    assert (activity.uptime_s, activity.idle_s) == (30.0, 30.0)
    activity.touch()
    wall.now, mono.now = 1_035.0, 85.0
    assert activity.last_activity_unix == 1_030.0
    assert (activity.uptime_s, activity.idle_s) == (35.0, 5.0)


def test_idle_time_ignores_wall_clock_steps() -> None:
    wall, mono = FakeClock(1_000.0), FakeClock(0.0)
    activity = ActivityClock(clock=wall, monotonic=mono)
    wall.now, mono.now = 500.0, 10.0  # NTP stepped the wall clock back
    assert activity.idle_s == 10.0


def test_stats_carry_the_activity_clock(tmp_path: Path) -> None:
    wall, mono = FakeClock(1_000.0), FakeClock(0.0)
    activity = ActivityClock(clock=wall, monotonic=mono)
    wall.now, mono.now = 1_012.0, 12.0
    snapshot = collect_stats(activity, cgroup_memory=lambda: (100, 200))
    assert (snapshot.uptime_s, snapshot.idle_s, snapshot.last_activity_unix) == (
        12.0,
        12.0,
        1_000.0,
    )


def test_the_cgroup_hook_overrides_memory_figures() -> None:
    snapshot = collect_stats(ActivityClock(), cgroup_memory=lambda: (123_456, 654_321))
    assert snapshot.memory_source == "cgroup"
    assert (snapshot.memory_current_bytes, snapshot.memory_peak_bytes) == (123_456, 654_321)


def test_child_processes_are_counted_and_their_memory_summed(
    shell_with_two_sleeps: subprocess.Popen[bytes],
) -> None:
    snapshot, tree = settled_tree(shell_with_two_sleeps.pid, 3)  # bash + two sleeps
    assert snapshot.process_count == 3
    assert snapshot.memory_source == "proc"
    assert tree.pids[0] == shell_with_two_sleeps.pid
    assert snapshot.memory_current_bytes == tree.rss_bytes > tree.root_rss_bytes > 0
    assert snapshot.memory_peak_bytes >= snapshot.memory_current_bytes


def test_this_process_counts_its_new_children() -> None:
    before = collect_stats(ActivityClock(), cgroup_memory=no_cgroup).process_count
    children = [subprocess.Popen(["sleep", "60"]) for _ in range(3)]
    try:
        after = wait_for_process_count(os.getpid(), before + 3)
        assert after.process_count == before + 3
        assert after.memory_current_bytes > 0
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_a_vanished_root_process_has_no_processes() -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    snapshot = collect_stats(ActivityClock(), cgroup_memory=no_cgroup, root_pid=child.pid)
    assert (snapshot.process_count, snapshot.memory_current_bytes) == (0, 0)


def test_the_real_sandbox_reports_memory_from_some_source() -> None:
    snapshot = collect_stats(ActivityClock())
    assert snapshot.memory_source in ("cgroup", "proc")
    assert snapshot.memory_peak_bytes >= snapshot.memory_current_bytes > 0
    assert snapshot.process_count >= 1


def fake_cgroups(tmp_path: Path, self_cgroup: str, files: dict[str, str]) -> tuple[Path, Path]:
    proc_file = tmp_path / "proc_self_cgroup"
    proc_file.write_text(self_cgroup)
    root = tmp_path / "sys_fs_cgroup"
    root.mkdir()
    for name, value in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"{value}\n")
    return proc_file, root


def test_cgroup_v2_memory_current_and_peak_are_read(tmp_path: Path) -> None:
    proc_file, root = fake_cgroups(
        tmp_path,
        "0::/kubepods/pod1/sandbox\n",
        {
            "kubepods/pod1/sandbox/memory.current": "1000",
            "kubepods/pod1/sandbox/memory.peak": "5000",
        },
    )
    assert read_cgroup_memory(proc_file, root) == (1000, 5000)


def test_cgroup_v2_without_memory_peak_reports_current_as_peak(tmp_path: Path) -> None:
    proc_file, root = fake_cgroups(tmp_path, "0::/\n", {"memory.current": "1000"})
    assert read_cgroup_memory(proc_file, root) == (1000, 1000)


def test_a_cgroup_path_missing_from_the_mount_reads_the_mount_root(tmp_path: Path) -> None:
    # Without a cgroup namespace the container sees the host path but its own cgroup mounted.
    proc_file, root = fake_cgroups(
        tmp_path, "0::/system.slice/docker-abc.scope\n", {"memory.current": "7", "memory.peak": "9"}
    )
    assert read_cgroup_memory(proc_file, root) == (7, 9)


def test_cgroup_v1_is_used_on_a_hybrid_host(tmp_path: Path) -> None:
    proc_file, root = fake_cgroups(
        tmp_path,
        "9:name=systemd:/\n4:cpu,memory:/process_api/abc\n0::/\n",
        {
            "memory/process_api/abc/memory.usage_in_bytes": "2048",
            "memory/process_api/abc/memory.max_usage_in_bytes": "4096",
        },
    )
    assert read_cgroup_memory(proc_file, root) == (2048, 4096)


def test_no_readable_cgroup_means_none(tmp_path: Path) -> None:
    proc_file, root = fake_cgroups(tmp_path, "0::/\n", {})
    assert read_cgroup_memory(proc_file, root) is None
    assert read_cgroup_memory(tmp_path / "missing", root) is None
