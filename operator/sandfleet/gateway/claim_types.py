"""What the gateway's claim path takes and gives: ClaimSpec, Claimed, ClaimError.

The gRPC service (service.py) turns requests into a ClaimSpec and Claimed into responses;
the claim path (claims.py) knows nothing of gRPC. Authentication, authorization and quotas
happen before a ClaimSpec reaches the claim path.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence

from sandfleet.api import EgressMode, LifecycleSpec
from sandfleet.errors import SandfleetError


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimSpec:
    """`count` sandboxes for one caller in one namespace, already authorized."""

    namespace: str
    pool: str | None
    """A SandboxPool: warm claims while it has idle pods, cold sessions for the rest."""
    template: str | None
    """A SandboxTemplate (cold); neither pool nor template: the operator's default image."""
    count: int
    env: Mapping[str, str]
    files: Sequence[tuple[str, bytes, int]]
    """(path as the caller gave it, content, permission bits) of each input file."""
    lifecycle: LifecycleSpec
    generate_name: str
    egress: EgressMode
    timeout_s: float
    """How long cold starts may take before the claim fails (UNAVAILABLE)."""
    caller: str
    """The caller's Kubernetes username (recorded on the sessions, logged)."""
    claim_id: str = ""
    """The caller's idempotency key ("": none): the sessions' names derive from it, so a
    retried claim finds the sessions the first one made (claims.claim_session_names)."""
    names: tuple[str, ...] = ()
    """The sessions' names, chosen before the claim (claim_ids.planned_session_names) so the
    quota ledger can name what the claim is about to create; empty: the claim path picks."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Claimed:
    """One sandbox handed out: a Ready SandboxSession and how to reach its runtime."""

    namespace: str
    name: str
    token: str
    """The session's runtime token (the data-plane credential)."""
    pod: str
    address: str
    """The runtime's host:port (the pod IP), where the proxy sends this session's calls."""
    warm: bool
    workdir: str


class ClaimFailure(enum.Enum):
    """Why a claim (or connect) failed; the service maps each to one gRPC status code."""

    INVALID = "invalid"
    """The request is wrong (INVALID_ARGUMENT)."""
    NOT_FOUND = "not_found"
    """No such pool, template or session (NOT_FOUND)."""
    UNAVAILABLE = "unavailable"
    """No sandbox could be had in time, or the session ended (UNAVAILABLE)."""


class ClaimError(SandfleetError):
    def __init__(self, failure: ClaimFailure, message: str) -> None:
        super().__init__(message)
        self.failure = failure
