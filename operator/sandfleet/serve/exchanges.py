"""One API request from its body to its answer: ChatExchange and ResponsesExchange.

Each reads its body into a Job for the service, and turns the run's steps and outcome into
that API's answer: a JSON body, or the lines of its event stream.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping
from typing import Any

from sandfleet.serve import chat, responses
from sandfleet.serve.conversations import Conversation, StoredResponse
from sandfleet.serve.engine import Outcome, StepEvent, StepStarted
from sandfleet.serve.errors import ApiError, bad_request
from sandfleet.serve.files import unique_files
from sandfleet.serve.handoff import conversation_of, response_id_for
from sandfleet.serve.prompts import problem_statement
from sandfleet.serve.requests import parse
from sandfleet.serve.service import Job, Running, Sampling, ServeService, new_id

CONVERSATION_HEADER = "x-sandfleet-conversation"
"""Chat completions: `new` keeps the request's sandbox as a conversation (its id comes back
in the same header); an id continues in that conversation's sandbox."""


def extension(service: ServeService, job: Job, route: str, outcome: Outcome) -> dict[str, Any]:
    """The `sandfleet` field: accounting, the output files' URLs, the conversation."""
    files = [
        {"name": f.name, "bytes": f.size, "url": f"{route}/{job.response_id}/files/{f.name}"}
        for f in outcome.files
    ]
    conversation = job.conversation.id if job.conversation is not None else None
    return {**outcome.accounting(), "files": files, "conversation_id": conversation}


def _remember(service: ServeService, job: Job, body: dict[str, Any], store: bool) -> None:
    """Keep the answer for GET and its output files (a response not stored keeps its files
    only when it has some, so they can be downloaded)."""
    if not store and not body.get("sandfleet", {}).get("files"):
        return
    conversation = job.conversation.id if job.conversation is not None else None
    files = service.files_root / job.response_id
    service.store.store(StoredResponse(job.response_id, job.tenant, body, files, conversation))


def _conversation(
    service: ServeService, key: str, tenant: str, model: str, param: str
) -> Conversation:
    conversation = service.store.conversations.get(key)
    if conversation is None or conversation.tenant != tenant:
        raise bad_request(
            f"the conversation of {key!r} has ended (deleted, or idle past the server's TTL: "
            "idle conversations are released, suspend/resume is not built yet); start a new one",
            param, "conversation_not_found",
        )  # fmt: skip
    if conversation.model != model:
        raise bad_request(f"the conversation runs model {conversation.model!r}", "model")
    if conversation.busy:
        raise ApiError(409, "the conversation is answering another request; retry after it",
                       param=param, code="conversation_busy")  # fmt: skip
    return conversation


def _previous_conversation(service: ServeService, response_id: str, tenant: str) -> str:
    """The conversation a previous_response_id continues: its stored response's, else (a
    response another replica answered) the one its id names, when that is known here."""
    stored = service.store.response(response_id, tenant)
    if stored is not None:
        return stored.conversation_id or ""
    named = conversation_of(response_id)
    if named is not None and named in service.store.conversations:
        return named
    raise bad_request(f"no response {response_id!r} is stored here",
                      "previous_response_id", "not_found")  # fmt: skip


def _hold(running: Running, conversation: Conversation | None) -> Running:
    """Mark the conversation busy while `running` runs."""
    if conversation is not None:
        conversation.busy = True

        def free(_: object) -> None:
            conversation.busy = False

        running.task.add_done_callback(free)
    return running


