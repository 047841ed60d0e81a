"""The trajectory contract: how a run is named, where its file lies in a store, what
status.trajectory holds, and the operator's HTTP route that serves it.

The operator writes trajectories and serves them on GET /trajectories/{namespace}/{name};
`sandfleet trajectory` fetches them there or reads a store directory directly. Both sides
take the names and the layout from here. No I/O: reading a store is
sandfleet.trajectory.store, writing one is the operator's.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Final
from urllib.parse import quote

from sandfleet.errors import SandfleetError

REFERENCE_SCHEME: Final = "dir:"
"""status.trajectory holds "dir:<namespace>/<name>/<uid>.jsonl": a path relative to the store's
root, so it stays true wherever the volume is mounted (the operator's pod, a backup host)."""
SUFFIX: Final = ".jsonl"
ROUTE: Final = "/trajectories/{namespace}/{name}"
"""The operator's HTTP route of a session's trajectory; `?uid=UID` picks a run (default: the
latest). Errors are JSON {"error": message}: 400 for an invalid name, 404 when none is stored."""
UID_QUERY: Final = "uid"
UID_HEADER: Final = "Sandfleet-Trajectory-Uid"
"""HTTP header naming the run a trajectory response holds (the operator sets it, the CLI
reports it)."""
NDJSON: Final = "application/x-ndjson"
"""Content-Type of a trajectory response: JSON Lines, whole records only."""

# Kubernetes' own name rules: a namespace is a DNS-1123 label, an object name a DNS-1123
# subdomain. A run id is a subdomain too: a lowercase UUID, or "<uid>.lost-1" for the run a
# lost sandbox cut short (the operator sets those aside). None of them can hold "/" or "..".
_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_LABEL_PATTERN = re.compile(_LABEL)
_SUBDOMAIN_PATTERN = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_LABEL_MAX = 63
_SUBDOMAIN_MAX = 253


class TrajectoryNameError(SandfleetError, ValueError):
    """A namespace, name or uid that is not a Kubernetes name, and so never a safe path part."""


def validate_namespace(namespace: str) -> str:
    return _checked(namespace, "namespace", _LABEL_PATTERN, _LABEL_MAX)


def validate_name(name: str) -> str:
    return _checked(name, "name", _SUBDOMAIN_PATTERN, _SUBDOMAIN_MAX)


def validate_uid(uid: str) -> str:
    """A run's id: the session's metadata.uid, or a set-aside run's "<uid>.lost-<n>"."""
    return _checked(uid, "uid", _SUBDOMAIN_PATTERN, _SUBDOMAIN_MAX)


def is_valid(value: str, validate: Callable[[str], str]) -> bool:
    """Whether `validate` (one of the validate_* functions) accepts `value`."""
    try:
        validate(value)
    except TrajectoryNameError:
        return False
    return True


def _checked(value: str, what: str, pattern: re.Pattern[str], limit: int) -> str:
    if len(value) > limit or pattern.fullmatch(value) is None:
        if pattern is _LABEL_PATTERN:
            rule = "a DNS-1123 label: lowercase letters, digits and '-'"
        else:
            rule = "a DNS-1123 subdomain: lowercase letters, digits, '-' and '.'"
        raise TrajectoryNameError(
            f"invalid {what} {value[:80]!r}: want {rule}, at most {limit} characters"
        )
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class TrajectoryKey:
    """One run of one session: a session recreated under the same name gets a new uid."""

    namespace: str
    name: str
    uid: str

    def __post_init__(self) -> None:
        validate_namespace(self.namespace)
        validate_name(self.name)
        validate_uid(self.uid)

    @property
    def relative_path(self) -> str:
        """Where the run's file lies below a store's root: `<ns>/<name>/<uid>.jsonl`."""
        return f"{self.namespace}/{self.name}/{self.uid}{SUFFIX}"

    @property
    def reference(self) -> str:
        return REFERENCE_SCHEME + self.relative_path


def parse_reference(reference: str) -> TrajectoryKey:
    """The key a status.trajectory reference names; TrajectoryNameError when it names none."""
    relative = reference.removeprefix(REFERENCE_SCHEME)
    parts = relative.split("/")
    if relative == reference or len(parts) != 3 or not parts[2].endswith(SUFFIX):
        raise TrajectoryNameError(
            f"not a trajectory reference: {reference[:120]!r} (want "
            f"{REFERENCE_SCHEME}<namespace>/<name>/<uid>{SUFFIX})"
        )
    return TrajectoryKey(parts[0], parts[1], parts[2].removesuffix(SUFFIX))


def uid_of_file(file_name: str) -> str | None:
    """The run a store's file name holds (`<uid>.jsonl`), or None for any other file."""
    if not file_name.endswith(SUFFIX):
        return None
    uid = file_name.removesuffix(SUFFIX)
    return uid if is_valid(uid, validate_uid) else None


def trajectory_path(namespace: str, name: str, uid: str | None = None) -> str:
    """The operator's HTTP path (ROUTE) of a session's trajectory, names validated."""
    path = ROUTE.format(namespace=validate_namespace(namespace), name=validate_name(name))
    return path if uid is None else f"{path}?{UID_QUERY}={quote(validate_uid(uid))}"
