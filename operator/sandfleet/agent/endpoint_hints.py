"""What to tell a user whose model endpoint URL is wrong: is an https:// endpoint really a
plain-HTTP server (one short probe, asked only after a TLS handshake failed or hung, so the
user hears "use http://" instead of a TLS error, or nothing for as long as the request
timeout), where an endpoint that answered 404 probably serves (/v1), and what a failed
connection's chain of causes says (TLS, a connect timeout)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import urllib.parse

PROBE_TIMEOUT_S = 3.0
"""For connecting and for the first bytes of the answer: a plain-HTTP server answers a
request line at once."""


async def plain_http_instead_of_tls(url: str) -> bool:
    """Whether the host and port of `url` answer a plain HTTP request with an HTTP status
    line. False on any doubt (no answer, another protocol, an unparsable URL)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname, parts.port or 443
    except ValueError:
        return False
    if not host:
        return False
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(host, port)
            request = f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
            writer.write(request.encode("ascii", "replace"))
            await writer.drain()
            first = await reader.read(5)
    except (OSError, TimeoutError):
        return False
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    return first == b"HTTP/"


def v1_base_url(url: str) -> str | None:
    """The base URL OpenAI-compatible servers usually serve under (scheme://host[:port]/v1)
    for an endpoint that answered 404, or None when `url` already ends in /v1 or has no
    host. Another path (/v2, /api) is replaced, never extended (no .../v2/v1)."""
    parts = urllib.parse.urlsplit(url.rstrip("/"))
    if not parts.netloc or parts.path.endswith("/v1"):
        return None
    return f"{parts.scheme}://{parts.netloc}/v1"


def _chain(error: BaseException) -> list[BaseException]:
    """The error and its causes and contexts, innermost last."""
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def tls_failed(error: BaseException) -> bool:
    """An SSL error somewhere in the chain (a handshake with a server that does not speak
    TLS, a certificate the client refuses, ...)."""
    return any(isinstance(e, ssl.SSLError) for e in _chain(error))


def connect_timed_out(error: BaseException) -> bool:
    """A timeout while connecting (TCP or TLS handshake), not while waiting for the reply."""
    return any(type(e).__name__ == "ConnectTimeout" for e in _chain(error))
