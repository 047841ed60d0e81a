"""Every open bash session's cwd and exported environment, read from one real runtime (which
names its sessions) and re-established in another, as a suspend and its resume do."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.snapshots.shell_state import capture, live_sessions, reestablish
from tests.support.runtime_server import running_runtime

pytestmark = pytest.mark.integration


async def test_each_open_session_is_kept_not_only_default(tmp_path: Path) -> None:
    (tmp_path / "before" / "b").mkdir(parents=True)
    (tmp_path / "after" / "b").mkdir(parents=True)
    async with running_runtime(tmp_path / "before") as (server, token):
        client = RuntimeClient(f"127.0.0.1:{server.port}", token)
        try:
            await client.run_command("cd b && export BUILD='two words'", session="build")
            await client.run_command("export SEEN=1", session="other")
            names = await live_sessions(client, ["used-by-the-sdk"])
            states = await capture(client, names)
        finally:
            await client.close()
    assert names == ["build", "default", "other", "used-by-the-sdk"]

    async with running_runtime(tmp_path / "after") as (server, token):
        client = RuntimeClient(f"127.0.0.1:{server.port}", token)
        try:
            await reestablish(client, states, (str(tmp_path / "before"), str(tmp_path / "after")))
            build = await client.run_command('pwd; echo "$BUILD|${SEEN-}"', session="build")
            other = await client.run_command('echo "${BUILD-}|$SEEN"', session="other")
        finally:
            await client.close()
    assert build.stdout.splitlines() == [str(tmp_path / "after" / "b"), "two words|"]
    assert other.stdout == "|1\n"


async def test_what_only_the_fresh_shell_exports_is_unset_but_the_launchers_own_stays(
    tmp_path: Path,
) -> None:
    states = {"default": {"cwd": str(tmp_path), "env": {"KEPT": "it's kept", "PATH": "/bin"}}}
    fresh_env = (("PATH", "/usr/bin:/bin"), ("FRESH_ONLY", "x"), ("SANDFLEET_SANDBOX_ID", "s1"))
    async with running_runtime(tmp_path, shell_env=fresh_env) as (server, token):
        client = RuntimeClient(f"127.0.0.1:{server.port}", token)
        try:
            await reestablish(client, states, ("", ""))
            seen = await client.run_command(
                'echo "$KEPT|${FRESH_ONLY-unset}|$SANDFLEET_SANDBOX_ID|$PATH"; pwd'
            )
        finally:
            await client.close()
    assert seen.stdout.splitlines() == ["it's kept|unset|s1|/bin", str(tmp_path)]
