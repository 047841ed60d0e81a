"""Who is calling and what RBAC lets them do: cached TokenReviews and SubjectAccessReviews.

Shared by every sandfleet server that takes a caller's Kubernetes token (the gateway's gRPC
port, the operator's HTTP port): the API server decides, these caches keep the cost of
asking it to one review per token and per (caller, question) and TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from cachetools import TTLCache

from sandfleet.api.names import bearer_token_of
from sandfleet.errors import SandfleetError
from sandfleet.kube.client import KubeClient
from sandfleet.kube.errors import ForbiddenError, KubeConnectionError, KubeError
from sandfleet.logs import get_logger

log = get_logger(__name__)

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
REFUSED_TOKEN_MESSAGE = "the token was not accepted by the Kubernetes API server (expired or wrong)"
AUTHORIZATION = "Authorization"

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class Caller:
    """A Kubernetes identity, as the API server's TokenReview gave it."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """user.extra (e.g. the pod a service account token was bound to); SubjectAccessReviews
    pass it on, as some authorizers look at it."""


@dataclasses.dataclass(frozen=True, slots=True)
class ResourceAccess:
    """A question about an API resource: may the caller `verb` `resource` in `namespace`?"""

    verb: str
    group: str
    resource: str
    namespace: str

    def attributes(self) -> dict[str, Any]:
        return {
            "resourceAttributes": {
                "group": self.group,
                "resource": self.resource,
                "verb": self.verb,
                "namespace": self.namespace,
            }
        }

    def denial(self, username: str) -> str:
        return f"user {username} may not {self.verb} {self.resource} in namespace {self.namespace}"


@dataclasses.dataclass(frozen=True, slots=True)
class UrlAccess:
    """A question about a non-resource URL (as /metrics): may the caller `verb` `path`?"""

    verb: str
    path: str

    def attributes(self) -> dict[str, Any]:
        return {"nonResourceAttributes": {"path": self.path, "verb": self.verb}}

    def denial(self, username: str) -> str:
        return f"user {username} may not {self.verb} {self.path}"


Access = ResourceAccess | UrlAccess


class AuthError(SandfleetError):
    """Authentication or authorization failed; the message is for the caller."""


class UnauthenticatedError(AuthError):
    """No token, or one the API server does not accept."""


class PermissionDeniedError(AuthError):
    """RBAC does not allow the call."""


class AuthUnavailableError(AuthError):
    """The API server could not answer a review now (try again)."""


class _SingleFlight(Generic[T]):
    """Concurrent lookups of one key share one call: a burst of identical requests (a batch
    claim from one trainer) costs the API server one review, not hundreds."""

    def __init__(self) -> None:
        self._running: dict[Hashable, asyncio.Task[T]] = {}

    async def run(self, key: Hashable, call: Callable[[], Awaitable[T]]) -> T:
        task = self._running.get(key)
        if task is None:

            async def lookup() -> T:
                try:
                    return await call()
                finally:
                    self._running.pop(key, None)

            task = asyncio.ensure_future(lookup())
            self._running[key] = task
        # One caller giving up (its deadline) must not cancel the lookup the others await.
        return await asyncio.shield(task)


class _RefreshAhead:
    """When each cached answer was given (per cache kind), and the background reviews that
    renew the ones in the second half of their TTL; one at a time per key."""

    def __init__(
        self,
        ttls: Mapping[str, float],
        max_entries: int,
        *,
        enabled: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._enabled = enabled
        self._clock = clock
        self._ttls = dict(ttls)
        self._given: dict[str, TTLCache[Hashable, float]] = {
            kind: TTLCache(max_entries, ttl, timer=clock) for kind, ttl in ttls.items() if ttl > 0
        }
        self._running: dict[tuple[str, Hashable], asyncio.Task[None]] = {}

    def stored(self, kind: str, key: Hashable) -> None:
        given = self._given.get(kind)
        if self._enabled and given is not None:
            given[key] = self._clock()

    def maybe(self, kind: str, key: Hashable, review: Callable[[], Awaitable[None]]) -> None:
        """Start `review` unless the answer is in the first half of its TTL or one runs."""
        given = self._given.get(kind)
        if not self._enabled or given is None or (kind, key) in self._running:
            return
        at = given.get(key)
        if at is None or self._clock() - at < self._ttls[kind] / 2:
            return
        task = asyncio.get_running_loop().create_task(self._run(review))
        self._running[(kind, key)] = task
        task.add_done_callback(lambda _: self._running.pop((kind, key), None))

    @staticmethod
    async def _run(review: Callable[[], Awaitable[None]]) -> None:
        # Unanswered: the answer lives out its TTL; the next use after it asks in front.
        with contextlib.suppress(AuthUnavailableError):
            await review()

    async def close(self) -> None:
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Authenticator:
    """TokenReview and SubjectAccessReview through a server's own KubeClient, with TTL caches.

    Tokens are cached by their sha256 digest, never as themselves. Accepted tokens live
    `token_ttl_s` (keep it no longer than the API server takes to refuse a revoked token:
    that is how long a revoked token still works here), refused ones `negative_ttl_s`; RBAC
    answers live `access_ttl_s` per (caller, question). `server` names this server in the
    messages of an unavailable review ("the gateway", "the operator").

    With `refresh_ahead`, a cached answer used in the second half of its TTL is asked again
    in the background, so a steady caller never waits for a review (a serial client paid one
    in every few claims). Each answer still lives its TTL from when the API server gave it:
    a revoked token or a removed RoleBinding stops working as soon as without.
    """

    def __init__(
        self,
        kube: KubeClient,
        *,
        token_ttl_s: float = 5.0,
        negative_ttl_s: float = 5.0,
        access_ttl_s: float = 10.0,
        max_entries: int = 10_000,
        server: str = "the gateway",
        refresh_ahead: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._server = server
        self._accepted: TTLCache[bytes, Caller] = TTLCache(max_entries, token_ttl_s, timer=clock)
        self._refused: TTLCache[bytes, str] = TTLCache(max_entries, negative_ttl_s, timer=clock)
        self._access: TTLCache[tuple[Hashable, ...], str | None] = TTLCache(
            max_entries, access_ttl_s, timer=clock
        )
        self._reviews: _SingleFlight[Caller | str] = _SingleFlight()
        self._access_reviews: _SingleFlight[str | None] = _SingleFlight()
        self._refresh = _RefreshAhead(
            {"token": token_ttl_s, "access": access_ttl_s},
            max_entries,
            enabled=refresh_ahead,
            clock=clock,
        )

    async def authenticate(self, token: str) -> Caller:
        """The caller the token belongs to; UnauthenticatedError when the API server refuses it."""
        digest = hashlib.sha256(token.encode()).digest()
        caller = self._accepted.get(digest)
        if caller is not None:
            self._refresh.maybe("token", digest, lambda: self._rereview_token(digest, token))
            return caller
        refusal = self._refused.get(digest)
        if refusal is None:
            answer = await self._reviews.run(digest, lambda: self._review_token(token))
            self._store_token(digest, answer)
            if isinstance(answer, Caller):
                return answer
            refusal = answer
        raise UnauthenticatedError(refusal)

    def _store_token(self, digest: bytes, answer: Caller | str) -> None:
        if isinstance(answer, Caller):
            self._accepted[digest] = answer
            self._refresh.stored("token", digest)
        else:
            self._accepted.pop(digest, None)
            self._refused[digest] = answer

    async def _rereview_token(self, digest: bytes, token: str) -> None:
        self._store_token(
            digest, await self._reviews.run(digest, lambda: self._review_token(token))
        )

    async def close(self) -> None:
        """Cancel background reviews still running (refresh_ahead)."""
        await self._refresh.close()

    async def check(self, caller: Caller, access: Access) -> None:
        """PermissionDeniedError unless RBAC allows `access` to `caller`."""
        key = (caller.username, caller.uid, caller.groups, caller.extra, access)
        if key in self._access:
            denial = self._access[key]
            self._refresh.maybe("access", key, lambda: self._rereview(key, caller, access))
        else:
            denial = await self._access_reviews.run(key, lambda: self._review(caller, access))
            self._access[key] = denial
            self._refresh.stored("access", key)
        if denial is not None:
            raise PermissionDeniedError(denial)

    async def _rereview(self, key: tuple[Hashable, ...], caller: Caller, access: Access) -> None:
        denial = await self._access_reviews.run(key, lambda: self._review(caller, access))
        self._access[key] = denial
        self._refresh.stored("access", key)

    async def _review_token(self, token: str) -> Caller | str:
        """The caller, or the refusal message for the caller."""
        review = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        status = (await self._create(TOKEN_REVIEWS, review, "tokenreviews")).get("status") or {}
        user = status.get("user") or {}
        if not status.get("authenticated") or not user.get("username"):
            # The server's own error ("token has expired", "invalid bearer token") goes to
            # the log only: the caller learns that the token was refused, not why.
            log.info("token_refused", server=self._server, error=status.get("error") or "")
            return REFUSED_TOKEN_MESSAGE
        extra = user.get("extra") or {}
        return Caller(
            username=str(user["username"]),
            uid=str(user.get("uid") or ""),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            extra=tuple(sorted((str(k), tuple(str(v) for v in vs)) for k, vs in extra.items())),
        )

    async def _review(self, caller: Caller, access: Access) -> str | None:
        """None when allowed, else the denial message for the caller."""
        spec: dict[str, Any] = {
            "user": caller.username,
            "groups": list(caller.groups),
            **access.attributes(),
        }
        if caller.uid:
            spec["uid"] = caller.uid
        if caller.extra:
            spec["extra"] = {key: list(values) for key, values in caller.extra}
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        answer = await self._create(ACCESS_REVIEWS, review, "subjectaccessreviews")
        status = answer.get("status") or {}
        if status.get("allowed") and not status.get("denied"):
            return None
        message = access.denial(caller.username)
        reason = str(status.get("reason") or "").strip()
        return f"{message} ({reason})" if reason else message

    async def _create(self, path: str, review: dict[str, Any], what: str) -> dict[str, Any]:
        server = self._server
        try:
            return await self._kube.create(path, review)
        except ForbiddenError as error:
            log.error("review_forbidden", server=server, resource=what, error=str(error))
            raise AuthUnavailableError(
                f"{server} may not create {what} (its RBAC is incomplete): "
                f"ask the platform team to check {server}'s ClusterRole"
            ) from error
        except KubeConnectionError as error:
            log.warning("review_failed", server=server, resource=what, error=str(error))
            raise AuthUnavailableError(
                f"the Kubernetes API server does not answer {server}'s {what} now; "
                "try again shortly"
            ) from error
        except KubeError as error:
            log.warning("review_failed", server=server, resource=what, error=str(error))
            raise AuthUnavailableError(
                f"the Kubernetes API server could not review the call now ({what}); "
                "try again shortly"
            ) from error


METRICS_ACCESS = UrlAccess("get", "/metrics")
"""What a scraper's RBAC must allow for a sandfleet server's /metrics (as controller-runtime's
metrics endpoints ask): the chart's ClusterRole <release namespace>-sandfleet-metrics-reader."""


def header_token(headers: Mapping[str, str], names: Sequence[str] = (AUTHORIZATION,)) -> str:
    """The bearer token of the first of the HTTP `headers` named in `names` that has one."""
    for name in names:
        token = bearer_token_of(headers.get(name))
        if token is not None:
            return token
    raise UnauthenticatedError(
        f"no bearer token: send '{names[-1]}: Bearer <token>' with a token the Kubernetes "
        "API server accepts (`kubectl create token`, a ServiceAccount token)"
    )


async def http_refusal(
    auth: Authenticator,
    headers: Mapping[str, str],
    access: Access,
    names: Sequence[str] = (AUTHORIZATION,),
) -> tuple[int, str] | None:
    """None when the request's bearer token may `access`, else the HTTP status and message
    to refuse it with: 401 (no token, or refused), 403 (RBAC), 503 (no review possible)."""
    try:
        caller = await auth.authenticate(header_token(headers, names))
        await auth.check(caller, access)
    except UnauthenticatedError as error:
        return 401, str(error)
    except PermissionDeniedError as error:
        return 403, str(error)
    except AuthError as error:
        return 503, str(error)
    return None
