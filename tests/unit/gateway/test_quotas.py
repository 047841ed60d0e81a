"""Quotas: limits and their sources, reservations around a claim, the refusal's message."""

from __future__ import annotations

import collections

import pytest

from sandfleet.gateway.quotas import QuotaExceeded, Quotas


def quotas(default: int = 3, **overrides: int) -> tuple[Quotas, collections.Counter[str]]:
    sessions: collections.Counter[str] = collections.Counter()
    return Quotas(default, overrides, lambda ns: sessions[ns]), sessions


def test_limits_and_their_sources() -> None:
    q, _ = quotas(3, team_b=7)
    assert q.limit("team-a") == (3, "the gateway's default quota (quota_default)")
    assert q.limit("team_b") == (7, "the gateway's quota for team_b (quotas)")


def test_a_reservation_counts_until_its_block_ends() -> None:
    q, sessions = quotas(3)
    sessions["team-a"] = 1
    with q.reserve("team-a", 2):
        assert q.in_use("team-a") == 3
        with pytest.raises(QuotaExceeded) as refused, q.reserve("team-a", 1):
            pass
    assert str(refused.value) == (
        "namespace team-a has 3 of its 3 sessions and asks for another (the gateway's default "
        "quota (quota_default)); release some or raise the limit"
    )
    assert q.in_use("team-a") == 1
    with q.reserve("team-a", 2):
        pass


def test_a_failed_claim_gives_its_reservation_back() -> None:
    q, _ = quotas(2)
    with pytest.raises(RuntimeError), q.reserve("team-a", 2):
        raise RuntimeError("claim failed")
    assert q.in_use("team-a") == 0


def test_zero_means_unlimited() -> None:
    q, sessions = quotas(0)
    sessions["team-a"] = 10_000
    with q.reserve("team-a", 100):
        assert q.in_use("team-a") == 10_100
