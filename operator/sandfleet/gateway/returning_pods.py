"""Released sandboxes on their way back to their pool: a claim waits for one of them rather
than start a cold sandbox.

A session released through the gateway whose pod came from a recycling pool (its runtime
restores every writable path) is reset and verified by the operator and relabelled idle,
usually within a second or two; a cold start takes many seconds on a busy node, and it adds
a pod the pool deletes again once the released one is back. So while released pods of a pool
are expected back (until they return, leave, or RETURN_WAIT_S passes), a claim that finds no
idle pod waits for the next warm one. Only this replica's releases are known here.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from sandfleet.api import Annotation, Label, PodState
from sandfleet.fleet.pod_index import Pod, PodIndex
from sandfleet.fleet.resources import resets_every_writable_path

RETURN_WAIT_S = 10.0
"""How long a released pod is expected back: a recycle takes ~0.1-3 s (under load); past
this it failed (the pod is deleted) or the operator is not keeping up, and a cold start is
the better bet."""


class ReturningPods:
    """Pods of released sessions expected back in their pool, by (namespace, pool)."""

    def __init__(self, index: PodIndex, clock: Callable[[], float] = time.monotonic) -> None:
        self._index = index
        self._clock = clock
        self._pods: dict[tuple[str, str], dict[str, _Expected]] = {}

    def released(self, namespace: str, session: Mapping[str, Any]) -> None:
        """Note a released session (its body as the DELETE answered it): its pod is
        expected back when it is a recycling pool's."""
        pool = ((session.get("spec") or {}).get("poolRef") or {}).get("name")
        annotations = (session.get("metadata") or {}).get("annotations") or {}
        name = annotations.get(Annotation.CLAIMED_POD) or (session.get("status") or {}).get(
            "podName"
        )
        pod = self._index.get(namespace, name) if pool and name else None
        if pod is None or not resets_every_writable_path(pod):
            return
        holder = (pod["metadata"].get("labels") or {}).get(Label.SESSION, "")
        self._pods.setdefault((namespace, str(pool)), {})[str(name)] = _Expected(
            holder, self._clock() + RETURN_WAIT_S
        )

    def wait_left_s(self, namespace: str, pool: str) -> float:
        """How long a claim on `pool` may wait for a returning pod (0: none is expected)."""
        pods = self._pods.get((namespace, pool))
        if not pods:
            return 0.0
        now = self._clock()
        for name, expected in list(pods.items()):
            if expected.deadline <= now or not _still_held(
                self._index.get(namespace, name), expected.holder
            ):
                del pods[name]  # back (idle, or claimed again already), gone, or overdue
        if not pods:
            del self._pods[(namespace, pool)]
            return 0.0
        return max(e.deadline for e in pods.values()) - now


@dataclasses.dataclass(frozen=True, slots=True)
class _Expected:
    holder: str
    """The released session's label on the pod: while it is there, the pod is on its way."""
    deadline: float


def _still_held(pod: Pod | None, holder: str) -> bool:
    """The pod is still claimed by the released session and not leaving."""
    if pod is None or pod["metadata"].get("deletionTimestamp"):
        return False
    labels = pod["metadata"].get("labels") or {}
    return labels.get(Label.STATE) == PodState.CLAIMED and labels.get(Label.SESSION) == holder
