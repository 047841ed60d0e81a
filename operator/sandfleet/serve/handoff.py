"""Conversations that any serve replica can continue (cluster mode).

A conversation's sandbox is claimed with the conversation id as its idempotent claim id, so
the gateway names the session from it and hands the same session back when any replica of
the same identity claims with that id again. Every response id names its conversation
(`resp_<conversation>_<random>`), and after each answer the conversation's state (its model,
tenant and exchanges so far, and when it was last used) is written into the sandbox itself,
outside the working directory: the state lives exactly as long as the sandbox, needs no
store of its own, and is read back through the gateway by the replica a follow-up reaches.

A chat conversation (its id in the x-sandfleet-conversation header) continues the same way.
Not covered: two follow-ups of one conversation reaching two replicas at the same moment
(each replica refuses a second request only for itself), and stored responses and their
output files, which stay in the memory and disk of the replica that answered.
"""

from __future__ import annotations

import json
import time
from typing import Any

from sandfleet.errors import SandfleetError
from sandfleet.logs import get_logger
from sandfleet.sandbox.facade import Sandbox
from sandfleet.serve.conversations import Conversation

log = get_logger(__name__)

STATE_PATH = "/tmp/.sandfleet-serve-conversation.json"
"""Outside the working directory the model lists; a model that finds and edits it changes
only its own conversation's history."""
STATE_SESSION = "sandfleet-serve"
"""A bash session of its own: reading the state never touches the model's shell."""
_PREFIX = "resp_"
_CONVERSATION = "conv_"


def response_id_for(conversation_id: str, suffix: str) -> str:
    """A response id that names its conversation."""
    return f"{_PREFIX}{conversation_id.removeprefix(_CONVERSATION)}_{suffix}"


def conversation_of(response_id: str) -> str | None:
    """The conversation id a response id names (None: an id of another shape)."""
    if not response_id.startswith(_PREFIX):
        return None
    key, underscore, _ = response_id.removeprefix(_PREFIX).partition("_")
    if not underscore or not key.isalnum():
        return None
    return f"{_CONVERSATION}{key}"


def is_conversation_id(key: str) -> bool:
    """Whether `key` has the shape of the conversation ids serve hands out (only those are
    claimed with: a client's header must not pick arbitrary claim ids)."""
    rest = key.removeprefix(_CONVERSATION)
    return rest != key and rest.isalnum() and rest.isascii() and len(rest) <= 64


async def save_state(conversation: Conversation) -> None:
    """Write the conversation's state into its sandbox (a failure is logged: the answer is
    already there, and only another replica's follow-up would miss it)."""
    state = {
        "id": conversation.id,
        "model": conversation.model,
        "tenant": conversation.tenant,
        "history": conversation.history,
        "updated": time.time(),
    }
    try:
        await conversation.sandbox.upload(json.dumps(state).encode(), STATE_PATH, mode=0o600)
    except (SandfleetError, OSError) as error:
        log.warning("serve_conversation_state_not_saved", conversation=conversation.id,
                    error=str(error))  # fmt: skip


async def load_state(sandbox: Sandbox) -> dict[str, Any] | None:
    """The state a replica wrote into `sandbox`, or None (a fresh sandbox, or unreadable)."""
    try:
        result = await sandbox.bash(f"cat {STATE_PATH} 2>/dev/null", session=STATE_SESSION)
    except (SandfleetError, OSError) as error:
        log.warning("serve_conversation_state_not_read", error=str(error))
        return None
    if result.exit_code != 0:
        return None
    try:
        state = json.loads(result.stdout)
    except ValueError:
        return None
    return state if isinstance(state, dict) else None


def history_of(state: dict[str, Any]) -> list[tuple[str, str]]:
    """The (message, answer) exchanges of a state (malformed entries left out)."""
    exchanges = state.get("history")
    if not isinstance(exchanges, list):
        return []
    return [
        (str(item[0]), str(item[1]))
        for item in exchanges
        if isinstance(item, list) and len(item) == 2
    ]


def seconds_since_used(state: dict[str, Any] | None) -> float | None:
    """How long ago any replica last answered in the conversation (None: unknown)."""
    if state is None or not isinstance(state.get("updated"), int | float):
        return None
    return max(0.0, time.time() - float(state["updated"]))
