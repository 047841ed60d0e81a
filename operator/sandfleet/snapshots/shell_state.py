"""Bash sessions' working directory and exported environment: read before a suspend,
re-established in the fresh sessions after a resume.

Shell variables that are not exported, functions, aliases, jobs and history are not kept:
they live in the bash process, which a suspend ends.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import SandfleetError, SuspendError
from sandfleet.logs import get_logger

log = get_logger(__name__)

# NUL-separated so any value survives; base64 so the output is plain text.
_READ = "{ printf '%s\\0' \"$PWD\"; env -0; } | base64 -w0"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
VOLATILE = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})
"""Set by bash itself: never restored."""
_OWN_PREFIX = "SANDFLEET_"
"""Set by the launcher for this sandbox (its id, ...): the new sandbox's values win."""
_TIMEOUT_S = 30.0


DEFAULT_SESSION = "default"
"""The session execute_bash and the SDK's bash() use: always kept."""


async def live_sessions(client: RuntimeClient, also: Sequence[str] = ()) -> list[str]:
    """The bash sessions to keep: every one the runtime has open (GetStats names them), the
    `also` ones a caller knows it used, and `default`; sorted, each once."""
    try:
        names = (await client.stats()).bash_session_names
    except SandfleetError as exc:
        raise SuspendError(
            f"could not list the sandbox's bash sessions: {exc}; the sandbox keeps running"
        ) from exc
    return sorted({DEFAULT_SESSION, *names, *also})


async def capture(client: RuntimeClient, sessions: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each session's {"cwd", "env"}, after interrupting its foreground command."""
    states: dict[str, dict[str, Any]] = {}
    for session in sessions:
        try:
            await client.interrupt(session)
            states[session] = await _read(client, session)
        except SandfleetError as exc:
            raise SuspendError(
                f"could not read bash session {session!r}'s working directory and "
                f"environment: {exc}; the sandbox keeps running"
            ) from exc
    return states


async def reestablish(
    client: RuntimeClient, states: Mapping[str, Mapping[str, Any]], moved: tuple[str, str]
) -> None:
    """Bring each saved session's environment and working directory back in a fresh
    session, one command each, the sessions at once; `moved` = (old prefix, new prefix) of
    host paths (isolation "none")."""
    old, new = moved

    async def one(session: str, saved: Mapping[str, Any]) -> None:
        env = {k: _move(str(v), old, new) for k, v in dict(saved["env"]).items()}
        script = _script(env, _move(str(saved["cwd"]), old, new))
        result = await client.run_command(script, session=session, timeout_s=_TIMEOUT_S)
        if result.exit_code not in (0, None):
            log.warning("shell_state_partly_restored", session=session, output=result.stdout[-500:])

    await asyncio.gather(*(one(session, saved) for session, saved in states.items()))


_UNSET_OTHERS = """for __sf_name in $(compgen -e); do
  case "$__sf_name" in {skipped}) continue ;; esac
  case " {saved} " in *" $__sf_name "*) ;; *) unset "$__sf_name" 2>/dev/null ;; esac
done
unset __sf_name"""
"""Unsets what the fresh shell exports and the saved one did not (in the shell itself: no
round trip to read the fresh environment first); bash's own and the launcher's stay."""


def _script(saved: Mapping[str, str], cwd: str) -> str:
    kept = sorted(name for name in saved if _restorable(name))
    skipped = "|".join([*sorted(VOLATILE), f"{_OWN_PREFIX}*"])
    lines = [_UNSET_OTHERS.format(skipped=skipped, saved=" ".join(kept))]
    lines += [f"export {name}={shlex.quote(saved[name])}" for name in kept]
    lines.append(f"cd -- {shlex.quote(cwd)}")
    return "\n".join(lines)


def _restorable(name: str) -> bool:
    return (
        _NAME.fullmatch(name) is not None
        and name not in VOLATILE
        and not name.startswith(_OWN_PREFIX)
    )


async def _read(client: RuntimeClient, session: str) -> dict[str, Any]:
    result = await client.run_command(_READ, session=session, timeout_s=_TIMEOUT_S)
    if result.exit_code != 0 or result.truncated:
        why = "its output was cut" if result.truncated else result.stderr[-300:]
        raise SuspendError(f"reading the session state failed: {why}")
    try:
        text = base64.b64decode(result.stdout.strip(), validate=True).decode(errors="replace")
    except binascii.Error as exc:
        raise SuspendError(f"reading the session state failed: {exc}") from None
    fields = text.split("\0")
    env = dict(item.split("=", 1) for item in fields[1:] if "=" in item)
    return {"cwd": fields[0], "env": env}


def _move(value: str, old: str, new: str) -> str:
    return new + value[len(old) :] if old and old != new and value.startswith(old) else value
