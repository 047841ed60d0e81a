"""Who may use a ServedModel: whoever may `list servedmodels` in its namespace, as the API
server answers a SubjectAccessReview for the caller's own token (TokenReview first; both
cached, as the gateway's). The same question for listing and for using: a model a tenant
cannot see it cannot use, and both look the same to a stranger (400 `model_not_found`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from sandfleet import api
from sandfleet.kube.access_review import (
    Authenticator,
    AuthError,
    PermissionDeniedError,
    ResourceAccess,
    UnauthenticatedError,
)
from sandfleet.serve.errors import ApiError, model_not_found
from sandfleet.serve.served_models import namespace_of


class NamespaceAccess:
    def __init__(self, auth: Authenticator) -> None:
        self._auth = auth

    async def may_list(self, token: str, namespace: str) -> bool:
        """Whether `token`'s identity may list ServedModels in `namespace`; ApiError 401
        for a token the API server refuses, 503 when it cannot answer."""
        try:
            caller = await self._auth.authenticate(token)
            question = ResourceAccess("list", api.GROUP, api.SERVED_MODEL_PLURAL, namespace)
            await self._auth.check(caller, question)
        except PermissionDeniedError:
            return False
        except UnauthenticatedError as error:
            raise ApiError(401, str(error), error_type="invalid_request_error",
                           code="invalid_api_key") from None  # fmt: skip
        except AuthError as error:
            raise ApiError(503, str(error), error_type="server_error",
                           code="auth_unavailable") from None  # fmt: skip
        return True


async def check_visible(access: NamespaceAccess | None, name: object, token: str | None) -> None:
    """A ServedModel's name ("<namespace>/<name>") is usable only by a caller who may list
    servedmodels in its namespace; to anyone else it does not exist (400 `model_not_found`,
    as an unknown name: whether another tenant serves it is not theirs to learn)."""
    namespace = namespace_of(name) if isinstance(name, str) else None
    if namespace is None or access is None:
        return
    if token is None or not await access.may_list(token, namespace):
        raise model_not_found(str(name))


async def visible_models(
    access: NamespaceAccess | None, names: Iterable[str], token: str | None
) -> list[str]:
    """The names GET /v1/models lists for the caller with `token`: the config file's, and
    the ServedModels of the namespaces the caller may list them in."""
    names = list(names)
    namespaces = sorted({ns for name in names if (ns := namespace_of(name)) is not None})
    allowed: set[str] = set()
    if namespaces and access is not None and token is not None:
        answers = await asyncio.gather(*(access.may_list(token, ns) for ns in namespaces))
        allowed = {ns for ns, ok in zip(namespaces, answers, strict=True) if ok}
    return [name for name in names if namespace_of(name) in (None, *allowed)]
