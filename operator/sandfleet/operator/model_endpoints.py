"""Which model endpoints the operator calls for managed sessions: the admin's allowlist.

A managed session's baseURL is chosen by whoever creates the session, and the operator sends
that session's API key (a Secret it reads with its own rights) and its prompts there. Left
open, that makes the operator a confused deputy: a tenant names a listener of its own and
receives the key. So the operator calls only endpoints the platform admin listed (operator
setting `model_endpoints_allowed`, chart value `model.allowedEndpoints`) and the
platform's default endpoint.

Matching is on the parsed URL, never on the text: scheme, host (exact, or `*.suffix` for
subdomains), port (the scheme's default unless the entry names one or `*`) and a path prefix
by whole segments. Hosts are plain DNS names or IP literals, so no two URL parsers can
disagree on which host a URL names (no userinfo, no backslash, no percent-escapes).
"""

from __future__ import annotations

import dataclasses
import re
import urllib.parse
from collections.abc import Iterable

from sandfleet.api.session import check_base_url
from sandfleet.errors import SandfleetError

OPENAI_BASE_URL = "https://api.openai.com/v1"
"""Where a session without baseURL goes (the SDK's default)."""

_DEFAULT_PORTS = {"http": 80, "https": 443}
_HOST = re.compile(r"^([a-z0-9]([a-z0-9-]*[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")
_IPV6 = re.compile(r"^[0-9a-f:.]+$")
_ENTRY = re.compile(
    r"^(?P<scheme>https?)://(?P<wild>\*\.)?(?P<host>\[[0-9a-f:.]+\]|[a-z0-9.-]+)"
    r"(:(?P<port>\d{1,5}|\*))?(?P<path>/[^?#]*)?$"
)


class EndpointNotAllowedError(SandfleetError):
    """The URL is not among the allowed endpoints (or is not a URL the check can trust)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Target:
    scheme: str
    host: str
    port: int
    segments: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class EndpointRule:
    """One allowlist entry, parsed."""

    scheme: str
    host: str
    subdomains: bool
    """`*.host`: any name below `host` (not `host` itself)."""
    port: int | None
    """None: any port (`:*`)."""
    segments: tuple[str, ...]

    @classmethod
    def parse(cls, entry: str) -> EndpointRule:
        match = _ENTRY.match(entry.strip().lower())
        if match is None:
            raise ValueError(
                f"model endpoint {entry!r} is not scheme://host[:port][/path] "
                "(http or https; host a DNS name, *.domain or an IP; port a number or *)"
            )
        scheme = match["scheme"]
        host = _plain_host(match["host"])
        if host is None:
            raise ValueError(f"model endpoint {entry!r} has an invalid host")
        port_text = match["port"]
        port = _DEFAULT_PORTS[scheme] if port_text is None else None
        if port_text not in (None, "*"):
            port = int(port_text)
        return cls(scheme, host, bool(match["wild"]), port, _segments(match["path"] or "/"))

    def admits(self, target: _Target) -> bool:
        if target.scheme != self.scheme:
            return False
        if self.subdomains:
            if not target.host.endswith("." + self.host):
                return False
        elif target.host != self.host:
            return False
        if self.port is not None and target.port != self.port:
            return False
        return target.segments[: len(self.segments)] == self.segments


class EndpointAllowlist:
    """The admin's allowlist plus the platform's default endpoint."""

    def __init__(self, entries: Iterable[str], default_base_url: str | None = None) -> None:
        self.entries = tuple(entries)
        self._rules = [EndpointRule.parse(e) for e in self.entries]
        if default_base_url:
            # The default is set by the admin too; allowed as its own origin and path.
            self._rules.append(EndpointRule.parse(default_base_url.rstrip("/")))

    def check(self, url: str) -> None:
        """Raises EndpointNotAllowedError unless a rule admits `url`."""
        target = _target(url)
        if not any(rule.admits(target) for rule in self._rules):
            listed = ", ".join(self.entries) or "none"
            raise EndpointNotAllowedError(
                f"model endpoint {url} is not allowed: the platform admin lists the endpoints "
                f"managed sessions may use (chart value model.allowedEndpoints; now: {listed})"
            )


def _target(url: str) -> _Target:
    try:
        check_base_url(url)
    except ValueError as exc:
        raise EndpointNotAllowedError(f"model endpoint {url!r}: {exc}") from None
    parts = urllib.parse.urlsplit(url)
    host = _plain_host(parts.hostname or "")
    if host is None:
        raise EndpointNotAllowedError(f"model endpoint {url!r}: the host is not a plain name or IP")
    scheme = parts.scheme.lower()
    segments = _segments(parts.path or "/")
    if any(urllib.parse.unquote(s) in (".", "..") for s in segments):
        raise EndpointNotAllowedError(f"model endpoint {url!r}: '.' or '..' in the path")
    return _Target(scheme, host, parts.port or _DEFAULT_PORTS[scheme], segments)


def _plain_host(host: str) -> str | None:
    """`host` lower-cased without brackets or a trailing dot; None unless a DNS name or IP."""
    host = host.lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if ":" in host:
        return host if _IPV6.match(host) else None
    host = host.removesuffix(".")
    return host if _HOST.match(host) else None


def _segments(path: str) -> tuple[str, ...]:
    return tuple(s for s in path.split("/") if s)
