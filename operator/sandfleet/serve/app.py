"""The HTTP adapter: the OpenAI API's routes on starlette, served by uvicorn.

starlette, not FastAPI: the `mcp` extra already brings starlette and uvicorn, the bodies are
the `openai` package's own types (FastAPI's request models and OpenAPI page would add a
dependency and a second, hand-written schema), and eight routes need no framework beyond
routing and streaming. Every route answers errors as OpenAI error objects; a bug is a 500
saying so, its traceback only in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from sandfleet.errors import SandfleetError
from sandfleet.logs import get_logger
from sandfleet.serve import chat, responses
from sandfleet.serve.catalog import model_body, models_page
from sandfleet.serve.conversations import StoredResponse
from sandfleet.serve.engine import Outcome
from sandfleet.serve.errors import ApiError, internal_error
from sandfleet.serve.exchanges import CONVERSATION_HEADER, ChatExchange, ResponsesExchange
from sandfleet.serve.files import output_file
from sandfleet.serve.handoff import conversation_of
from sandfleet.serve.metrics import ServeMetrics
from sandfleet.serve.model_access import check_visible, visible_models
from sandfleet.serve.requests import client_token_of, read_json, tenant_of
from sandfleet.serve.service import Running, ServeService

log = get_logger(__name__)

Handler = Callable[[Request], Awaitable[Response]]
CLIENT_GONE = 499  # nginx's "client closed request": only the metrics and the log see it
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
REPLICA_HEADER = "x-sandfleet-replica"
"""On every answer: the host name of the replica that answered (its pod name on a cluster),
so an operator (and a test) sees which replica served a request behind a Service."""


def error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


class ClientGoneError(SandfleetError):
    """The client disconnected before its answer."""


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def until_done_or_gone(request: Request, work: Awaitable[Any]) -> Any:
    """Await `work` unless the client disconnects first (ClientGoneError then)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        raise ClientGoneError
    return task.result()


