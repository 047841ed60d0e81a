"""A stand-in Kubernetes API server for the gateway's non-cluster tests.

A real aiohttp server on 127.0.0.1 that answers what the gateway (and the operator's HTTP
port) asks the API server: TokenReviews, SubjectAccessReviews (on sandboxsessions and on
non-resource URLs), SandboxSession list/watch/get and spec merge patches, pod get, and Lease
get/create/update with the resourceVersion precondition (the quota ledger). It stands in
for the real API server (whose real behaviour the cluster tier covers) because no real one
can run in these tests; its answers follow the shapes the Kubernetes API documents.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from sandfleet.api import API_VERSION, SESSION_KIND
from sandfleet.kube import KubeClient, KubeConfig

GATEWAY_SA_TOKEN = "gateway-service-account-token"
JsonObject = dict[str, Any]


def session_object(
    namespace: str,
    name: str,
    *,
    phase: str | None = "Ready",
    pod_ip: str | None = None,
    pod: str | None = None,
    annotations: dict[str, str] | None = None,
    version: int = 1,
) -> JsonObject:
    status: JsonObject = {}
    if phase:
        status["phase"] = phase
    if pod_ip:
        status["podIP"] = pod_ip
    if pod:
        status["podName"] = pod
    return {
        "apiVersion": API_VERSION,
        "kind": SESSION_KIND,
        "metadata": {
            "namespace": namespace,
            "name": name,
            "resourceVersion": str(version),
            "annotations": annotations or {},
        },
        "status": status,
    }


class StandInApiServer:
    """Scriptable answers; `requests` counts each (method, path) for cache tests."""

    def __init__(self) -> None:
        self.users: dict[str, JsonObject] = {}
        """token -> TokenReview status.user of accepted tokens."""
        self.expired: set[str] = set()
        self.allowed: set[tuple[str, str, str]] = set()
        """(username, verb, namespace) RBAC allows on sandboxsessions."""
        self.allowed_urls: set[tuple[str, str, str]] = set()
        """(username, verb, path) RBAC allows on non-resource URLs."""
        self.sessions: dict[tuple[str, str], JsonObject] = {}
        self.session_patches: list[tuple[tuple[str, str], JsonObject]] = []
        """Every merge patch of a session, in order: ((namespace, name), patch)."""
        self.pods: dict[tuple[str, str], JsonObject] = {}
        self.leases: dict[tuple[str, str], JsonObject] = {}
        self.lease_conflicts = 0
        """Lease writes refused for a stale resourceVersion or an existing name (409)."""
        self._versions = 0
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
        self.reviews: list[JsonObject] = []
        """Every review body received, in order."""
        self.review_delay_s = 0.0
        self.review_status = 201
        """Any other status answers reviews with that error (an API server in trouble)."""
        self.caller_tokens: list[str] = []
        """The Authorization header of every request (the gateway's own credential)."""
        self._watchers: list[asyncio.Queue[JsonObject | None]] = []
        self.url = ""

    def accept(self, token: str, username: str, groups: tuple[str, ...] = ()) -> None:
        self.users[token] = {"username": username, "uid": f"uid-{username}", "groups": groups}

    def allow(self, username: str, verb: str, namespace: str) -> None:
        self.allowed.add((username, verb, namespace))

    def allow_url(self, username: str, verb: str, path: str) -> None:
        self.allowed_urls.add((username, verb, path))

    def put_session(self, session: JsonObject, event: str = "ADDED") -> None:
        meta = session["metadata"]
        self.sessions[(meta["namespace"], meta["name"])] = session
        self.push(event, session)

    def delete_session(self, namespace: str, name: str) -> None:
        session = self.sessions.pop((namespace, name))
        self.push("DELETED", session)

    def push(self, event: str, obj: JsonObject) -> None:
        for queue in self._watchers:
            queue.put_nowait({"type": event, "object": obj})

    def count(self, method: str, path: str) -> int:
        return self.requests[(method, path)]

    # --- handlers --------------------------------------------------------------------------
    async def token_review(self, request: web.Request) -> web.Response:
        body = await self._review(request)
        if self.review_status != 201:
            return _status(self.review_status, "ServiceUnavailable", "etcd is unhappy")
        token = body["spec"]["token"]
        if token in self.users:
            status: JsonObject = {"authenticated": True, "user": self.users[token]}
        elif token in self.expired:
            status = {"authenticated": False, "error": "[invalid bearer token, token has expired]"}
        else:
            status = {"authenticated": False, "error": "invalid bearer token"}
        return web.json_response({**body, "status": status}, status=201)

    async def access_review(self, request: web.Request) -> web.Response:
        body = await self._review(request)
        if self.review_status != 201:
            return _status(self.review_status, "ServiceUnavailable", "etcd is unhappy")
        spec = body["spec"]
        if "nonResourceAttributes" in spec:
            url = spec["nonResourceAttributes"]
            allowed = (spec["user"], url["verb"], url["path"]) in self.allowed_urls
        else:
            attributes = spec["resourceAttributes"]
            key = (spec["user"], attributes["verb"], attributes["namespace"])
            allowed = key in self.allowed and attributes["resource"] == "sandboxsessions"
        status = {"allowed": allowed} if allowed else {"allowed": False, "reason": ""}
        return web.json_response({**body, "status": status}, status=201)

    async def _review(self, request: web.Request) -> JsonObject:
        self.requests[("POST", request.path)] += 1
        self.caller_tokens.append(request.headers.get("Authorization", ""))
        body: JsonObject = await request.json()
        self.reviews.append(body)
        if self.review_delay_s:
            await asyncio.sleep(self.review_delay_s)
        return body

    async def sessions_collection(self, request: web.Request) -> web.StreamResponse:
        namespace = request.match_info.get("namespace")
        if request.query.get("watch") == "true":
            return await self._watch(request)
        self.requests[("LIST", request.path)] += 1
        items = [s for (ns, _), s in self.sessions.items() if namespace in (None, ns)]
        return web.json_response(
            {
                "kind": f"{SESSION_KIND}List",
                "apiVersion": API_VERSION,
                "metadata": {"resourceVersion": "1"},
                "items": items,
            }
        )

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        self.requests[("WATCH", request.path)] += 1
        namespace = request.match_info.get("namespace")
        queue: asyncio.Queue[JsonObject | None] = asyncio.Queue()
        self._watchers.append(queue)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        try:
            while (event := await queue.get()) is not None:
                if namespace in (None, event["object"]["metadata"]["namespace"]):
                    await response.write(json.dumps(event).encode() + b"\n")
        finally:
            self._watchers.remove(queue)
        return response

    async def session(self, request: web.Request) -> web.Response:
        self.requests[("GET", request.path)] += 1
        key = (request.match_info["namespace"], request.match_info["name"])
        if key not in self.sessions:
            return _not_found("sandboxsessions", key[1])
        return web.json_response(self.sessions[key])

    async def patch_session(self, request: web.Request) -> web.Response:
        """A JSON merge patch of a session's spec (what a resume or a suspend sends)."""
        self.requests[("PATCH", request.path)] += 1
        key = (request.match_info["namespace"], request.match_info["name"])
        if key not in self.sessions:
            return _not_found("sandboxsessions", key[1])
        patch: JsonObject = await request.json()
        self.session_patches.append((key, patch))
        session = self.sessions[key]
        spec = {**(session.get("spec") or {}), **(patch.get("spec") or {})}
        if spec != session.get("spec"):  # a spec change is a new generation
            session["metadata"]["generation"] = int(session["metadata"].get("generation", 1)) + 1
        session["spec"] = spec
        self._versions += 1
        session["metadata"]["resourceVersion"] = str(self._versions)
        self.push("MODIFIED", session)
        return web.json_response(session)

    async def pod(self, request: web.Request) -> web.Response:
        self.requests[("GET", request.path)] += 1
        key = (request.match_info["namespace"], request.match_info["name"])
        if key not in self.pods:
            return _not_found("pods", key[1])
        return web.json_response(self.pods[key])

    async def lease(self, request: web.Request) -> web.Response:
        self.requests[(request.method, request.path)] += 1
        namespace = request.match_info["namespace"]
        name = request.match_info.get("name")
        if request.method == "GET":
            if (namespace, name) not in self.leases:
                return _not_found("leases", str(name))
            return web.json_response(self.leases[(namespace, str(name))])
        body: JsonObject = await request.json()
        key = (namespace, str(name or body["metadata"]["name"]))
        current = self.leases.get(key)
        if request.method == "POST" and current is not None:
            self.lease_conflicts += 1
            return _status(409, "AlreadyExists", f'leases "{key[1]}" already exists')
        if request.method == "PUT":
            if current is None:
                return _not_found("leases", key[1])
            sent = body["metadata"].get("resourceVersion")
            if sent != current["metadata"]["resourceVersion"]:
                self.lease_conflicts += 1
                return _status(409, "Conflict", "the object has been modified")
        self._versions += 1
        body["metadata"] = {**body["metadata"], "namespace": namespace}
        body["metadata"]["resourceVersion"] = str(self._versions)
        self.leases[key] = body
        return web.json_response(body, status=201 if request.method == "POST" else 200)

    def app(self) -> web.Application:
        app = web.Application()
        sessions = "/apis/sandfleet.dev/v1alpha1"
        app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", self.token_review)
        app.router.add_post(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews", self.access_review
        )
        app.router.add_get(f"{sessions}/sandboxsessions", self.sessions_collection)
        app.router.add_get(
            f"{sessions}/namespaces/{{namespace}}/sandboxsessions", self.sessions_collection
        )
        app.router.add_get(
            f"{sessions}/namespaces/{{namespace}}/sandboxsessions/{{name}}", self.session
        )
        app.router.add_patch(
            f"{sessions}/namespaces/{{namespace}}/sandboxsessions/{{name}}", self.patch_session
        )
        app.router.add_get("/api/v1/namespaces/{namespace}/pods/{name}", self.pod)
        leases = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        app.router.add_post(leases, self.lease)
        app.router.add_get(f"{leases}/{{name}}", self.lease)
        app.router.add_put(f"{leases}/{{name}}", self.lease)
        return app

    def close_watches(self) -> None:
        for queue in self._watchers:
            queue.put_nowait(None)


def _not_found(resource: str, name: str) -> web.Response:
    return _status(404, "NotFound", f'{resource} "{name}" not found')


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason}
    return web.json_response(body | {"message": message, "code": code}, status=code)


@contextlib.asynccontextmanager
async def running_api() -> AsyncIterator[tuple[StandInApiServer, KubeClient]]:
    """The stand-in on 127.0.0.1:<free port> and a KubeClient (the gateway's) pointed at it."""
    api = StandInApiServer()
    runner = web.AppRunner(api.app(), shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    api.url = f"http://127.0.0.1:{port}"
    kube = KubeClient(KubeConfig(server=api.url, token=GATEWAY_SA_TOKEN), timeout_s=5.0)
    try:
        yield api, kube
    finally:
        await kube.close()
        api.close_watches()
        await runner.cleanup()
