"""The SDK repeats a claim that has a claim id while its answer is lost, and only then.

A scripted GatewayService answers on cue (tests/support/scripted_gateway_service.py): the
real gateway cannot be made to let a deadline pass on demand. The claim path's own handling
of a repeated id (same sessions back, a racing retry, a cut-short attempt) runs on the real
cluster: tests/cluster/gateway/test_rl_envs.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from sandfleet.backends import gateway as gateway_backend
from sandfleet.errors import GatewayStartError
from sandfleet.sandbox.facade import Sandbox
from tests.support.scripted_gateway_service import Failure, ScriptedGatewayService

pytestmark = pytest.mark.integration


@pytest.fixture
async def scripted(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ScriptedGatewayService]:
    monkeypatch.setattr(gateway_backend, "CLAIM_RETRY_DELAY_S", 0.01)
    service = ScriptedGatewayService()
    await service.start()
    yield service
    await service.stop()


def claims(service: ScriptedGatewayService) -> list[str]:
    return [request.claim_id for method, request, _ in service.calls if method == "Claim"]


async def test_a_claim_with_an_id_is_repeated_with_that_id_while_its_answer_is_lost(
    scripted: ScriptedGatewayService,
) -> None:
    scripted.failures["Claim"] = Failure(grpc.StatusCode.DEADLINE_EXCEEDED, "lost", times=2)
    (sandbox,) = await Sandbox.on_cluster_many(
        1, "team-a", gateway=scripted.address, token="t", claim_id="batch-9"
    )
    await sandbox.close()
    assert claims(scripted) == ["batch-9"] * 3


async def test_it_gives_up_after_three_attempts(scripted: ScriptedGatewayService) -> None:
    scripted.failures["Claim"] = Failure(grpc.StatusCode.DEADLINE_EXCEEDED, "lost", times=5)
    with pytest.raises(GatewayStartError, match="lost"):
        await Sandbox.on_cluster_many(
            1, "team-a", gateway=scripted.address, token="t", claim_id="b"
        )
    assert claims(scripted) == ["b"] * 3


@pytest.mark.parametrize(
    ("claim_id", "code"),
    [
        (None, grpc.StatusCode.DEADLINE_EXCEEDED),  # no id: a repeat could claim twice
        ("batch-1", grpc.StatusCode.UNAVAILABLE),  # the gateway's own answer: nothing lost
    ],
    ids=["without-an-id", "an-answered-failure"],
)
async def test_a_claim_is_not_repeated_without_an_id_or_after_an_answer(
    scripted: ScriptedGatewayService, claim_id: str | None, code: grpc.StatusCode
) -> None:
    scripted.failures["Claim"] = Failure(code, "no sandbox in time")
    with pytest.raises(GatewayStartError, match="no sandbox in time"):
        await Sandbox.on_cluster_many(
            1, "team-a", gateway=scripted.address, token="t", claim_id=claim_id
        )
    assert claims(scripted) == [claim_id or ""]