class _Routes:
    """The route handlers over one ServeService."""

    def __init__(self, service: ServeService) -> None:
        self.service = service
        self.metrics = service.metrics
        self.config = service.config
        self.replica = socket.gethostname()

    def endpoint(self, name: str, handler: Handler) -> Handler:
        """`handler` with the key checked, errors as OpenAI error objects, metrics counted."""

        async def wrapped(request: Request) -> Response:
            request.state.model = "-"
            request.state.token = None
            started = time.perf_counter()
            try:
                request.state.tenant = self._tenant(request)
                response = await handler(request)
            except ApiError as error:
                response = error_response(error)
            except ClientGoneError:
                response = Response(status_code=CLIENT_GONE)
            except Exception:
                log.exception("serve_request_failed", endpoint=name)
                response = error_response(internal_error())
            response.headers[REPLICA_HEADER] = self.replica
            job = getattr(request.state, "job", None)
            if job is not None and response.background is None:
                # The sandbox's release and the refill wait until this response is sent.
                response.background = BackgroundTask(job.answered.set)
            model = request.state.model
            self.metrics.request_done(model, name, response.status_code)
            self.metrics.first_byte(model, name, time.perf_counter() - started)
            if not isinstance(response, StreamingResponse):
                self.metrics.answered(model, name, time.perf_counter() - started)
            return response

        return wrapped

    async def _body(self, request: Request) -> dict[str, Any]:
        limit = self.config.server.max_body_bytes
        return await read_json(request.stream(), request.headers.get("content-length"), limit)

    async def _check_visible(self, request: Request, model: object) -> None:
        await check_visible(self.service.access, model, request.state.token)

    async def list_models(self, request: Request) -> Response:
        names = await visible_models(self.service.access, self.service.models, request.state.token)
        return JSONResponse(models_page(names))

    async def get_model(self, request: Request) -> Response:
        name = request.path_params["model"]
        await self._check_visible(request, name)
        self.service.served(name)
        return JSONResponse(model_body(name))

    async def chat_completions(self, request: Request) -> Response:
        body = await self._body(request)
        wanted, model = request.headers.get(CONVERSATION_HEADER), body.get("model")
        await self._check_visible(request, model)
        if wanted and isinstance(model, str):
            # Cluster mode: the conversation may have been started by another replica.
            await self.service.continue_conversation(wanted, request.state.tenant, model)
        exchange = ChatExchange.read(self.service, request.state.tenant, body, request.headers)
        request.state.model = exchange.job.served.name
        request.state.job = exchange.job
        running = exchange.start()
        if exchange.request.stream:
            return await self._stream(request, running, exchange.stream, exchange.headers())
        outcome = await _answer(request, running)
        return JSONResponse(exchange.body(outcome), headers=exchange.headers())

    async def create_response(self, request: Request) -> Response:
        body = await self._body(request)
        previous, model = body.get("previous_response_id"), body.get("model")
        await self._check_visible(request, model)
        if isinstance(previous, str) and isinstance(model, str):
            # Cluster mode: the conversation may have been started by another replica.
            key = conversation_of(previous)
            await self.service.continue_conversation(key, request.state.tenant, model)
        exchange = ResponsesExchange.read(self.service, request.state.tenant, body)
        request.state.model = exchange.job.served.name
        request.state.job = exchange.job
        running = exchange.start()
        if exchange.request.stream:
            return await self._stream(request, running, exchange.stream)
        outcome = await _answer(request, running)
        return JSONResponse(exchange.body(outcome))

    async def _stream(
        self,
        request: Request,
        running: Running,
        lines: Callable[[Running], AsyncIterator[str]],
        headers: dict[str, str] | None = None,
    ) -> Response:
        """Headers only once the run shows a step or ends: an upstream that is down is a
        plain 502, not a stream that fails."""
        try:
            await until_done_or_gone(request, running.first_event())
        except ClientGoneError:
            await running.cancel()
            raise
        if running.task.done() and running.task.exception() is not None:
            raise running.task.exception()  # type: ignore[misc]
        return StreamingResponse(
            _released_on_exit(running, lines(running), self.metrics),
            media_type="text/event-stream",
            headers={**SSE_HEADERS, **(headers or {})},
        )  # fmt: skip

    async def get_response(self, request: Request) -> Response:
        return JSONResponse(self._stored(request).body)

    async def delete_response(self, request: Request) -> Response:
        key = request.path_params["response_id"]
        tenant = request.state.tenant
        # Cluster mode: another replica answered it; its conversation still ends here.
        if self.service.store.response(key, tenant) is None and (
            await self.service.end_conversation_of(key, tenant)
        ):
            return JSONResponse({"id": key, "object": "response", "deleted": True})
        stored = self._stored(request)
        await self.service.store.delete_response(stored.id)
        return JSONResponse({"id": stored.id, "object": "response", "deleted": True})

    async def response_file(self, request: Request) -> Response:
        stored = self._stored(request)
        name = request.path_params["name"]
        path = await asyncio.to_thread(output_file, stored.files_dir, name)
        if path is None:
            raise ApiError(404, f"no output file {name!r}", param="name", code="file_not_found")
        return FileResponse(path, filename=path.name)

    def _tenant(self, request: Request) -> str:
        if self.config.gateway.identity == "client":
            tenant, token = client_token_of(request.headers)
            self.service.tokens.remember(tenant, token)
            request.state.token = token
            return tenant
        return tenant_of(request.headers, self.config.api_key)

    def _stored(self, request: Request) -> StoredResponse:
        key = request.path_params["response_id"]
        stored = self.service.store.response(key, request.state.tenant)
        if stored is None:
            raise ApiError(404, f"no response {key!r} is stored here", param="response_id",
                           code="not_found")  # fmt: skip
        return stored

    async def metrics_page(self, request: Request) -> Response:
        body, content_type = self.metrics.render(request.headers.get("accept"))
        return Response(body, headers={"content-type": content_type})

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    def routes(self) -> list[Route]:
        e = self.endpoint
        routes = [
            Route("/v1/models", e("models", self.list_models), methods=["GET"]),
            Route("/v1/models/{model:path}", e("models", self.get_model), methods=["GET"]),
            Route("/v1/chat/completions", e(chat.ENDPOINT, self.chat_completions),
                  methods=["POST"]),
            Route("/v1/responses", e(responses.ENDPOINT, self.create_response),
                  methods=["POST"]),
            Route("/v1/responses/{response_id}", e("responses.get", self.get_response),
                  methods=["GET"]),
            Route("/v1/responses/{response_id}", e("responses.delete", self.delete_response),
                  methods=["DELETE"]),
            Route("/v1/responses/{response_id}/files/{name:path}",
                  e("responses.files", self.response_file), methods=["GET"]),
            Route("/v1/chat/completions/{response_id}/files/{name:path}",
                  e("chat.files", self.response_file), methods=["GET"]),
            Route("/healthz", self.healthz, methods=["GET"]),
        ]  # fmt: skip
        if self.config.server.metrics:
            routes.append(Route("/metrics", self.metrics_page, methods=["GET"]))
        return routes


def create_app(service: ServeService) -> Starlette:
    """The app; its lifespan starts the service (warm sandboxes) and closes it."""

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await service.start()
        try:
            yield
        finally:
            await service.aclose()

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        code = "not_found" if error.status_code == 404 else "method_not_allowed"
        message = f"{request.method} {request.url.path}: {error.detail}"
        return error_response(ApiError(error.status_code, message, code=code))

    return Starlette(routes=_Routes(service).routes(), lifespan=lifespan,
                     exception_handlers={HTTPException: http_error})  # fmt: skip


async def _answer(request: Request, running: Running) -> Outcome:
    """The run's outcome; when the client leaves first, the run is cancelled (its sandbox
    released) and ClientGoneError raised."""
    try:
        outcome: Outcome = await until_done_or_gone(request, asyncio.shield(running.task))
    except ClientGoneError:
        log.info("serve_client_gone", response=running.job.response_id)
        await running.cancel()
        raise
    return outcome


async def _released_on_exit(
    running: Running, lines: AsyncIterator[str], metrics: ServeMetrics
) -> AsyncIterator[str]:
    """The stream's lines; when the client goes away mid-stream (starlette cancels this
    generator), the loop is cancelled and its sandbox released before anything else."""
    job = running.job
    try:
        async for line in lines:
            yield line
        metrics.answered(job.served.name, job.endpoint, time.perf_counter() - job.started)
    finally:
        if not running.task.done():
            log.info("serve_client_gone", response=running.job.response_id)
        with anyio.CancelScope(shield=True):
            await running.cancel()


async def serve_http(app: Starlette, *, host: str, port: int) -> None:
    """Serve `app` with uvicorn until cancelled (Ctrl-C): conversations end, sandboxes go."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
