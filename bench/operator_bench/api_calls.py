"""Counting the operator's API calls: a loopback reverse proxy in front of the API server.

The operator's kubeconfig points here (plain HTTP on 127.0.0.1); every request is counted
by client (kopf or sandfleet's own client, from the User-Agent), verb and resource, then
forwarded with the operator's own bearer token, so RBAC still sees the operator's
ServiceAccount. Watch streams are passed through as they come. The proxy costs latency and
CPU, so only the call-counting round uses it.
"""

from __future__ import annotations

import base64
import json
import ssl
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qs

import aiohttp
import yaml
from aiohttp import web

_FORWARDED_REQUEST = ("Authorization", "Content-Type", "Accept", "User-Agent")
_FORWARDED_RESPONSE = ("Content-Type", "Retry-After", "Audit-Id", "Warning")

SAMPLES_KEPT = 8
CallKey = tuple[str, str, str]
"""(client, verb, resource): ("kopf", "patch", "sandboxsessions")."""


def classify(method: str, path: str, query: str) -> tuple[str, str]:
    """(verb, resource) of one request, in the API server's own terms."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"]:
        rest = parts[3:]
    else:
        return "get", "/".join(parts) or "root"
    if not rest:
        return "get", "discovery"
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]  # namespaced: drop "namespaces/<ns>"
    plural, name, sub = rest[0], rest[1] if len(rest) > 1 else None, rest[2:]
    resource = "/".join([plural, *sub])
    if method == "GET":
        watching = parse_qs(query).get("watch", [""])[0] in {"true", "1"}
        verb = "get" if name else ("watch" if watching else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = {"POST": "create", "PATCH": "patch", "PUT": "update"}.get(method, method.lower())
    return verb, resource


def body_shape(body: bytes) -> str:
    """What a write changes, without its values: JSON-patch paths, or merge-patch keys two
    levels deep ("metadata.annotations,metadata.finalizers")."""
    try:
        document = json.loads(body)
    except ValueError:
        return "?"
    if isinstance(document, list):
        return ",".join(sorted({f"{op.get('op')} {op.get('path')}" for op in document}))
    if not isinstance(document, dict):
        return "?"
    keys = []
    for key, value in document.items():
        inner = value.keys() if isinstance(value, dict) else [""]
        keys += [f"{key}.{k}".rstrip(".") for k in inner]
    return ",".join(sorted(keys))


def upstream_of(kubeconfig: Path) -> tuple[str, ssl.SSLContext]:
    """The API server's address and a TLS context that trusts its CA and presents no client
    certificate (the operator's bearer token must be the only identity on the request)."""
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c for c in config["clusters"] if c["name"] == context["context"]["cluster"])
    entry = cluster["cluster"]
    tls = ssl.create_default_context()
    if entry.get("certificate-authority-data"):
        tls.load_verify_locations(
            cadata=base64.b64decode(entry["certificate-authority-data"]).decode()
        )
    elif entry.get("certificate-authority"):
        tls.load_verify_locations(cafile=entry["certificate-authority"])
    return str(entry["server"]), tls


def client_of(user_agent: str) -> str:
    for known in ("kopf", "sandfleet"):
        if user_agent.startswith(known):
            return known
    return "other"


class CountingProxy:
    def __init__(
        self, upstream: str, ssl_context: ssl.SSLContext, server_hostname: str | None = None
    ) -> None:
        self._upstream = upstream.rstrip("/")
        self._ssl = ssl_context
        self._server_hostname = server_hostname
        self.counts: Counter[CallKey] = Counter()
        self.samples: dict[str, dict[str, str]] = {}
        """One request body per shape of each kind of write (what kopf patches, for one)."""
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> str:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=1000, ssl=self._ssl),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            auto_decompress=True,
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def snapshot(self) -> Counter[CallKey]:
        return Counter(self.counts)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        verb, resource = classify(request.method, request.path, request.query_string)
        client = client_of(request.headers.get("User-Agent", ""))
        self.counts[(client, verb, resource)] += 1
        headers = {k: request.headers[k] for k in _FORWARDED_REQUEST if k in request.headers}
        body = await request.read()
        if body and verb in {"patch", "update"}:
            kept = self.samples.setdefault(f"{client} {verb} {resource}", {})
            shape = body_shape(body)
            if shape not in kept and len(kept) < SAMPLES_KEPT:
                kept[shape] = body[:400].decode(errors="replace")
        async with self._session.request(
            request.method,
            self._upstream + request.path_qs,
            headers=headers,
            data=body or None,
            server_hostname=self._server_hostname,
        ) as upstream:
            response = web.StreamResponse(
                status=upstream.status,
                headers={
                    k: upstream.headers[k] for k in _FORWARDED_RESPONSE if k in upstream.headers
                },
            )
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except (ConnectionError, aiohttp.ClientError):
                pass  # the operator hung up (a watch it ended, or its shutdown)
            return response


def per_session(calls: Counter[CallKey], sessions: int) -> dict[str, float]:
    """Calls per session, "client verb resource" -> count / sessions, largest first."""
    rows = {f"{c} {v} {r}": n / sessions for (c, v, r), n in calls.items() if n}
    return dict(sorted(rows.items(), key=lambda kv: -kv[1]))
