"""KubeClient: async JSON calls to the Kubernetes REST API over one pooled aiohttp session."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import AsyncGenerator, Mapping
from types import TracebackType
from typing import Any, Literal, Self

import aiohttp
from aiohttp.connector import NEEDS_CLEANUP_CLOSED
from yarl import URL

from sandfleet.kube.config import KubeConfig
from sandfleet.kube.errors import (
    GoneError,
    KubeApiError,
    KubeConfigError,
    KubeConnectionError,
    NotFoundError,
)
from sandfleet.kube.rate_limit import TokenBucket
from sandfleet.kube.watch import WatchEvent, expired_error, read_events
from sandfleet.logs import get_logger
from sandfleet.version import __version__

log = get_logger(__name__)

JsonObject = dict[str, Any]
# Module-level aliases: inside KubeClient the name `list` is the method.
JsonObjects = list[JsonObject]
JsonPatch = JsonObject | list[Any]
PatchKind = Literal["merge", "json", "strategic"]
Propagation = Literal["Background", "Foreground", "Orphan"]

PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}

LIST_PAGE_SIZE = 500
# 429 (and 5xx with Retry-After) mean "not processed, try again later": safe for any verb.
_MAX_RETRIES = 3
_MAX_RETRY_DELAY_S = 10.0


class KubeClient:
    """An async Kubernetes API client speaking JSON dicts.

    Use as `async with KubeClient(config) as kube:`. Every call except watch streams
    passes a token bucket (`qps`, `burst`) first; `timeout_s` bounds each call, connection
    pool wait included. Errors are typed by status (see sandfleet.kube.errors); a server
    that cannot be reached raises KubeConnectionError.
    """

    def __init__(
        self,
        config: KubeConfig,
        *,
        qps: float = 50.0,
        burst: int = 100,
        timeout_s: float = 30.0,
        connection_limit: int = 100,
    ) -> None:
        self.config = config
        self.rate_limiter = TokenBucket(qps, burst)
        self.timeout_s = timeout_s
        self._connection_limit = connection_limit
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        self._open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            secure = self.config.server.startswith("https:")
            try:
                ssl_context = self.config.ssl_context() if secure else None
            except (OSError, ValueError) as error:  # an unreadable or mismatched cert or key
                raise KubeConfigError(
                    f"cannot use the TLS files for {self.config.server}: {error}"
                ) from error
            connector = api_server_connector(self._connection_limit, ssl_context)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                headers={"Accept": "application/json", "User-Agent": f"sandfleet/{__version__}"},
            )
        return self._session

    def _url(self, path: str, params: Mapping[str, str] | None) -> URL:
        if not path.startswith("/"):
            raise ValueError(f"API paths start with '/': {path!r}")
        url = URL(self.config.server + path)
        return url.extend_query(params) if params else url

    async def _headers(self, content_type: str | None, *, refresh: bool = False) -> dict[str, str]:
        """The request's headers; the credentials' Authorization (refreshed when due)."""
        headers = {}
        authorization = await self.config.auth_header(refresh=refresh)
        if authorization:
            headers["Authorization"] = authorization
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def request(
        self,
        method: str,
        path: str,
        body: JsonPatch | None = None,
        *,
        content_type: str | None = None,
        params: Mapping[str, str] | None = None,
    ) -> JsonObject:
        """Any call: the decoded answer, or the typed KubeApiError for a status of 400 and up.

        `content_type` defaults to application/json when there is a body. A 401 makes the
        credentials load again (an expired plugin token, a rotated token file) and the call
        is sent once more; a second 401 is the caller's UnauthorizedError.
        """
        session = self._open()
        url = self._url(path, params)
        data = json.dumps(body).encode() if body is not None else None
        if data is not None and content_type is None:
            content_type = "application/json"
        refresh = False
        attempt = 0
        while attempt <= _MAX_RETRIES:
            await self.rate_limiter.acquire()
            started = time.monotonic()
            headers = await self._headers(content_type, refresh=refresh)
            try:
                async with session.request(
                    method,
                    url,
                    data=data,
                    headers=headers,
                    server_hostname=self.config.tls_server_name,
                ) as response:
                    status, raw = response.status, await response.read()
                    retry_after = response.headers.get("Retry-After")
            except (aiohttp.ClientError, TimeoutError) as error:
                raise KubeConnectionError(
                    f"{method} {path}: no answer from {self.config.server}: "
                    f"{str(error) or type(error).__name__}"
                ) from error
            log.debug(
                "kube_request_completed",
                method=method,
                path=path,
                status=status,
                duration_ms=round((time.monotonic() - started) * 1000, 1),
            )
            throttled = status == 429 or (status >= 500 and retry_after is not None)
            if throttled and attempt < _MAX_RETRIES:
                delay = _retry_delay(retry_after, attempt)
                log.warning(
                    "kube_request_retried", method=method, path=path, status=status, delay_s=delay
                )
                await asyncio.sleep(delay)
                attempt += 1
                continue
            if status == 401 and not refresh:
                log.info("kube_credentials_rejected", method=method, path=path)
                refresh = True
                continue
            decoded = _decode(raw)
            if status >= 400:
                raise KubeApiError.from_status(status, decoded, method=method, path=path)
            return decoded
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def get(self, path: str) -> JsonObject:
        """The object at path; NotFoundError when it does not exist."""
        return await self.request("GET", path)

    async def create(self, path: str, body: JsonObject) -> JsonObject:
        """POST body to a collection; ConflictError (reason AlreadyExists) if the name is taken."""
        return await self.request("POST", path, body)

    async def replace(self, path: str, body: JsonObject) -> JsonObject:
        """PUT: ConflictError when body's metadata.resourceVersion is no longer current."""
        return await self.request("PUT", path, body)

    async def patch(self, path: str, body: JsonPatch, *, kind: PatchKind = "merge") -> JsonObject:
        """PATCH with a merge (RFC 7386), JSON (RFC 6902, body is a list) or strategic patch.

        A metadata.resourceVersion in a merge patch is a precondition: ConflictError when
        the object has changed since (compare-and-swap).
        """
        return await self.request("PATCH", path, body, content_type=PATCH_CONTENT_TYPES[kind])

    async def delete(
        self,
        path: str,
        *,
        propagation: Propagation = "Background",
        missing_ok: bool = True,
        grace_period_s: int | None = None,
        preconditions: JsonObject | None = None,
    ) -> None:
        """Delete the object; with missing_ok an object already gone is not an error.
        `preconditions` (uid, resourceVersion): only that object as it was seen, else
        ConflictError."""
        options: JsonObject = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": propagation,
        }
        if grace_period_s is not None:
            options["gracePeriodSeconds"] = grace_period_s
        if preconditions:
            options["preconditions"] = preconditions
        try:
            await self.request("DELETE", path, options)
        except NotFoundError:
            if not missing_ok:
                raise

    async def list(
        self,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = LIST_PAGE_SIZE,
    ) -> JsonObjects:
        """Every item of a collection, following `continue` pages of `page_size` items.

        Items get the kind and apiVersion that list answers leave out.
        """
        items, _ = await self.list_with_version(
            path, label_selector=label_selector, field_selector=field_selector, page_size=page_size
        )
        return items

    async def list_with_version(
        self,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = LIST_PAGE_SIZE,
    ) -> tuple[JsonObjects, str]:
        """The items and the list's resourceVersion: where a watch that follows should start."""
        params = _selectors(label_selector, field_selector)
        if page_size > 0:
            params["limit"] = str(page_size)
        items: JsonObjects = []
        token = ""
        while True:
            try:
                page = await self.request(
                    "GET", path, params={**params, "continue": token} if token else params
                )
            except GoneError:
                if not token:
                    raise
                # The snapshot behind the continue token was compacted away: start over,
                # in one page, as client-go's pager does.
                log.info("kube_list_restarted", path=path, items_dropped=len(items))
                items, token = [], ""
                params.pop("limit", None)
                continue
            items.extend(_typed_items(page))
            metadata = page.get("metadata") or {}
            token = metadata.get("continue") or ""
            if not token:
                return items, str(metadata.get("resourceVersion") or "")

    async def watch(
        self,
        path: str,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_s: int | None = None,
        bookmarks: bool = True,
    ) -> AsyncGenerator[WatchEvent, None]:
        """Changes to a collection after `resource_version`, until the stream ends.

        The server ends the stream after `timeout_s` (its own default is 30-60 minutes);
        a dropped connection ends it too, quietly. Either way, watch again from the last
        event's resourceVersion. WatchExpiredError means that version is too old: list
        again (list_with_version) and watch from the list's version. Not rate limited.
        """
        params = {"watch": "true", **_selectors(label_selector, field_selector)}
        if bookmarks:
            params["allowWatchBookmarks"] = "true"
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if timeout_s is not None:
            params["timeoutSeconds"] = str(timeout_s)
        # No total deadline for a stream; a read timeout only when the server promised an end.
        timeout = aiohttp.ClientTimeout(
            total=None,
            sock_connect=self.timeout_s,
            sock_read=timeout_s + self.timeout_s if timeout_s is not None else None,
        )
        response = await self.open_response(path, params=params, timeout=timeout, what="WATCH")
        try:
            if response.status >= 400:
                body = _decode(await response.read())
                if response.status == 410:
                    raise expired_error(body, path=path)
                raise KubeApiError.from_status(response.status, body, method="WATCH", path=path)
            async for event in read_events(response, path=path):
                yield event
        finally:
            # Never hand a half-read stream back to the pool.
            response.close()

    async def open_response(
        self,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        timeout: aiohttp.ClientTimeout | None = None,
        what: str = "GET",
        headers: Mapping[str, str] | None = None,
    ) -> aiohttp.ClientResponse:
        """GET `path` and hand back the response unread, whatever its status, for a body the
        caller streams (watch, a trajectory through the service proxy). A 401 refreshes the
        credentials and asks once more. Not rate limited; close the response when done.
        `headers` go along (never Authorization: that is the credentials')."""
        response = await self._get_response(path, params, timeout, what=what, extra=headers)
        if response.status == 401:
            response.close()
            log.info("kube_credentials_rejected", method=what, path=path)
            response = await self._get_response(
                path, params, timeout, what=what, refresh=True, extra=headers
            )
        return response

    async def _get_response(
        self,
        path: str,
        params: Mapping[str, str] | None,
        timeout: aiohttp.ClientTimeout | None,
        *,
        what: str,
        refresh: bool = False,
        extra: Mapping[str, str] | None = None,
    ) -> aiohttp.ClientResponse:
        headers = {**(extra or {}), **await self._headers(None, refresh=refresh)}
        try:
            return await self._open().request(
                "GET",
                self._url(path, params),
                headers=headers,
                timeout=timeout if timeout is not None else self._open().timeout,
                server_hostname=self.config.tls_server_name,
            )
        except (aiohttp.ClientError, TimeoutError) as error:
            raise KubeConnectionError(
                f"{what} {path}: no answer from {self.config.server}: "
                f"{str(error) or type(error).__name__}"
            ) from error


