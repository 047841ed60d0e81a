"""Pure builders of SandboxSession bodies and spec parts (files, Secret references, names),
shared by the SDK, the CLI and the gateway; managed runs from an AgentConfig + Task are
sandfleet.cluster.session_specs.

Specs go through the API's pydantic models (sandfleet.api), the ones the operator parses, so
a body built here is one the operator accepts; defaults are left out for the CRD to fill in.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator, Mapping
from pathlib import PurePosixPath
from typing import Any

from pydantic import ValidationError

from sandfleet.api import (
    API_VERSION,
    SESSION_KIND,
    EgressMode,
    EnvVar,
    FileSource,
    KeyRef,
    LifecycleSpec,
    NetworkSpec,
    ObjectName,
    PodTemplate,
    SandboxSessionSpec,
)
from sandfleet.errors import SandfleetError

DEFAULT_GENERATE_NAME = "sbx-"
DEFAULT_API_KEY_SECRET_KEY = "api-key"
"""Key of the API key in the Secret --api-key-secret names, when it names no key."""
MAX_INLINE_FILES_BYTES = 256 * 1024
"""Budget of spec.files inline content: etcd keeps objects below ~1.5 MB, and every status
update rewrites the whole object, so large inputs belong in the image, a ConfigMap or an
upload after the sandbox is Ready."""
MAX_INLINE_FILES = 64
"""spec.files holds at most this many entries (the CRD's maxItems)."""
_GENERATED_SUFFIX_ROOM = 40  # generateName prefixes stay short: the server appends 5 chars


class ManifestError(SandfleetError):
    """The arguments cannot be expressed as a SandboxSession (the message says why)."""


def session_body(
    spec: SandboxSessionSpec,
    *,
    name: str | None = None,
    generate_name: str = DEFAULT_GENERATE_NAME,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A complete SandboxSession object for `spec`, named `name` or generateName'd."""
    metadata: dict[str, Any] = {"name": name} if name else {"generateName": generate_name}
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": API_VERSION,
        "kind": SESSION_KIND,
        "metadata": metadata,
        # exclude_defaults: the CRD's defaults apply, and `kubectl get -o yaml` shows what
        # the user actually asked for.
        "spec": spec.model_dump(
            mode="json", by_alias=True, exclude_none=True, exclude_defaults=True
        ),
    }


def raw_session_spec(
    *,
    template: str | None = None,
    pool: str | None = None,
    pod: PodTemplate | None = None,
    env: Mapping[str, str] | None = None,
    files: tuple[FileSource, ...] = (),
    lifecycle: LifecycleSpec | None = None,
    egress: EgressMode | str | None = None,
) -> SandboxSessionSpec:
    """A session without spec.agent: a sandbox the caller drives through the runtime API."""
    with readable_spec_errors():
        return SandboxSessionSpec(
            template_ref=ObjectName(name=template) if template else None,
            pool_ref=ObjectName(name=pool) if pool else None,
            template=pod,
            env=tuple(EnvVar(name=key, value=value) for key, value in (env or {}).items()),
            files=files,
            lifecycle=lifecycle or LifecycleSpec(),
            network=NetworkSpec(egress=EgressMode(egress)) if egress is not None else None,
        )


def file_sources(
    contents: Mapping[str, str],
    *,
    base_dir: str | None = None,
    modes: Mapping[str, int] | None = None,
    max_total_bytes: int = MAX_INLINE_FILES_BYTES,
) -> tuple[FileSource, ...]:
    """spec.files entries with inline text; relative names go below `base_dir` when given
    (else the operator places them relative to the sandbox workdir)."""
    if len(contents) > MAX_INLINE_FILES:
        raise ManifestError(
            f"{len(contents)} input files; a SandboxSession carries at most {MAX_INLINE_FILES} "
            "(archive them into one file, or upload them once the sandbox is Ready)"
        )
    total = sum(len(text.encode("utf-8")) for text in contents.values())
    if total > max_total_bytes:
        raise ManifestError(
            f"the input files hold {total} bytes; a SandboxSession carries at most "
            f"{max_total_bytes} bytes of inline files (put larger inputs in the image or a "
            "ConfigMap, or upload them once the sandbox is Ready)"
        )
    sources = []
    for name, text in contents.items():
        path = name if base_dir is None else str(PurePosixPath(base_dir, name))
        mode = (modes or {}).get(name)
        with readable_spec_errors():
            if mode is None:
                sources.append(FileSource(path=path, content=text))
            else:
                sources.append(FileSource(path=path, content=text, mode=mode & 0o777))
    return tuple(sources)


def secret_key_ref(reference: str) -> KeyRef:
    """`NAME` or `NAME:KEY` (the --api-key-secret syntax) as a KeyRef."""
    name, _, key = reference.partition(":")
    if not name:
        raise ManifestError(f"not a Secret reference (NAME or NAME:KEY): {reference!r}")
    with readable_spec_errors():
        return KeyRef(name=name, key=key or DEFAULT_API_KEY_SECRET_KEY)


def decimal_string(value: float) -> str:
    """A float as the plain decimal string Kubernetes specs carry ("0.7", not "7e-01")."""
    if not math.isfinite(value):
        raise ManifestError(f"not a finite number: {value}")
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def generate_name_for(task_id: str) -> str:
    """A generateName prefix that shows the task in `kubectl get sbx` ("sales-by-region-")."""
    slug = re.sub(r"[^a-z0-9-]+", "-", task_id.lower()).strip("-")[:_GENERATED_SUFFIX_ROOM]
    return f"{slug.rstrip('-') or 'task'}-"


@contextlib.contextmanager
def readable_spec_errors() -> Iterator[None]:
    """Turns a pydantic error from an api model into a ManifestError that names each field."""
    try:
        yield
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in issue['loc']) or 'spec'}: {issue['msg']}"
            + (f" (got {issue['input']!r})" if isinstance(issue.get("input"), str | int) else "")
            for issue in error.errors()
        )
        raise ManifestError(f"invalid SandboxSession spec: {problems}") from error
    except ValueError as error:  # an enum value (egress) that does not exist
        raise ManifestError(f"invalid SandboxSession spec: {error}") from error
