"""Status conditions as the Kubernetes API conventions define them: pure list-in, list-out.

Conditions are plain dicts (as read from and written to the API), in camelCase:
type, status ("True" | "False" | "Unknown"), reason (PascalCase), message,
lastTransitionTime (RFC 3339, UTC, 'Z') and observedGeneration.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

ConditionStatus = Literal["True", "False", "Unknown"]

MAX_MESSAGE_LENGTH: Final = 32768
"""metav1.Condition's limit; longer messages (an exception's text) are cut to it."""

# metav1.Condition's pattern: a reason is a machine-readable CamelCase token.
_REASON: Final = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")


def rfc3339(moment: dt.datetime) -> str:
    """`moment` in UTC with second precision and a 'Z', the way metav1.Time serialises."""
    if moment.tzinfo is None:
        raise ValueError("a naive datetime has no defined instant; pass an aware one")
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status_text(status: ConditionStatus | bool) -> ConditionStatus:
    if isinstance(status, bool):
        return "True" if status else "False"
    if status not in ("True", "False", "Unknown"):
        raise ValueError(f"condition status must be True, False or Unknown, not {status!r}")
    return status


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    *,
    type: str,
    status: ConditionStatus | bool,
    reason: str,
    message: str,
    generation: int,
    now: dt.datetime,
) -> list[dict[str, Any]]:
    """A new list with condition `type` set; the input is not modified.

    lastTransitionTime moves only when the status changes (a new reason or message is not a
    transition); reason, message and observedGeneration always take the new values. An
    existing condition keeps its place in the list, so an unchanged list compares equal to
    the input and the caller can skip the status patch.
    """
    status_text = _status_text(status)
    if not _REASON.match(reason):
        raise ValueError(f"condition reason {reason!r} is not a CamelCase token")
    previous = condition(conditions, type)
    kept_time = None
    if previous is not None and previous.get("status") == status_text:
        kept_time = previous.get("lastTransitionTime")
    updated: dict[str, Any] = {
        # str(): a StrEnum member (api.ConditionType, api.Reason) goes out as its plain value.
        "type": str(type),
        "status": status_text,
        "reason": str(reason),
        "message": message[:MAX_MESSAGE_LENGTH],
        "lastTransitionTime": kept_time or rfc3339(now),
        "observedGeneration": generation,
    }
    if previous is None:
        return [dict(c) for c in conditions] + [updated]
    return [updated if c.get("type") == type else dict(c) for c in conditions]


def condition(conditions: Sequence[Mapping[str, Any]] | None, type: str) -> dict[str, Any] | None:
    """The condition of `type` (a copy), or None when it was never set."""
    for existing in conditions or ():
        if existing.get("type") == type:
            return dict(existing)
    return None


def is_true(conditions: Sequence[Mapping[str, Any]] | None, type: str) -> bool:
    """True only when condition `type` is present with status "True" (absent is not true)."""
    found = condition(conditions, type)
    return found is not None and found.get("status") == "True"