def api_server_connector(limit: int, ssl_context: ssl.SSLContext | None) -> aiohttp.TCPConnector:
    """The connection pool for one API server: at most `limit` connections, TLS with
    `ssl_context` (None: plain HTTP, or the system's trust for https).

    A TLS connection closed before its answer was read (a timeout, a cancelled call, a watch
    left early) ends with a TLS shutdown. On the Pythons whose asyncio can leave that
    shutdown hanging (CPython gh-118950: before 3.12.8 and 3.13.1; aiohttp's
    NEEDS_CLEANUP_CLOSED) the socket stays open while a busy API server has not answered,
    and once the event loop is gone it is left to the garbage collector (ResourceWarning:
    unclosed socket; a failure in the tests). enable_cleanup_closed aborts such connections
    two seconds after they were closed, and at the latest when the pool closes; aiohttp
    warns when asked for it on a Python that does not need it.
    """
    return aiohttp.TCPConnector(
        limit=limit,
        ssl=ssl_context if ssl_context else True,
        enable_cleanup_closed=NEEDS_CLEANUP_CLOSED,
    )


def _selectors(label_selector: str | None, field_selector: str | None) -> dict[str, str]:
    params = {}
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    return params


def _decode(raw: bytes) -> JsonObject:
    """The JSON object in an answer; a non-JSON answer (a proxy's error page) as a message."""
    if not raw:
        return {}
    try:
        decoded = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {"message": raw.decode(errors="replace")[:2000]}
    return decoded if isinstance(decoded, dict) else {"items": decoded}


def _typed_items(page: JsonObject) -> list[JsonObject]:
    items: list[JsonObject] = page.get("items") or []
    kind = str(page.get("kind") or "")
    api_version = page.get("apiVersion")
    if kind.endswith("List") and api_version:
        for item in items:
            item.setdefault("kind", kind.removesuffix("List"))
            item.setdefault("apiVersion", api_version)
    return items


def _retry_delay(retry_after: str | None, attempt: int) -> float:
    """The server's Retry-After in seconds if it gave one, else an exponential back-off."""
    try:
        delay = float(retry_after) if retry_after is not None else -1.0
    except ValueError:
        delay = -1.0  # an HTTP date: the API server sends seconds; back off on our own
    if not delay >= 0:
        delay = 0.5 * 2**attempt
    return min(_MAX_RETRY_DELAY_S, delay)
