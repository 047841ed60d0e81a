"""A small synchronous Kubernetes REST client for the cluster tests: JSON in and out.

The kubeconfig and its credentials come from sandfleet.kube.KubeConfig (kubernetes_asyncio's
loaders: any auth method, the same path as the product); the transport is http.client in a
worker thread, so tests can call it synchronously from any thread and see the API server's
raw status codes (409, 422, 404) instead of a client's typed view.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import http.client
import json
import socket
import time
import urllib.parse
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

from sandfleet.kube import KubeConfig

JsonObject = dict[str, Any]


class ApiError(RuntimeError):
    """A non-2xx answer; status is the HTTP code, body the server's Status object."""

    def __init__(self, method: str, path: str, status: int, body: JsonObject) -> None:
        super().__init__(f"{method} {path} -> {status}: {body.get('message', body)}")
        self.status = status
        self.body = body


@dataclasses.dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: JsonObject


class KubeApi:
    """Talks to one API server as the kubeconfig's current user (client cert or bearer token)."""

    def __init__(self, config: KubeConfig) -> None:
        parsed = urllib.parse.urlsplit(config.server)
        self.server = config.server
        self._host = parsed.hostname or "127.0.0.1"
        self._port = parsed.port or 443
        self._prefix = parsed.path.rstrip("/")
        self._context = config.ssl_context()
        self._config = config

    @classmethod
    def from_kubeconfig(cls, path: Path) -> KubeApi:
        return cls(KubeConfig.load(path))

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        authorization = self._config.auth.header_blocking()  # refreshed when due
        if authorization:
            headers["Authorization"] = authorization
        return headers

    def request_sync(
        self,
        method: str,
        path: str,
        body: JsonObject | None = None,
        content_type: str = "application/json",
        timeout_s: float = 30.0,
    ) -> Response:
        """One request; never raises for HTTP errors (see request() for that)."""
        connection = http.client.HTTPSConnection(
            self._host, self._port, context=self._context, timeout=timeout_s
        )
        headers = self._headers()
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            connection.request(method, self._prefix + path, body=payload, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        try:
            decoded: JsonObject = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            decoded = {"message": raw.decode(errors="replace")}
        return Response(response.status, decoded)

    def checked_sync(
        self, method: str, path: str, body: JsonObject | None = None, **kwargs: Any
    ) -> JsonObject:
        response = self.request_sync(method, path, body, **kwargs)
        if response.status >= 300:
            raise ApiError(method, path, response.status, response.body)
        return response.body

    async def request(
        self, method: str, path: str, body: JsonObject | None = None, **kwargs: Any
    ) -> Response:
        """Like request_sync, off the event loop."""
        return await asyncio.to_thread(self.request_sync, method, path, body, **kwargs)

    async def checked(
        self, method: str, path: str, body: JsonObject | None = None, **kwargs: Any
    ) -> JsonObject:
        """The response body; ApiError for any status of 300 or more."""
        return await asyncio.to_thread(self.checked_sync, method, path, body, **kwargs)

    def _watch_sync(
        self,
        path: str,
        timeout_s: int,
        connection: http.client.HTTPSConnection,
        deliver: Callable[[JsonObject], None],
    ) -> None:
        separator = "&" if "?" in path else "?"
        headers = self._headers()
        target = f"{self._prefix}{path}{separator}watch=1&timeoutSeconds={timeout_s}"
        try:
            connection.request("GET", target, headers=headers)
            response = connection.getresponse()
            if response.status != 200:
                raise ApiError("WATCH", path, response.status, json.loads(response.read() or b"{}"))
            while line := response.readline():
                deliver(json.loads(line))
        except OSError:
            if connection.sock is not None:  # closed by watch() on purpose: a normal end
                raise
        finally:
            connection.close()

    async def watch(self, path: str, timeout_s: int) -> AsyncGenerator[JsonObject, None]:
        """Watch events ({"type", "object"}) of a collection until the server ends the watch.

        The stream is read in a worker thread; each event is handed to the loop as it arrives.
        Leaving the loop early closes the stream, which ends the thread.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[JsonObject | None] = asyncio.Queue()
        connection = http.client.HTTPSConnection(
            self._host, self._port, context=self._context, timeout=timeout_s + 30
        )

        def deliver(event: JsonObject) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, event)

        async def read() -> None:
            try:
                await asyncio.to_thread(self._watch_sync, path, timeout_s, connection, deliver)
            finally:
                queue.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            while (event := await queue.get()) is not None:
                yield event
            await reader  # surfaces an ApiError from the stream
        finally:
            if connection.sock is not None:
                sock, connection.sock = connection.sock, None
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            with contextlib.suppress(Exception):
                await reader

    async def wait_for(
        self,
        path: str,
        condition: Callable[[Response], bool],
        timeout_s: float,
        interval_s: float = 0.25,
    ) -> Response:
        """GET path until condition(response) holds; TimeoutError with the last answer if not."""
        deadline = time.monotonic() + timeout_s
        while True:
            response = await self.request("GET", path)
            if condition(response):
                return response
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"GET {path} did not reach the condition in {timeout_s}s; last: "
                    f"{response.status} {json.dumps(response.body)[:2000]}"
                )
            await asyncio.sleep(interval_s)


def condition_is_true(obj: JsonObject, condition_type: str) -> bool:
    """True when status.conditions has condition_type with status "True" (null-safe)."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c["type"] == condition_type and c["status"] == "True" for c in conditions)
