"""Reading a request: the bearer key, the JSON body (bounded), the body's fields.

Every failure is an ApiError naming what is wrong: 401 for the key, 400 for a body that is
too large, not JSON, or has a bad field (its path in `param`, e.g. `messages[0].content`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from sandfleet.api.names import bearer_token_of
from sandfleet.serve.errors import ApiError, bad_request

ModelT = TypeVar("ModelT", bound=BaseModel)
LOCAL_TENANT = "local"


def tenant_of(headers: Mapping[str, str], api_key: str | None) -> str:
    """Who is asking: `local` without a configured key; else the key must match (401)."""
    if api_key is None:
        return LOCAL_TENANT
    token = bearer_token_of(headers.get("authorization"))
    if token is None or not hmac.compare_digest(token.encode(), api_key.encode()):
        raise ApiError(
            401,
            "missing or wrong API key: send `Authorization: Bearer <key>`",
            error_type="invalid_request_error",
            code="invalid_api_key",
        )
    return "key-" + hashlib.sha256(token.encode()).hexdigest()[:12]


def client_token_of(headers: Mapping[str, str]) -> tuple[str, str]:
    """gateway.identity = client: the tenant a bearer token stands for, and the token (the
    gateway checks it at the claim); 401 without one."""
    token = bearer_token_of(headers.get("authorization"))
    if not token:
        raise ApiError(
            401,
            "send a Kubernetes bearer token as the API key (`Authorization: Bearer <token>`)",
            error_type="invalid_request_error",
            code="invalid_api_key",
        )
    return "token-" + hashlib.sha256(token.encode()).hexdigest()[:16], token


async def read_json(
    chunks: AsyncIterator[bytes], content_length: str | None, limit: int
) -> dict[str, Any]:
    """The body as a JSON object, at most `limit` bytes."""
    too_large = bad_request(
        f"the request body is larger than {limit} bytes", "body", "request_too_large"
    )
    if content_length is not None and content_length.isdigit() and int(content_length) > limit:
        raise too_large
    body = bytearray()
    async for chunk in chunks:
        body.extend(chunk)
        if len(body) > limit:
            raise too_large
    try:
        decoded = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise bad_request(f"the body is not valid JSON: {error}", "body", "invalid_json") from None
    if not isinstance(decoded, dict):
        raise bad_request("the body must be a JSON object", "body", "invalid_json")
    return decoded


_UNION_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})


def _field_path(loc: tuple[int | str, ...]) -> list[int | str]:
    """The field path of an error's location, without pydantic's union member tags
    (`input.str`, `input.list[dict[str,any]]` are both the field `input`)."""
    path: list[int | str] = []
    for part in loc:
        if isinstance(part, str) and (part in _UNION_TAGS or "[" in part):
            break
        path.append(part)
    return path


def parse(model: type[ModelT], body: dict[str, Any]) -> ModelT:
    """`body` as `model`; the first bad field is named in `param`."""
    try:
        return model.model_validate(body)
    except ValidationError as error:
        first = error.errors()[0]
        param = "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}"
            for part in _field_path(first["loc"])
        ).lstrip(".")
        raise bad_request(f"{param or 'body'}: {first['msg']}", param or "body") from None


class ClientTokens:
    """The latest bearer token of each client tenant (gateway.identity = client), at most
    LIMIT of them (the least recently seen go first): claims are made with them."""

    LIMIT = 10_000

    def __init__(self) -> None:
        self._tokens: dict[str, str] = {}

    def remember(self, tenant: str, token: str) -> None:
        self._tokens.pop(tenant, None)
        self._tokens[tenant] = token
        if len(self._tokens) > self.LIMIT:
            del self._tokens[next(iter(self._tokens))]

    def get(self, tenant: str) -> str | None:
        return self._tokens.get(tenant)
