"""Per-namespace limits on concurrent sessions, checked before a claim reaches the claim path."""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Iterator, Mapping

from sandfleet.errors import SandfleetError


class QuotaExceeded(SandfleetError):
    """The namespace would hold more sessions than its limit (RESOURCE_EXHAUSTED)."""

    def __init__(self, namespace: str, message: str) -> None:
        super().__init__(message)
        self.namespace = namespace


class Quotas:
    """Limits from the gateway's settings: a default and per-namespace overrides (0: none).

    A namespace's usage is its not-finished sessions (`count`, from the session index) plus
    the sessions this replica's claims in flight are about to create (`reserve`). Other
    replicas' claims in flight are not seen, so with N replicas a namespace can overshoot
    by at most N-1 concurrent claims: a soft limit, like the watch it is counted from.
    """

    def __init__(
        self, default: int, overrides: Mapping[str, int], count: Callable[[str], int]
    ) -> None:
        self._default = default
        self._overrides = dict(overrides)
        self._count = count
        self._in_flight: collections.Counter[str] = collections.Counter()

    def limit(self, namespace: str) -> tuple[int, str]:
        """(limit, where it comes from); a limit of 0 means none."""
        if namespace in self._overrides:
            return self._overrides[namespace], f"the gateway's quota for {namespace} (quotas)"
        return self._default, "the gateway's default quota (quota_default)"

    def in_use(self, namespace: str) -> int:
        return self._count(namespace) + self._in_flight[namespace]

    @contextlib.contextmanager
    def reserve(self, namespace: str, count: int) -> Iterator[None]:
        """Hold `count` sessions of the namespace's quota for the block (a claim); raises
        QuotaExceeded when they do not fit. Check and reservation happen without an await
        in between, so concurrent claims on this replica cannot both take the last one."""
        limit, source = self.limit(namespace)
        used = self.in_use(namespace)
        if limit and used + count > limit:
            wanted = f"{count} more" if count > 1 else "another"
            raise QuotaExceeded(
                namespace,
                f"namespace {namespace} has {used} of its {limit} sessions and asks for "
                f"{wanted} ({source}); release some or raise the limit",
            )
        self._in_flight[namespace] += count
        try:
            yield
        finally:
            self._in_flight[namespace] -= count
            if self._in_flight[namespace] <= 0:
                del self._in_flight[namespace]
