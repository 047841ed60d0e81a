"""The claim path's pure parts: session names, file paths, which pods are claimable."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from typing import Any

import pytest

from sandfleet.api import EgressMode, LifecycleSpec
from sandfleet.fleet.naming import is_dns_label
from sandfleet.fleet.pod_index import pool_of, runtime_address
from sandfleet.gateway.claim_ids import claim_session_names
from sandfleet.gateway.claim_types import ClaimSpec
from sandfleet.gateway.claims import sandbox_path, session_name
from sandfleet.gateway.idle_pods import claimable
from sandfleet.gateway.warm_claims import StepTimes


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


def idempotent(**changes: Any) -> ClaimSpec:
    spec = ClaimSpec(
        namespace="team-a", pool="py", template=None, count=3, env={}, files=[],
        lifecycle=LifecycleSpec(), generate_name="rl-", egress=EgressMode.NONE, timeout_s=60,
        caller="system:serviceaccount:team-a:trainer", claim_id="batch-7",
    )  # fmt: skip
    return dataclasses.replace(spec, **changes)


def test_an_idempotent_claims_names_are_the_same_on_a_retry_and_differ_per_sandbox() -> None:
    names = claim_session_names(idempotent())
    assert names == claim_session_names(idempotent())  # the retry finds them
    assert len(set(names)) == 3
    assert all(re.fullmatch(r"rl-[a-z0-9]{10}", n) and is_dns_label(n) for n in names)


def test_another_caller_namespace_or_id_gets_other_names() -> None:
    names = set(claim_session_names(idempotent()))
    for other in (
        idempotent(caller="system:serviceaccount:team-b:trainer"),
        idempotent(namespace="team-b"),
        idempotent(claim_id="batch-8"),
    ):
        assert names.isdisjoint(claim_session_names(other))


def test_a_long_prefix_still_gives_a_valid_name() -> None:
    (name,) = claim_session_names(idempotent(count=1, generate_name="p" * 58))
    assert len(name) == 63 and is_dns_label(name)


async def test_step_times_record_overlapping_steps_and_the_total() -> None:
    steps = StepTimes()

    await asyncio.gather(
        steps.timed("bind", asyncio.sleep(0.02)), steps.timed("create", asyncio.sleep(0))
    )
    steps.since_start("total")

    assert set(steps.ms) == {"bind", "create", "total"}
    assert steps.ms["bind"] >= 15  # slept 20 ms (the loop may wake a clock tick early)
    assert steps.ms["total"] >= steps.ms["bind"]


async def test_a_failed_step_raises_and_records_no_time() -> None:
    async def fails() -> None:
        raise RuntimeError("boom")

    steps = StepTimes()
    with pytest.raises(RuntimeError):
        await steps.timed("create", fails())
    assert steps.ms == {}
