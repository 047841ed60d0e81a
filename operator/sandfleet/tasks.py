"""Task inputs for the CLI: a prompt, a prompt file, a seed-format task folder, a batch line."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from sandfleet.agent import Task
from sandfleet.agent.prompts import known_placeholders, template_problem, unknown_placeholders
from sandfleet.errors import SandfleetError
from sandfleet.sandbox.backend import SandboxPaths
from sandfleet.setting_names import did_you_mean

PROMPT_FILE = "prompt.txt"
PROMPT_CONFIG_FILE = "prompt_config.yaml"
INPUT_FOLDER = "input"
# Argument suffixes that mark a path even when it does not exist, so a typo is reported
# instead of being sent to the model as the prompt.
_PATH_SUFFIXES = (".txt", ".md", ".yaml", ".yml", ".json", ".jsonl", ".prompt")


class TaskInputError(SandfleetError):
    """A task argument, folder or batch line cannot be turned into a Task."""


@dataclasses.dataclass(frozen=True, slots=True)
class PromptConfig:
    """The seed project's prompt_config.yaml: prompt templates and, rarely, sandbox paths.

    The templates may use {problem_statement}, {working_dir}, {input_dir} and {output_dir};
    the agent loop fills them in with the sandbox's real paths.
    """

    system_prompt: str | None = None
    instance_prompt: str | None = None
    paths: SandboxPaths | None = None
    """Set only when the file names working_dir/input_dir/output_dir (seed-project keys)."""
    notices: tuple[str, ...] = ()
    """What the file holds that nothing reads (unknown keys and placeholders), one line each."""


@dataclasses.dataclass(frozen=True, slots=True)
class TaskSpec:
    """A Task plus what the CLI needs around it to launch the sandbox."""

    task: Task
    paths: SandboxPaths | None = None
    """Sandbox layout the task asks for; None keeps the backend's default (/testbed)."""
    notices: tuple[str, ...] = ()
    """Warnings for the user (a misspelt prompt_config key, an unknown placeholder)."""
    hidden: tuple[Path, ...] = ()
    """Host paths the sandbox must never see, not even through a read-only bind
    (`sandfleet eval`: the benchmark folder with its answers and reward.py)."""


