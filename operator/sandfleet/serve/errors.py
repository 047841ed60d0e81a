"""Errors as the OpenAI API sends them: `{"error": {message, type, param, code}}` + a status."""

from __future__ import annotations

from typing import Any

from openai.types import ErrorObject

from sandfleet.errors import GatewayAuthError, QuotaExceededError, SandfleetError

INVALID_REQUEST = "invalid_request_error"


class ApiError(SandfleetError):
    """An error a client gets as an OpenAI error object with HTTP `status`."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        error_type: str = INVALID_REQUEST,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.error_type = error_type
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        error = ErrorObject(
            message=self.message, type=self.error_type, param=self.param, code=self.code
        )
        return {"error": error.model_dump(mode="json", exclude={"misalignment"})}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def model_not_found(name: str) -> ApiError:
    """A 400 naming the `model` field, with the OpenAI API's code for it (the API itself
    answers 404; an unknown model is a bad request here as every other bad field is). The
    served names are not listed: a ServedModel is visible only to its namespace's tenants
    (GET /v1/models lists yours)."""
    return ApiError(
        400,
        f"the model {name!r} does not exist here or you do not have access to it "
        "(GET /v1/models lists the models you may use)",
        param="model",
        code="model_not_found",
    )


def upstream_failed(model: str, message: str) -> ApiError:
    """The upstream endpoint of `model` failed (down, an error status, garbage)."""
    return ApiError(
        502,
        f"the upstream model endpoint of {model!r} failed: {message}",
        error_type="upstream_error",
        code="upstream_error",
    )


def internal_error() -> ApiError:
    """What a client sees of a bug: never a traceback (the log has it)."""
    return ApiError(500, "internal server error (the server log has the details)",
                    error_type="server_error", code="internal_error")  # fmt: skip


def claim_failed(error: Exception) -> ApiError:
    """No sandbox for a request: 503, except what the gateway says of the caller in cluster
    mode (a full namespace quota: 429 with Retry-After; a token or RBAC refused: 401/403,
    which with gateway.identity = client is the client's own token)."""
    if isinstance(error, QuotaExceededError):
        return ApiError(429, f"no sandbox now: {error}", error_type="rate_limit_error",
                        code="sandbox_quota_exceeded", headers={"Retry-After": "5"})  # fmt: skip
    if isinstance(error, GatewayAuthError):
        status = 403 if error.code == "PERMISSION_DENIED" else 401
        return ApiError(status, f"the gateway refused the claim: {error}",
                        code="sandbox_claim_refused")  # fmt: skip
    return ApiError(503, f"no sandbox could be started: {error}",
                    error_type="server_error", code="sandbox_unavailable")  # fmt: skip
