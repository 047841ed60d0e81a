"""Who calls the gateway and what RBAC lets them do: cached TokenReviews and access reviews."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

from cachetools import TTLCache

from sandfleet.api import GROUP, SESSION_PLURAL
from sandfleet.errors import SandfleetError
from sandfleet.kube import ForbiddenError, KubeClient, KubeConnectionError, KubeError
from sandfleet.logs import get_logger

log = get_logger(__name__)

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

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


class AuthError(SandfleetError):
    """Authentication or authorization failed; the message is for the caller."""


class Unauthenticated(AuthError):
    """No token, or one the API server does not accept (UNAUTHENTICATED)."""


class PermissionDenied(AuthError):
    """RBAC does not allow the call (PERMISSION_DENIED)."""


class AuthUnavailable(AuthError):
    """The API server could not answer a review now (UNAVAILABLE: try again)."""


def bearer_token(metadata: Any) -> str:
    """The bearer token in call metadata (a sequence of (key, value) pairs)."""
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            break
    raise Unauthenticated(
        "no bearer token: send 'authorization: Bearer <token>' with a token the Kubernetes "
        "API server accepts (a ServiceAccount token, `kubectl create token`, an OIDC token)"
    )


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


class Authenticator:
    """TokenReview and SubjectAccessReview through the gateway's KubeClient, with TTL caches.

    Tokens are cached by their sha256 digest, never as themselves. Accepted tokens live
    `token_ttl_s`, refused ones `negative_ttl_s`; RBAC answers live `access_ttl_s` per
    (user, uid, groups, verb, namespace).
    """

    def __init__(
        self,
        kube: KubeClient,
        *,
        token_ttl_s: float = 30.0,
        negative_ttl_s: float = 5.0,
        access_ttl_s: float = 10.0,
        max_entries: int = 10_000,
    ) -> None:
        self._kube = kube
        self._accepted: TTLCache[bytes, Caller] = TTLCache(max_entries, token_ttl_s)
        self._refused: TTLCache[bytes, str] = TTLCache(max_entries, negative_ttl_s)
        self._access: TTLCache[tuple[Hashable, ...], str | None] = TTLCache(
            max_entries, access_ttl_s
        )
        self._reviews: _SingleFlight[Caller | str] = _SingleFlight()
        self._access_reviews: _SingleFlight[str | None] = _SingleFlight()

    async def authenticate(self, token: str) -> Caller:
        """The caller the token belongs to; Unauthenticated when the API server refuses it."""
        digest = hashlib.sha256(token.encode()).digest()
        caller = self._accepted.get(digest)
        if caller is not None:
            return caller
        refusal = self._refused.get(digest)
        if refusal is None:
            answer = await self._reviews.run(digest, lambda: self._review_token(token))
            if isinstance(answer, Caller):
                self._accepted[digest] = answer
                return answer
            self._refused[digest] = refusal = answer
        raise Unauthenticated(refusal)

    async def authorize(self, caller: Caller, verb: str, namespace: str) -> None:
        """PermissionDenied unless RBAC lets `caller` `verb` sandboxsessions in `namespace`."""
        key = (caller.username, caller.uid, caller.groups, caller.extra, verb, namespace)
        if key in self._access:
            denial = self._access[key]
        else:
            denial = await self._access_reviews.run(
                key, lambda: self._review_access(caller, verb, namespace)
            )
            self._access[key] = denial
        if denial is not None:
            raise PermissionDenied(denial)

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
            log.info("gateway_token_refused", error=status.get("error") or "")
            return "the token was not accepted by the Kubernetes API server (expired or wrong)"
        extra = user.get("extra") or {}
        return Caller(
            username=str(user["username"]),
            uid=str(user.get("uid") or ""),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            extra=tuple(sorted((str(k), tuple(str(v) for v in vs)) for k, vs in extra.items())),
        )

    async def _review_access(self, caller: Caller, verb: str, namespace: str) -> str | None:
        """None when allowed, else the denial message for the caller."""
        spec: dict[str, Any] = {
            "user": caller.username,
            "groups": list(caller.groups),
            "resourceAttributes": {
                "group": GROUP,
                "resource": SESSION_PLURAL,
                "verb": verb,
                "namespace": namespace,
            },
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
        message = f"user {caller.username} may not {verb} {SESSION_PLURAL} in namespace {namespace}"
        reason = str(status.get("reason") or "").strip()
        return f"{message} ({reason})" if reason else message

    async def _create(self, path: str, review: dict[str, Any], what: str) -> dict[str, Any]:
        try:
            return await self._kube.create(path, review)
        except ForbiddenError as error:
            log.error("gateway_review_forbidden", resource=what, error=str(error))
            raise AuthUnavailable(
                f"the gateway may not create {what} (its RBAC is incomplete): "
                "ask the platform team to check the gateway's ClusterRole"
            ) from error
        except KubeConnectionError as error:
            log.warning("gateway_review_failed", resource=what, error=str(error))
            raise AuthUnavailable(
                "the Kubernetes API server does not answer the gateway's "
                f"{what} now; try again shortly"
            ) from error
        except KubeError as error:
            log.warning("gateway_review_failed", resource=what, error=str(error))
            raise AuthUnavailable(
                f"the Kubernetes API server could not review the call now ({what}); "
                "try again shortly"
            ) from error
