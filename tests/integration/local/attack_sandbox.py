"""Attacks from inside two local sandboxes, as a model's code would try them; prints a JSON
report for test_isolation_attacks.py. Each attack is bounded (timeouts; writes only aimed at
the given host dir). Usage: python attack_sandbox.py STATE_DIR HOST_DIR LOOPBACK_PORT TOOL
[EGRESS [HOST_IP]] (TOOL: unshare or bwrap; prints {"unavailable": why} when it cannot run
here; EGRESS "all": report what the network reaches instead of running the attacks)."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path

from sandfleet.backends.local import LocalRuntime, LocalSandboxConfig, launch_local_runtime
from sandfleet.backends.local.isolation import probe
from sandfleet.clients.runtime.client import RuntimeClient

STATUS = "grep -E '^(Uid|Cap(Eff|Prm|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status"
ROOT_CGROUPS = (
    "for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/*/cgroup.procs; do"
    ' [ -e "$f" ] && echo $$ 2>/dev/null > "$f" && echo "moved:$f"; done; cat /proc/self/cgroup'
)


def remount_and_write(host_dir: str) -> str:
    parent = str(Path(host_dir).parent)
    target = shlex.quote(f"{host_dir}/written-from-sandbox")
    return (
        f"for m in / {shlex.quote(parent)} {shlex.quote(host_dir)}; do"
        ' mount -o remount,bind,rw "$m" 2>/dev/null && echo "remounted:$m"; done;'
        f" unshare -Urm sh -c 'mount -o remount,bind,rw {shlex.quote(parent)} && echo hacked"
        f" > {target}' 2>/dev/null; echo hacked > {target} 2>/dev/null && echo wrote; true"
    )


def sibling_limits(cgroups: tuple[Path, ...]) -> str:
    """Lower another sandbox's limits, or change our own outer ones, from inside."""
    files = [str(c / "pids.max") for c in cgroups] + ["/sys/fs/cgroup/pids/pids.max"]
    return (
        "; ".join(
            f"[ -e {shlex.quote(f)} ] && echo 1 2>/dev/null > {shlex.quote(f)} && echo wrote:{f}"
            for f in files
        )
        + "; true"
    )


async def run(client: RuntimeClient, command: str) -> str:
    result = await client.run_command(command, timeout_s=20)
    return result.stdout


def reach(address: str, port: int) -> str:
    return (
        f"timeout 3 bash -c 'echo hi > /dev/tcp/{address}/{port}' 2>/dev/null"
        f" && echo reached:{address}; true"
    )


async def network_report(
    state_dir: Path, port: int, tool: str, host_ip: str, egress: str = "all"
) -> None:
    unavailable = await probe(tool)  # type: ignore[arg-type]
    if unavailable:
        print(json.dumps({"unavailable": unavailable}), flush=True)
        return
    config = LocalSandboxConfig(
        state_dir=state_dir,
        isolation="namespaces",
        egress=egress,  # type: ignore[arg-type]
        namespace_tool=tool,  # type: ignore[arg-type]
    )
    runtime = await launch_local_runtime(config)
    client = RuntimeClient(runtime.address, runtime.token)
    try:
        checks = [reach("127.0.0.1", port), reach("10.0.2.2", port)]
        checks += [reach(host_ip, port)] if host_ip else []
        report = {
            "route": await run(client, "cat /proc/net/route"),
            "reached": await run(client, "; ".join(checks)),
        }
        if egress == "internet":  # the firewall is the namespace's; the sandbox has no say
            report["flush"] = await run(client, "iptables -F 2>&1; echo rc=$?")
            report["reached_after_flush"] = await run(client, "; ".join(checks))
    finally:
        await client.close()
        await runtime.close()
    print(json.dumps(report), flush=True)


async def main(state_dir: Path, host_dir: str, port: int, tool: str) -> None:
    unavailable = await probe(tool)  # type: ignore[arg-type]
    if unavailable:
        print(json.dumps({"unavailable": unavailable}), flush=True)
        return
    config = LocalSandboxConfig(
        state_dir=state_dir,
        max_processes=64,
        isolation="namespaces",
        namespace_tool=tool,  # type: ignore[arg-type]
    )
    runtimes: list[LocalRuntime] = []
    clients: list[RuntimeClient] = []
    try:
        for _ in range(2):
            runtimes.append(await launch_local_runtime(config))
            clients.append(RuntimeClient(runtimes[-1].address, runtimes[-1].token))
        attacker, victim = clients
        report = {
            "mechanism": runtimes[0].mechanism,
            "address": runtimes[0].address,
            "status": await run(attacker, STATUS),
            "unshare": await run(attacker, "unshare -U true 2>&1; echo rc=$?"),
            "shadow": await run(attacker, "cat /etc/shadow /etc/gshadow 2>&1 | head -3"),
            "home": await run(attacker, "ls -A /home 2>&1"),
            "host_write": await run(attacker, remount_and_write(host_dir)),
            "loopback": await run(
                attacker,
                f"timeout 3 bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' 2>&1 && echo connected;"
                " true",
            ),
            "egress": await run(
                attacker,
                # TEST-NET-1: no route exists, so nothing is sent anywhere.
                "timeout 3 bash -c 'echo > /dev/tcp/192.0.2.1/53' 2>&1 && echo connected;"
                " cat /proc/net/route | tail -n +2; true",
            ),
            "proc_sys": await run(
                attacker,
                "echo 1 2>&1 > /proc/sys/kernel/ns_last_pid && echo wrote; true",
            ),
            "cgroup_escape": await run(attacker, ROOT_CGROUPS),
            "sibling": await run(
                attacker, sibling_limits((*runtimes[1].cgroups, *runtimes[0].cgroups))
            ),
            "victim_forks": await run(victim, "for i in 1 2 3; do /bin/true; done; echo ok"),
            "cgroups": [str(c) for c in runtimes[0].cgroups],
            "victim_cgroups": [str(c) for c in runtimes[1].cgroups],
        }
    finally:
        for client in clients:
            await client.close()
        for runtime in runtimes:
            await runtime.close()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    if sys.argv[5:6] in (["all"], ["internet"]):
        host = sys.argv[6] if len(sys.argv) > 6 else ""
        asyncio.run(
            network_report(Path(sys.argv[1]), int(sys.argv[3]), sys.argv[4], host, sys.argv[5])
        )
    else:
        asyncio.run(main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]))
