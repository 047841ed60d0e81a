"""The quota ledger's concurrency: replicas that reserve at once take turns through the
resourceVersion precondition, a refused claim writes nothing, a failed claim's reservation
goes at once and an old one expires. Against the stand-in API server
(tests/support/gateway_api.py); the cluster tier races real gateway replicas against the real
API server (tests/cluster/gateway/test_attack_quota_race.py)."""

from __future__ import annotations

import asyncio

import pytest

from sandfleet.errors import QuotaExceededError
from sandfleet.gateway.quota_ledger import QuotaLedger
from sandfleet.gateway.quotas import Quotas
from tests.support.gateway_api import running_api

pytestmark = pytest.mark.integration

LIMIT = 4


async def test_replicas_claiming_at_once_never_reserve_more_than_the_limit() -> None:
    async with running_api() as (api, kube):
        now = [1000.0]
        replicas = [
            Quotas(
                0,
                {"team-a": LIMIT},
                lambda ns: 0,  # no session created yet: only the ledger can tell
                ledger=QuotaLedger(kube, "gw", f"gw-{i}", hold_s=15, clock=lambda: now[0]),
            )
            for i in range(2)
        ]
        claims = 6  # 12 sessions asked for, 4 allowed
        tried: list[int] = []
        all_tried = asyncio.Event()

        def one_more(index: int) -> None:
            tried.append(index)
            if len(tried) == claims:
                all_tried.set()

        async def claim(quotas: Quotas, index: int) -> bool:
            try:
                async with quotas.reserve("team-a", [f"s{index}-a", f"s{index}-b"]):
                    one_more(index)
                    await all_tried.wait()  # every claim stays in flight until all have tried
            except QuotaExceededError as refused:
                one_more(index)
                assert f"of its {LIMIT} sessions and asks for 2 more" in str(refused)
                return False
            return True

        tasks = [asyncio.create_task(claim(replicas[i % 2], i)) for i in range(claims)]
        granted = await asyncio.gather(*tasks)
        assert sum(granted) == LIMIT // 2
        assert api.lease_conflicts >= 1, "the replicas did race"
        assert ("POST", "/apis/coordination.k8s.io/v1/namespaces/gw/leases") in api.requests

        # Both claims worked: their reservations count until they expire (the sessions will
        # be in every watch by then).
        for quotas in replicas:
            with pytest.raises(QuotaExceededError):
                async with quotas.reserve("team-a", ["late"]):
                    pass
        now[0] += 16
        async with replicas[0].reserve("team-a", ["later"]):
            pass


async def test_a_failed_claim_gives_its_places_back_at_once() -> None:
    async with running_api() as (_api, kube):
        ledgers = [QuotaLedger(kube, "gw", f"gw-{i}", hold_s=15) for i in range(2)]
        a, b = (Quotas(0, {"team-a": 2}, lambda ns: 0, ledger=ledger) for ledger in ledgers)
        with pytest.raises(RuntimeError):
            async with a.reserve("team-a", ["x", "y"]):
                raise RuntimeError("the claim failed")
        async with b.reserve("team-a", ["z", "w"]):
            pass
