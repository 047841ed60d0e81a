"""The quota ledger: claims in flight on any gateway replica, one Lease per tenant namespace.

Each replica counts a namespace's sessions from its own watch, which cannot see what another
replica is about to create: two replicas each admitting a claim at once would both fit under
the limit and overshoot it together (issue #26: 5 sessions under a quota of 4). So before a
claim creates anything, it writes its session names into the namespace's ledger, a Lease in
the gateway's own namespace, with the resourceVersion it read: of two replicas writing at
once the API server takes one and answers 409 to the other, which reads again, sees the
first claim and counts it. A reservation matters only until its sessions show up in every
replica's watch, so it is dropped `hold_s` after it was made (and at once when its claim
fails): the ledger stays small, and a claim costs one write (a read too after another
replica wrote). Tenants cannot touch it: it lives in the gateway's namespace.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from sandfleet.errors import SandfleetError
from sandfleet.kube import ConflictError, KubeClient, NotFoundError, resource_path
from sandfleet.logs import get_logger

log = get_logger(__name__)

LEASE_API = "coordination.k8s.io/v1"
RESERVATIONS_ANNOTATION = "sandfleet.dev/quota-reservations"
LEASE_PREFIX = "sandfleet-quota-"
WRITE_ATTEMPTS = 20
"""Conflicts in a row before a claim gives up (each means another replica's claim went in)."""


class LedgerUnavailableError(SandfleetError):
    """The ledger could not be written: the claim is refused rather than left uncounted."""


@dataclasses.dataclass(frozen=True, slots=True)
class Reservation:
    """Sessions a claim is about to create."""

    at: float
    """Wall-clock time (seconds) of the reservation, by the replica that made it."""
    names: tuple[str, ...]
    replica: str


Entries = dict[str, Reservation]
Admit = Callable[[Mapping[str, Reservation]], None]
"""Raises (QuotaExceededError) when the claim does not fit beside these reservations."""


class QuotaLedger:
    def __init__(
        self,
        kube: KubeClient,
        namespace: str,
        replica: str,
        *,
        hold_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._kube = kube
        self._namespace = namespace
        self._replica = replica
        self._hold_s = hold_s
        self._clock = clock
        self._last: dict[str, dict[str, Any] | None] = {}
        """Per tenant namespace, the Lease as this replica last read or wrote it (None: it did
        not exist): the next write tries that resourceVersion without reading first."""
        self._locks: collections.defaultdict[str, asyncio.Lock] = collections.defaultdict(
            asyncio.Lock
        )

    def entries(self, namespace: str) -> Entries:
        """The reservations of the ledger as last seen here, expired ones left out."""
        return self._live(_entries(self._last.get(namespace)))

    async def reserve(self, namespace: str, key: str, names: tuple[str, ...], admit: Admit) -> None:
        """Write reservation `key` for `names` unless `admit(others)` raises (it is called
        again with what another replica wrote meanwhile, until one write goes through)."""
        await self._update(namespace, key, lambda entries: self._add(entries, key, names, admit))

    async def release(self, namespace: str, key: str) -> None:
        """Drop reservation `key` (its claim failed); errors are logged, not raised: it
        expires by itself."""
        try:
            await self._update(namespace, key, lambda entries: entries.pop(key, None) is not None)
        except (LedgerUnavailableError, SandfleetError) as exc:
            log.warning("quota_release_failed", namespace=namespace, key=key, error=str(exc))

    async def forget(self, namespace: str, names: set[str]) -> None:
        """Drop `names` from every reservation (released sessions); a write only when some
        reservation still names one of them. Errors are logged: reservations expire."""

        def drop(entries: Entries) -> bool:
            changed = False
            for key, entry in list(entries.items()):
                if names.intersection(entry.names):
                    kept = tuple(n for n in entry.names if n not in names)
                    entries[key] = dataclasses.replace(entry, names=kept)
                    changed = True
            return changed

        if not any(names.intersection(e.names) for e in self.entries(namespace).values()):
            return
        try:
            await self._update(namespace, "", drop)
        except SandfleetError as exc:
            log.warning("quota_forget_failed", namespace=namespace, error=str(exc))

    def _add(self, entries: Entries, key: str, names: tuple[str, ...], admit: Admit) -> bool:
        admit({k: e for k, e in entries.items() if k != key})
        entries[key] = Reservation(self._clock(), names, self._replica)
        return True

    async def _update(self, namespace: str, key: str, change: Callable[[Entries], bool]) -> None:
        """Read-modify-write with the resourceVersion precondition; `change` edits the
        entries in place and says whether there is anything to write."""
        async with self._locks[namespace]:
            for _ in range(WRITE_ATTEMPTS):
                if namespace not in self._last:
                    self._last[namespace] = await self._read(namespace)
                current = self._last[namespace]
                entries = self._live(_entries(current))
                if not change(entries):
                    return
                try:
                    self._last[namespace] = await self._write(namespace, current, entries)
                    return
                except ConflictError:
                    del self._last[namespace]  # another replica wrote: read it, try again
            raise LedgerUnavailableError(
                f"the quota ledger of {namespace} kept changing under {WRITE_ATTEMPTS} writes; "
                "try again"
            )

    def _live(self, entries: Entries) -> Entries:
        oldest = self._clock() - self._hold_s
        return {k: e for k, e in entries.items() if e.at >= oldest and e.names}

    async def _read(self, namespace: str) -> dict[str, Any] | None:
        try:
            return await self._kube.get(self._path(namespace))
        except NotFoundError:
            return None

    async def _write(
        self, namespace: str, current: dict[str, Any] | None, entries: Entries
    ) -> dict[str, Any]:
        text = json.dumps(
            {k: {"at": e.at, "names": list(e.names), "by": e.replica} for k, e in entries.items()},
            separators=(",", ":"),
            sort_keys=True,
        )
        if current is None:
            body = {
                "apiVersion": LEASE_API,
                "kind": "Lease",
                "metadata": {
                    "name": LEASE_PREFIX + namespace,
                    "namespace": self._namespace,
                    "labels": {"app.kubernetes.io/managed-by": "sandfleet-gateway"},
                    "annotations": {RESERVATIONS_ANNOTATION: text},
                },
                "spec": {"holderIdentity": self._replica},
            }
            collection = resource_path(LEASE_API, "leases", self._namespace)
            return await self._kube.create(collection, body)  # 409 if another made it first
        meta: dict[str, Any] = dict(current["metadata"])
        meta["annotations"] = {**(meta.get("annotations") or {}), RESERVATIONS_ANNOTATION: text}
        spec: dict[str, Any] = {**(current.get("spec") or {}), "holderIdentity": self._replica}
        # metadata keeps its resourceVersion: the API server's precondition.
        body = {**current, "metadata": meta, "spec": spec}
        return await self._kube.replace(self._path(namespace), body)

    def _path(self, namespace: str) -> str:
        return resource_path(LEASE_API, "leases", self._namespace, LEASE_PREFIX + namespace)


def _entries(lease: Mapping[str, Any] | None) -> Entries:
    if lease is None:
        return {}
    text = ((lease.get("metadata") or {}).get("annotations") or {}).get(RESERVATIONS_ANNOTATION)
    try:
        raw = json.loads(text) if text else {}
        return {
            str(k): Reservation(float(v["at"]), tuple(map(str, v["names"])), str(v.get("by", "")))
            for k, v in raw.items()
        }
    except (ValueError, TypeError, KeyError, AttributeError):
        log.warning("quota_ledger_unreadable", lease=(lease.get("metadata") or {}).get("name"))
        return {}
