"""Suspend and resume of real local sandboxes: files, cwd and env survive; a corrupt
snapshot fails resume and stays; a snapshot over the limit is refused (docs/suspend.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sandfleet import (
    LocalBackend,
    Sandbox,
    SandboxStartError,
    SnapshotCorruptError,
    SnapshotTooLargeError,
    SuspendError,
    SyncSandbox,
)
from sandfleet.backends.local.registry import Registry

from .conftest import config_for, mechanism_params

WRITE = (
    "mkdir -p src/pkg && echo tree > src/pkg/a.txt && echo in > input/in.txt"
    ' && echo out > output/out.txt && echo home > "$HOME/.dotfile"'
    ' && echo tmp > "${TMPDIR:-/tmp}/scratch.txt"'
    " && (sleep 600 &) && cd src/pkg && export GREETING='hello  world' && unset LANG"
)
READ = (
    'cat a.txt ../../input/in.txt ../../output/out.txt "$HOME/.dotfile"'
    ' "${TMPDIR:-/tmp}/scratch.txt"; pwd; echo "[$GREETING]"; echo "lang=${LANG-unset}"'
    '; stat -c %a "${TMPDIR:-/tmp}"'
)


@pytest.mark.parametrize("mechanism", mechanism_params(("bwrap", "unshare", "none")))
async def test_files_cwd_and_env_survive_a_round_trip(mechanism: str, tmp_path: Path) -> None:
    config = config_for(mechanism, tmp_path, env={"LANG": "C.UTF-8"})
    sandbox = await Sandbox.local(config)
    try:
        wrote = await sandbox.bash(WRITE)
        assert wrote.exit_code == 0, wrote.stderr
        await sandbox.bash("cd /; export OTHER=2", session="other")
        workdir = (await sandbox.bash("pwd")).stdout.strip()
        record = await sandbox.suspend()
    except BaseException:
        await sandbox.close()
        raise
    assert record.size_bytes > 0 and len(record.sha256) == 64
    assert not record.processes_kept and "not kept" in record.note
    assert set(record.sessions) == {"default", "other"}
    assert not Registry(tmp_path).record_path(record.id).exists()  # nothing runs
    assert (record.path / "files.tar").is_file()

    async with Sandbox.resume(record.id, state_dir=tmp_path) as resumed:
        result = await resumed.bash(READ)
        lines = result.stdout.splitlines()
        assert lines[:5] == ["tree", "in", "out", "home", "tmp"], result.stdout + result.stderr
        assert lines[5:] == [workdir, "[hello  world]", "lang=unset", "1777"]  # /tmp's mode too
        other = await resumed.bash('pwd; echo "$OTHER"', session="other")
        assert other.stdout.split() == ["/", "2"]
        assert "sleep 600" not in (await resumed.bash("ps -eo args")).stdout
        assert not record.path.exists()  # the running sandbox holds the state now


async def test_a_corrupt_snapshot_fails_resume_and_is_kept(tmp_path: Path) -> None:
    with SyncSandbox.local(config_for("none", tmp_path)) as sandbox:
        sandbox.bash("echo precious > keep.txt")
        record = sandbox.suspend()
    archive = record.path / "files.tar"
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    archive.write_bytes(bytes(data))
    with pytest.raises(SnapshotCorruptError, match="corrupt") as raised:
        SyncSandbox.resume(record.id, state_dir=tmp_path)
    assert str(archive) in str(raised.value)
    assert archive.read_bytes() == bytes(data)  # kept for inspection
    (record.path / "manifest.json").unlink()
    with pytest.raises(SnapshotCorruptError, match="incomplete"):
        await Sandbox.resume(record.id, state_dir=tmp_path)
    with pytest.raises(SnapshotCorruptError, match="missing"):
        await Sandbox.resume("sbx-nothere", state_dir=tmp_path)
    assert archive.exists() and not Registry(tmp_path).record_path(record.id).exists()


async def test_a_snapshot_over_the_limit_is_refused_and_the_sandbox_runs_on(
    tmp_path: Path,
) -> None:
    config: Any = config_for("none", tmp_path, max_suspend_bytes=4000)
    async with Sandbox.local(config) as sandbox:
        await sandbox.bash("head -c 20000 /dev/zero > big.bin && echo small > small.txt")
        with pytest.raises(SnapshotTooLargeError) as raised:
            await sandbox.suspend()
        message = str(raised.value)
        assert "4000 bytes" in message and "big.bin" in message, message
        assert isinstance(raised.value, SuspendError)
        assert (await sandbox.bash("cat small.txt")).stdout.strip() == "small"
        assert not (tmp_path / "suspended").exists() or not any((tmp_path / "suspended").iterdir())


async def test_a_sandbox_without_a_local_backend_cannot_suspend(tmp_path: Path) -> None:
    opened = await LocalBackend(config_for("none", tmp_path)).open()
    try:
        async with Sandbox.connect(opened.details.address, opened.details.token) as connected:
            with pytest.raises(SuspendError, match="cluster sandboxes through the gateway"):
                await connected.suspend()
    finally:
        await opened.close()


async def test_two_resumes_at_once_start_the_sandbox_once(tmp_path: Path) -> None:
    async with Sandbox.local(config_for("none", tmp_path)) as sandbox:
        await sandbox.bash("echo once > once.txt")
        record = await sandbox.suspend()
    results = await asyncio.gather(
        Sandbox.resume(record.id, state_dir=tmp_path),
        Sandbox.resume(record.id, state_dir=tmp_path),
        return_exceptions=True,
    )
    opened = [r for r in results if isinstance(r, Sandbox)]
    failed = [r for r in results if not isinstance(r, Sandbox)]
    try:
        assert len(opened) == 1 and len(failed) == 1, results
        assert isinstance(failed[0], SandboxStartError), failed
        assert "resumed by another program" in str(failed[0])
        assert (await opened[0].bash("cat once.txt")).stdout.strip() == "once"
    finally:
        for each in opened:
            await each.close()


async def test_a_store_that_cannot_be_written_fails_suspend_and_the_sandbox_runs_on(
    tmp_path: Path,
) -> None:
    async with Sandbox.local(config_for("none", tmp_path)) as sandbox:
        await sandbox.bash("echo still > here.txt")
        await asyncio.to_thread((tmp_path / "suspended").write_text, "a file, not a folder")
        with pytest.raises(SuspendError, match="could not write the snapshot") as raised:
            await sandbox.suspend()
        assert "keeps running" in str(raised.value)
        assert (await sandbox.bash("cat here.txt")).stdout.strip() == "still"
