"""Wake-ups for session workers that wait on their own session's spec (spec.suspend).

kopf updates a daemon's live body in place and has no hook for it, so a worker waiting for
`spec.suspend` to change used to look at the body every 250 ms: up to a quarter second added
to every suspend and resume, and four wake-ups a second per waiting session (a thousand
suspended sessions: four thousand). kopf's event handler for sessions (handlers.py) runs after
the live body has been updated; it sets the session's signal here, and the worker looks
again at once. A slow fallback look stays, so a missed signal costs latency, never a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator

FALLBACK_S = 5.0
"""How often a waiting worker looks anyway (a signal it missed, a body changed otherwise)."""


class SessionSignals:
    """One asyncio.Event per session uid with a worker waiting on it."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def notify(self, uid: str) -> None:
        """The session's body changed (kopf's watch event): wake its waiting worker."""
        event = self._events.get(uid)
        if event is not None:
            event.set()

    @contextlib.contextmanager
    def subscribed(self, uid: str) -> Iterator[asyncio.Event]:
        event = self._events.setdefault(uid, asyncio.Event())
        try:
            yield event
        finally:
            if self._events.get(uid) is event:
                del self._events[uid]

    async def until(
        self, uid: str, done: Callable[[], bool], *, deadline: float | None = None
    ) -> bool:
        """True once `done()`, looked at after each change of the session (and every
        FALLBACK_S regardless); False when the event loop's clock passes `deadline` first."""
        loop = asyncio.get_running_loop()
        with self.subscribed(uid) as event:
            while True:
                event.clear()  # before the look: a change right after it still wakes us
                if done():
                    return True
                wait_s = FALLBACK_S
                if deadline is not None:
                    if loop.time() >= deadline:
                        return False
                    wait_s = min(wait_s, deadline - loop.time())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), wait_s)
