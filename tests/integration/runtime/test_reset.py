"""Reset on a real runtime over loopback gRPC with real bash: processes, files, env, undo, speed."""

from __future__ import annotations

import asyncio
import os
import secrets
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import ToolError
from sandfleet_runtime.server import RuntimeServer
from tests.integration.runtime.tree_support import (
    alive,
    eventually,
    make_sample_tree,
    tree_picture,
)
from tests.support.runtime_server import running_runtime, spawn_runtime_process

pytestmark = pytest.mark.integration


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    make_sample_tree(root)
    return root


@pytest.fixture
async def runtime(tree: Path) -> AsyncIterator[tuple[RuntimeServer, str]]:
    async with running_runtime(tree, default_timeout_s=20.0) as started:
        yield started


@pytest.fixture
async def client(runtime: tuple[RuntimeServer, str]) -> AsyncIterator[RuntimeClient]:
    server, token = runtime
    client = RuntimeClient(f"127.0.0.1:{server.port}", token)
    yield client
    await client.close()


async def test_reset_leaves_no_process_file_variable_or_undo_of_the_previous_rollout(
    tree: Path, client: RuntimeClient
) -> None:
    pristine = tree_picture(tree)
    await client.bind_session(secrets.token_urlsafe(24), {"TASK": "t1"}, session="ns/s")
    setsid_pid = int(
        (await client.run_command("setsid sleep 300 >/dev/null 2>&1 & echo $!")).stdout
    )
    nohup_pid = int(
        (await client.run_command("nohup sleep 301 >/dev/null 2>&1 & echo $!", session="b")).stdout
    )
    await client.run_command(
        "export ROLLOUT_VAR=leaked; echo changed >> notes.txt; rm src/data.bin;"
        " mkdir -p new/deeper && echo x > new/deeper/f; echo n > new.txt; chmod 600 src/run.sh;"
        " rm link-to-notes && ln -s /etc/passwd link-to-notes; rmdir empty && touch empty;"
        " chmod 000 src"
    )
    await client.create(str(tree / "edited.txt"), "from the editor\n")
    assert alive(setsid_pid)
    assert alive(nohup_pid)

    report = await client.reset()

    assert await eventually(lambda: not alive(setsid_pid) and not alive(nohup_pid), 5.0)
    assert tree_picture(tree) == pristine
    assert report.closed_sessions == 2
    assert report.killed_processes >= 4  # two shells, two sleeps
    assert report.removed_paths >= 3  # new, new.txt, edited.txt (and the file named empty)
    assert report.restored_paths >= 4
    result = await client.run_command('echo "${ROLLOUT_VAR:-unset} $TASK"; pwd')
    assert result.stdout == f"unset t1\n{tree}\n"  # the binding's env stays; the cwd is reset
    with pytest.raises(ToolError, match="No edit history"):
        await client.undo_edit(str(tree / "edited.txt"))
    stats = await client.stats()
    assert stats.session == "ns/s"
    assert stats.idle_s < 5


async def test_reset_is_idempotent_and_fast(client: RuntimeClient, tree: Path) -> None:
    pristine = tree_picture(tree)
    await client.run_command("echo more >> notes.txt")
    first = await client.reset()

    second = await client.reset()
    third = await client.reset()

    assert first.restored_paths == 1
    assert (second.removed_paths, second.restored_paths, second.killed_processes) == (0, 0, 0)
    assert (third.removed_paths, third.restored_paths, third.closed_sessions) == (0, 0, 0)
    assert tree_picture(tree) == pristine
    # Generous for a loaded 2-core machine; bench/bench_reset.py measures the real numbers.
    assert max(second.duration_s, third.duration_s) < 0.5


async def test_a_rewrite_that_keeps_size_and_mtime_is_still_undone(
    client: RuntimeClient, tree: Path
) -> None:
    """touch -r puts the old mtime back; the ctime (which no process can set) still moved."""
    await client.run_command(
        "cp -p notes.txt /tmp/ref-$$; printf 'FIRST line\\nsecond line\\n' > notes.txt;"
        " touch -r /tmp/ref-$$ notes.txt; rm /tmp/ref-$$"
    )
    assert (tree / "notes.txt").read_text().startswith("FIRST")

    report = await client.reset()

    assert report.restored_paths == 1
    assert (tree / "notes.txt").read_text() == "first line\nsecond line\n"


async def test_a_captured_baseline_is_where_reset_returns_until_the_next_binding(
    tree: Path, client: RuntimeClient
) -> None:
    image = tree_picture(tree)
    await client.upload(b"task input\n", str(tree / "task.txt"))
    paths, size = await client.capture_baseline()
    prepared = tree_picture(tree)
    assert paths == len(prepared)
    assert size > len(b"task input\n")
    await client.run_command("rm task.txt; echo scratch > scratch.txt")

    await client.reset()
    assert tree_picture(tree) == prepared

    await client.bind_session(secrets.token_urlsafe(24), {}, session="ns/next")
    await client.reset()
    assert tree_picture(tree) == image


async def test_a_too_large_capture_is_refused_and_keeps_the_baseline(tmp_path: Path) -> None:
    root = tmp_path / "small"
    root.mkdir()
    (root / "a.txt").write_text("a")
    async with running_runtime(root, reset_baseline_max_bytes=1000) as (server, token):
        client = RuntimeClient(f"127.0.0.1:{server.port}", token)
        try:
            await client.run_command("head -c 5000 /dev/zero > big.bin")
            with pytest.raises(ToolError, match="more than 1000 bytes") as refused:
                await client.capture_baseline()
            assert refused.value.code == "FAILED_PRECONDITION"

            await client.reset()

            assert sorted(os.listdir(root)) == ["a.txt"]
        finally:
            await client.close()


