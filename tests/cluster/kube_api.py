"""A small Kubernetes REST client for the cluster tests: kubeconfig auth, JSON in and out.

Standard library only (http.client in a worker thread), so the tests add no dependency and
see the API server's real status codes (409, 422, 404) instead of a client library's view.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import http.client
import json
import socket
import ssl
import tempfile
import time
import urllib.parse
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

import yaml

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


def _material(entry: dict[str, Any], key: str, workdir: Path, name: str) -> str | None:
    """A kubeconfig credential as a file path, whether given inline (`KEY-data`) or as a file."""
    if entry.get(f"{key}-data"):
        path = workdir / name
        path.write_bytes(base64.b64decode(entry[f"{key}-data"]))
        return str(path)
    value = entry.get(key)
    return str(value) if value else None


class KubeApi:
    """Talks to one API server as the kubeconfig's current user (client cert or bearer token)."""

    def __init__(self, server: str, context: ssl.SSLContext, token: str | None) -> None:
        parsed = urllib.parse.urlsplit(server)
        self.server = server
        self._host = parsed.hostname or "127.0.0.1"
        self._port = parsed.port or 443
        self._prefix = parsed.path.rstrip("/")
        self._context = context
        self._token = token

    @classmethod
    def from_kubeconfig(cls, path: Path) -> KubeApi:
        config = yaml.safe_load(path.read_text())
        context_name = config["current-context"]
        context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        # ssl wants files; inline credentials are written to a private temporary directory.
        workdir = Path(tempfile.mkdtemp(prefix="sandfleet-kubeapi-"))
        ssl_context = ssl.create_default_context()
        if cluster.get("insecure-skip-tls-verify"):
            ssl_context.check_hostname = False
            ssl_context.verify_mode = ssl.CERT_NONE
        else:
            ca = _material(cluster, "certificate-authority", workdir, "ca.crt")
            if ca:
                ssl_context.load_verify_locations(ca)
        cert = _material(user, "client-certificate", workdir, "client.crt")
        key = _material(user, "client-key", workdir, "client.key")
        if cert and key:
            ssl_context.load_cert_chain(cert, key)
        token = user.get("token")
        if token is None and user.get("tokenFile"):
            token = Path(user["tokenFile"]).read_text().strip()
        if "exec" in user or "auth-provider" in user:
            raise ValueError("kubeconfig users with exec/auth-provider plugins are not supported")
        return cls(cluster["server"], ssl_context, token)

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
        headers = {"Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
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
        headers = {"Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
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
