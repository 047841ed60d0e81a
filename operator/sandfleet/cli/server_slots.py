"""`sandfleet doctor`'s look at how many requests the model server runs at once.

llama.cpp's server (the one the real-model tests and the README's local-model path use)
reports its slots at GET /props (`total_slots`). A one-slot server answers one request at a
time; at --concurrency 2 or more, each request evicts the other's cached prompt, so every
turn re-reads its whole context (measured: an eval sample took 868 s instead of ~400 s).
Servers without /props (vLLM, OpenAI) are not judged.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from sandfleet.settings import Settings

PROPS_TIMEOUT_S = 5.0


def props_url(base_url: str) -> str:
    """/props at the server's root (llama.cpp serves it beside /v1, not under it)."""
    parts = urllib.parse.urlsplit(base_url)
    return f"{parts.scheme}://{parts.netloc}/props"


async def total_slots(base_url: str) -> int | None:
    """The server's `total_slots` from GET /props, or None when it reports none."""
    import aiohttp

    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROPS_TIMEOUT_S)) as session,
            session.get(props_url(base_url)) as response,
        ):
            if response.status != 200:
                return None
            body: Any = await response.json(content_type=None)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
        return None
    slots = body.get("total_slots") if isinstance(body, dict) else None
    return slots if isinstance(slots, int) and slots > 0 else None


def slots_verdict(slots: int | None, concurrency: int) -> tuple[str, str] | None:
    """("ok" or "warn", the line) for doctor, or None when the server reports no slots."""
    if slots is None:
        return None
    if concurrency > slots:
        return "warn", (
            f"the server runs {slots} request(s) at a time (llama.cpp's /props) but "
            f"--concurrency is {concurrency}: requests evict each other's cached prompt, so "
            f"every task gets slower; use --concurrency {slots} (or start the server with "
            "more slots)"
        )
    return "ok", f"the server runs {slots} request(s) at a time; --concurrency {concurrency}"


async def check(settings: Settings) -> tuple[str, str]:
    """("ok" | "warn" | "skip", the line) for `settings`' endpoint and concurrency."""
    if settings.base_url is None:
        return "skip", "no --base-url (a hosted API: not checked)"
    verdict = slots_verdict(await total_slots(settings.base_url), settings.concurrency)
    if verdict is None:
        return "skip", "the server reports no slot count (not llama.cpp's server)"
    return verdict
