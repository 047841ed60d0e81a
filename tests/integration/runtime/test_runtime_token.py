"""The runtime's token never reaches its shells: not in their environment, not through /proc."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandfleet.clients.runtime.client import RuntimeClient
from tests.support.runtime_server import spawn_runtime_process

pytestmark = pytest.mark.integration

NOBODY = 65534
# Everything a same-uid shell could try: every process's environment and command line.
SCAN = (
    "for p in /proc/[0-9]*; do cat $p/environ $p/cmdline; echo; done 2>/dev/null | tr '\\0' '\\n'"
)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A workdir an unprivileged agent can use (pytest's tmp_path is root-only)."""
    base = Path(tempfile.mkdtemp(prefix="sandfleet-token-"))
    base.chmod(0o777)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _as_unprivileged() -> list[str]:
    """Run the agent as `nobody` when we are root: its shells then hold no capabilities."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", "--"]


async def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    await asyncio.to_thread(proc.wait, 20)


@pytest.mark.parametrize("token_via", ["fd", "env"])
async def test_a_shell_finds_the_token_in_no_environment_and_no_command_line(
    shared_dir: Path, token_via: str
) -> None:
    token = secrets.token_urlsafe(32)
    proc, port = await asyncio.to_thread(
        spawn_runtime_process, shared_dir, token, token_via=token_via
    )
    client = RuntimeClient(f"127.0.0.1:{port}", token)
    try:
        env = await client.run_command("env", timeout_s=60, max_output_chars=10**6)
        assert env.exit_code == 0 and "PATH=" in env.stdout
        assert "SANDFLEET_RUNTIME_TOKEN" not in env.stdout
        # Host-wide here (no PID namespace): other processes may hold other tokens.
        # The pattern comes from a file: an argv holding it would itself be found.
        await client.upload(token.encode(), str(shared_dir / "pattern"))
        shown = await client.run_command(
            f"{SCAN} > scan.txt; grep -c PATH= scan.txt; grep -c -F -f pattern scan.txt",
            timeout_s=60,
        )
        assert shown.stdout.split()[1] == "0", shown.stdout
        assert int(shown.stdout.split()[0]) > 0, shown.stdout
        # The kernel's copy of the agent's initial environment is wiped too (read as the
        # test's user, who may be root and so is not stopped by the agent being undumpable).
        environ = await asyncio.to_thread(Path(f"/proc/{proc.pid}/environ").read_bytes)
        assert token.encode() not in environ
    finally:
        await client.close()
        await _stop(proc)


async def test_a_shell_cannot_read_the_agents_proc_files(shared_dir: Path) -> None:
    token = secrets.token_urlsafe(32)
    proc, port = await asyncio.to_thread(
        spawn_runtime_process, shared_dir, token, token_via="env", prefix=_as_unprivileged()
    )
    client = RuntimeClient(f"127.0.0.1:{port}", token)
    try:
        # The shell's parent is the agent, running as the shell's own uid.
        probe = await client.run_command(
            "id -u; for f in environ maps; do cat /proc/$PPID/$f >/dev/null 2>&1 "
            "&& echo $f=readable || echo $f=denied; done; ls /proc/$PPID/fd >/dev/null 2>&1 "
            "&& echo fd=readable || echo fd=denied; (exec 3</proc/$PPID/mem) 2>/dev/null "
            "&& echo mem=readable || echo mem=denied",
            timeout_s=60,
        )
        lines = probe.stdout.split()
        assert lines[0] != "0", "the shell must run without root for this test to mean anything"
        assert lines[1:] == ["environ=denied", "maps=denied", "fd=denied", "mem=denied"]
    finally:
        await client.close()
        await _stop(proc)


async def test_a_token_file_of_ours_is_read_and_removed(shared_dir: Path) -> None:
    token = secrets.token_urlsafe(32)
    token_file = shared_dir / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    proc, port = await asyncio.to_thread(
        spawn_runtime_process, shared_dir, "unused-env-token", "--token-file", str(token_file)
    )
    client = RuntimeClient(f"127.0.0.1:{port}", token)
    try:
        assert (await client.run_command("echo ok", timeout_s=60)).stdout == "ok\n"
        assert not token_file.exists()
    finally:
        await client.close()
        await _stop(proc)


@pytest.mark.parametrize(
    ("flag", "value", "source"),
    [("--token-fd", "57", "fd 57"), ("--token-file", "/nonexistent/token", "/nonexistent/token")],
)
def test_an_unreadable_token_source_is_one_clear_line(flag: str, value: str, source: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDFLEET_RUNTIME_TOKEN")}
    proc = subprocess.run(
        [sys.executable, "-m", "sandfleet_runtime", "--listen", "127.0.0.1:0", flag, value],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"sandfleet-runtime: cannot read the token from {source}: ")
    assert "Traceback" not in proc.stderr