def load_prompt_config(path: Path) -> PromptConfig:
    """Read a seed-format prompt_config.yaml (system_prompt, instance_prompt, optional paths)."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise TaskInputError(f"cannot read prompt config {path}: {error}") from error
    if document is None:
        return PromptConfig()
    if not isinstance(document, dict):
        raise TaskInputError(f"prompt config {path} must be a mapping of keys to strings")
    texts: dict[str, str | None] = {}
    notices = [
        f"prompt config {path}: unknown key {key!s} is ignored{did_you_mean(str(key), _KEYS)}"
        for key in document
        if key not in _KEYS
    ]
    for key in _KEYS:
        value = document.get(key)
        if value is not None and not isinstance(value, str):
            raise TaskInputError(f"prompt config {path}: {key} must be a string")
        notices += _check_template(f"prompt config {path}: {key}", key, value)
        texts[key] = value or None
    return PromptConfig(
        system_prompt=texts["system_prompt"],
        instance_prompt=texts["instance_prompt"],
        paths=_configured_paths(texts["working_dir"], texts["input_dir"], texts["output_dir"]),
        notices=tuple(notices),
    )


_KEYS = ("system_prompt", "instance_prompt", "working_dir", "input_dir", "output_dir")
"""The keys of a seed-format prompt_config.yaml."""


def _check_template(where: str, key: str, value: str | None) -> list[str]:
    """Raise for a template that cannot be filled; return notices for unknown placeholders."""
    if value is None or key not in ("system_prompt", "instance_prompt"):
        return []
    problem = template_problem(value)
    if problem is not None:
        raise TaskInputError(f"{where}: {problem}")
    return template_notices(where, value)


def template_notices(where: str, template: str) -> list[str]:
    """One line per placeholder of `template` that nothing fills (it stays as written)."""
    known = known_placeholders()
    return [
        f"{where}: the placeholder {{{name}}} is not filled in{did_you_mean(name, known)} "
        f"(known: {', '.join('{' + k + '}' for k in known)})"
        for name in unknown_placeholders(template)
    ]


def _configured_paths(
    working_dir: str | None, input_dir: str | None, output_dir: str | None
) -> SandboxPaths | None:
    if working_dir is None and input_dir is None and output_dir is None:
        return None
    default = SandboxPaths()
    # The seed project's fallbacks: every directory defaults independently.
    output = (output_dir or default.output_dir).rstrip("/")
    return SandboxPaths(
        working_dir=(working_dir or default.working_dir).rstrip("/"),
        input_dir=(input_dir or default.input_dir).rstrip("/"),
        output_dir=output,
        answer_file=f"{output}/answer.txt",
    )


def task_from_folder(
    folder: Path, *, task_id: str | None = None, prompt: str | None = None
) -> TaskSpec:
    """A seed-format folder: prompt.txt, optional prompt_config.yaml, optional input/ files.

    prompt overrides prompt.txt (batch lines may carry their own prompt for a shared folder).
    """
    if not folder.is_dir():
        raise TaskInputError(f"task folder not found: {folder}")
    if prompt is None:
        prompt_path = folder / PROMPT_FILE
        if not prompt_path.is_file():
            raise TaskInputError(f"task folder {folder} has no {PROMPT_FILE}")
        prompt = _read_prompt(prompt_path)
    config_path = folder / PROMPT_CONFIG_FILE
    config = load_prompt_config(config_path) if config_path.is_file() else PromptConfig()
    input_dir = folder / INPUT_FOLDER
    files = _tree_files(input_dir) if input_dir.is_dir() else {}
    task = Task(
        id=task_id or folder.resolve().name,
        prompt=prompt,
        files=files,
        system_prompt=config.system_prompt,
        instance_prompt=config.instance_prompt,
    )
    return TaskSpec(task=task, paths=config.paths, notices=config.notices)


def task_from_argument(
    argument: str, *, extra_files: Iterable[Path] = (), task_id: str | None = None
) -> TaskSpec:
    """`sandfleet run ARG`: a task folder, a prompt file, or else the prompt text itself.

    extra_files (--file) go into the input directory under their base names (folders keep
    their structure below their own name) and win over a folder's input/ files of that name.
    """
    candidate = Path(argument).expanduser()
    if candidate.is_dir():
        spec = task_from_folder(candidate, task_id=task_id)
    elif candidate.is_file():
        prompt = _read_prompt(candidate)
        spec = TaskSpec(task=Task(id=task_id or candidate.stem, prompt=prompt))
    elif _looks_like_a_path(argument):
        raise TaskInputError(
            f"no such file or folder: {argument} (quote a sentence to use it as the prompt)"
        )
    elif not argument.strip():
        raise TaskInputError("the prompt is empty")
    else:
        spec = TaskSpec(task=Task(id=task_id or prompt_task_id(argument), prompt=argument))
    added = named_input_files(extra_files)
    if not added:
        return spec
    files = {**spec.task.files, **added}
    return dataclasses.replace(spec, task=dataclasses.replace(spec.task, files=files))


def task_from_batch_record(record: Mapping[str, Any], *, base_dir: Path) -> TaskSpec:
    """One line of a batch file: {"id", "prompt"?, "task_dir"?, "files"?, "system_prompt"?,
    "instance_prompt"?}. Relative task_dir and file paths are resolved against base_dir.

    files maps a sandbox path (relative to the input directory, or absolute) to either the
    file's text, {"path": "local/file"} or {"base64": "..."}.
    """
    task_id = record.get("id")
    if not isinstance(task_id, str) or not task_id:
        raise TaskInputError("a batch line needs a non-empty string id")
    prompt = record.get("prompt")
    if prompt is not None and not isinstance(prompt, str):
        raise TaskInputError(f"task {task_id}: prompt must be a string")
    task_dir = record.get("task_dir")
    if task_dir is not None:
        if not isinstance(task_dir, str):
            raise TaskInputError(f"task {task_id}: task_dir must be a string")
        spec = task_from_folder(base_dir / task_dir, task_id=task_id, prompt=prompt)
    elif prompt:
        spec = TaskSpec(task=Task(id=task_id, prompt=prompt))
    else:
        raise TaskInputError(f"task {task_id}: needs a prompt or a task_dir")
    files: dict[str, Path | bytes] = dict(spec.task.files)
    files.update(_record_files(task_id, record.get("files"), base_dir))
    templates = {
        key: record[key] for key in ("system_prompt", "instance_prompt") if record.get(key)
    }
    notices = list(spec.notices)
    for key, value in templates.items():
        if not isinstance(value, str):
            raise TaskInputError(f"task {task_id}: {key} must be a string")
        notices += _check_template(f"task {task_id}: {key}", key, value)
    task = dataclasses.replace(spec.task, files=files, **templates)
    return dataclasses.replace(spec, task=task, notices=tuple(notices))


def _record_files(task_id: str, files: Any, base_dir: Path) -> dict[str, Path | bytes]:
    if files is None:
        return {}
    if not isinstance(files, dict):
        raise TaskInputError(f"task {task_id}: files must be an object of name -> content")
    loaded: dict[str, Path | bytes] = {}
    for name, value in files.items():
        if isinstance(value, str):
            loaded[name] = value.encode()
        elif isinstance(value, dict) and isinstance(value.get("path"), str):
            local = base_dir / value["path"]
            if not local.is_file():
                raise TaskInputError(f"task {task_id}: file {name}: not found: {local}")
            loaded[name] = local
        elif isinstance(value, dict) and isinstance(value.get("base64"), str):
            try:
                loaded[name] = base64.b64decode(value["base64"], validate=True)
            except binascii.Error as error:
                raise TaskInputError(f"task {task_id}: file {name}: bad base64") from error
        else:
            raise TaskInputError(
                f'task {task_id}: file {name}: expected text, {{"path": ...}} or {{"base64": ...}}'
            )
    return loaded


def named_input_files(paths: Iterable[Path]) -> dict[str, Path | bytes]:
    """--file arguments: a file by its base name, a folder's files under the folder's name."""
    files: dict[str, Path | bytes] = {}
    for given in paths:
        path = given.expanduser()
        if path.is_dir():
            for relative, local in _tree_files(path).items():
                files[f"{path.resolve().name}/{relative}"] = local
        elif path.is_file():
            files[path.name] = path
        else:
            raise TaskInputError(f"input file not found: {path}")
    return files


def _tree_files(folder: Path) -> dict[str, Path | bytes]:
    # Sorted, so uploads and the trajectory's record of them do not depend on directory order.
    return {
        path.relative_to(folder).as_posix(): path
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def prompt_task_id(prompt: str) -> str:
    """A stable id for a bare prompt, so re-running the same prompt reuses its results folder."""
    return "prompt-" + hashlib.sha256(prompt.encode()).hexdigest()[:10]


def _looks_like_a_path(argument: str) -> bool:
    if any(character.isspace() for character in argument):
        return False
    return "/" in argument or argument.lower().endswith(_PATH_SUFFIXES)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise TaskInputError(f"cannot read {path}: {error}") from error


def _read_prompt(path: Path) -> str:
    # The seed project passes prompt files as --query "$(cat prompt.txt)", which drops the
    # trailing newlines; doing the same keeps the first user message identical.
    return _read_text(path).rstrip("\n")
