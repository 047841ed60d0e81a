"""The conversation store: an idle conversation is released after its TTL, a busy one never,
and deleting a response ends its conversation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sandfleet.serve.conversations import Conversation, ConversationStore, StoredResponse


class Released:
    def __init__(self) -> None:
        self.ids: list[str] = []

    async def __call__(self, conversation: Conversation) -> None:
        self.ids.append(conversation.id)


def conversation(key: str, last_used: float) -> Conversation:
    sandbox: Any = object()  # the store never touches it; its release callback does
    return Conversation(key, "m", "local", sandbox, last_used=last_used)


async def test_idle_conversations_are_released_after_the_ttl_busy_ones_are_not() -> None:
    released = Released()
    store = ConversationStore(ttl_s=60, release=released)
    store.add(conversation("idle", last_used=0))
    store.add(conversation("fresh", last_used=50))
    busy = conversation("busy", last_used=0)
    busy.busy = True
    store.add(busy)
    assert await store.reap(now=100) == 1
    assert released.ids == ["idle"]
    assert set(store.conversations) == {"fresh", "busy"}


async def test_deleting_a_response_ends_its_conversation_and_removes_its_files(
    tmp_path: Path,
) -> None:
    released = Released()
    store = ConversationStore(ttl_s=60, release=released)
    store.add(conversation("c", last_used=0))
    files = tmp_path / "resp_1"
    files.mkdir()
    (files / "out.txt").write_text("x")
    store.store(StoredResponse("resp_1", "local", {}, files, "c"))
    assert store.response("resp_1", "someone-else") is None  # another tenant's is absent
    await store.delete_response("resp_1")
    assert released.ids == ["c"]
    assert not files.exists()
    assert store.response("resp_1", "local") is None
