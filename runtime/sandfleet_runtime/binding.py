"""Binding a warm sandbox to the session that claimed it: new token, session env, fresh shells.

A pool sandbox starts with the pool's token and no session. When a session claims it, the
control plane calls BindSession (with the pool token) instead of restarting the pod: the
session's token replaces the pool's, its environment reaches every shell started
afterwards, and nothing from before the claim (shells, idle time) carries over. Binding to a
session starts the "default" bash session's shell at once (with that environment), so the
session's first command does not wait for bash; binding back to no session (recycling) does not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Callable, Mapping

from sandfleet_runtime.auth import TokenAuthInterceptor
from sandfleet_runtime.bash.session import MARKER_VARIABLE
from sandfleet_runtime.bash.sessions import BashSessions
from sandfleet_runtime.bash.shell_driver import BOOTSTRAP_VARIABLE
from sandfleet_runtime.errors import InvalidArgumentError, UnauthenticatedError
from sandfleet_runtime.stats import ActivityClock

__all__ = ["Binding", "SessionBinder", "validate_binding"]

log = logging.getLogger(__name__)

MIN_TOKEN_CHARS = 16
MAX_TOKEN_CHARS = 4096
MAX_SESSION_CHARS = 512
TOKEN_VARIABLE_PREFIX = "SANDFLEET_RUNTIME_TOKEN"
"""The runtime's own credentials (__main__ keeps them out of the shells); never bindable."""
RESERVED_VARIABLES = frozenset({MARKER_VARIABLE, BOOTSTRAP_VARIABLE})
"""Set by the runtime in every shell; a bound value would be silently overridden."""
# Linux refuses to exec with one NAME=value string (NUL included) of more than 32 pages
# (MAX_ARG_STRLEN), and with all of argv+environ beyond a quarter of the stack limit.
_MAX_VARIABLE_BYTES = 128 * 1024 - 1
_MAX_ENV_BYTES = 1024 * 1024
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Visible ASCII only: gRPC metadata values must be printable ASCII, and HTTP/2 stacks may
# trim surrounding whitespace, so any other token could lock every client out for good.
_TOKEN_CHARACTERS = re.compile(r"[\x21-\x7e]+")
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


@dataclasses.dataclass(frozen=True, slots=True)
class Binding:
    """What one BindSession did."""

    session: str
    closed_sessions: int
    """Bash sessions open before the binding, now closed."""
    bound_unix: float
    """Wall-clock time of the binding; also the new last activity."""


def validate_binding(token: str, env: Mapping[str, str], session: str) -> None:
    """Raises InvalidArgumentError, saying what is wrong, unless the binding can be applied."""
    _validate_token(token)
    _validate_env(env, token)
    if len(session) > MAX_SESSION_CHARS or _CONTROL_CHARACTERS.search(session):
        raise InvalidArgumentError(
            f"Invalid session {session[:80]!r}: use at most {MAX_SESSION_CHARS} characters"
            " without control characters, such as 'namespace/name'."
        )


def _validate_token(token: str) -> None:
    if len(token) < MIN_TOKEN_CHARS:
        raise InvalidArgumentError(
            f"The token is {len(token)} characters long; it must have at least"
            f" {MIN_TOKEN_CHARS} (use a random one, e.g. 32 bytes, base64url-encoded)."
        )
    if len(token) > MAX_TOKEN_CHARS:
        raise InvalidArgumentError(
            f"The token is {len(token)} characters long; at most {MAX_TOKEN_CHARS} are allowed."
        )
    if not _TOKEN_CHARACTERS.fullmatch(token):
        raise InvalidArgumentError(
            "The token may only contain visible ASCII characters (no spaces, control"
            " characters or non-ASCII letters): clients send it in a gRPC metadata header."
        )


def _validate_env(env: Mapping[str, str], token: str) -> None:
    total = 0
    for name in sorted(env):  # sorted: the same request always names the same problem
        value = env[name]
        if not _IDENTIFIER.fullmatch(name):
            raise InvalidArgumentError(
                f"Invalid environment variable name {name!r}: use letters, digits and '_',"
                " not starting with a digit."
            )
        if name.startswith(TOKEN_VARIABLE_PREFIX):
            raise InvalidArgumentError(
                f"The environment variable {name} cannot be bound: names starting with"
                f" {TOKEN_VARIABLE_PREFIX} hold the runtime's credentials, which never reach"
                " the shells."
            )
        if name in RESERVED_VARIABLES:
            raise InvalidArgumentError(
                f"The environment variable {name} is set by the runtime itself and cannot be bound."
            )
        if "\0" in value:
            raise InvalidArgumentError(
                f"The value of {name} contains a NUL character, which an environment cannot hold."
            )
        if token in value:
            raise InvalidArgumentError(
                f"The value of {name} contains the new runtime token; the shells must never see it."
            )
        size = len(name.encode()) + 1 + len(value.encode())
        if size > _MAX_VARIABLE_BYTES:
            raise InvalidArgumentError(
                f"The environment variable {name} is {size} bytes as NAME=value; Linux allows"
                f" at most {_MAX_VARIABLE_BYTES} per variable. Pass large data as a file."
            )
        total += size + 1
    if total > _MAX_ENV_BYTES:
        raise InvalidArgumentError(
            f"The bound environment is {total} bytes; at most {_MAX_ENV_BYTES} are allowed."
            " Pass large data as files."
        )


class SessionBinder:
    """Applies BindSession to the running runtime: token, shell environment, shells, clock."""

    def __init__(
        self,
        auth: TokenAuthInterceptor,
        sessions: BashSessions,
        activity: ActivityClock,
        *,
        on_bind: Callable[[], None] | None = None,
    ) -> None:
        self._on_bind = on_bind
        """Called with each binding (Reset forgets a baseline a previous session captured)."""
        self._auth = auth
        self._sessions = sessions
        self._activity = activity
        self._lock = asyncio.Lock()
        self._bound = False
        self.session = ""
        """The session bound last ("namespace/name"); empty before any binding."""

    async def bind(
        self,
        token: str,
        env: Mapping[str, str],
        session: str,
        *,
        still_authorized: Callable[[], bool],
    ) -> Binding:
        """Binds the sandbox to `session`; nothing changes when the request is invalid.

        `still_authorized` re-checks the caller's token once the binding runs: two calls
        that both presented the old token must not both succeed, because the second would
        take the sandbox away from the session the first one bound it to.
        """
        validate_binding(token, env, session)
        async with self._lock:
            if not still_authorized():
                raise UnauthenticatedError(
                    "The token this call carries was replaced by another BindSession."
                )
            rebound, self._bound = self._bound, True
            # Environment first, then the token: a shell that starts from here on (even for
            # a call admitted just before the rotation) has the session's environment.
            self._sessions.bind_env(env)
            self._auth.rotate(token)
            self.session = session
            if self._on_bind is not None:
                self._on_bind()
            closed = await self._sessions.close_open()
            if session:
                # The session's first command is usually a bash one: its shell starts (in
                # the background) while the claim is answered, not on that command's path.
                self._sessions.prestart()
            self._activity.touch()
            bound_unix = self._activity.last_activity_unix
        log.info(
            "session_bound",
            extra={
                "session": session,
                "env_names": sorted(env),
                "closed_sessions": closed,
                "rebound": rebound,
            },
        )
        return Binding(session=session, closed_sessions=closed, bound_unix=bound_unix)
