"""The node's network on the host: the pod bridge, forwarding for it alone, and packet-filter
rules (ours, kube-proxy's, kube-router's) added at start and removed at stop."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.cluster.harness.layout import BRIDGE_ADDRESS, BRIDGE_NAME

CONTAINMENT_COMMENT = "sandfleet-test: pods reach nothing beyond this machine"
_CONTAINMENT_RULE = [
    "FORWARD", "-i", BRIDGE_NAME, "!", "-o", BRIDGE_NAME,
    "-m", "comment", "--comment", CONTAINMENT_COMMENT, "-j", "DROP",
]  # fmt: skip
_KUBE_PREFIX = "KUBE-"
"""Every chain kube-proxy and kube-router create, and every ipset kube-router creates."""
_TABLES = ("filter", "nat", "mangle")


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys/net/ipv4/conf") / BRIDGE_NAME / name


def create_bridge() -> None:
    """The pod bridge with the host's address on it (the CNI plugin is told not to add one),
    routing for packets that arrive on it, and the rule that keeps them on this machine.

    Forwarding is switched on for the bridge only (the per-interface flag of the receiving
    device decides), because a pod reaching a ClusterIP whose endpoint is another pod is
    routed by the host after kube-proxy's DNAT. The mangle-table rule drops anything
    forwarded from the bridge to another interface before any filter chain (kube-proxy's or
    kube-router's ACCEPTs) sees it.
    """
    if _run("ip", "link", "show", BRIDGE_NAME, check=False).returncode != 0:
        _run("ip", "link", "add", BRIDGE_NAME, "type", "bridge")
    _run("ip", "addr", "replace", BRIDGE_ADDRESS, "dev", BRIDGE_NAME)
    _run("ip", "link", "set", BRIDGE_NAME, "up")
    if _run("iptables", "-w", "-t", "mangle", "-C", *_CONTAINMENT_RULE, check=False).returncode:
        _run("iptables", "-w", "-t", "mangle", "-I", *_CONTAINMENT_RULE)
    # A redirect would tell a pod to skip the host for a peer it already reaches directly.
    _sysctl_path("send_redirects").write_text("0")
    _sysctl_path("forwarding").write_text("1")


def delete_bridge() -> None:
    _run("ip", "link", "delete", BRIDGE_NAME, check=False)


def _is_ours(rule: str) -> bool:
    """An iptables-save `-A` line of a KUBE-* chain, jumping to one, or our containment rule."""
    words = rule.split()
    if words[1].startswith(_KUBE_PREFIX) or CONTAINMENT_COMMENT in rule:
        return True
    targets = [words[i + 1] for i, word in enumerate(words[:-1]) if word in ("-j", "-g")]
    return any(target.startswith(_KUBE_PREFIX) for target in targets)


def without_cluster_rules(saved: str) -> str:
    """iptables-save output minus every KUBE-* chain, every rule in or jumping to one, and our
    containment rule; everything else (other users' rules) kept as it was."""
    kept = []
    for line in saved.splitlines():
        if line.startswith(":" + _KUBE_PREFIX):
            continue
        if line.startswith("-A ") and _is_ours(line):
            continue
        kept.append(line)
    return "\n".join(kept) + "\n"


def remove_cluster_rules() -> list[str]:
    """Undo what kube-proxy, kube-router and create_bridge added to the host's packet filter
    (IPv4 and IPv6 tables, then kube-router's ipsets); returns what could not be undone.

    Run after those processes stopped. The tables are rewritten only when something of ours
    is in them, with every other rule as it was.
    """
    problems = []
    for family in ("iptables", "ip6tables"):
        for table in _TABLES:
            saved = _run(f"{family}-save", "-t", table, check=False)
            if saved.returncode != 0:
                continue  # the table does not exist in this kernel (or the tool is absent)
            cleaned = without_cluster_rules(saved.stdout)
            if cleaned.split() == saved.stdout.split():
                continue
            restored = subprocess.run(
                [f"{family}-restore", "-w"],
                input=cleaned,
                capture_output=True,
                text=True,
                check=False,
            )
            if restored.returncode != 0:
                problems.append(f"{family} {table}: {restored.stderr.strip()}")
    listed = _run("ipset", "list", "-n", check=False)
    for name in listed.stdout.split() if listed.returncode == 0 else []:
        if name.startswith(_KUBE_PREFIX):
            destroyed = _run("ipset", "destroy", name, check=False)
            if destroyed.returncode != 0:
                problems.append(f"ipset {name}: {destroyed.stderr.strip()}")
    return problems


def chain_exists(chain: str, table: str = "filter") -> bool:
    """Whether an IPv4 chain exists: how kube-router's first policy sync is seen."""
    return _run("iptables", "-w", "-t", table, "-S", chain, check=False).returncode == 0
