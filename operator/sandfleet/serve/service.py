"""The serving core, without HTTP: served models, their sandboxes and upstreams, limits,
conversations, and one request's run (`Job` -> `Running` -> `Outcome`).

The HTTP adapter (app) and the two API mappings (chat, responses) use it; it knows neither.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from sandfleet.agent import StopReason, Task
from sandfleet.errors import SandfleetError
from sandfleet.logs import get_logger
from sandfleet.sandbox.copy_back import CopyLimits
from sandfleet.sandbox.facade import Sandbox
from sandfleet.serve.config import ServeConfig, ServedModel
from sandfleet.serve.conversations import Conversation, ConversationStore
from sandfleet.serve.engine import Emit, Outcome, StepEvent, forget_answer, run_loop
from sandfleet.serve.errors import (
    ApiError,
    bad_request,
    claim_failed,
    model_not_found,
    upstream_failed,
)
from sandfleet.serve.handoff import (
    conversation_of,
    history_of,
    is_conversation_id,
    load_state,
    save_state,
    seconds_since_used,
)
from sandfleet.serve.limits import TenantLimiter
from sandfleet.serve.metrics import ServeMetrics
from sandfleet.serve.model_access import NamespaceAccess
from sandfleet.serve.model_watch import ServedModels
from sandfleet.serve.registry import ModelTable
from sandfleet.serve.requests import ClientTokens
from sandfleet.serve.sandboxes import AfterAnswer, SandboxSource, close_quietly
from sandfleet.serve.served_models import namespace_of

log = get_logger(__name__)


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


@dataclasses.dataclass(frozen=True, slots=True)
class Sampling:
    """Per-request knobs over the served model's defaults (None: the default)."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None


@dataclasses.dataclass(slots=True)
class Job:
    """One request's work: which model, what to ask, in which sandbox."""

    served: ServedModel
    tenant: str
    endpoint: str
    response_id: str
    message: str
    """The user's message as the conversation history keeps it."""
    prompt: str
    """The whole problem statement the loop gets (history and attachments included)."""
    files: Mapping[str, bytes] = dataclasses.field(default_factory=dict)
    sampling: Sampling = Sampling()
    conversation: Conversation | None = None
    """Continue in this conversation's sandbox (its lock is held by the request)."""
    keep: bool = False
    """Keep the sandbox afterwards as a new conversation (responses with store)."""
    conversation_id: str = dataclasses.field(default_factory=lambda: new_id("conv"))
    """The id a kept conversation gets (known before the run: streamed items name it)."""
    started: float = dataclasses.field(default_factory=time.perf_counter)
    answered: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    """Set by the HTTP layer once the answer has been sent (or the client is gone)."""


