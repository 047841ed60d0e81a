"""The public Sandbox opens sandboxes through SandboxBackend and nothing else: any backend
plugs in, closing gives the sandbox back to it, and the backends load only when used."""

from __future__ import annotations

import subprocess
import sys

from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.fleet.status import SessionState
from sandfleet.sandbox.backend import OpenedSandbox, SandboxBackend, SandboxPaths
from sandfleet.sandbox.facade import ClusterSandbox, Sandbox

PATHS = SandboxPaths.under("/work")


class CountingBackend:
    """A backend that hands out a client to nowhere and counts how often it was closed."""

    def __init__(self) -> None:
        self.closed = 0

    async def open(self) -> OpenedSandbox[str]:
        client = RuntimeClient("127.0.0.1:9", "token")

        async def close() -> None:
            self.closed += 1
            await client.close()

        return OpenedSandbox(client=client, paths=PATHS, close=close, details="counting")


async def test_any_backend_opens_a_sandbox_and_closing_it_once_gives_it_back() -> None:
    backend = CountingBackend()
    opened_by: SandboxBackend[str] = backend  # the protocol is structural: no base class

    async with await Sandbox.open(opened_by, tool_timeout_s=5, max_output_chars=100) as sandbox:
        assert type(sandbox) is Sandbox
        assert sandbox.paths == PATHS
        assert (sandbox.tool_timeout_s, sandbox.max_output_chars) == (5, 100)
    await sandbox.close()

    assert backend.closed == 1


async def test_every_opener_is_awaited_or_used_as_async_with_and_each_use_opens_anew() -> None:
    backend = CountingBackend()
    opening = Sandbox.open(backend)

    async with opening as first:
        assert backend.closed == 0
    assert backend.closed == 1
    second = await opening  # awaited: the caller closes it
    assert second is not first and backend.closed == 1
    await second.close()
    assert backend.closed == 2


async def test_a_cluster_backend_opens_a_cluster_sandbox_that_keeps_its_session() -> None:
    session = SessionState(namespace="team-a", name="sbx-2")

    class SessionBackend(CountingBackend):
        async def open(self) -> OpenedSandbox[SessionState]:  # type: ignore[override]
            opened = await super().open()
            return OpenedSandbox(opened.client, opened.paths, opened.close, session)

    async with ClusterSandbox.open(SessionBackend()) as sandbox:
        assert type(sandbox) is ClusterSandbox
        assert (sandbox.name, sandbox.session) == ("sbx-2", session)


async def test_a_cluster_sandbox_names_its_session() -> None:
    session = SessionState(namespace="team-a", name="sbx-1")

    async with ClusterSandbox(RuntimeClient("127.0.0.1:9", "t"), session=session) as sandbox:
        pass

    assert (sandbox.name, sandbox.namespace, sandbox.session) == ("sbx-1", "team-a", session)
    assert isinstance(sandbox, Sandbox)


def test_importing_the_sdk_loads_no_backend() -> None:
    code = (
        "import sys\n"
        "from sandfleet import Sandbox, SandboxPaths\n"
        "Sandbox.local, Sandbox.on_cluster, SandboxPaths()\n"
        "print(sorted(m for m in sys.modules if m.startswith(('sandfleet.backends',"
        " 'sandfleet.cluster', 'sandfleet.kube', 'sandfleet.operator'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
