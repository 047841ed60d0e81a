"""Authenticator against a stand-in API server on 127.0.0.1 (tests/support/gateway_api.py:
the real API server's behaviour is covered by the cluster tier): reviews, caches, single
flight, messages, and an API server that does not answer."""

from __future__ import annotations

import asyncio
import hashlib
import socket
from collections.abc import AsyncIterator, Callable

import pytest

from sandfleet.gateway.auth import (
    ACCESS_REVIEWS,
    TOKEN_REVIEWS,
    Authenticator,
    AuthUnavailableError,
    Caller,
    PermissionDeniedError,
    UnauthenticatedError,
    bearer_token,
)
from sandfleet.kube import KubeClient, KubeConfig
from tests.support.gateway_api import GATEWAY_SA_TOKEN, StandInApiServer, running_api

pytestmark = pytest.mark.integration

TRAINER = "system:serviceaccount:rl:trainer"


@pytest.fixture
async def api() -> AsyncIterator[tuple[StandInApiServer, KubeClient]]:
    async with running_api() as started:
        started[0].accept("good-token", TRAINER, ("system:serviceaccounts", "rl"))
        started[0].expired.add("old-token")
        started[0].allow(TRAINER, "create", "team-a")
        yield started


async def test_an_accepted_token_gives_the_caller_and_is_reviewed_as_the_gateway(
    api: tuple[StandInApiServer, KubeClient],
) -> None:
    server, kube = api
    caller = await Authenticator(kube).authenticate("good-token")
    assert caller == Caller(TRAINER, f"uid-{TRAINER}", ("system:serviceaccounts", "rl"))
    assert server.reviews[0]["spec"] == {"token": "good-token"}
    assert server.caller_tokens == [f"Bearer {GATEWAY_SA_TOKEN}"]


@pytest.mark.parametrize("token", ["old-token", "made-up-token"])
async def test_an_expired_or_wrong_token_is_refused_with_a_plain_message(
    api: tuple[StandInApiServer, KubeClient], token: str
) -> None:
    _, kube = api
    with pytest.raises(UnauthenticatedError) as refused:
        await Authenticator(kube).authenticate(token)
    assert str(refused.value) == (
        "the token was not accepted by the Kubernetes API server (expired or wrong)"
    )


async def test_accepted_tokens_are_cached_by_digest_for_their_ttl(
    api: tuple[StandInApiServer, KubeClient],
) -> None:
    server, kube = api
    auth = Authenticator(kube, token_ttl_s=0.3)
    for _ in range(5):
        await auth.authenticate("good-token")
    assert server.count("POST", TOKEN_REVIEWS) == 1
    assert list(auth._accepted) == [hashlib.sha256(b"good-token").digest()]
    await asyncio.sleep(0.4)
    await auth.authenticate("good-token")
    assert server.count("POST", TOKEN_REVIEWS) == 2


async def test_refused_tokens_are_cached_briefly_then_asked_again(
    api: tuple[StandInApiServer, KubeClient],
) -> None:
    server, kube = api
    auth = Authenticator(kube, negative_ttl_s=0.3)
    for _ in range(3):
        with pytest.raises(UnauthenticatedError):
            await auth.authenticate("new-token")
    assert server.count("POST", TOKEN_REVIEWS) == 1
    server.accept("new-token", "alice")  # e.g. a token minted a moment after its first use
    await asyncio.sleep(0.4)
    assert (await auth.authenticate("new-token")).username == "alice"
    assert server.count("POST", TOKEN_REVIEWS) == 2


async def test_concurrent_lookups_of_one_token_share_one_review(
    api: tuple[StandInApiServer, KubeClient],
) -> None:
    server, kube = api
    server.review_delay_s = 0.2
    auth = Authenticator(kube)
    callers = await asyncio.gather(*(auth.authenticate("good-token") for _ in range(20)))
    assert {c.username for c in callers} == {TRAINER}
    assert server.count("POST", TOKEN_REVIEWS) == 1


