"""A seed-format benchmark folder: config.yaml, its dataset rows, reward.py, prompts."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from sandfleet.errors import SandfleetError
from sandfleet.sandbox.backend import SandboxPaths
from sandfleet.tasks import TaskInputError, load_prompt_config

CONFIG_FILE = "config.yaml"
REWARD_FILE = "reward.py"
VANILLA_PROMPT_FILE = "vanilla_llm_prompt.py"
_LOCAL_FORMATS = ("json", "jsonl")


class BenchError(SandfleetError):
    """The benchmark folder, its config or one of its rows cannot be used (the message says
    which and why); nothing has been sent to the model yet."""


@dataclasses.dataclass(frozen=True, slots=True)
class Benchmark:
    folder: Path
    name: str
    """The folder's name; the domain of rows that name none."""
    rows: list[dict[str, Any]]
    """The dataset rows as loaded (checked later, see problems.py)."""
    source: str
    """Where the rows came from, for messages ("data/test.jsonl", "org/set:test")."""
    system_prompt: str | None
    instance_prompt: str | None
    paths: SandboxPaths | None
    """The layout config.yaml asks for (working_dir/input_dir/output_dir); None: default."""
    reward_file: Path
    vanilla_prompt_file: Path | None
    data_files: tuple[Path, ...] = ()
    """The local data files the rows came from (none for a `datasets` hub dataset)."""

    @property
    def secret_dirs(self) -> tuple[Path, ...]:
        """Folders a model under test must never read: the benchmark folder (rows,
        expected answers, reward.py) and those of its local data files."""
        return (self.folder, *sorted({path.parent.absolute() for path in self.data_files}))


def load_benchmark(folder: Path) -> Benchmark:
    """Read config.yaml and the dataset; raises BenchError with a message for the user."""
    folder = folder.expanduser().absolute()  # reward.py runs from its own folder
    if not folder.is_dir():
        raise BenchError(f"benchmark folder not found: {folder}")
    config_path = folder / CONFIG_FILE
    if not config_path.is_file():
        raise BenchError(f"benchmark folder {folder} has no {CONFIG_FILE}")
    config = _read_config(config_path)
    try:
        prompts = load_prompt_config(config_path)
    except TaskInputError as error:
        raise BenchError(str(error)) from error
    reward_file = folder / REWARD_FILE
    if not reward_file.is_file():
        raise BenchError(f"benchmark folder {folder} has no {REWARD_FILE}")
    vanilla = folder / VANILLA_PROMPT_FILE
    rows, source, data_files = _load_rows(folder, config)
    return Benchmark(
        folder=folder,
        name=folder.resolve().name,  # "." and "x/.." have a name too
        rows=rows,
        source=source,
        system_prompt=prompts.system_prompt,
        instance_prompt=prompts.instance_prompt,
        paths=prompts.paths,
        reward_file=reward_file,
        vanilla_prompt_file=vanilla if vanilla.is_file() else None,
        data_files=data_files,
    )


def _read_config(path: Path) -> dict[str, Any]:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise BenchError(f"cannot read {path}: {error}") from error
    if not isinstance(document, dict):
        raise BenchError(f"{path} must be a mapping (dataset, data_files, prompts, ...)")
    return document


def _load_rows(
    folder: Path, config: dict[str, Any]
) -> tuple[list[dict[str, Any]], str, tuple[Path, ...]]:
    dataset = config.get("dataset", "json")
    if not isinstance(dataset, str) or not dataset:
        raise BenchError(f"{folder / CONFIG_FILE}: dataset must be a string")
    split = config.get("split")
    if split is not None and not isinstance(split, str):
        raise BenchError(f"{folder / CONFIG_FILE}: split must be a string")
    data_files = config.get("data_files")
    if dataset in _LOCAL_FORMATS:
        files = [_resolve_data_file(folder, name) for name in _file_names(data_files, split)]
        rows = [row for path in files for row in _read_json_rows(path)]
        return rows, ", ".join(str(path) for path in files), tuple(files)
    rows, source = _load_with_datasets(folder, dataset, config.get("config"), split, data_files)
    return rows, source, ()


def _file_names(data_files: Any, split: str | None) -> list[str]:
    """data_files as the `datasets` library takes it: a path, a list, or split -> path(s)."""
    if isinstance(data_files, dict):
        chosen = data_files.get(split or "train")
        if chosen is None and len(data_files) == 1:
            chosen = next(iter(data_files.values()))
        if chosen is None:
            raise BenchError(
                f"data_files has no split {split or 'train'!r} (it has {', '.join(data_files)})"
            )
        data_files = chosen
    if isinstance(data_files, str):
        return [data_files]
    if isinstance(data_files, list) and data_files and all(isinstance(f, str) for f in data_files):
        return list(data_files)
    raise BenchError(
        f"{CONFIG_FILE}: dataset json needs data_files (a path, a list of paths, or split -> path)"
    )


def _resolve_data_file(folder: Path, name: str) -> Path:
    """The seed resolves data_files against its benchmark root (the folder's parent); a path
    relative to the folder itself is accepted too, and tried first."""
    given = Path(name).expanduser()
    candidates = [given] if given.is_absolute() else [folder / given, folder.parent / given]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    tried = " or ".join(str(c) for c in candidates)
    raise BenchError(f"data file {name} not found (looked for {tried})")


def _read_json_rows(path: Path) -> list[dict[str, Any]]:
    """A JSON array of objects, or JSON Lines (one object per line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise BenchError(f"cannot read {path}: {error}") from error
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            raise BenchError(f"{path}: not valid JSON ({error})") from error
        return _objects(document, path)
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise BenchError(f"{path}:{number}: not valid JSON ({error.msg})") from error
        if not isinstance(row, dict):
            raise BenchError(f"{path}:{number}: a row must be a JSON object")
        rows.append(row)
    return rows


def _objects(document: Any, path: Path) -> list[dict[str, Any]]:
    if not isinstance(document, list):
        raise BenchError(f"{path}: expected a JSON array of rows")
    for index, row in enumerate(document):
        if not isinstance(row, dict):
            raise BenchError(f"{path}: row {index} is not a JSON object")
    return document


def _load_with_datasets(
    folder: Path, name: str, subset: Any, split: str | None, data_files: Any
) -> tuple[list[dict[str, Any]], str]:
    """A dataset by name (or a format datasets reads, e.g. parquet), through `datasets`."""
    try:
        import datasets  # type: ignore[import-not-found,unused-ignore]
    except ImportError as error:
        raise BenchError(
            f"dataset {name!r} is loaded with the `datasets` library, which is not installed "
            "(pip install 'sandfleet[eval]'), or point config.yaml at a local file "
            "(dataset: json, data_files: ...)"
        ) from error
    files: Sequence[str] | None = None
    if data_files is not None:
        files = [str(_resolve_data_file(folder, f)) for f in _file_names(data_files, split)]
    source = f"{name}{':' + str(subset) if subset else ''}:{split or 'train'}"
    try:
        loaded = datasets.load_dataset(name, subset, split=split or "train", data_files=files)
    # The library raises many unrelated types (ConnectionError, FileNotFoundError,
    # DatasetNotFoundError, ValueError...); every one means "cannot load this dataset".
    except Exception as error:
        raise BenchError(f"cannot load dataset {source}: {error}") from error
    return [dict(row) for row in loaded], source
