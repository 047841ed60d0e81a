"""GET /v1/models: the served model names, as the `openai` package's Model objects."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from openai.types import Model

OWNER = "sandfleet"
_STARTED = int(time.time())


def models_page(names: Iterable[str]) -> dict[str, Any]:
    data = [
        Model(id=name, object="model", created=_STARTED, owned_by=OWNER).model_dump(
            mode="json", exclude_unset=True
        )
        for name in sorted(names)
    ]
    return {"object": "list", "data": data}


def model_body(name: str) -> dict[str, Any]:
    return Model(id=name, object="model", created=_STARTED, owned_by=OWNER).model_dump(
        mode="json", exclude_unset=True
    )
