"""Egress for a namespaced sandbox: none (loopback only), or a user-mode stack (slirp4netns),
whole ("all") or public addresses only ("internet").

A sandbox's network namespace starts with loopback alone: egress "none". For "all",
slirp4netns (a Debian package; the standard for unprivileged containers, e.g. rootless
Podman) gives it a tap device and NATs its connections through the host's sockets, as the
user who started it: no privilege, no host interface, no host firewall rule. Host loopback
stays unreachable (--disable-host-loopback), so services bound to the host's 127.0.0.1 do not
become reachable. Without root, slirp4netns needs /dev/net/tun open to users (mode 0666, the
usual). For "internet", the same stack behind a firewall in the sandbox's own network
namespace, loaded before the stack starts: every range the cluster's Internet mode leaves out
(sandfleet.api.egress: private, link-local/metadata, CGNAT, loopback) is rejected, except
slirp4netns's DNS forwarder. The sandbox has no capability over its namespace, so it cannot
change the rules.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path
from typing import BinaryIO

from sandfleet.api.egress import PRIVATE_IPV4_RANGES, PRIVATE_IPV6_RANGES
from sandfleet.backends.local.config import Egress
from sandfleet.errors import SandboxStartError
from sandfleet.logs import get_logger

log = get_logger(__name__)

_READY_TIMEOUT_S = 10.0
_SLIRP_DNS = "10.0.2.3"
"""slirp4netns's DNS forwarder, inside its 10.0.2.0/24 (a private range, so allowed by name)."""


def check_egress(egress: Egress, mechanism: str) -> None:
    """Refuse, before anything starts, what this machine or this version cannot give."""
    if egress == "none":
        return
    if mechanism == "bwrap":
        # bubblewrap's --disable-userns nests the agent one user namespace below the one that
        # owns the network namespace; slirp4netns would have to join bwrap's own child.
        raise SandboxStartError(
            f"egress '{egress}' needs the unshare mechanism (util-linux), not bubblewrap"
        )
    if shutil.which("slirp4netns") is None:
        raise SandboxStartError(
            f"egress '{egress}' needs slirp4netns (Debian/Ubuntu: apt-get install slirp4netns)"
        )
    if egress == "internet" and not all(map(shutil.which, ("nsenter", "iptables-restore"))):
        raise SandboxStartError(
            "egress 'internet' needs nsenter (util-linux) and iptables-restore "
            "(Debian/Ubuntu: apt-get install iptables) for its firewall"
        )


_SPECIAL_IPV4_RANGES = (
    "0.0.0.0/8",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
)
"""Not public either (IANA special-purpose: this network, documentation, benchmarking,
multicast, reserved). A cluster's nodes sit in the private ranges; a laptop or VM may sit in
one of these, or on a public address, hence also the host's own addresses (host_addresses)."""


def host_addresses() -> tuple[list[str], list[str]]:
    """The host's own IPv4 and IPv6 addresses (`ip -o addr`): "internet" rejects them too,
    whatever range they are in."""
    try:
        listing = subprocess.run(
            ["ip", "-o", "addr", "show"], capture_output=True, text=True, check=True, timeout=5
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return [], []
    v4: list[str] = []
    v6: list[str] = []
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[2] in ("inet", "inet6"):
            (v4 if fields[2] == "inet" else v6).append(fields[3].split("/")[0])
    return v4, v6


def _ruleset(accept: list[str], reject: list[str]) -> str:
    """One filter table for iptables-restore / ip6tables-restore."""
    lines = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]"]
    lines += ["-A OUTPUT -o lo -j ACCEPT", *accept, *reject, "COMMIT", ""]
    return "\n".join(lines)


def public_only_rules(host_ipv4: list[str]) -> str:
    """The "internet" firewall for IPv4: slirp4netns's DNS forwarder allowed, then every range
    that is not public, and the host's own addresses, rejected."""
    dns = [f"-A OUTPUT -d {_SLIRP_DNS}/32 -p {p} --dport 53 -j ACCEPT" for p in ("udp", "tcp")]
    ranges = (*PRIVATE_IPV4_RANGES, *_SPECIAL_IPV4_RANGES, *(f"{a}/32" for a in host_ipv4))
    reject = [f"-A OUTPUT -d {cidr} -j REJECT --reject-with icmp-net-prohibited" for cidr in ranges]
    return _ruleset(dns, reject)


