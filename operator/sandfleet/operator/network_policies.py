"""Pure builders of sandbox NetworkPolicies: ingress from the operator and gateway, egress by mode.

A sandbox runs whatever a model writes, so by default it reaches nothing (egress None);
`Internet` opens public addresses but never the cluster, the node network or cloud metadata,
and port 53 only towards the cluster's resolver.
A pool's policy covers all its pods, idle and claimed; a session's policy only adds to it
(NetworkPolicies are additive), so a claim never switches policies under a live channel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sandfleet.api import RUNTIME_PORT, Component, EgressMode, Label
from sandfleet.api.egress import PRIVATE_IPV4_RANGES, PRIVATE_IPV6_RANGES
from sandfleet.fleet.naming import label_value, network_policy_name, pool_network_policy_name
from sandfleet.fleet.resources import (
    ObjectRef,
    PlatformDefaults,
    common_labels,
    object_metadata,
)


def _from_control_plane(defaults: PlatformDefaults) -> list[dict[str, Any]]:
    """Ingress rules: the runtime port, from the operator's and the gateway's pods only."""
    namespace = {"matchLabels": {"kubernetes.io/metadata.name": defaults.operator_namespace}}
    return [
        {
            "from": [
                {"namespaceSelector": namespace, "podSelector": {"matchLabels": dict(labels)}}
                for labels in (defaults.operator_pod_labels, defaults.gateway_pod_labels)
            ],
            "ports": [{"protocol": "TCP", "port": RUNTIME_PORT}],
        }
    ]


_DNS_PORTS = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]


def _to_resolver(defaults: PlatformDefaults) -> dict[str, Any]:
    """Port 53 to the cluster's resolver and nowhere else (not any private address: a
    listener on port 53 of the node or of another pod would be reachable).

    The resolver is named by its pods, not its Service's ClusterIP: policy engines see a
    connection after kube-proxy's DNAT, so the destination is a resolver pod's address.
    """
    namespace = {"matchLabels": {"kubernetes.io/metadata.name": defaults.dns_namespace}}
    peers: list[dict[str, Any]] = [
        {
            "namespaceSelector": namespace,
            "podSelector": {"matchLabels": dict(defaults.dns_pod_labels)},
        }
    ]
    peers += [{"ipBlock": {"cidr": cidr}} for cidr in defaults.dns_cidrs]
    return {"to": peers, "ports": [dict(port) for port in _DNS_PORTS]}


def egress_rules(egress: EgressMode, defaults: PlatformDefaults) -> list[dict[str, Any]]:
    """NetworkPolicy egress rules for a mode: [] denies all, [{}] allows all."""
    if egress is EgressMode.NONE:
        return []
    if egress is EgressMode.ALL:
        return [{}]
    return [
        {
            "to": [
                {"ipBlock": {"cidr": "0.0.0.0/0", "except": list(PRIVATE_IPV4_RANGES)}},
                {"ipBlock": {"cidr": "::/0", "except": list(PRIVATE_IPV6_RANGES)}},
            ]
        },
        # Names must resolve, and the resolver sits at a private address.
        _to_resolver(defaults),
    ]


def _network_policy(
    owner: ObjectRef,
    *,
    name: str,
    selector: Mapping[str, str],
    egress: list[dict[str, Any]],
    defaults: PlatformDefaults,
    labels: Mapping[str, str],
) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_metadata(
            owner, {**common_labels(Component.NETWORK_POLICY), **labels}, name=name
        ),
        "spec": {
            "podSelector": {"matchLabels": dict(selector)},
            # Both types listed, so an empty egress list means "deny all", not "no opinion".
            "policyTypes": ["Ingress", "Egress"],
            "ingress": _from_control_plane(defaults),
            "egress": egress,
        },
    }


def session_network_policy(
    session: ObjectRef, egress: EgressMode, defaults: PlatformDefaults
) -> dict[str, Any]:
    """The NetworkPolicy of a session's pod (cold, or claimed from a pool)."""
    session_label = {Label.SESSION.value: label_value(session.name)}
    return _network_policy(
        session,
        name=network_policy_name(session.name),
        selector=session_label,
        egress=egress_rules(egress, defaults),
        defaults=defaults,
        labels=session_label,
    )


def pool_network_policy(pool: ObjectRef, defaults: PlatformDefaults) -> dict[str, Any]:
    """The NetworkPolicy of all a pool's pods: reachable by the operator and the gateway,
    reaching nothing.

    It selects idle and claimed pods alike (the pool label stays on a claimed pod): a claim
    changes no policy, so a pod is never unprotected and an open channel to it never stalls
    while the node's firewall is rewritten. The session's own policy adds its egress.
    """
    pool_label = {Label.POOL.value: label_value(pool.name)}
    return _network_policy(
        pool,
        name=pool_network_policy_name(pool.name),
        selector=pool_label,
        egress=egress_rules(EgressMode.NONE, defaults),
        defaults=defaults,
        labels=pool_label,
    )
