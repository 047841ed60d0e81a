"""Bounded names and label values: unchanged when they fit, cut and hash-suffixed when not."""

from __future__ import annotations

import re

import pytest

from sandfleet.fleet.naming import (
    GENERATED_SUFFIX_LENGTH,
    bounded_name,
    is_dns_label,
    is_label_value,
    label_value,
    network_policy_name,
    pool_network_policy_name,
    pool_pod_generate_name,
    pool_token_secret_name,
    session_pod_name,
    token_secret_name,
)

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LONG = "a-very-long-session-name-" * 10  # 250 chars: a valid object name, not a label

TRICKY_BASES = [
    "x",
    LONG,
    LONG.rstrip("-"),
    "UPPER-case",
    "dotted.name.example",
    "-leading-and-trailing-",
    "...",
    "a" * 63,
    "a" * 64,
    "a" * 62 + "-b",
    "9starts-with-digit",
    "under_score",
]


def test_names_that_fit_are_used_as_they_are() -> None:
    assert session_pod_name("fix-bug-42") == "fix-bug-42"
    assert token_secret_name("fix-bug-42") == "fix-bug-42-token"
    assert pool_token_secret_name("swe") == "swe-pool-token"
    assert network_policy_name("fix-bug-42") == "fix-bug-42-sandbox"
    assert pool_network_policy_name("swe") == "swe-pool"
    assert pool_pod_generate_name("swe") == "swe-"


@pytest.mark.parametrize("base", TRICKY_BASES)
@pytest.mark.parametrize("suffix", ["", "-token", "-pool-token", "-sandbox", "-pool"])
def test_every_bounded_name_is_a_dns_label_ending_in_its_suffix(base: str, suffix: str) -> None:
    name = bounded_name(base, suffix)

    assert len(name) <= 63
    assert DNS_LABEL.match(name), name
    assert name.endswith(suffix)


def test_a_long_name_keeps_its_start_and_gets_a_hash_before_the_suffix() -> None:
    name = token_secret_name(LONG)

    assert len(name) == 63
    assert name.startswith("a-very-long-session-name-a-very")
    assert re.search(r"-[0-9a-f]{8}-token$", name), name


def test_the_hash_suffix_is_the_same_in_every_process_and_release() -> None:
    # The operator finds its objects again by name after a restart or an upgrade: the
    # hash must not depend on PYTHONHASHSEED or change between releases.
    assert bounded_name("a" * 70) == "a" * 54 + "-6bd5e503"  # sha256("a" * 70)[:8]


def test_long_names_sharing_a_prefix_still_get_different_names() -> None:
    first, second = LONG + "one", LONG + "two"

    assert session_pod_name(first) != session_pod_name(second)
    assert token_secret_name(first) != token_secret_name(second)


def test_a_name_a_label_refuses_is_cleaned_and_hashed_so_it_cannot_collide() -> None:
    dotted = session_pod_name("my.session")

    assert DNS_LABEL.match(dotted)
    assert dotted.startswith("my-session-")
    assert dotted != session_pod_name("my-session")
    assert session_pod_name("Session") != session_pod_name("session")


def test_the_limit_is_respected_below_63() -> None:
    name = bounded_name(LONG, "-x", limit=20)

    assert len(name) == 20
    assert DNS_LABEL.match(name)


@pytest.mark.parametrize("pool", ["swe", LONG, "p" * 58, "p" * 57])
def test_a_pool_pods_generated_name_is_still_a_dns_label(pool: str) -> None:
    prefix = pool_pod_generate_name(pool)
    generated = prefix + "x" * GENERATED_SUFFIX_LENGTH  # what the API server appends

    assert prefix.endswith("-")
    assert len(generated) <= 63
    assert DNS_LABEL.match(generated)


def test_bounded_name_refuses_what_cannot_be_made_a_label() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        bounded_name("")
    with pytest.raises(ValueError, match="no room"):
        bounded_name(LONG, "-" + "s" * 60)
    with pytest.raises(ValueError, match="cannot end"):
        bounded_name(LONG, "-token-")
    with pytest.raises(ValueError, match="limit"):
        bounded_name("x", limit=64)


@pytest.mark.parametrize("value", ["", "fix-bug-42", "Mixed_Case.v2", "a" * 63])
def test_valid_label_values_are_kept(value: str) -> None:
    assert label_value(value) == value


@pytest.mark.parametrize(
    "name", [LONG, "a" * 64, "has space", "slash/ed", "-dash-first", "ends.", "ü-nicode"]
)
def test_anything_else_becomes_a_valid_label_value(name: str) -> None:
    value = label_value(name)

    assert len(value) <= 63
    assert LABEL_VALUE.match(value), value
    assert value != label_value(name + "x")


def test_the_validity_checks_agree_with_the_kubernetes_rules() -> None:
    assert is_dns_label("a-1")
    assert not is_dns_label("a.b")
    assert not is_dns_label("-a")
    assert not is_dns_label("a" * 64)
    assert is_label_value("")
    assert is_label_value("A_b.c")
    assert not is_label_value("a_")
    assert not is_label_value("a" * 64)
