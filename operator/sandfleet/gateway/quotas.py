"""Per-namespace limits on concurrent sessions, checked before a claim reaches the claim path.

A namespace's usage is its not-finished sessions as this replica's watch shows them, plus the
sessions claims are about to create that the watch does not show yet: this replica's own
claims in flight, and every replica's reservations in the namespace's quota ledger
(quota_ledger). A claim is admitted and reserved in one conditional write of the ledger, so
replicas racing for the last places take turns: the limit holds across replicas as long as a
created session reaches every replica's watch within the ledger's hold time (seconds).
"""

from __future__ import annotations

import collections
import contextlib
import secrets
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

from sandfleet.errors import QuotaExceededError, SandfleetError
from sandfleet.gateway.claim_types import ClaimError, ClaimFailure
from sandfleet.gateway.quota_ledger import QuotaLedger, Reservation


class Quotas:
    """Limits from the gateway's settings: a default and per-namespace overrides (0: none).

    `count(namespace)`: the namespace's not-finished sessions the watch knows; `known(namespace,
    name)`: whether the watch knows that session (in any state), so a reserved name is never
    counted twice. Without a `ledger` (one replica) only this replica's claims are counted.
    """

    def __init__(
        self,
        default: int,
        overrides: Mapping[str, int],
        count: Callable[[str], int],
        *,
        known: Callable[[str, str], bool] = lambda namespace, name: False,
        ledger: QuotaLedger | None = None,
    ) -> None:
        self._default = default
        self._overrides = dict(overrides)
        self._count = count
        self._known = known
        self._ledger = ledger
        self._in_flight: collections.defaultdict[str, collections.Counter[str]] = (
            collections.defaultdict(collections.Counter)
        )

    def limit(self, namespace: str) -> tuple[int, str]:
        """(limit, where it comes from); a limit of 0 means none."""
        if namespace in self._overrides:
            return self._overrides[namespace], f"the gateway's quota for {namespace} (quotas)"
        return self._default, "the gateway's default quota (quota_default)"

    def in_use(self, namespace: str) -> int:
        """Sessions counted against the namespace now, as this replica knows them."""
        reserved = self._ledger.entries(namespace) if self._ledger is not None else {}
        return self._count(namespace) + len(self._pending(namespace, reserved, ()))

    @contextlib.asynccontextmanager
    async def reserve(self, namespace: str, names: Sequence[str]) -> AsyncIterator[None]:
        """Hold the namespace's quota for `names` (a claim's sessions) for the block; raises
        QuotaExceededError when they do not fit. The reservation stays in the ledger after a claim
        that worked (until every replica's watch shows its sessions); a failed claim's is
        dropped at once."""
        limit, source = self.limit(namespace)
        if not limit:
            yield
            return
        wanted = tuple(n for n in names if not self._known(namespace, n))

        def admit(reserved: Mapping[str, Reservation]) -> None:
            used = self._count(namespace) + len(self._pending(namespace, reserved, wanted))
            if used + len(wanted) > limit:
                asked = f"{len(wanted)} more" if len(wanted) > 1 else "another"
                raise QuotaExceededError(
                    f"namespace {namespace} has {used} of its {limit} sessions and asks for "
                    f"{asked} ({source}); release some or raise the limit",
                    namespace=namespace,
                )

        key = secrets.token_hex(8)
        if self._ledger is not None:
            try:
                await self._ledger.reserve(namespace, key, wanted, admit)
            except QuotaExceededError:
                raise
            except SandfleetError as exc:  # never an uncounted claim: refuse it instead
                raise ClaimError(
                    ClaimFailure.UNAVAILABLE, f"the quota of {namespace} cannot be checked: {exc}"
                ) from exc
        else:
            admit({})  # no await between this check and the in-flight count below
        flying = self._in_flight[namespace]
        flying.update(wanted)
        try:
            yield
        except BaseException:
            if self._ledger is not None:
                await self._ledger.release(namespace, key)
            raise
        finally:
            flying.subtract(wanted)
            for name in wanted:
                if flying[name] <= 0:
                    del flying[name]
            if not flying:
                self._in_flight.pop(namespace, None)

    async def released(self, namespace: str, names: Sequence[str]) -> None:
        """Sessions released through this replica: no reservation counts them any longer."""
        if self._ledger is not None and self.limit(namespace)[0]:
            await self._ledger.forget(namespace, set(names))

    def _pending(
        self, namespace: str, reserved: Mapping[str, Reservation], own: Sequence[str]
    ) -> set[str]:
        """Sessions about to be created that the watch does not show yet (not `own`)."""
        names = set(self._in_flight.get(namespace) or ())
        for entry in reserved.values():
            names.update(entry.names)
        names.difference_update(own)
        return {n for n in names if not self._known(namespace, n)}
