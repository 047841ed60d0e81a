"""One cheap request to the model endpoint before a batch starts, so a dead endpoint or a
refused key fails the batch in seconds instead of failing every task one by one.

The check is `GET <base-url>/models`, which OpenAI, vLLM, llama.cpp, SGLang and Ollama serve
without generating anything. Only answers that say the endpoint cannot work fail it: no
connection, no answer in time, or 401/403 (the key). Any other status passes, because some
servers have no /models route while their chat completions work. `get_models` is the one
request, shared with `sandfleet doctor`'s endpoint check (which judges the answer its own way).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sandfleet.errors import SandfleetError

OPENAI_BASE_URL = "https://api.openai.com/v1"
PREFLIGHT_TIMEOUT_S = 10.0


class EndpointUnusableError(SandfleetError):
    """The model endpoint did not answer, or refused the API key."""


def models_url(base_url: str | None) -> str:
    return (base_url or OPENAI_BASE_URL).rstrip("/") + "/models"


@dataclasses.dataclass(frozen=True, slots=True)
class ModelsAnswer:
    """What GET <base-url>/models answered."""

    url: str
    status: int
    body: Any = None
    """The parsed JSON of a 200 answer, when it was asked for."""


async def get_models(
    base_url: str | None, api_key: str | None, *, timeout_s: float, read_body: bool = False
) -> ModelsAnswer:
    """GET <base-url>/models with the key (none: no Authorization header); `read_body`
    parses a 200's JSON. Raises what aiohttp raises: TimeoutError, aiohttp.ClientError,
    ValueError (a malformed URL, or a 200 whose body is not JSON)."""
    # Imported here: only the commands that check an endpoint pay for aiohttp's import.
    import aiohttp

    url = models_url(base_url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
        session.get(url, headers=headers, allow_redirects=True) as response,
    ):
        body = (
            await response.json(content_type=None) if read_body and response.status == 200 else None
        )
        return ModelsAnswer(url, response.status, body)


async def check_endpoint(
    base_url: str | None, api_key: str | None, *, timeout_s: float = PREFLIGHT_TIMEOUT_S
) -> int:
    """The HTTP status of GET <base-url>/models; raises EndpointUnusableError when the
    endpoint is unreachable, too slow, or refuses the key."""
    import aiohttp

    url = models_url(base_url)
    try:
        status = (await get_models(base_url, api_key, timeout_s=timeout_s)).status
    except TimeoutError as error:
        await _plain_http_instead_of_tls(url, error)
        raise EndpointUnusableError(
            f"the model endpoint did not answer GET {url} within {timeout_s:g}s"
        ) from error
    except (aiohttp.ClientError, OSError, ValueError) as error:
        # ValueError: a malformed URL. ClientError carries the socket's reason.
        await _plain_http_instead_of_tls(url, error)
        raise EndpointUnusableError(
            f"the model endpoint is unreachable: GET {url}: {error or type(error).__name__}"
        ) from error
    if status in {401, 403}:
        raise EndpointUnusableError(
            f"the model endpoint refused the API key (HTTP {status} from GET {url})"
        )
    return status


async def _plain_http_instead_of_tls(url: str, error: BaseException) -> None:
    """Raise EndpointUnusableError naming the mistake when an https:// endpoint that failed
    (a TLS handshake nobody answered, or one that broke) answers plain HTTP."""
    from sandfleet.agent.endpoint_hints import plain_http_instead_of_tls

    if url.startswith("https:") and await plain_http_instead_of_tls(url):
        raise EndpointUnusableError(
            f"the endpoint {url.removesuffix('/models')} answered plain HTTP, not TLS: use "
            "http:// in --base-url"
        ) from error