class ServeService:
    def __init__(self, config: ServeConfig, *, files_root: Path | None = None) -> None:
        self.config = config
        server = config.server
        self.metrics = ServeMetrics(config.models)
        self.table = ModelTable(config, self.metrics)
        self.models = self.table.models
        """The models served now, by name (ServedModel objects change it live)."""
        self.limiter = TenantLimiter(server.max_concurrent_per_tenant)
        self.store = ConversationStore(
            ttl_s=server.conversation_ttl_seconds, release=self._release,
            used_elsewhere=self._used_elsewhere,
        )  # fmt: skip
        self._own_root = files_root is None
        self.files_root = files_root or Path(tempfile.mkdtemp(prefix="sandfleet-serve-"))
        self._limits = CopyLimits(max_bytes=server.max_output_bytes,
                                  max_files=server.max_output_files)  # fmt: skip
        self.tokens = ClientTokens()
        """gateway.identity = client: each tenant's latest bearer token, claimed with."""
        self._after_answer = AfterAnswer()
        self.watch = ServedModels.configured(config, self)
        """Cluster mode with served_models: the ServedModel objects, watched."""
        self.access: NamespaceAccess | None = None if self.watch is None else self.watch.access

    async def start(self) -> None:
        self.table.start()
        self.store.start()
        if self.watch is not None:
            self.watch.start()

    async def aclose(self) -> None:
        if self.watch is not None:
            await self.watch.aclose()
        await self._after_answer.aclose()
        await self.store.aclose()
        await self.table.aclose()
        if self._own_root:
            await asyncio.to_thread(_remove_tree, self.files_root)

    def put_model(self, served: ServedModel) -> None:
        self.table.put(served)

    def drop_model(self, name: str) -> None:
        self.table.drop(name)

    def served(self, name: object) -> ServedModel:
        """The served model `name`; ApiError 400 (param `model`) for any other."""
        if not isinstance(name, str) or not name:
            raise bad_request("`model` is required: name a served model", "model")
        served = self.models.get(name)
        if served is None:
            raise model_not_found(name)
        return served

    def start_job(self, job: Job) -> Running:
        """Run `job` in the background (the tenant's slot is taken here: 429 when full)."""
        self.limiter.acquire(job.tenant)
        try:
            return Running(self, job)
        except BaseException:
            self.limiter.release(job.tenant)
            raise

    async def run(self, job: Job, emit: Emit) -> Outcome:
        """Take a sandbox, run the loop, give the sandbox back unless it is kept.

        Raises ApiError for what a client must hear as an error (502 for the upstream, 503
        when no sandbox starts); CancelledError when the client went away.
        """
        with self.table.in_use(job.served):
            return await self._run(job, emit)

    async def _run(self, job: Job, emit: Emit) -> Outcome:
        served = job.served
        sandbox: Sandbox | None = await self._sandbox_for(job)
        kept = False
        self.metrics.loop_started(served.name)
        outcome: Outcome | None = None
        try:
            assert sandbox is not None
            outcome = await self._run_in(job, sandbox, emit)
            lost = outcome.result.stop_reason is StopReason.SANDBOX_LOST
            if lost and not outcome.steps and job.conversation is None:
                # Nothing was streamed yet: the client need not know (retried once).
                log.warning("serve_sandbox_lost_retrying", response=job.response_id)
                self._source(job).release(sandbox)
                sandbox = None
                sandbox = await self._sandbox_for(job)
                outcome = await self._run_in(job, sandbox, emit)
            elif lost and job.conversation is not None:
                await self.store.end(job.conversation.id)  # its sandbox is gone
            kept = self._keep(job, sandbox, outcome)
            if job.conversation is not None and self.on_cluster(served.name):
                await save_state(job.conversation)  # for the replica a follow-up reaches
        finally:
            self.metrics.loop_ended(
                served.name,
                turns=None if outcome is None else outcome.result.turns,
                tool_calls=None if outcome is None else len(outcome.steps),
            )
            spare = sandbox if job.conversation is None and not kept else None
            if outcome is None:  # failed or cancelled: no answer to send first
                self._tidy(job, spare)
            else:
                self._after_answer.run(job.answered, lambda: self._tidy(job, spare))
        return _checked(served, outcome)

    def _tidy(self, job: Job, spare: Sandbox | None) -> None:
        """Release the sandbox a finished job does not keep; refill the warm pool."""
        if spare is not None:
            self._source(job).release(spare)
        self._source(job).refill()

    async def _run_in(self, job: Job, sandbox: Sandbox, emit: Emit) -> Outcome:
        served = job.served
        sampling = job.sampling
        client = self.table.entry(served).upstream
        assert client is not None  # opened at start, or when the model was added
        upstream = client.with_sampling(
            temperature=sampling.temperature, top_p=sampling.top_p, seed=sampling.seed
        )
        config = served.agent
        if sampling.max_tokens is not None:
            config = dataclasses.replace(config, max_tokens=sampling.max_tokens)
        return await run_loop(
            task=Task(id=job.response_id, prompt=job.prompt, files=dict(job.files)),
            sandbox=sandbox,
            model=upstream,
            config=config,
            emit=emit,
            on_model_call=lambda seconds: self.metrics.upstream_call(served.name, seconds),
            outputs_to=self.files_root / job.response_id,
            limits=self._limits,
            fresh=job.conversation is None,
        )

    async def _sandbox_for(self, job: Job) -> Sandbox:
        if job.conversation is not None:
            sandbox = job.conversation.sandbox
            try:
                await forget_answer(sandbox)
            except SandfleetError as error:
                await self.store.end(job.conversation.id)
                raise ApiError(
                    409, f"the conversation's sandbox is gone ({error}); start a new one",
                    param="previous_response_id", code="conversation_lost",
                ) from error  # fmt: skip
            return sandbox
        claimed = time.perf_counter()
        try:
            sandbox = await self._source(job).take(
                job.conversation_id if job.keep else None, token=self.tokens.get(job.tenant)
            )
        except (SandfleetError, OSError) as error:
            log.warning("serve_sandbox_start_failed", model=job.served.name, error=str(error))
            raise claim_failed(error) from error
        self.metrics.claimed(job.served.name, time.perf_counter() - claimed)
        return sandbox

    def _keep(self, job: Job, sandbox: Sandbox, outcome: Outcome) -> bool:
        """Remember the exchange in the job's conversation, or start one with `sandbox`."""
        answer = outcome.result.answer or ""
        if job.conversation is not None:
            job.conversation.history.append((job.message, answer))
            job.conversation.last_used = time.monotonic()
            return False
        if not job.keep or outcome.result.stop_reason in _FAILED:
            return False
        conversation = Conversation(job.conversation_id, job.served.name, job.tenant, sandbox)
        conversation.history.append((job.message, answer))
        self.store.add(conversation)
        job.conversation = conversation
        return True

    def _source(self, job: Job) -> SandboxSource:
        return self.table.entry(job.served).source

    def warm_sandboxes(self) -> int:
        """Started sandboxes waiting for a request, over every served model."""
        return sum(source.ready for source in self.table.sources())

    def open_sandboxes(self) -> int:
        """Sandboxes started and not closed, over every served model (warm ones included)."""
        return sum(source.open for source in self.table.sources())

    async def _release(self, conversation: Conversation) -> None:
        entry = self.table.named(conversation.model)
        if entry is None:  # its ServedModel was deleted: the session still goes
            await close_quietly(conversation.sandbox)
        else:
            entry.source.release(conversation.sandbox)

    def on_cluster(self, model: str) -> bool:
        served = self.models.get(model)
        if served is None:
            return namespace_of(model) is not None
        return served.spec.sandbox == "cluster"

    async def _used_elsewhere(self, conversation: Conversation) -> float | None:
        if not self.on_cluster(conversation.model):
            return None
        return seconds_since_used(await load_state(conversation.sandbox))

    async def continue_conversation(self, key: str | None, tenant: str, model: str) -> None:
        """Cluster mode: make the conversation `key` (conversation_of a previous response
        id, or a chat request's conversation header) known here before a follow-up is read,
        whichever replica started it: claim its session again (the same claim id returns the
        same session) and read its state from the sandbox, or refresh the history of one
        known here from it (another replica may have answered since). Does nothing when the
        conversation cannot be found: the follow-up is then refused as an unknown one."""
        if key is None or not is_conversation_id(key):
            return
        if model not in self.models or not self.on_cluster(model):
            return
        known = self.store.conversations.get(key)
        if known is not None:
            if not known.busy and known.tenant == tenant:
                state = await load_state(known.sandbox)
                if state is not None:
                    known.history = history_of(state)
            return
        await self._adopt(key, tenant, model)

    async def end_conversation_of(self, response_id: str, tenant: str) -> bool:
        """Cluster mode: end (release) the conversation a response another replica answered
        names, found as continue_conversation finds it; False when there is none."""
        key = conversation_of(response_id)
        if key is None:
            return False
        for model in list(self.models):
            if key not in self.store.conversations:
                await self.continue_conversation(key, tenant, model)
        conversation = self.store.conversations.get(key)
        if conversation is None or conversation.tenant != tenant:
            return False
        await self.store.end(key)
        return True

    async def _adopt(self, key: str, tenant: str, model: str) -> None:
        entry = self.table.named(model)
        if entry is None:
            return
        source = entry.source
        try:
            sandbox = await source.take(key, token=self.tokens.get(tenant))
        except (SandfleetError, OSError) as error:
            log.warning("serve_conversation_not_reclaimed", conversation=key, error=str(error))
            return
        state = await load_state(sandbox)
        if state is None or (state.get("tenant"), state.get("model")) != (tenant, model):
            source.release(sandbox)  # a new session (the old one is gone), or not theirs
            return
        if key in self.store.conversations:  # adopted meanwhile by a concurrent request
            return
        conversation = Conversation(key, model, tenant, sandbox, history_of(state))
        self.store.add(conversation)
        log.info("serve_conversation_continued_here", conversation=key)


