"""Runtime tokens of gateway-claimed sessions, derived from the fleet's session key.

The gateway claims a pool pod, binds it to a fresh token and writes the SandboxSession once:
no token Secret on the claim path. The operator adopts the session later and needs the same
token (idle probes, reconnects), so the token is an HMAC of the session's identity under a
key only the gateway and the operator hold (a Secret in the release's namespace).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path

MIN_KEY_BYTES = 32


def derive_session_token(key: bytes, namespace: str, session: str, pod: str) -> str:
    """The runtime token of `session` bound to `pod`: 43 URL-safe characters.

    The pod is part of the input, so a session re-created under the same name on another
    pod never gets its predecessor's token.
    """
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"the session key must hold at least {MIN_KEY_BYTES} bytes")
    message = f"sandfleet-session-token\0{namespace}\0{session}\0{pod}".encode()
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def read_session_key(path: Path) -> bytes:
    """The session key from its file (a mounted Secret), read the same way by the gateway and
    the operator, or their tokens would differ: a trailing newline is not part of it (files
    written by hand or `kubectl create secret --from-file` often end with one).
    ValueError when the file is unreadable or the key too short."""
    try:
        key = path.read_bytes().rstrip(b"\r\n")
    except OSError as error:
        raise ValueError(f"cannot read the session key file {path}: {error.strerror}") from error
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(
            f"the session key in {path} is too short ({len(key)} bytes, want {MIN_KEY_BYTES}+)"
        )
    return key
