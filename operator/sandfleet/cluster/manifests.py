"""Pure builders of SandboxSession bodies: raw sandboxes for the SDK, managed runs for the CLI.

Specs go through the API's pydantic models (sandfleet.api), the ones the operator parses, so
a body built here is one the operator accepts; defaults are left out for the CRD to fill in.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Iterator, Mapping
from pathlib import PurePosixPath
from typing import Any

from pydantic import ValidationError

from sandfleet.agent import AgentConfig, Task
from sandfleet.api import (
    API_VERSION,
    DEFAULT_WORKDIR,
    SESSION_KIND,
    AgentSpec,
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
from sandfleet.sandbox.backend import SandboxPaths

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
    with _readable_spec_errors():
        return SandboxSessionSpec(
            template_ref=ObjectName(name=template) if template else None,
            pool_ref=ObjectName(name=pool) if pool else None,
            template=pod,
            env=tuple(EnvVar(name=key, value=value) for key, value in (env or {}).items()),
            files=files,
            lifecycle=lifecycle or LifecycleSpec(),
            network=NetworkSpec(egress=EgressMode(egress)) if egress is not None else None,
        )


def managed_session_spec(
    config: AgentConfig,
    task: Task,
    *,
    files: tuple[FileSource, ...] = (),
    api_key_secret: KeyRef | None = None,
    template: str | None = None,
    pool: str | None = None,
    paths: SandboxPaths | None = None,
    ttl_seconds_after_finished: int | None = None,
) -> SandboxSessionSpec:
    """A session whose agent loop the operator drives: the CLI's `run --backend kubernetes`.

    config.api_key is never used: the operator reads the key from `api_key_secret`.
    """
    pod = workdir_pod(paths, sandbox_from_elsewhere=bool(template or pool))
    agent = agent_spec(config, task, api_key_secret=api_key_secret)
    with _readable_spec_errors():
        return SandboxSessionSpec(
            template_ref=ObjectName(name=template) if template else None,
            pool_ref=ObjectName(name=pool) if pool else None,
            template=pod,
            files=files,
            agent=agent,
            lifecycle=LifecycleSpec(ttl_seconds_after_finished=ttl_seconds_after_finished),
        )


def agent_spec(config: AgentConfig, task: Task, *, api_key_secret: KeyRef | None) -> AgentSpec:
    """spec.agent from the loop's configuration and the task.

    The task's own templates (prompt_config.yaml) travel as they are: the operator's loop
    fills them in against the sandbox's paths, as the local loop does.
    """
    temperature = None if config.temperature is None else decimal_string(config.temperature)
    with _readable_spec_errors():
        return AgentSpec(
            model=config.model,
            prompt=task.prompt,
            instance_prompt=task.instance_prompt or config.instance_prompt,
            baseURL=config.base_url,  # the alias: the field name is base_url
            api_key_secret_ref=api_key_secret,
            system_prompt=(
                config.system_prompt_override or task.system_prompt or config.system_prompt
            ),
            max_turns=config.max_turns,
            max_tokens=config.max_tokens,
            temperature=temperature,
            top_p=None if config.top_p is None else decimal_string(config.top_p),
            seed=config.seed,
            extra_body=json.dumps(dict(config.extra_body)) if config.extra_body else None,
            tool_timeout_seconds=max(1, math.ceil(config.tool_timeout_s)),
        )


def workdir_pod(paths: SandboxPaths | None, *, sandbox_from_elsewhere: bool) -> PodTemplate | None:
    """An inline pod template that moves the workdir where the task's layout wants it.

    The sandbox layout on the cluster is always <workdir>/{input,output}; a layout that
    does not have that shape, or a moved workdir when a template or pool decides the pod,
    cannot be honoured.
    """
    if paths is None or paths == SandboxPaths():
        return None
    if paths != SandboxPaths.under(paths.working_dir):
        raise ManifestError(
            "the kubernetes backend keeps inputs and outputs in <working_dir>/input and "
            f"<working_dir>/output; this task asks for input_dir {paths.input_dir} and "
            f"output_dir {paths.output_dir}"
        )
    if sandbox_from_elsewhere:
        raise ManifestError(
            f"the task moves the working directory to {paths.working_dir}, but with a "
            "template or pool the template decides it (set its pod.workdir instead)"
        )
    with _readable_spec_errors():
        return PodTemplate(workdir=paths.working_dir)


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
        with _readable_spec_errors():
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
    with _readable_spec_errors():
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


def default_paths(workdir: str | None) -> SandboxPaths:
    """The sandbox layout a session with this workdir has (None: the image default)."""
    if workdir is None or workdir == DEFAULT_WORKDIR:
        return SandboxPaths()
    return SandboxPaths.under(workdir)


@contextlib.contextmanager
def _readable_spec_errors() -> Iterator[None]:
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
