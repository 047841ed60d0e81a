"""The trajectory format's constants: the version and the record kinds.

The format itself (every kind and its keys) is documented in docs/trajectory-format.md.
"""

from __future__ import annotations

from typing import Final

FORMAT_VERSION: Final = 1
"""Written into the meta record; bump it when a record kind changes incompatibly (new keys
are compatible: readers test for them)."""

RECORD_KINDS: Final = (
    "meta", "message", "retry", "tool_call", "observation", "usage", "tokens", "notice", "result",
)  # fmt: skip
"""The kinds the loop writes. Every record carries "kind"; readers ignore kinds they do not
know, so this list may grow without a new FORMAT_VERSION."""

TOKENS_KIND: Final = "tokens"
"""The record of one model turn's tokens, in runs that record them (meta "record_tokens":
true): {"kind": "tokens", "turn", "prompt_ids", "completion_ids", "logprobs", "source",
"unavailable"}. The ids and logprobs are the endpoint's own, never re-tokenised: a part it did
not return is null, and "unavailable" maps that part's name to why; "source" maps each part
present to the response field it came from. Runs that do not record tokens write no such
record and no "record_tokens" key."""
