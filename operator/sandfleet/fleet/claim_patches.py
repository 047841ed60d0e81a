"""The merge patches that hand a pool pod to a session: the operator's claim, the gateway's
claim (before its session exists) and the operator's adoption of a gateway-claimed pod. Pure,
like fleet.resources; the resourceVersion they carry is what keeps two claims off one pod."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sandfleet.api import Annotation, Label, PodState
from sandfleet.fleet.conditions import rfc3339
from sandfleet.fleet.naming import label_value
from sandfleet.fleet.resources import ObjectRef, owner_reference


def claim_patch(session: ObjectRef, pod_resource_version: str, now: dt.datetime) -> dict[str, Any]:
    """A merge patch that hands an idle pool pod to `session`, at most once.

    It carries the resourceVersion the pod was read at, so the API server answers 409 when
    anyone changed the pod since (another claim above all): two sessions never get one pod.
    The session replaces the pool as the controlling owner (a merge patch replaces lists
    whole), so the pod goes with the session, not the pool; the pool label stays.
    """
    return {
        "metadata": {
            "resourceVersion": pod_resource_version,
            "labels": {
                Label.STATE.value: PodState.CLAIMED.value,
                Label.SESSION.value: label_value(session.name),
            },
            "annotations": {Annotation.CLAIMED_AT.value: rfc3339(now)},
            "ownerReferences": [owner_reference(session)],
        }
    }


def gateway_claim_patch(
    session: str, pod_resource_version: str, now: dt.datetime, replica: str
) -> dict[str, Any]:
    """The gateway's merge patch that hands an idle pool pod to the session it will create.

    Conditional on the resourceVersion like `claim_patch`, so the gateway's replicas and the
    operator never share a pod. The session does not exist yet (it is created after the
    bind), so there is no uid to own the pod: the pool stays its owner until the operator
    adopts it, and the labels and annotations say whose it is meanwhile.
    """
    return {
        "metadata": {
            "resourceVersion": pod_resource_version,
            "labels": {
                Label.STATE.value: PodState.CLAIMED.value,
                Label.SESSION.value: label_value(session),
            },
            "annotations": {
                Annotation.CLAIMED_AT.value: rfc3339(now),
                Annotation.CLAIMED_BY.value: replica,
            },
        }
    }


def adoption_patch(session: ObjectRef) -> dict[str, Any]:
    """Makes a gateway-claimed pod the session's: it goes with the session from now on."""
    return {"metadata": {"ownerReferences": [owner_reference(session)]}}