_FAILED = frozenset({StopReason.MODEL_ERROR, StopReason.SANDBOX_LOST})
"""Runs that are answered with an error: their sandbox never starts a conversation."""


def _checked(served: ServedModel, outcome: Outcome | None) -> Outcome:
    assert outcome is not None
    result = outcome.result
    if result.stop_reason is StopReason.MODEL_ERROR:
        raise upstream_failed(served.name, result.error or "no answer")
    if result.stop_reason is StopReason.SANDBOX_LOST:
        raise ApiError(503, f"the sandbox was lost: {result.error}",
                       error_type="server_error", code="sandbox_lost")  # fmt: skip
    return outcome


class Running:
    """A job running in the background: its step events in order, then its outcome."""

    def __init__(self, service: ServeService, job: Job) -> None:
        self.job = job
        self._service = service
        self.events: asyncio.Queue[StepEvent | None] = asyncio.Queue()
        self._peeked: list[StepEvent | None] = []
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> Outcome:
        try:
            return await self._service.run(self.job, self.events.put_nowait)
        finally:
            self._service.limiter.release(self.job.tenant)
            self.events.put_nowait(None)

    async def first_event(self) -> None:
        """Wait for the first step event or the run's end (next_event still returns it)."""
        if not self._peeked:
            self._peeked.append(await self.events.get())

    async def next_event(self) -> StepEvent | None:
        """The next step event, or None once the run has ended (then await `outcome`)."""
        if self._peeked:
            return self._peeked.pop()
        return await self.events.get()

    async def outcome(self) -> Outcome:
        return await self.task

    async def cancel(self) -> None:
        """Stop the loop (the client went away, or the stream ended); returns once the
        sandbox is released."""
        self.job.answered.set()  # nothing more goes to the client
        if not self.task.done():
            self.task.cancel()
        await asyncio.wait({self.task})  # never raises the run's own exception


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
