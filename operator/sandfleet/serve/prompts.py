"""What the loop is asked: a client's messages (and attachments) as one problem statement.

The loop's system prompt is the served model's (the paper's by default); what a client
says as system or developer instructions, earlier turns and attached files become part of
the problem statement.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence


@dataclasses.dataclass(frozen=True, slots=True)
class Turn:
    role: str
    """user, assistant, system (developer counts as system), tool."""
    text: str


_LABELS = {"user": "User", "assistant": "Assistant", "tool": "Tool result"}


def problem_statement(
    turns: Sequence[Turn], attachments: Iterable[str], history: Sequence[tuple[str, str]] = ()
) -> str:
    """The problem statement for the last user turn of `turns`, with the instructions,
    earlier turns (`history`: a kept conversation's exchanges, then `turns`) and the names
    of the attached files."""
    instructions = [t.text for t in turns if t.role == "system" and t.text.strip()]
    dialogue = [t for t in turns if t.role != "system"]
    earlier = [f"User: {asked}\n\nAssistant: {answered}" for asked, answered in history]
    earlier += [f"{_LABELS.get(t.role, t.role)}: {t.text}" for t in dialogue[:-1]]
    last = dialogue[-1].text if dialogue else ""
    parts = []
    if instructions:
        parts.append("Instructions from the application:\n" + "\n\n".join(instructions))
    if earlier:
        note = " (in this same sandbox: your files from then are still there)" if history else ""
        parts.append(f"The conversation so far{note}:\n\n" + "\n\n".join(earlier))
        parts.append("The user's new message, which you now answer:\n" + last)
    else:
        parts.append(last)
    names = list(attachments)
    if names:
        parts.append("Attached files, in your input folder: " + ", ".join(names))
    return "\n\n".join(parts)
