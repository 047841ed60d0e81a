"""The "internet" egress firewall of local sandboxes: what it lets through and what not."""

from __future__ import annotations

from sandfleet.api.egress import PRIVATE_IPV4_RANGES, PRIVATE_IPV6_RANGES
from sandfleet.backends.local.network import host_addresses, public_only_rules, public_only_rules_v6


def test_every_range_the_cluster_leaves_out_is_rejected_and_so_are_the_hosts_addresses() -> None:
    rules = public_only_rules(["192.0.2.2", "203.0.113.9"]).splitlines()
    rejected = [line.split()[3] for line in rules if "-j REJECT" in line]
    assert set(PRIVATE_IPV4_RANGES) <= set(rejected)
    assert {"192.0.2.2/32", "203.0.113.9/32", "169.254.0.0/16", "224.0.0.0/4"} <= set(rejected)
    # slirp4netns's DNS forwarder sits in a private range: allowed before the rejections.
    dns = [i for i, line in enumerate(rules) if "10.0.2.3/32" in line and "ACCEPT" in line]
    first_reject = min(i for i, line in enumerate(rules) if "REJECT" in line)
    assert len(dns) == 2 and max(dns) < first_reject
    # Issue 26, item 6 (the cluster's Internet mode opened port 53 to any address): here
    # nothing but loopback and that forwarder is accepted, so port 53 of the host or of any
    # private address is rejected like every other port.
    accepted = [line for line in rules if "-j ACCEPT" in line]
    assert accepted == ["-A OUTPUT -o lo -j ACCEPT", *(rules[i] for i in dns)]
    assert rules[0] == "*filter" and "COMMIT" in rules


def test_ipv6_rejects_unique_local_link_local_loopback_and_the_hosts_addresses() -> None:
    rules = public_only_rules_v6(["2001:db8::1"])
    for cidr in (*PRIVATE_IPV6_RANGES, "::1/128", "2001:db8::1/128"):
        assert f"-d {cidr} -j REJECT" in rules


def test_the_hosts_addresses_include_loopback() -> None:
    v4, _ = host_addresses()
    assert "127.0.0.1" in v4
