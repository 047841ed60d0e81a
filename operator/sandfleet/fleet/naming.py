"""Names and label values of the objects the operator creates, always within Kubernetes' limits.

A name that already fits is used as it is, so `kubectl get pod <session>` finds a session's
pod. One that does not (too long, or characters a DNS label refuses) is cut and suffixed with
a short hash of the whole original, so two long names sharing a prefix still differ and the
same input always gives the same name: the operator finds its objects again after a restart.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

MAX_LABEL_LENGTH: Final = 63
"""The limit of a DNS-1123 label (pod hostnames, Service names) and of a label value."""
GENERATED_SUFFIX_LENGTH: Final = 5
"""Random characters the API server appends to a generateName prefix."""

_HASH_LENGTH: Final = 8  # 32 bits: a collision needs ~65k long names sharing one prefix
_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_NOT_DNS_LABEL_CHARS: Final = re.compile(r"[^-a-z0-9]")
_LABEL_VALUE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NOT_LABEL_VALUE_CHARS: Final = re.compile(r"[^-A-Za-z0-9_.]")


def _digest(text: str) -> str:
    # sha256, not hash(): the result must not change between processes (PYTHONHASHSEED).
    return hashlib.sha256(text.encode()).hexdigest()[:_HASH_LENGTH]


def is_dns_label(name: str) -> bool:
    """True for a valid DNS-1123 label: lowercase alphanumerics and '-', at most 63 chars."""
    return len(name) <= MAX_LABEL_LENGTH and _DNS_LABEL.match(name) is not None


def is_label_value(value: str) -> bool:
    """True for a valid label value (may be empty; alphanumeric at both ends; at most 63)."""
    return len(value) <= MAX_LABEL_LENGTH and _LABEL_VALUE.match(value) is not None


def bounded_name(base: str, suffix: str = "", limit: int = MAX_LABEL_LENGTH) -> str:
    """`base + suffix` as a DNS-1123 label of at most `limit` characters.

    Unchanged when it already is one. Otherwise `base` is lowercased, characters a label
    refuses become '-', it is cut to fit, and `-<hash of base>` goes between it and `suffix`,
    which is always kept whole (it says what the object is: "-token", "-sandbox").
    """
    if not base:
        raise ValueError("a name needs a non-empty base")
    if not 1 <= limit <= MAX_LABEL_LENGTH:
        raise ValueError(f"limit {limit} is outside 1..{MAX_LABEL_LENGTH}")
    candidate = base + suffix
    if len(candidate) <= limit and is_dns_label(candidate):
        return candidate
    digest = _digest(base)
    room = limit - len(suffix) - len(digest) - 1
    if room < 0:
        raise ValueError(f"suffix {suffix!r} leaves no room for a hash within {limit} chars")
    cut = _NOT_DNS_LABEL_CHARS.sub("-", base.lower())[:room].strip("-")
    name = f"{cut}-{digest}{suffix}" if cut else f"{digest}{suffix}"
    if not is_dns_label(name):
        raise ValueError(f"suffix {suffix!r} cannot end a DNS label")
    return name


def label_value(name: str) -> str:
    """`name` as a valid label value: unchanged when it is one, else cut and hash-suffixed.

    Object names (DNS subdomains, up to 253 chars) only ever need the cut; anything else
    also has its refused characters replaced by '-'.
    """
    if is_label_value(name):
        return name
    digest = _digest(name)
    room = MAX_LABEL_LENGTH - len(digest) - 1
    cut = _NOT_LABEL_VALUE_CHARS.sub("-", name)[:room].strip("-_.")
    return f"{cut}-{digest}" if cut else digest


def session_pod_name(session: str) -> str:
    """The pod of a cold-started session: the session's own name whenever it fits a label.

    Held to 63 characters (not the 253 a pod name may have) because the pod name is also its
    hostname, which the kubelet would otherwise cut without a hash.
    """
    return bounded_name(session)


def token_secret_name(session: str) -> str:
    """The Secret holding a session's runtime bearer token: "<session>-token"."""
    return bounded_name(session, "-token")


def pool_token_secret_name(pool: str) -> str:
    """The Secret holding the bearer token a pool's idle pods start with: "<pool>-pool-token"."""
    return bounded_name(pool, "-pool-token")


def network_policy_name(session: str) -> str:
    """The NetworkPolicy of a session's sandbox: "<session>-sandbox"."""
    return bounded_name(session, "-sandbox")


def pool_network_policy_name(pool: str) -> str:
    """The NetworkPolicy of a pool's idle pods: "<pool>-pool"."""
    return bounded_name(pool, "-pool")


def pool_pod_generate_name(pool: str) -> str:
    """The generateName prefix of a pool's pods: "<pool>-".

    Short enough that the API server's five random characters still make a 63-char label
    (it would otherwise cut the prefix itself, without a hash).
    """
    return bounded_name(pool, limit=MAX_LABEL_LENGTH - GENERATED_SUFFIX_LENGTH - 1) + "-"
