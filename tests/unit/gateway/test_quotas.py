"""Quotas: limits and their sources, reservations around a claim, the refusal's message.
(The quota ledger shared by replicas is tested against the real API server:
tests/cluster/gateway/test_attack_quota_race.py.)"""

from __future__ import annotations

import collections

import pytest

from sandfleet.errors import QuotaExceededError
from sandfleet.gateway.quotas import Quotas


def quotas(
    default: int = 3, known: set[str] | None = None, **overrides: int
) -> tuple[Quotas, collections.Counter[str]]:
    sessions: collections.Counter[str] = collections.Counter()
    seen = known if known is not None else set()
    return Quotas(
        default, overrides, lambda ns: sessions[ns], known=lambda ns, name: name in seen
    ), sessions


def test_limits_and_their_sources() -> None:
    q, _ = quotas(3, team_b=7)
    assert q.limit("team-a") == (3, "the gateway's default quota (quota_default)")
    assert q.limit("team_b") == (7, "the gateway's quota for team_b (quotas)")


async def test_a_reservation_counts_until_its_block_ends() -> None:
    q, sessions = quotas(3)
    sessions["team-a"] = 1
    async with q.reserve("team-a", ["a", "b"]):
        assert q.in_use("team-a") == 3
        with pytest.raises(QuotaExceededError) as refused:
            async with q.reserve("team-a", ["c"]):
                pass
    assert str(refused.value) == (
        "namespace team-a has 3 of its 3 sessions and asks for another (the gateway's default "
        "quota (quota_default)); release some or raise the limit"
    )
    assert q.in_use("team-a") == 1
    async with q.reserve("team-a", ["d", "e"]):
        pass


async def test_a_failed_claim_gives_its_reservation_back() -> None:
    q, _ = quotas(2)
    with pytest.raises(RuntimeError):
        async with q.reserve("team-a", ["a", "b"]):
            raise RuntimeError("claim failed")
    assert q.in_use("team-a") == 0


async def test_sessions_the_index_shows_are_not_counted_twice() -> None:
    # An idempotent claim's retry: its first attempt's sessions exist (and count) already.
    known = {"a"}
    q, sessions = quotas(2, known=known)
    sessions["team-a"] = 1
    async with q.reserve("team-a", ["a", "b"]):
        assert q.in_use("team-a") == 2
        known.add("b")
        sessions["team-a"] = 2  # the watch shows b now: still 2, not 3
        assert q.in_use("team-a") == 2


async def test_zero_means_unlimited() -> None:
    q, sessions = quotas(0)
    sessions["team-a"] = 10_000
    async with q.reserve("team-a", [f"s{i}" for i in range(100)]):
        assert q.in_use("team-a") == 10_000