@dataclasses.dataclass
class ChatExchange:
    service: ServeService
    request: chat.ChatRequest
    job: Job
    route = "/v1/chat/completions"

    @classmethod
    def read(cls, service: ServeService, tenant: str, body: dict[str, Any],
             headers: Mapping[str, str]) -> ChatExchange:  # fmt: skip
        request = parse(chat.ChatRequest, body)
        served = service.served(request.model)
        turns, files = chat.read_messages(request.messages)
        named = unique_files(files)
        wanted = headers.get(CONVERSATION_HEADER)
        conversation = None
        if wanted and wanted != "new":
            conversation = _conversation(service, wanted, tenant, served.name, CONVERSATION_HEADER)
        max_tokens = request.max_completion_tokens or request.max_tokens
        sampling = Sampling(request.temperature, request.top_p, max_tokens, request.seed)
        job = Job(served, tenant, chat.ENDPOINT, new_id("chatcmpl"), turns[-1].text,
                  problem_statement(turns, named), named, sampling, conversation,
                  keep=wanted == "new")  # fmt: skip
        return cls(service, request, job)

    def start(self) -> Running:
        return _hold(self.service.start_job(self.job), self.job.conversation)

    def headers(self) -> dict[str, str]:
        """The conversation header: the one continued, or the one this request starts."""
        job = self.job
        if job.conversation is not None:
            return {CONVERSATION_HEADER: job.conversation.id}
        return {CONVERSATION_HEADER: job.conversation_id} if job.keep else {}

    def body(self, outcome: Outcome) -> dict[str, Any]:
        ext = extension(self.service, self.job, self.route, outcome)
        body = chat.completion(self.job.response_id, self.job.served.name, outcome, ext)
        _remember(self.service, self.job, body, store=False)
        return body

    async def stream(self, running: Running) -> AsyncIterator[str]:
        writer = chat.ChunkWriter(self.job.response_id, self.job.served.name)
        yield writer.delta(role="assistant", content="")
        while (event := await running.next_event()) is not None:
            yield writer.delta(reasoning_content=chat.step_text(event))
        try:
            outcome = await running.outcome()
        except ApiError as error:
            yield chat.sse_error(error)
            return
        ext = extension(self.service, self.job, self.route, outcome)
        _remember(self.service, self.job, chat.completion(self.job.response_id,
                  self.job.served.name, outcome, ext), store=False)  # fmt: skip
        yield writer.delta(content=outcome.result.answer or "")
        yield writer.delta(finish=chat.finish_reason(outcome))
        options = self.request.stream_options
        if options is not None and options.include_usage:
            yield writer.usage(outcome, ext)
        yield "data: [DONE]\n\n"


@dataclasses.dataclass
class ResponsesExchange:
    service: ServeService
    request: responses.ResponsesRequest
    job: Job
    shape: responses.ResponseShape
    route = "/v1/responses"

    @classmethod
    def read(cls, service: ServeService, tenant: str, body: dict[str, Any]) -> ResponsesExchange:
        request = parse(responses.ResponsesRequest, body)
        served = service.served(request.model)
        turns, files = responses.read_input(request)
        named = unique_files(files)
        conversation = None
        if request.previous_response_id is not None:
            key = _previous_conversation(service, request.previous_response_id, tenant)
            conversation = _conversation(service, key, tenant, served.name,
                                         "previous_response_id")  # fmt: skip
        history = conversation.history if conversation is not None else ()
        sampling = Sampling(request.temperature, request.top_p, request.max_output_tokens)
        key = conversation.id if conversation is not None else new_id("conv")
        response_id = response_id_for(key, new_id("r").removeprefix("r_"))
        job = Job(served, tenant, responses.ENDPOINT, response_id, turns[-1].text,
                  problem_statement(turns, named, history), named, sampling, conversation,
                  keep=request.store and conversation is None, conversation_id=key)  # fmt: skip
        return cls(service, request, job, responses.ResponseShape(job.response_id, served.name,
                                                                  request))  # fmt: skip

    @property
    def container(self) -> str:
        job = self.job
        return job.conversation.id if job.conversation is not None else job.conversation_id

    def start(self) -> Running:
        return _hold(self.service.start_job(self.job), self.job.conversation)

    def body(self, outcome: Outcome) -> dict[str, Any]:
        ext = extension(self.service, self.job, self.route, outcome)
        body = responses.response_body(self.shape, self.container, outcome, ext)
        _remember(self.service, self.job, body, store=self.request.store)
        return body

    async def stream(self, running: Running) -> AsyncIterator[str]:
        writer = responses.EventWriter(self.shape, self.container)
        for line in writer.started():
            yield line
        while (event := await running.next_event()) is not None:
            lines = _step_lines(writer, event)
            for line in lines:
                yield line
        try:
            outcome = await running.outcome()
        except ApiError as error:
            yield writer.failed(error)
            return
        ext = extension(self.service, self.job, self.route, outcome)
        _remember(self.service, self.job,
                  responses.response_body(self.shape, self.container, outcome, ext),
                  store=self.request.store)  # fmt: skip
        for line in writer.answered(outcome, ext):
            yield line


def _step_lines(writer: responses.EventWriter, event: StepEvent) -> list[str]:
    if isinstance(event, StepStarted):
        return writer.step_started(event.step)
    return writer.step_finished(event.step)
