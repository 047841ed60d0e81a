"""The model endpoint allowlist: matching is on the parsed URL (scheme, host, port, path by
segments), so the usual tricks to pass a string-prefix check fail, and bad entries stop the
operator at start-up."""

from __future__ import annotations

import pydantic
import pytest

from sandfleet.api import AgentSpec
from sandfleet.operator.model_endpoints import (
    EndpointAllowlist,
    EndpointNotAllowedError,
    EndpointRule,
)
from sandfleet.operator.settings import OperatorSettings

ALLOWED = EndpointAllowlist(
    [
        "https://allowed.example.com/v1",
        "https://*.models.example.org",
        "http://127.0.0.1:*",
        "http://vllm.models:8000",
    ],
    default_base_url="http://platform-llm.sandfleet-system:8000/v1/",
)


@pytest.mark.parametrize(
    "url",
    [
        "https://allowed.example.com/v1",
        "https://allowed.example.com/v1/",
        "https://ALLOWED.example.com:443/v1/chat",
        "https://allowed.example.com./v1",
        "https://a.models.example.org/anything",
        "https://x.y.models.example.org",
        "http://127.0.0.1:41234/v1",
        "http://vllm.models:8000/v1",
        "http://platform-llm.sandfleet-system:8000/v1",
    ],
)
def test_allowed_endpoints_pass(url: str) -> None:
    ALLOWED.check(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://allowed.example.com@evil.net/v1",  # userinfo: the host is evil.net
        "https://allowed.example.com:443@evil.net/v1",
        "https://allowed.example.com.evil.net/v1",  # a suffix is another host
        "https://evil.net/allowed.example.com/v1",
        "https://evilallowed.example.com/v1",
        "https://allowed.example.com\\@evil.net/v1",  # parsers disagree on backslashes
        "https://allowed.example.com/v10",  # the path prefix is by whole segments
        "https://allowed.example.com/v1/../../steal",
        "https://allowed.example.com/v1/%2e%2e/steal",
        "https://allowed.example.com:8443/v1",  # no port in the entry: the default only
        "http://allowed.example.com/v1",  # the scheme is part of the entry
        "https://models.example.org/v1",  # *.domain is its subdomains, not itself
        "https://a.models.example.org.evil.net",
        "https://%61llowed.example.com/v1",
        "http://127.0.0.2:41234/v1",
        "http://localhost:41234/v1",
        "http://vllm.models:8001/v1",
        "https://api.openai.com/v1",  # OpenAI itself only when listed
        "ftp://allowed.example.com/v1",
        "https://allowed.example.com /v1",
    ],
)
def test_other_endpoints_and_tricks_are_refused(url: str) -> None:
    with pytest.raises(EndpointNotAllowedError):
        ALLOWED.check(url)


def test_an_empty_allowlist_allows_only_the_platform_default() -> None:
    allowlist = EndpointAllowlist([], default_base_url="http://llm.platform:8000/v1")
    allowlist.check("http://llm.platform:8000/v1")
    with pytest.raises(EndpointNotAllowedError, match=r"model.allowedEndpoints; now: none"):
        allowlist.check("http://llm.platform:8000/other")
    with pytest.raises(EndpointNotAllowedError):
        EndpointAllowlist([]).check("https://api.openai.com/v1")


@pytest.mark.parametrize(
    "entry",
    [
        "allowed.example.com",
        "https://user@allowed.example.com",
        "https://*/",
        "https://a b",
        "https://x:99999999",
    ],
)
def test_bad_entries_are_refused_at_start_up(entry: str) -> None:
    with pytest.raises(ValueError, match="model endpoint"):
        EndpointRule.parse(entry)
    with pytest.raises(pydantic.ValidationError):
        OperatorSettings(model_endpoints_allowed=[entry])


@pytest.mark.parametrize(
    "url",
    [
        "https://allowed.example.com@evil.net/v1",
        "https://allowed.example.com\\@evil.net/v1",
        "https:///v1",
        "https://a b/v1",
        "https://host:notaport/v1",
    ],
)
def test_the_api_refuses_base_urls_whose_host_is_ambiguous(url: str) -> None:
    with pytest.raises(pydantic.ValidationError, match="baseURL"):
        AgentSpec.model_validate({"model": "m", "prompt": "p", "baseURL": url})
