"""Regression tests for issue 11's findings 1 and 2: attacks from inside local sandboxes
fail, with the SDK run as root and as an unprivileged user (root drops to a throwaway uid).

Each variant runs attack_sandbox.py in a child process that opens two real sandboxes;
the assertions here read its report and the host's state afterwards.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandfleet.backends.local import LocalSandboxConfig, launch_local_runtime
from sandfleet.backends.local.cgroups import AGENT_MEMORY_HEADROOM, AGENT_PROCESS_HEADROOM
from sandfleet.backends.local.isolation import SANDBOX_UID
from tests.integration.local.conftest import THROWAWAY_UID

pytestmark = pytest.mark.integration

ATTACK = Path(__file__).with_name("attack_sandbox.py")
REPO = Path(__file__).resolve().parents[3]
TUN = "/dev/net/tun"


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A host dir the sandbox sees (read-only) and anyone may write: only the mount stops
    a write. Under /usr/local/src (a system dir: host data dirs are not in a sandbox at
    all), or /var/tmp where we may not write there."""
    parent = "/usr/local/src" if os.access("/usr/local/src", os.W_OK) else "/var/tmp"
    base = Path(tempfile.mkdtemp(prefix="sandfleet-attack-", dir=parent))
    base.chmod(0o777)
    (base / "marker").write_text("host\n")
    try:
        yield base
    finally:
        shutil.rmtree(base)


def _host_address() -> str | None:
    """One of the host's non-loopback IPv4 addresses (the route to a public one), if any."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if address.startswith("127.") else address


@pytest.fixture
def loopback_server(request: pytest.FixtureRequest) -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server on the host's 127.0.0.1 (or all addresses, when the test is
    parametrized with host="any") that records whatever connects."""
    seen: list[bytes] = []
    bind = "" if getattr(request, "param", "") == "any" else "127.0.0.1"
    server = socket.create_server((bind, 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                seen.append(conn.recv(100))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], seen
    finally:
        stop.set()
        thread.join()
        server.close()


def _unprivileged(argv: list[str], home: Path) -> list[str]:
    """As root: the same command as a throwaway uid, in a private mount namespace where an
    interpreter below root's 0700 /root (pyenv) is reachable (only there, only readable)."""
    if os.geteuid() != 0:
        return argv
    ids = [f"--reuid={THROWAWAY_UID}", f"--regid={THROWAWAY_UID}", "--clear-groups"]
    drop = ["setpriv", *ids, "--", "env", f"HOME={home}", *argv]
    python = os.path.realpath(sys.executable)
    if not python.startswith("/root/"):
        return drop
    top = "/root/" + python.split("/")[2]
    script = (
        f"mkdir -p {home}/.keep && mount --bind {top} {home}/.keep && "
        f"mount -t tmpfs -o mode=0755 tmpfs /root && mkdir {top} && "
        f'mount --bind {home}/.keep {top} && exec "$@"'
    )
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *drop]


def _attack(
    state_dir: Path, host_dir: Path, port: int, tool: str, *extra: str, as_user: bool
) -> dict[str, object]:
    argv = [sys.executable, str(ATTACK), str(state_dir), str(host_dir), str(port), tool, *extra]
    if as_user:
        argv = _unprivileged(argv, state_dir.parent)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        argv,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=state_dir.parent,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.parametrize("tool", ["unshare", "bwrap"])
@pytest.mark.parametrize("as_user", [False, True], ids=["as-root", "as-user"])
def test_attacks_from_inside_a_sandbox_fail(
    as_user: bool,
    tool: str,
    work_dir: Path,
    host_dir: Path,
    loopback_server: tuple[int, list[bytes]],
) -> None:
    if not as_user and os.geteuid() != 0:
        pytest.skip("the as-root variant needs root (CI runs as root)")
    port, seen = loopback_server

    report = _attack(work_dir / "state", host_dir, port, tool, as_user=as_user)

    if "unavailable" in report:
        pytest.skip(f"{tool} cannot isolate here: {report['unavailable']}")
    assert report["mechanism"] == tool
    assert str(report["address"]).startswith("unix:"), "no TCP port in the host's network"
    status = dict(line.split(":\t", 1) for line in str(report["status"]).splitlines())
    assert status["Uid"].split()[0] == str(SANDBOX_UID), "not uid 0 inside"
    for field in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
        assert int(status[field], 16) == 0, f"{field} is {status[field]}"
    assert status["NoNewPrivs"] == "1"
    if ctypes.util.find_library("seccomp"):
        assert status["Seccomp"] == "2", "a seccomp filter (libseccomp is installed here)"
    assert "rc=0" not in str(report["unshare"]), "no new namespaces from inside"
    # Finding 1: host write, host secrets, host loopback.
    assert "remounted" not in str(report["host_write"])
    assert "wrote" not in str(report["host_write"])
    assert sorted(p.name for p in host_dir.iterdir()) == ["marker"]
    assert (host_dir / "marker").read_text() == "host\n"
    # The sandbox's shadow files are empty; the host's would be closed by permissions.
    assert "root:" not in str(report["shadow"])
    assert str(report["home"]).strip() == "", "/home is masked"
    assert "connected" not in str(report["loopback"]) and seen == []
    assert "connected" not in str(report["egress"]), "egress none: no route out"
    assert "wrote" not in str(report["proc_sys"])
    # Finding 2: the cgroups stay where the host put them, a sibling's limits untouched.
    assert "moved:" not in str(report["cgroup_escape"])
    for line in str(report["cgroup_escape"]).splitlines():
        controllers, path = line.split(":", 2)[1:]
        if controllers in ("pids", "memory") and report["cgroups"]:
            assert "/sandfleet-sbx-" in path, f"left its cgroup: {line}"
    assert "wrote:" not in str(report["sibling"])
    assert str(report["victim_forks"]).strip() == "ok"


