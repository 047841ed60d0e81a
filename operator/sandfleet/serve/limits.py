"""Per-tenant concurrency: a tenant at its limit is refused at once (429), never queued."""

from __future__ import annotations

import collections

from sandfleet.serve.errors import ApiError

RETRY_AFTER_S = 1


class TenantLimiter:
    """At most `per_tenant` requests in flight per tenant (a client key, or `local`)."""

    def __init__(self, per_tenant: int) -> None:
        if per_tenant < 1:
            raise ValueError("per_tenant must be at least 1")
        self._limit = per_tenant
        self._in_flight: collections.Counter[str] = collections.Counter()

    def in_flight(self, tenant: str) -> int:
        return self._in_flight[tenant]

    def acquire(self, tenant: str) -> None:
        """Take one of the tenant's slots (give it back with `release`); ApiError 429 with
        Retry-After when none is free."""
        if self._in_flight[tenant] >= self._limit:
            raise ApiError(
                429,
                f"too many requests in flight for this client: the limit is {self._limit}; "
                "retry after the current ones finish",
                error_type="rate_limit_exceeded",
                code="rate_limit_exceeded",
                headers={"retry-after": str(RETRY_AFTER_S)},
            )
        self._in_flight[tenant] += 1

    def release(self, tenant: str) -> None:
        self._in_flight[tenant] -= 1
        if self._in_flight[tenant] <= 0:
            del self._in_flight[tenant]
