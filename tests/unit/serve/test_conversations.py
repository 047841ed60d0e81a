"""The conversation store: an idle conversation is released after its TTL, a busy one never,
and deleting a response ends its conversation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sandfleet.serve.conversations import Conversation, ConversationStore, StoredResponse
from sandfleet.serve.handoff import (
    conversation_of,
    history_of,
    is_conversation_id,
    response_id_for,
    seconds_since_used,
)


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


async def test_a_conversation_another_replica_answered_in_lately_is_kept_past_the_ttl() -> None:
    released = Released()
    elsewhere = {"recent": 10.0, "stale": 90.0}

    async def used_elsewhere(conversation: Conversation) -> float | None:
        return elsewhere.get(conversation.id)

    store = ConversationStore(ttl_s=60, release=released, used_elsewhere=used_elsewhere)
    for key in ("recent", "stale", "unknown"):
        store.add(conversation(key, last_used=0))
    assert await store.reap(now=100) == 2
    assert released.ids == ["stale", "unknown"]
    # Its idle clock restarted at the other replica's answer (100 - 10): ended 60 s later.
    assert store.conversations["recent"].last_used == 90
    assert await store.reap(now=149) == 0
    elsewhere.clear()
    assert await store.reap(now=151) == 1


def test_a_response_id_names_its_conversation() -> None:
    key = "conv_0123456789abcdef01234567"
    response_id = response_id_for(key, "feedface")
    assert response_id == "resp_0123456789abcdef01234567_feedface"
    assert conversation_of(response_id) == key
    for other in ("resp_abc", "chatcmpl_1_2", "resp_../x_1", ""):
        assert conversation_of(other) is None


def test_a_state_read_back_keeps_only_well_formed_exchanges() -> None:
    state = {"history": [["q", "a"], ["only one"], "text", [1, 2]], "updated": 5}
    assert history_of(state) == [("q", "a"), ("1", "2")]
    assert history_of({"history": "no"}) == []
    assert seconds_since_used(None) is None
    assert seconds_since_used({"updated": "soon"}) is None
    assert (seconds_since_used({"updated": 1.0}) or 0) > 0


def test_only_conversation_ids_of_serves_shape_are_claimed_with() -> None:
    assert is_conversation_id("conv_0123456789abcdef01234567")
    for other in ("new", "conv_", "conv_../../x", "conv_a b", "conv_" + "a" * 65, "résumé"):
        assert not is_conversation_id(other)