async def test_rbac_allows_in_its_namespace_and_names_the_denial_elsewhere(
    api: tuple[StandInApiServer, KubeClient],
) -> None:
    server, kube = api
    auth = Authenticator(kube)
    caller = await auth.authenticate("good-token")
    await auth.authorize(caller, "create", "team-a")
    review = server.reviews[-1]["spec"]
    assert review["resourceAttributes"] == {
        "group": "sandfleet.dev",
        "resource": "sandboxsessions",
        "verb": "create",
        "namespace": "team-a",
    }
    assert review["user"] == TRAINER
    assert review["groups"] == ["system:serviceaccounts", "rl"]
    with pytest.raises(PermissionDeniedError) as denied:
        await auth.authorize(caller, "create", "team-b")
    assert str(denied.value) == (
        "user system:serviceaccount:rl:trainer may not create sandboxsessions in namespace team-b"
    )
    with pytest.raises(
        PermissionDeniedError, match="may not delete sandboxsessions in namespace team-a"
    ):
        await auth.authorize(caller, "delete", "team-a")


async def test_access_answers_are_cached_per_user_verb_and_namespace(
    api: tuple[StandInApiServer, KubeClient],
) -> None:
    server, kube = api
    auth = Authenticator(kube, access_ttl_s=0.3)
    caller = await auth.authenticate("good-token")
    for _ in range(4):
        await auth.authorize(caller, "create", "team-a")
        with pytest.raises(PermissionDeniedError):
            await auth.authorize(caller, "create", "team-b")
    assert server.count("POST", ACCESS_REVIEWS) == 2
    server.allow(TRAINER, "create", "team-b")
    await asyncio.sleep(0.4)
    await auth.authorize(caller, "create", "team-b")
    assert server.count("POST", ACCESS_REVIEWS) == 3


async def test_an_api_server_that_does_not_answer_is_unavailable_not_a_refusal() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with KubeClient(KubeConfig(server=f"http://127.0.0.1:{port}"), timeout_s=2) as kube:
        auth = Authenticator(kube)
        with pytest.raises(AuthUnavailableError, match="does not answer"):
            await auth.authenticate("good-token")
        # Not cached as a refusal: the same token is asked again.
        with pytest.raises(AuthUnavailableError):
            await auth.authenticate("good-token")
        assert len(auth._refused) == 0


@pytest.mark.parametrize(
    ("metadata", "token"),
    [
        ((("authorization", "Bearer abc"),), "abc"),
        ((("x-other", "1"), ("authorization", "bearer  abc ")), "abc"),
    ],
)
def test_bearer_token_from_metadata(metadata: tuple[tuple[str, str], ...], token: str) -> None:
    assert bearer_token(metadata) == token


@pytest.mark.parametrize("metadata", [(), (("authorization", "Basic abc"),), None])
def test_no_bearer_token_is_unauthenticated(metadata: object) -> None:
    with pytest.raises(UnauthenticatedError, match="no bearer token"):
        bearer_token(metadata)


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _until(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not predicate():  # noqa: ASYNC110 - polls the background reviews' effect
            await asyncio.sleep(0.01)


async def test_refresh_ahead_renews_answers_in_the_background_and_drops_a_revoked_token(
    api: tuple[StandInApiServer, KubeClient],
) -> None:
    server, kube = api
    clock = ManualClock()
    auth = Authenticator(kube, token_ttl_s=10, access_ttl_s=10, refresh_ahead=True, clock=clock)
    caller = await auth.authenticate("good-token")
    await auth.authorize(caller, "create", "team-a")
    clock.now += 4  # first half of the TTL: used as it is
    await auth.authenticate("good-token")
    await auth.authorize(caller, "create", "team-a")
    assert (server.count("POST", TOKEN_REVIEWS), server.count("POST", ACCESS_REVIEWS)) == (1, 1)

    clock.now += 2  # second half: answered from the cache, asked again beside it
    assert await auth.authenticate("good-token") == caller
    await auth.authorize(caller, "create", "team-a")
    await _until(lambda: server.count("POST", ACCESS_REVIEWS) == 2)
    await _until(lambda: server.count("POST", TOKEN_REVIEWS) == 2)
    clock.now += 8  # past the first answers' TTL: the renewed ones answer (and renew again)
    assert await auth.authenticate("good-token") == caller
    await auth.authorize(caller, "create", "team-a")
    await _until(lambda: server.count("POST", TOKEN_REVIEWS) == 3)
    await _until(lambda: server.count("POST", ACCESS_REVIEWS) == 3)

    del server.users["good-token"]  # revoked: the next renewal is refused and forgets it
    clock.now += 6
    assert await auth.authenticate("good-token") == caller  # its answer's TTL still runs
    await _until(lambda: hashlib.sha256(b"good-token").digest() not in auth._accepted)
    with pytest.raises(UnauthenticatedError):
        await auth.authenticate("good-token")
    await auth.close()