@pytest.mark.parametrize("loopback_server", ["any"], indirect=True)
@pytest.mark.parametrize("as_user", [False, True], ids=["as-root", "as-user"])
def test_egress_all_reaches_the_network_but_not_the_hosts_loopback(
    as_user: bool,
    work_dir: Path,
    host_dir: Path,
    loopback_server: tuple[int, list[bytes]],
) -> None:
    tool = "unshare"  # egress "all" is refused with bubblewrap (network.py says why)
    if not as_user and os.geteuid() != 0:
        pytest.skip("the as-root variant needs root (CI runs as root)")
    if shutil.which("slirp4netns") is None:
        pytest.skip("egress 'all' needs slirp4netns (.ci/run installs it)")
    if as_user and not (os.path.exists(TUN) and os.stat(TUN).st_mode & 0o006):
        pytest.skip("/dev/net/tun is closed to users here: slirp4netns cannot run as one")
    port, seen = loopback_server
    host_ip = _host_address() or ""

    report = _attack(work_dir / "state", host_dir, port, tool, "all", host_ip, as_user=as_user)

    if "unavailable" in report:
        pytest.skip(f"{tool} cannot isolate here: {report['unavailable']}")
    assert "tap0\t00000000" in str(report["route"]), "a default route through slirp4netns"
    reached = str(report["reached"])
    assert "reached:127.0.0.1" not in reached and "reached:10.0.2.2" not in reached
    if host_ip:
        assert f"reached:{host_ip}" in reached, "the host's other addresses are the network"
        assert len(seen) == 1


async def test_the_host_limits_the_whole_sandbox_agent_included_and_delegates_only_its_subtree(
    tmp_path: Path,
) -> None:
    config = LocalSandboxConfig(
        state_dir=tmp_path / "state", max_processes=40, max_memory_bytes=512 * 1024**2
    )
    runtime = await launch_local_runtime(config)
    try:
        if not runtime.cgroups:
            pytest.skip("no writable cgroupfs here (root, or a delegated subtree)")
        agent_uid = os.stat(f"/proc/{runtime.agent_pid}").st_uid
        for directory in runtime.cgroups:
            assert str(runtime.agent_pid) in (
                directory / "cgroup.procs"
            ).read_text().split() or any(
                str(runtime.agent_pid) in p.read_text().split()
                for p in directory.glob("*/cgroup.procs")
            ), "the agent lives in the limited cgroup"
            assert directory.stat().st_uid == agent_uid, "delegated to the sandbox's host uid"
            for name, limit in (
                ("pids.max", 40 + AGENT_PROCESS_HEADROOM),
                ("memory.limit_in_bytes", 512 * 1024**2 + AGENT_MEMORY_HEADROOM),
                ("memory.max", 512 * 1024**2 + AGENT_MEMORY_HEADROOM),
            ):
                if (directory / name).exists():
                    assert int((directory / name).read_text()) == limit
                    assert (directory / name).stat().st_uid == os.geteuid(), "limits stay ours"
    finally:
        await runtime.close()


@pytest.mark.parametrize("loopback_server", ["any"], indirect=True)
def test_egress_internet_rejects_the_hosts_private_addresses_and_the_sandbox_cannot_undo_it(
    work_dir: Path,
    host_dir: Path,
    loopback_server: tuple[int, list[bytes]],
) -> None:
    """The cluster's `Internet` mode, locally: the same stack as `all`, with every private,
    link-local, CGNAT and loopback range rejected by a firewall in the sandbox's network
    namespace. This machine reaches no public address, so that side is not exercised here:
    only that the host's own address (reachable under `all`, see above) is not under
    `internet`, nor slirp4netns's gateway, nor the host's loopback, even after the sandbox
    tries to flush the rules."""
    if os.geteuid() != 0:
        pytest.skip("slirp4netns needs root here (/dev/net/tun is closed to users)")
    if shutil.which("slirp4netns") is None or shutil.which("iptables-restore") is None:
        pytest.skip("egress 'internet' needs slirp4netns and iptables (.ci/run installs them)")
    port, seen = loopback_server
    host_ip = _host_address() or ""
    if not host_ip:
        pytest.skip("no host address besides loopback to aim at")

    report = _attack(
        work_dir / "state", host_dir, port, "unshare", "internet", host_ip, as_user=False
    )

    if "unavailable" in report:
        pytest.skip(f"unshare cannot isolate here: {report['unavailable']}")
    assert "tap0\t00000000" in str(report["route"]), "a default route through slirp4netns"
    for key in ("reached", "reached_after_flush"):
        assert "reached:" not in str(report[key]), (key, report)
    assert "rc=0" not in str(report["flush"]) or "denied" in str(report["flush"]).lower()
    assert seen == []  # the host's server saw no connection
