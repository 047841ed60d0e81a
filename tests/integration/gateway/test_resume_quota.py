"""A resume through the gateway is admitted by the namespace's session quota (issue #23): a
Suspended session does not count, its resume does, from the request until it is Ready.
The gateway's Resumer, Quotas and SessionRoutes are the real ones (the index fed by hand);
the patch goes to the stand-in API server (tests/support/gateway_api.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from sandfleet.errors import QuotaExceededError
from sandfleet.gateway.quotas import Quotas
from sandfleet.gateway.resume import Resumer
from sandfleet.gateway.routes import SessionRoutes
from tests.support.gateway_api import StandInApiServer, running_api, session_object

pytestmark = pytest.mark.integration

NS = "team-a"


class Gateway:
    def __init__(self, api: StandInApiServer, routes: SessionRoutes, quotas: Quotas) -> None:
        self.api = api
        self.routes = routes
        self.quotas = quotas

    def show(self, name: str, phase: str, pod_ip: str | None = None) -> None:
        """What the watch would bring: the session in the API and in the index."""
        body = session_object(NS, name, phase=phase, pod="pod-" + name, pod_ip=pod_ip)
        body["spec"] = {"suspend": phase == "Suspended"}
        self.api.sessions[(NS, name)] = body
        self.routes.apply("MODIFIED", body)

    def resumes_asked(self) -> list[str]:
        return [key[1] for key, patch in self.api.session_patches if patch == RESUME]


RESUME = {"spec": {"suspend": False}}


@contextlib.asynccontextmanager
async def gateway(limit: int) -> AsyncIterator[tuple[Gateway, Resumer]]:
    async with running_api() as (api, kube):
        routes = SessionRoutes(kube, (NS,), miss_wait_s=0)

        def counted(namespace: str, name: str) -> bool:
            route = routes.get(namespace, name)
            return route is not None and route.counted

        quotas = Quotas(limit, {}, routes.active, known=counted)
        resumer = Resumer(kube, routes, quotas, hold_s=30)
        try:
            yield Gateway(api, routes, quotas), resumer
        finally:
            await resumer.close()


async def test_a_suspended_session_does_not_count_and_its_resume_waits_for_room() -> None:
    async with gateway(limit=1) as (gw, resumer):
        gw.show("held", "Suspended")
        gw.show("running", "Ready", pod_ip="10.0.0.2")
        assert gw.quotas.in_use(NS) == 1  # "running" only
        with pytest.raises(QuotaExceededError, match="team-a has 1 of its 1 sessions"):
            await resumer.request(NS, "held")
        assert gw.resumes_asked() == []  # refused before anything was asked

        gw.show("running", "Expired")
        await resumer.request(NS, "held")
        assert gw.resumes_asked() == ["held"]
        # Until it is Ready the watch does not count it: the reservation does.
        assert gw.quotas.in_use(NS) == 1
        with pytest.raises(QuotaExceededError):
            async with gw.quotas.reserve(NS, ["claimed"]):
                pass
        gw.show("held", "Ready", pod_ip="10.0.0.3")
        assert gw.quotas.in_use(NS) == 1  # now counted by the index, and only once


async def test_concurrent_accesses_ask_once_and_share_one_reservation() -> None:
    async with gateway(limit=2) as (gw, resumer):
        gw.show("held", "Suspended")
        await asyncio.gather(*(resumer.request(NS, "held") for _ in range(5)))
        assert gw.resumes_asked() == ["held"]
        assert gw.quotas.in_use(NS) == 1


async def test_a_failed_request_is_every_callers_error_and_holds_nothing() -> None:
    async with gateway(limit=2) as (gw, resumer):
        gw.routes.apply("ADDED", session_object(NS, "ghost", phase="Suspended"))  # not in the API
        results = await asyncio.gather(
            *(resumer.request(NS, "ghost") for _ in range(3)), return_exceptions=True
        )
        assert all("not found" in str(r) for r in results), results
        assert gw.quotas.in_use(NS) == 0 and not resumer._tasks
