"""SandboxSession objects over the Kubernetes API: create, read, delete, follow, wait for."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
from collections.abc import AsyncGenerator, Callable
from typing import Any

from sandfleet.api import API_VERSION, SESSION_PLURAL, TOKEN_SECRET_KEY
from sandfleet.errors import SandfleetError
from sandfleet.fleet.status import SessionState
from sandfleet.kube import (
    KubeClient,
    KubeConnectionError,
    NotFoundError,
    WatchExpiredError,
    resource_path,
)
from sandfleet.logs import get_logger

log = get_logger(__name__)

WATCH_TIMEOUT_S = 300
"""Each watch request asks the server to end the stream after this long; the follow loop
then watches again from the last version (a cheap way to notice a silently dead connection)."""
_RECONNECT_ATTEMPTS = 5
_RECONNECT_BASE_DELAY_S = 0.5


class SessionGoneError(SandfleetError):
    """The session does not exist (any more): never created, deleted, or reclaimed by TTL."""


class SessionWaitTimeoutError(SandfleetError):
    """A wait_until ran out of time; `state` is the last state seen (None if none was)."""

    def __init__(self, message: str, state: SessionState | None) -> None:
        super().__init__(message)
        self.state = state


class SessionClient:
    """The SandboxSessions of one namespace, as SessionState views."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace

    def path(self, name: str | None = None) -> str:
        return resource_path(API_VERSION, SESSION_PLURAL, self.namespace, name)

    async def create(self, body: dict[str, Any]) -> SessionState:
        """Create the session (a generateName'd body gets its name here)."""
        created = await self.kube.create(self.path(), body)
        state = SessionState.from_object(created)
        log.info("session_created", session=state.reference, uid=state.uid)
        return state

    async def get(self, name: str) -> SessionState:
        try:
            return SessionState.from_object(await self.kube.get(self.path(name)))
        except NotFoundError as error:
            raise SessionGoneError(f"no SandboxSession {self.namespace}/{name}") from error

    async def delete(self, name: str) -> None:
        """Delete the session (the operator then reclaims its pod); gone already is fine."""
        await self.kube.delete(self.path(name), missing_ok=True)
        log.info("session_deleted", session=f"{self.namespace}/{name}")

    async def runtime_token(self, secret_name: str) -> str:
        """The runtime bearer token from the session's token Secret (key "token")."""
        path = resource_path("v1", "secrets", self.namespace, secret_name)
        try:
            secret = await self.kube.get(path)
        except NotFoundError as error:
            raise SandfleetError(
                f"the runtime token Secret {self.namespace}/{secret_name} does not exist"
            ) from error
        encoded = (secret.get("data") or {}).get(TOKEN_SECRET_KEY)
        try:
            token = base64.b64decode(encoded or "", validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as error:
            raise SandfleetError(
                f"Secret {secret_name}: {TOKEN_SECRET_KEY} is unreadable"
            ) from error
        if not token:
            raise SandfleetError(f"Secret {secret_name} has no {TOKEN_SECRET_KEY!r} key")
        return token

    async def states(
        self, name: str, *, since: SessionState | None = None
    ) -> AsyncGenerator[SessionState, None]:
        """The session's current state, then each new state, for as long as the caller reads.

        Driven by a watch: lists first (or, given `since`, yields that state and watches
        from its resourceVersion, so no change after it is missed — pass what create()
        returned), watches again when a stream ends, and lists again when the version has
        expired (410). Raises SessionGoneError when the session does not exist or is
        deleted. Close the iterator (contextlib.aclosing) to release the watch early.
        """
        field_selector = f"metadata.name={name}"
        last_seen = ""
        version: str | None = None
        if since is not None:
            last_seen = version = since.resource_version
            yield since
        reconnects = 0
        while True:
            if not version:
                items, version = await self.kube.list_with_version(
                    self.path(), field_selector=field_selector
                )
                if not items:
                    raise SessionGoneError(f"no SandboxSession {self.namespace}/{name}")
                state = SessionState.from_object(items[0])
                if state.resource_version != last_seen:
                    last_seen = state.resource_version
                    yield state
            watch = self.kube.watch(
                self.path(),
                resource_version=version,
                field_selector=field_selector,
                timeout_s=WATCH_TIMEOUT_S,
            )
            try:
                # Closed here, not by the garbage collector, when the caller stops early.
                async with contextlib.aclosing(watch) as events:
                    async for event in events:
                        reconnects = 0
                        version = event.resource_version or version
                        if event.type == "BOOKMARK":
                            continue
                        if event.type == "DELETED":
                            raise SessionGoneError(
                                f"SandboxSession {self.namespace}/{name} was deleted"
                            )
                        state = SessionState.from_object(event.object)
                        if state.resource_version != last_seen:
                            last_seen = state.resource_version
                            yield state
            except WatchExpiredError:
                log.info("session_watch_expired", session=f"{self.namespace}/{name}")
                version = None
            except KubeConnectionError as error:
                # The API server may restart under a long run; give it a few seconds.
                reconnects += 1
                if reconnects > _RECONNECT_ATTEMPTS:
                    raise
                log.info("session_watch_reconnecting", session=name, error=str(error))
                await asyncio.sleep(_RECONNECT_BASE_DELAY_S * 2**reconnects)

    async def wait_until(
        self,
        name: str,
        predicate: Callable[[SessionState], bool],
        timeout_s: float,
        *,
        since: SessionState | None = None,
    ) -> SessionState:
        """The first state (current or future) that satisfies `predicate`.

        Raises SessionWaitTimeoutError after timeout_s, SessionGoneError on deletion.
        """
        last: SessionState | None = None
        try:
            async with asyncio.timeout(timeout_s):
                async with contextlib.aclosing(self.states(name, since=since)) as states:
                    async for state in states:
                        last = state
                        if predicate(state):
                            return state
        except TimeoutError as error:
            detail = last.summary() if last else f"{self.namespace}/{name}: no state seen"
            raise SessionWaitTimeoutError(
                f"gave up waiting after {timeout_s:g}s: {detail}", last
            ) from error
        raise AssertionError("unreachable: states() never ends without an error")
