"""Conversations and stored responses: a follow-up (previous_response_id) runs in the same
sandbox, its files kept, until DELETE or an idle TTL releases it.

State lives in this process (one replica). An idle conversation is released, not suspended:
suspend/resume (issue #23) is not built yet, so after the TTL a follow-up is refused with a
clear error instead of continuing in a fresh sandbox that lacks the files.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sandfleet.logs import get_logger
from sandfleet.sandbox.facade import Sandbox

log = get_logger(__name__)


@dataclasses.dataclass(eq=False)
class Conversation:
    id: str
    model: str
    tenant: str
    sandbox: Sandbox
    history: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    """(the user's message, the answer) of each exchange so far."""
    busy: bool = False
    """A request is running in it (a second one is refused, the reaper passes it by)."""
    last_used: float = dataclasses.field(default_factory=time.monotonic)
    response_ids: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(eq=False)
class StoredResponse:
    id: str
    tenant: str
    body: dict[str, Any]
    """The response as GET returns it."""
    files_dir: Path
    conversation_id: str | None = None


Release = Callable[[Conversation], Awaitable[None]]
UsedElsewhere = Callable[[Conversation], Awaitable[float | None]]
"""Seconds since another replica last answered in the conversation (None: unknown)."""


class ConversationStore:
    def __init__(
        self, *, ttl_s: float, release: Release, used_elsewhere: UsedElsewhere | None = None
    ) -> None:
        self._ttl_s = ttl_s
        self._release = release
        self._used_elsewhere = used_elsewhere
        self.conversations: dict[str, Conversation] = {}
        self.responses: dict[str, StoredResponse] = {}
        self._reaper: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    def add(self, conversation: Conversation) -> None:
        self.conversations[conversation.id] = conversation

    def store(self, response: StoredResponse) -> None:
        self.responses[response.id] = response
        conversation = self.conversations.get(response.conversation_id or "")
        if conversation is not None:
            conversation.response_ids.append(response.id)

    def response(self, response_id: str, tenant: str) -> StoredResponse | None:
        """A stored response of `tenant` (another tenant's is as good as absent)."""
        stored = self.responses.get(response_id)
        return stored if stored is not None and stored.tenant == tenant else None

    async def delete_response(self, response_id: str) -> None:
        """Forget the response, its files and its whole conversation (sandbox released)."""
        stored = self.responses.pop(response_id, None)
        if stored is None:
            return
        await asyncio.to_thread(shutil.rmtree, stored.files_dir, True)
        if stored.conversation_id is not None:
            await self.end(stored.conversation_id)

    async def end(self, conversation_id: str) -> None:
        conversation = self.conversations.pop(conversation_id, None)
        if conversation is None:
            return
        for response_id in conversation.response_ids:
            kept = self.responses.get(response_id)
            if kept is not None:
                kept.conversation_id = None  # its files stay until the response is deleted
        log.info("serve_conversation_ended", conversation=conversation_id)
        await self._release(conversation)

    async def aclose(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        await asyncio.gather(*(self.end(key) for key in list(self.conversations)))

    async def reap(self, now: float | None = None) -> int:
        """End the conversations idle longer than the TTL (not one running a request)."""
        moment = time.monotonic() if now is None else now
        idle = [
            c.id
            for c in self.conversations.values()
            if not c.busy and moment - c.last_used > self._ttl_s
        ]
        ended = 0
        for key in idle:
            if await self._still_used(key, moment):
                continue
            await self.end(key)
            ended += 1
        return ended

    async def _still_used(self, key: str, moment: float) -> bool:
        """Whether another replica answered in the conversation within the TTL (then its
        idle clock restarts from that answer instead of the sandbox being released)."""
        conversation = self.conversations.get(key)
        if conversation is None or self._used_elsewhere is None:
            return False
        ago = await self._used_elsewhere(conversation)
        if ago is None or ago > self._ttl_s:
            return False
        conversation.last_used = moment - ago
        return True

    async def _reap_forever(self) -> None:
        period = min(max(self._ttl_s / 4, 0.5), 60.0)
        while True:
            await asyncio.sleep(period)
            await self.reap()