def public_only_rules_v6(host_ipv6: list[str]) -> str:
    """The same for IPv6 (slirp4netns gives the sandbox no IPv6 route; in case one appears)."""
    ranges = (*PRIVATE_IPV6_RANGES, "::1/128", "ff00::/8", *(f"{a}/128" for a in host_ipv6))
    return _ruleset([], [f"-A OUTPUT -d {cidr} -j REJECT" for cidr in ranges])


async def _load_firewall(namespace_holder: int, *, join_user_namespace: bool) -> None:
    """Load the public-only rules into the sandbox's network namespace (before any route)."""
    enter = [shutil.which("nsenter") or "nsenter", "--target", str(namespace_holder), "--net"]
    if join_user_namespace:  # not root: the namespace's owner is our user namespace child
        enter.insert(3, "--user")
    host_ipv4, host_ipv6 = await asyncio.to_thread(host_addresses)
    for restore, rules in (("iptables-restore", public_only_rules(host_ipv4)),
                           ("ip6tables-restore", public_only_rules_v6(host_ipv6))):  # fmt: skip
        if restore == "ip6tables-restore" and shutil.which(restore) is None:
            continue
        process = await asyncio.create_subprocess_exec(
            *enter, restore,
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        _, errors = await process.communicate(rules.encode())
        if process.returncode != 0:
            raise SandboxStartError(
                f"could not load the 'internet' egress firewall ({restore}): "
                + errors.decode(errors="replace").strip()
            )


async def start_egress(
    namespace_holder: int, *, join_user_namespace: bool, log_path: Path, public_only: bool
) -> asyncio.subprocess.Process:
    """Start slirp4netns for the network namespace of host pid `namespace_holder` and wait
    until the sandbox has its interface and default route (its messages go to log_path).

    join_user_namespace: the namespace belongs to a user namespace of that process (we are
    not root), which slirp4netns must join to configure it.
    public_only: egress "internet": the firewall is loaded first, so no packet leaves before
    it holds."""
    if public_only:
        await _load_firewall(namespace_holder, join_user_namespace=join_user_namespace)
    ready_read, ready_write = os.pipe()
    proc_dir = f"/proc/{namespace_holder}/ns"
    argv = [shutil.which("slirp4netns") or "slirp4netns", "--configure", "--mtu=65520"]
    argv += ["--disable-host-loopback", "--enable-sandbox", "--ready-fd", str(ready_write)]
    if join_user_namespace:
        # The pid form: slirp4netns 1.2's sandbox raises its ids in the target's user
        # namespace only when it knows the pid; with --userns-path and a netns path it
        # tries that in ours and fails ("setegid(0)", "parent failed").
        argv += [str(namespace_holder), "tap0"]
    else:
        argv += ["--netns-type=path", f"{proc_dir}/net", "tap0"]
    ready_pipe = os.fdopen(ready_read, "rb", buffering=0)
    try:
        with log_path.open("ab") as log_file:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                pass_fds=(ready_write,),
                start_new_session=True,
            )
    except BaseException:
        ready_pipe.close()
        raise
    finally:
        os.close(ready_write)
    if await _ready(ready_pipe) != b"1":
        await stop_egress(process)
        raise SandboxStartError(f"slirp4netns could not give the sandbox a network ({log_path})")
    log.debug("sandbox_egress_started", pid=process.pid, holder=namespace_holder)
    return process


async def _ready(pipe: BinaryIO) -> bytes:
    """The byte slirp4netns writes once configured; b"" when it exits or times out first."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    try:
        async with asyncio.timeout(_READY_TIMEOUT_S):
            return await reader.read(1)
    except TimeoutError:
        return b""
    finally:
        transport.close()


async def stop_egress(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.kill()
    await process.wait()
