"""Where a session is (status.phase) and why its sandbox was taken away (status.reclaimReason)."""

from __future__ import annotations

import enum


class Phase(enum.StrEnum):
    """status.phase of a SandboxSession: a summary for printing; conditions are the API."""

    PENDING = "Pending"
    STARTING = "Starting"
    READY = "Ready"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    """Its files and shells' state are in the snapshot store; it holds no pod (not finished:
    spec.suspend false, or an access through the gateway, resumes it)."""
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    EXPIRED = "Expired"

    @property
    def finished(self) -> bool:
        return self in {Phase.SUCCEEDED, Phase.FAILED, Phase.EXPIRED}


class ReclaimReason(enum.StrEnum):
    """Why a sandbox was taken away (status.reclaimReason, the reclaims metric's label and
    the log field)."""

    COMPLETED = "completed"
    TTL = "ttl"
    IDLE = "idle"
    DEADLINE = "deadline"
    DELETED = "deleted"
    ORPHAN = "orphan"
    LOST = "lost"
    SUSPENDED = "suspended"