async def test_reset_without_a_baseline_is_refused_and_the_rest_still_works(tree: Path) -> None:
    async with running_runtime(tree, reset_baseline_max_bytes=100) as (server, token):
        client = RuntimeClient(f"127.0.0.1:{server.port}", token)
        try:
            with pytest.raises(ToolError, match="more than 100 bytes") as refused:
                await client.reset()
            assert refused.value.code == "FAILED_PRECONDITION"
            assert (await client.run_command("echo still")).stdout == "still\n"
        finally:
            await client.close()


async def test_the_agent_kills_a_daemon_that_left_its_session_and_cleared_its_env(
    tmp_path: Path,
) -> None:
    """Double-forked, setsid'd and `env -i`: only the runtime's own descendants scan finds it
    (it was re-parented to the runtime, the child subreaper). Needs the agent process."""
    workdir = tmp_path / "agent-tree"
    workdir.mkdir()
    token = secrets.token_urlsafe(24)
    proc, port = await asyncio.to_thread(spawn_runtime_process, workdir, token)
    client = RuntimeClient(f"127.0.0.1:{port}", token)
    try:
        started = await client.run_command(
            "( env -i setsid sleep 302 >/dev/null 2>&1 & echo $! )", timeout_s=10
        )
        pid = int(started.stdout)
        # Re-parented to the agent, and past env's exec (before it, environ is the shell's).
        assert await eventually(lambda: _parent(pid) == proc.pid and _comm(pid) == "sleep", 5.0)
        assert b"SANDFLEET_SESSION_ID" not in _environ(pid)

        report = await client.reset()

        assert await eventually(lambda: not alive(pid), 5.0)
        assert report.killed_processes >= 2  # the shell and the daemon
    finally:
        await client.close()
        proc.terminate()
        await asyncio.to_thread(proc.wait, 10)


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except OSError:
        return ""


def _environ(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as environ:
        return environ.read()


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as proc_stat:
            return int(proc_stat.read().rsplit(b")", 1)[1].split()[1])
    except OSError:
        return -1


def test_sample_tree_helper_sees_modes_and_links(tmp_path: Path) -> None:
    make_sample_tree(tmp_path / "t")
    picture = tree_picture(tmp_path / "t")
    assert picture["src/run.sh"][1] == 0o755
    assert picture["link-to-notes"] == ("link", 0, os.fsencode("notes.txt"))
    assert picture["empty"][0] == "dir"


async def test_reset_returns_every_listed_writable_path_to_its_state_at_start(
    tree: Path, tmp_path: Path
) -> None:
    """A recycled pool sandbox: files a tenant left in /tmp-like and home-like directories
    (new, changed, deleted, its shell history) are undone like the working tree's."""
    scratch, home = tmp_path / "scratch", tmp_path / "home"
    scratch.mkdir()
    home.mkdir()
    (home / ".bashrc").write_text("# image's\n")
    pristine = (tree_picture(tree), tree_picture(scratch), tree_picture(home))
    async with running_runtime(tree, reset_paths=(scratch, home)) as (server, token):
        client = RuntimeClient(f"127.0.0.1:{server.port}", token)
        try:
            await client.run_command(
                f"mkdir -p {scratch}/d && echo secret > {scratch}/d/left.txt;"
                f" echo changed >> {home}/.bashrc; echo 'ls' > {home}/.bash_history;"
                " echo x > notes2.txt"
            )

            first = await client.reset()
            again = await client.reset()  # what recycling's verification checks: nothing left

            assert (tree_picture(tree), tree_picture(scratch), tree_picture(home)) == pristine
            assert first.removed_paths >= 3 and first.restored_paths >= 1
            assert (again.removed_paths, again.restored_paths, again.killed_processes) == (0, 0, 0)
        finally:
            await client.close()


def test_the_reset_paths_come_from_the_environment_with_the_home_and_without_missing_ones(
    tmp_path: Path,
) -> None:
    from sandfleet_runtime.__main__ import settings_from

    environ = {
        "SANDFLEET_RUNTIME_TOKEN": "t" * 32,
        "HOME": str(tmp_path),
        "SANDFLEET_RUNTIME_RESET_PATHS": f"{tmp_path}/missing:~: :{tmp_path}",
    }

    settings, _ = settings_from(["--workdir", str(tmp_path)], environ)

    assert settings.reset_paths == (tmp_path.resolve(),)


async def test_shells_start_again_after_a_reset_removed_the_runtimes_own_temporary_directory(
    tree: Path, tmp_path: Path
) -> None:
    """The bash driver lives in the system's temporary directory, which a recycling pool's
    reset restores to its state at start, before the driver existed."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(temp)  # where the runtime's mkdtemp puts the driver
    tempfile.tempdir = None
    try:
        async with running_runtime(tree, reset_paths=(temp,)) as (server, token):
            client = RuntimeClient(f"127.0.0.1:{server.port}", token)
            try:
                assert (await client.run_command("echo one")).stdout == "one\n"
                assert list(temp.iterdir())  # the driver's directory

                await client.reset()

                assert list(temp.iterdir()) == []
                assert (await client.run_command("echo two")).stdout == "two\n"
            finally:
                await client.close()
    finally:
        if old is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old
        tempfile.tempdir = None
