"""One cheap request to the model endpoint before a batch starts, so a dead endpoint or a
refused key fails the batch in seconds instead of failing every task one by one.

The check is `GET <base-url>/models`, which OpenAI, vLLM, llama.cpp, SGLang and Ollama serve
without generating anything. Only answers that say the endpoint cannot work fail it: no
connection, no answer in time, or 401/403 (the key). Any other status passes, because some
servers have no /models route while their chat completions work.
"""

from __future__ import annotations

from sandfleet.errors import SandfleetError

OPENAI_BASE_URL = "https://api.openai.com/v1"
PREFLIGHT_TIMEOUT_S = 10.0


class EndpointUnusableError(SandfleetError):
    """The model endpoint did not answer, or refused the API key."""


def models_url(base_url: str | None) -> str:
    return (base_url or OPENAI_BASE_URL).rstrip("/") + "/models"


async def check_endpoint(
    base_url: str | None, api_key: str | None, *, timeout_s: float = PREFLIGHT_TIMEOUT_S
) -> int:
    """The HTTP status of GET <base-url>/models; raises EndpointUnusableError when the
    endpoint is unreachable, too slow, or refuses the key."""
    # Imported here: only batch pays for aiohttp's import.
    import aiohttp

    url = models_url(base_url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, headers=headers, allow_redirects=True) as response,
        ):
            status = response.status
    except TimeoutError as error:
        raise EndpointUnusableError(
            f"the model endpoint did not answer GET {url} within {timeout_s:g}s"
        ) from error
    except (aiohttp.ClientError, OSError, ValueError) as error:
        # ValueError: a malformed URL. ClientError carries the socket's reason.
        raise EndpointUnusableError(
            f"the model endpoint is unreachable: GET {url}: {error or type(error).__name__}"
        ) from error
    if status in {401, 403}:
        raise EndpointUnusableError(
            f"the model endpoint refused the API key (HTTP {status} from GET {url})"
        )
    return status
