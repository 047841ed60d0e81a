"""SandboxSession specs for runs the operator drives (the CLI's `run --backend kubernetes`, the
eval on a cluster) from the agent loop's AgentConfig and a Task, and the SDK's sandbox layout on
the cluster. Kept out of sandfleet.fleet, which must not know the agent or the SDK."""

from __future__ import annotations

import json
import math

from sandfleet.agent import AgentConfig, Task
from sandfleet.api import (
    DEFAULT_WORKDIR,
    AgentSpec,
    FileSource,
    KeyRef,
    LifecycleSpec,
    ObjectName,
    PodTemplate,
    SandboxSessionSpec,
)
from sandfleet.fleet.manifests import ManifestError, decimal_string, readable_spec_errors
from sandfleet.sandbox.backend import SandboxPaths


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
    with readable_spec_errors():
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
    with readable_spec_errors():
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
    with readable_spec_errors():
        return PodTemplate(workdir=paths.working_dir)


def default_paths(workdir: str | None) -> SandboxPaths:
    """The sandbox layout a session with this workdir has (None: the image default)."""
    if workdir is None or workdir == DEFAULT_WORKDIR:
        return SandboxPaths()
    return SandboxPaths.under(workdir)
