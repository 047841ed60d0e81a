"""Sandbox.snapshot / restore / fork on REAL local sandboxes (runtime agent processes)."""

from __future__ import annotations

import asyncio
import tarfile

import pytest

from sandfleet import Sandbox
from sandfleet.backends.local import LocalBackend, LocalRuntime, LocalSandboxConfig
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import SandboxLostError, SandboxStartError, SandfleetError
from sandfleet.sandbox.backend import OpenedSandbox
from sandfleet.sandbox.core import SandboxCore
from sandfleet.sandbox.sync import SyncSandbox

pytestmark = pytest.mark.integration


async def text(sandbox: SandboxCore, command: str) -> str:
    result = await sandbox.bash(command, timeout_s=30)
    assert result.exit_code == 0, result.stderr
    return result.stdout


async def test_a_snapshot_is_a_tar_of_the_tree_and_restore_puts_it_back() -> None:
    async with Sandbox.local() as sandbox:
        workdir = sandbox.paths.working_dir
        await text(sandbox, "mkdir -p src && echo one > src/a.py && ln -s src/a.py link")
        with await sandbox.snapshot() as snapshot:
            with tarfile.open(snapshot.path) as archive:
                names = set(archive.getnames())
            assert {"src", "src/a.py", "link"} <= names
            assert snapshot.size == snapshot.path.stat().st_size > 0
            await text(sandbox, "echo two > src/a.py; rm link; echo new > extra.txt")
            await sandbox.restore(snapshot)
            assert await text(sandbox, f"cat {workdir}/src/a.py; readlink link; ls") == (
                "one\nsrc/a.py\ninput\nlink\noutput\nsrc\n"
            )
            kept = snapshot.path
        assert snapshot.closed and not kept.exists()
        with pytest.raises(ValueError, match="closed"):
            await sandbox.restore(snapshot)


async def test_fork_gives_independent_copies_whose_reset_returns_to_the_fork_point() -> None:
    async with Sandbox.local() as parent:
        await text(parent, "echo prepared > state.txt && mkdir -p data && seq 1000 > data/n.txt")
        await text(parent, "export PARENT_ONLY=1; sleep 600 >/dev/null 2>&1 &")
        forks = await parent.fork(3)
        try:
            assert len({id(fork.client) for fork in forks}) == 3
            # Each fork holds the fork point, not the parent's processes or shell state.
            for fork in forks:
                seen = await text(
                    fork, "cat state.txt; wc -l < data/n.txt; echo ${PARENT_ONLY:-no}"
                )
                assert seen == "prepared\n1000\nno\n"
                assert "sleep 600" not in await text(fork, "ps -eo args")
            # A change in one fork is in no other fork and not in the parent.
            await text(forks[0], "echo changed > state.txt; echo mine > only0.txt")
            await asyncio.gather(*(text(f, "true") for f in forks))
            assert (
                await text(forks[1], "cat state.txt; ls")
                == "prepared\ndata\ninput\noutput\nstate.txt\n"
            )
            assert await text(parent, "cat state.txt; ls only0.txt 2>&1 || true") == (
                "prepared\nls: cannot access 'only0.txt': No such file or directory\n"
            )
            # Reset returns each fork to the fork point (not to the image's empty tree).
            await text(forks[2], "rm -r data; echo late > late.txt")
            for fork in forks:
                await fork.reset()
                assert await text(fork, "cat state.txt; ls") == (
                    "prepared\ndata\ninput\noutput\nstate.txt\n"
                )
            # The parent's own reset still goes to the image's tree: forking moved nothing.
            await parent.reset()
            assert await text(parent, "ls") == "input\noutput\n"
        finally:
            await asyncio.gather(*(fork.close() for fork in forks))


async def test_a_fork_of_a_fork_works_and_closing_forks_stops_their_sandboxes() -> None:
    async with Sandbox.local() as parent:
        await text(parent, "echo gen0 > g.txt")
        (child,) = await parent.fork(1)
        await text(child, "echo gen1 >> g.txt")
        (grandchild,) = await child.fork(1)
        assert await text(grandchild, "cat g.txt") == "gen0\ngen1\n"
        await grandchild.reset()
        assert await text(grandchild, "cat g.txt") == "gen0\ngen1\n"
        for sandbox in (grandchild, child):
            address = sandbox.client.address
            metadata = dict(sandbox.client._connection.metadata)
            token = metadata["authorization"].removeprefix("Bearer ")
            await sandbox.close()
            fresh = RuntimeClient(address, token)
            try:
                with pytest.raises(SandboxLostError, match="UNAVAILABLE"):
                    await fresh.stats()
            finally:
                await fresh.close()


async def test_fork_needs_a_sandbox_opened_from_a_backend_and_a_positive_count() -> None:
    async with Sandbox.local() as local:
        connected = Sandbox(local.client, paths=local.paths)
        with pytest.raises(SandfleetError, match="cannot fork"):
            await connected.fork(2)
        with pytest.raises(ValueError, match="at least 1"):
            await local.fork(0)


def test_the_blocking_sandbox_resets_and_forks_too() -> None:
    with SyncSandbox.local() as sandbox:
        sandbox.bash("echo base > b.txt; sleep 600 >/dev/null 2>&1 &")
        forks = sandbox.fork(2)
        try:
            forks[0].bash("echo one > b.txt")
            assert [f.bash("cat b.txt").stdout for f in forks] == ["one\n", "base\n"]
            forks[0].reset()
            assert forks[0].bash("cat b.txt").stdout == "base\n"
        finally:
            for fork in forks:
                fork.close()
        report = sandbox.reset()
        assert report.killed_processes >= 1
        assert sandbox.bash("ls").stdout == "input\noutput\n"


class _FailingThirdOpen:
    """A real LocalBackend whose third open fails (a claim refused, a start that failed)."""

    def __init__(self) -> None:
        self.inner = LocalBackend(LocalSandboxConfig())
        self.opened: list[OpenedSandbox[LocalRuntime]] = []
        self.calls = 0

    async def open(self) -> OpenedSandbox[LocalRuntime]:
        self.calls += 1
        if self.calls == 3:
            raise SandboxStartError("the third sandbox could not start")
        opened = await self.inner.open()
        self.opened.append(opened)
        return opened


async def test_a_fork_that_cannot_open_every_sandbox_closes_the_ones_it_opened() -> None:
    backend = _FailingThirdOpen()
    parent = await Sandbox.open(backend)
    try:
        with pytest.raises(SandboxStartError, match="third"):
            await parent.fork(2)  # opens #2 and #3: #3 fails
        assert backend.calls == 3
        forked = backend.opened[1].details
        assert forked.sandbox_id != backend.opened[0].details.sandbox_id
        # The fork that did open was closed again: its agent no longer answers.
        fresh = RuntimeClient(forked.address, forked.token)
        try:
            with pytest.raises(SandboxLostError):
                await fresh.stats()
        finally:
            await fresh.close()
        assert (await parent.bash("echo alive")).stdout == "alive\n"
    finally:
        await parent.close()
