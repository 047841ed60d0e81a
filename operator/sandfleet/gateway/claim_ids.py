"""Idempotent claims: the session names a claim id stands for, and whose sessions they are.

A claim with a caller-chosen id (ClaimSpec.claim_id) names its sessions from the id, so a
retried claim finds what an earlier attempt made (sandfleet.gateway.claims uses this).
"""

from __future__ import annotations

import hashlib
import secrets
import string
from collections.abc import Mapping
from typing import Any

from sandfleet.gateway.claim_types import ClaimError, ClaimFailure, ClaimSpec

CALLER_ANNOTATION = "sandfleet.dev/claimed-for"
"""The Kubernetes user a gateway session was claimed for (usernames do not fit labels)."""
CLAIM_ID_ANNOTATION = "sandfleet.dev/claim-id"
"""The caller's idempotency key of the claim that made a session (ClaimSpec.claim_id)."""

_SUFFIX_CHARS = string.ascii_lowercase + string.digits
_MAX_NAME = 63
_MAX_DERIVED_SUFFIX = 10


def session_name(generate_name: str) -> str:
    """A new session name: the prefix and five random characters (as the API server would)."""
    return f"{generate_name or 'sbx-'}{''.join(secrets.choice(_SUFFIX_CHARS) for _ in range(5))}"


def planned_session_names(spec: ClaimSpec) -> tuple[str, ...]:
    """The names a claim's sessions will have: an idempotent claim's derived ones, else
    random ones (known before anything is created, for the quota ledger)."""
    if spec.claim_id:
        return tuple(claim_session_names(spec))
    return tuple(session_name(spec.generate_name) for _ in range(spec.count))


def claim_session_names(spec: ClaimSpec) -> list[str]:
    """The names of an idempotent claim's sessions: the prefix and a suffix derived from
    (namespace, caller, claim id, index), as long as the name limit allows (5 to 10
    characters). Deterministic, so a retried claim finds what the first one made; the caller
    is part of it, so the same id of another identity names other sessions."""
    prefix = spec.generate_name or "sbx-"
    length = max(5, min(_MAX_DERIVED_SUFFIX, _MAX_NAME - len(prefix)))
    names = []
    for index in range(spec.count):
        seed = "\0".join((spec.namespace, spec.caller, spec.claim_id, str(index))).encode()
        number = int.from_bytes(hashlib.sha256(seed).digest()[:16], "big")
        suffix = ""
        for _ in range(length):
            number, digit = divmod(number, len(_SUFFIX_CHARS))
            suffix += _SUFFIX_CHARS[digit]
        names.append(prefix + suffix)
    return names


def check_same_claim(spec: ClaimSpec, body: Mapping[str, Any]) -> None:
    """A session of a derived name that is not this caller's claim: a name collision."""
    annotations = body["metadata"].get("annotations") or {}
    if (
        annotations.get(CLAIM_ID_ANNOTATION) != spec.claim_id
        or annotations.get(CALLER_ANNOTATION) != spec.caller
    ):
        raise ClaimError(
            ClaimFailure.UNAVAILABLE,
            f"SandboxSession {spec.namespace}/{body['metadata']['name']} exists and is not "
            f"claim {spec.claim_id!r}'s; claim with a new claim_id",
        )
