"""The claim path's pure parts: session names, file paths, which pods are claimable."""

from __future__ import annotations

import re
from typing import Any

from sandfleet.gateway.claims import sandbox_path, session_name
from sandfleet.gateway.idle_pods import claimable, pool_of, runtime_address
from sandfleet.operator.naming import is_dns_label


def test_a_session_name_is_the_prefix_and_five_random_characters() -> None:
    names = {session_name("swe-") for _ in range(200)}

    assert all(re.fullmatch(r"swe-[a-z0-9]{5}", n) for n in names)
    assert len(names) > 190  # random, not a counter
    assert is_dns_label(session_name(""))


def test_relative_file_paths_start_at_the_working_directory() -> None:
    assert sandbox_path("a/b.txt", "/testbed") == "/testbed/a/b.txt"
    assert sandbox_path("/etc/x", "/testbed") == "/etc/x"


def pod(state: str = "idle", ready: bool = True, ip: str | None = "10.244.0.9", **meta: Any) -> Any:
    return {
        "metadata": {
            "name": "warm-abcde",
            "labels": {"sandfleet.dev/pool": "warm", "sandfleet.dev/state": state},
            "ownerReferences": [{"kind": "SandboxPool", "name": "warm-pool-name"}],
            **meta,
        },
        "status": {
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_only_idle_ready_addressed_live_pool_pods_are_claimable() -> None:
    assert claimable(pod())
    assert not claimable(pod(state="claimed"))
    assert not claimable(pod(ready=False))
    assert not claimable(pod(ip=None))
    assert not claimable(pod(deletionTimestamp="2026-11-25T04:00:00Z"))
    assert not claimable(None)


def test_a_pods_pool_is_its_owner_and_its_address_the_runtime_port() -> None:
    assert pool_of(pod()) == "warm-pool-name"
    assert runtime_address("10.244.0.9") == "10.244.0.9:50051"
    assert runtime_address("fd00::9") == "[fd00::9]:50051"
