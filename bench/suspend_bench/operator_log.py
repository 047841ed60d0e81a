"""Where a suspend's and a resume's time goes, from the operator's own log (one clock):
`session_suspended` (snapshot: the shells' state read, the archive streamed into the store
and verified; the phase recorded; the pod released), `resume_started` (the
snapshot's state member read), `session_ready` of a resume (claim, pod seen, bind, restore,
Ready written), `snapshot_restored` (RestoreTree, the shells' state replayed) and
`session_resumed` (the operator's whole resume, the snapshot dropped)."""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from typing import Any

from tests.support.stats import percentile

_STEPPED = {
    "session_suspended": "suspend",
    "snapshot_restored": "resume.restore",
    "session_ready": "resume.lease",
}


def steps_by_session(lines: list[str]) -> dict[str, dict[str, list[float]]]:
    """{session name: {"suspend.release": [ms, ...], ...}} over every logged transition."""
    steps: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    resuming: set[str] = set()
    for line in lines:
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
            record = json.loads(line)
            event, session = record["event"], str(record["session"]).rsplit("/", 1)[-1]
            mine = steps[session]
            if event == "resume_started":
                resuming.add(session)
                mine["resume.state_read"].append(float(record["state_read_ms"]))
            elif event == "session_ready" and session not in resuming:
                continue  # the session's first start, not a resume
            elif event == "session_resumed":
                resuming.discard(session)
                mine["resume.operator_total"].append(float(record["seconds"]) * 1000)
                continue
            elif event == "session_suspended":
                mine["suspend.operator_total"].append(float(record["seconds"]) * 1000)
            prefix = _STEPPED.get(event)
            if prefix is None:
                continue
            for stage, value in dict(record.get("steps_ms") or {}).items():
                mine[f"{prefix}.{stage}"].append(float(value))
    return steps


def medians(steps: dict[str, list[float]]) -> dict[str, Any]:
    return {
        stage: {"p50": round(percentile(values, 0.5), 1), "n": len(values)}
        for stage, values in sorted(steps.items())
    }
